"""Pictures: signed colours read back from the rendered pixels, the target
ring, heterogeneous node types, bars, walks, errors, nothing mutated."""
from __future__ import annotations

import io
import math
import sys

import matplotlib
import numpy as np
import pytest
import torch
from matplotlib.collections import LineCollection
from matplotlib.image import imread
from matplotlib.patches import FancyArrowPatch
from torch_geometric.explain import Explanation, HeteroExplanation

import torch_geometric_lrp as lrp

# --- reading a figure back ------------------------------------------------------------------------------

def render(fig) -> np.ndarray:
    """The figure as a PNG, read back: RGB floats in [0, 1], rows from the top."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    assert buffer.getvalue()[:8] == b"\x89PNG\r\n\x1a\n"
    buffer.seek(0)
    return imread(buffer)[..., :3]


def to_pixel(ax, image, xy) -> tuple[int, int]:
    x, y = ax.transData.transform(xy)
    return int(round(image.shape[0] - y)), int(round(x))


def colour_at(ax, image, xy) -> np.ndarray:
    """Median colour of the 3 x 3 pixels at a data point."""
    row, col = to_pixel(ax, image, xy)
    return np.median(image[row - 1:row + 2, col - 1:col + 2].reshape(-1, 3), axis=0)


def reddish(rgb) -> bool:
    return rgb[0] > 0.55 and rgb[2] < 0.45 and rgb[0] - rgb[2] > 0.3


def bluish(rgb) -> bool:
    return rgb[2] > 0.55 and rgb[0] < 0.45 and rgb[2] - rgb[0] > 0.3


def collection(ax, gid: str):
    found = [c for c in ax.collections if c.get_gid() == gid]
    assert len(found) == 1, [c.get_gid() for c in ax.collections]
    return found[0]


def node_positions(ax, gid: str = "nodes:") -> np.ndarray:
    """Node centres in data coordinates, in ascending node id (as drawn)."""
    return np.asarray(collection(ax, gid).get_offsets())


def dark_fraction(ax, image, centre, radius_px: float, samples: int = 48) -> float:
    """Share of the points on a circle around ``centre`` that are nearly black."""
    x0, y0 = ax.transData.transform(centre)
    dark = 0
    for k in range(samples):
        angle = 2 * math.pi * k / samples
        row = int(round(image.shape[0] - (y0 + radius_px * math.sin(angle))))
        col = int(round(x0 + radius_px * math.cos(angle)))
        patch = image[row - 1:row + 2, col - 1:col + 2].reshape(-1, 3)
        dark += bool((patch.max(axis=1) < 0.3).any())
    return dark / samples


def ring_radius_px(fig, ax) -> float:
    size = collection(ax, "targets").get_sizes()[0]  # points^2
    return math.sqrt(size) / 2 * fig.dpi / 72


def snapshot(explanation) -> dict:
    return {key: value.clone() if isinstance(value, torch.Tensor) else value
            for store in explanation.stores for key, value in store.items()}


def assert_unchanged(before: dict, explanation) -> None:
    after = snapshot(explanation)
    assert before.keys() == after.keys()
    for key, value in before.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(value, after[key]), key
        else:
            assert value == after[key], key


# --- small explanations whose signs are known -----------------------------------------------------------

def path_explanation() -> Explanation:
    """0 - 1 - 2, target 1: node 0 and its edge positive, node 2 and its edge negative."""
    edge_index = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    node_mask = torch.tensor([[1.0, 0.5], [0.1, 0.1], [-1.0, -0.5]])
    edge_mask = torch.tensor([1.0, 0.5, -0.5, -1.0])
    explanation = Explanation(node_mask=node_mask, edge_mask=edge_mask, x=torch.ones(3, 2),
                              edge_index=edge_index, index=torch.tensor([1]))
    explanation.score = 0.2
    return explanation


def test_node_and_edge_colours_follow_the_sign():
    explanation = path_explanation()
    fig = lrp.visualize_graph(explanation, node_labels=False)
    image = render(fig)
    ax = fig.axes[0]
    pos = node_positions(ax)
    assert reddish(colour_at(ax, image, pos[0])), colour_at(ax, image, pos[0])
    assert bluish(colour_at(ax, image, pos[2])), colour_at(ax, image, pos[2])
    assert reddish(colour_at(ax, image, (pos[0] + pos[1]) / 2))
    assert bluish(colour_at(ax, image, (pos[1] + pos[2]) / 2))
    # One line per node pair (both directions summed), as wide as its |relevance|: equal here.
    lines = [c for c in ax.collections if isinstance(c, LineCollection)]
    assert len(lines) == 1 and len(lines[0].get_segments()) == 2
    widths = lines[0].get_linewidths()
    assert widths[0] == pytest.approx(widths[1])
    # Two colorbars with scales symmetric around 0.
    bars = [a for a in fig.axes if a is not ax]
    assert len(bars) == 2
    for bar in bars:
        low, high = bar.get_ylim()
        assert low == pytest.approx(-high) and high > 0


def test_target_is_outlined_and_the_others_are_not():
    explanation = path_explanation()
    fig = lrp.visualize_graph(explanation, node_labels=False)
    image = render(fig)
    ax = fig.axes[0]
    pos = node_positions(ax)
    assert np.allclose(collection(ax, "targets").get_offsets(), pos[[1]])
    radius = ring_radius_px(fig, ax)
    assert dark_fraction(ax, image, pos[1], radius) > 0.8
    assert dark_fraction(ax, image, pos[0], radius) < 0.15
    assert dark_fraction(ax, image, pos[2], radius) < 0.15


def test_edge_width_grows_with_relevance_and_top_k_keeps_the_largest():
    # A star around node 0 with edges of relevance 0.1, -2 and 1.
    edge_index = torch.tensor([[1, 2, 3], [0, 0, 0]])
    explanation = Explanation(node_mask=torch.ones(4, 1), edge_mask=torch.tensor([0.1, -2.0, 1.0]),
                              edge_index=edge_index, index=torch.tensor([0]))
    ax = lrp.visualize_graph(explanation).axes[0]
    arrows = [p for p in ax.patches if isinstance(p, FancyArrowPatch)]  # directed: arrows
    assert len(arrows) == 3
    widths = [a.get_linewidth() for a in arrows]  # drawn from the weakest to the strongest
    assert widths[0] < widths[1] < widths[2]
    assert arrows[2].get_edgecolor()[2] > arrows[2].get_edgecolor()[0]  # the widest is the negative one
    assert arrows[1].get_edgecolor()[0] > arrows[1].get_edgecolor()[2]

    ax = lrp.visualize_graph(explanation, top_k=1, node_labels=False).axes[0]
    arrows = [p for p in ax.patches if isinstance(p, FancyArrowPatch)]
    assert len(arrows) == 1
    colour = arrows[0].get_edgecolor()
    assert colour[2] > colour[0]  # the kept edge is the negative one (|-2| is largest)
    assert len(node_positions(ax)) == 2  # its two nodes


def test_receptive_field_is_the_hops_of_nonzero_relevance_and_k_hop_overrides_it():
    # The path 0 - 1 - 2 - 3 - 4, target 0; relevance reaches node 2 only.
    edge_index = torch.tensor([[0, 1, 1, 2, 2, 3, 3, 4], [1, 0, 2, 1, 3, 2, 4, 3]])
    node_mask = torch.tensor([[1.0], [0.5], [0.2], [0.0], [0.0]])
    edge_mask = torch.tensor([0.3, 1.0, 0.0, 0.5, 0.0, 0.0, 0.0, 0.0])  # messages into nodes 0 and 1
    explanation = Explanation(node_mask=node_mask, edge_mask=edge_mask, edge_index=edge_index, index=0)
    assert len(node_positions(lrp.visualize_graph(explanation).axes[0])) == 3
    assert len(node_positions(lrp.visualize_graph(explanation, k_hop=1).axes[0])) == 2
    assert len(node_positions(lrp.visualize_graph(explanation, k_hop=4).axes[0])) == 5


def test_labels_are_the_global_ids_of_a_subgraph():
    explanation = path_explanation()
    explanation.node_index = torch.tensor([10, 20, 30])
    ax = lrp.visualize_graph(explanation).axes[0]
    assert sorted(t.get_text() for t in ax.texts) == ["10", "20", "30"]
    ax = lrp.visualize_graph(explanation, node_labels=["a", "b", "c"]).axes[0]
    assert sorted(t.get_text() for t in ax.texts) == ["a", "b", "c"]
    assert len(lrp.visualize_graph(explanation, node_labels=False).axes[0].texts) == 0


def test_a_dict_of_labels_is_keyed_by_the_ids_drawn():
    """{id: label} on a subgraph: each label goes to the node drawn with
    that global id (before, it was looked up by position: one node off)."""
    explanation = path_explanation()
    explanation.node_index = torch.tensor([10, 20, 30])
    ax = lrp.visualize_graph(explanation, node_labels={10: "a", 20: "b", 30: "c"}).axes[0]
    drawn = {t.get_text(): t.get_position() for t in ax.texts}
    default = {t.get_text(): t.get_position() for t in lrp.visualize_graph(explanation).axes[0].texts}
    assert drawn == {"a": default["10"], "b": default["20"], "c": default["30"]}


def test_feature_names_as_one_string_are_refused_by_name():
    explanation = path_explanation()
    with pytest.raises(ValueError, match="feature_names: expected a sequence of names.*got a string"):
        lrp.visualize_features(explanation, feature_names="ab")


def test_edge_level_target_highlights_the_explained_edge():
    explanation = path_explanation()
    del explanation.index
    explanation.edge_label_index = torch.tensor([[0, 2], [2, 1]])
    explanation.index = torch.tensor([0])  # the pair 0 -> 2, not an input edge
    fig = lrp.visualize_graph(explanation, node_labels=False)
    ax = fig.axes[0]
    pos = node_positions(ax)
    dashed = [line for line in ax.get_lines() if line.get_linestyle() == "--"]
    assert len(dashed) == 1
    assert np.allclose(dashed[0].get_xydata(), pos[[0, 2]])
    assert np.allclose(np.sort(collection(ax, "targets").get_offsets(), axis=0), np.sort(pos[[0, 2]], axis=0))
    assert fig.axes[0].get_title().startswith("edge 0→2")


def test_graph_level_draws_every_node_without_a_ring():
    explanation = path_explanation()
    del explanation.index
    ax = lrp.visualize_graph(explanation).axes[0]
    assert len(node_positions(ax)) == 3
    assert not [c for c in ax.collections if c.get_gid() == "targets"]
    # With a batch and an index: only the explained graph.
    explanation.batch = torch.tensor([0, 0, 1])
    explanation.index = torch.tensor([1])
    from torch_geometric.explain.config import ModelConfig
    explanation._model_config = ModelConfig(mode="multiclass_classification", task_level="graph", return_type="raw")
    ax = lrp.visualize_graph(explanation).axes[0]
    assert len(node_positions(ax)) == 1


def test_all_positive_mask_is_drawn_in_reds():
    explanation = path_explanation()
    explanation.node_mask = explanation.node_mask.abs()
    explanation.edge_mask = explanation.edge_mask.abs()
    fig = lrp.visualize_graph(explanation, node_labels=False)
    image = render(fig)
    ax = fig.axes[0]
    pos = node_positions(ax)
    assert reddish(colour_at(ax, image, pos[0])) and reddish(colour_at(ax, image, pos[2]))


def hetero_explanation() -> HeteroExplanation:
    explanation = HeteroExplanation()
    explanation["paper"].node_mask = torch.tensor([[0.2, 0.1], [1.0, 1.0], [0.3, 0.0]])
    explanation["author"].node_mask = torch.tensor([[-1.0, -1.0, -0.5], [-0.2, 0.0, 0.0]])
    writes = explanation["author", "writes", "paper"]
    writes.edge_index = torch.tensor([[0, 1, 1], [0, 1, 2]])
    writes.edge_mask = torch.tensor([-1.0, 0.5, 0.2])
    cites = explanation["paper", "cites", "paper"]
    cites.edge_index = torch.tensor([[1, 2], [0, 0]])
    cites.edge_mask = torch.tensor([1.0, 0.3])
    explanation.index = {"paper": torch.tensor([0])}
    return explanation


def test_hetero_draws_every_node_type():
    explanation = hetero_explanation()
    before = snapshot(explanation)
    fig = lrp.visualize_graph(explanation, node_labels=False)
    image = render(fig)
    assert_unchanged(before, explanation)
    ax = fig.axes[0]
    papers, authors = node_positions(ax, "nodes:paper"), node_positions(ax, "nodes:author")
    assert len(papers) == 3 and len(authors) == 2
    shapes = {tuple(np.round(collection(ax, f"nodes:{t}").get_paths()[0].vertices, 3).ravel())
              for t in ("paper", "author")}
    assert len(shapes) == 2  # one marker per node type
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "paper" in legend and "author" in legend
    assert reddish(colour_at(ax, image, papers[1]))  # paper 1: +2
    assert bluish(colour_at(ax, image, authors[0]))  # author 0: -2.5
    assert np.allclose(collection(ax, "targets").get_offsets(), papers[[0]])
    assert dark_fraction(ax, image, papers[0], ring_radius_px(fig, ax)) > 0.8
    arrows = [p for p in ax.patches if isinstance(p, FancyArrowPatch)]
    assert len(arrows) == 5  # both edge types


def test_visualize_features_signed_bars():
    node_mask = torch.tensor([[2.0, -1.0, 0.5, -0.05], [1.0, -1.0, 0.0, 0.0]])  # per feature: 3, -2, 0.5, -0.05
    explanation = Explanation(node_mask=node_mask, edge_index=torch.tensor([[0], [1]]))
    before = snapshot(explanation)
    fig = lrp.visualize_features(explanation, top_k=3, feature_names=["a", "b", "c", "d"])
    image = render(fig)
    assert_unchanged(before, explanation)
    ax = fig.axes[0]
    bars = ax.patches
    assert [b.get_width() for b in bars] == pytest.approx([3.0, -2.0, 0.5])
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b", "c"]
    red, blue, small = (b.get_facecolor() for b in bars)
    assert red[0] > 0.6 and red[2] < 0.3 and blue[2] > 0.6 and blue[0] < 0.3 and small[0] > small[2]
    for bar, check in zip(bars[:2], (reddish, bluish)):
        centre = (bar.get_x() + bar.get_width() / 2, bar.get_y() + bar.get_height() / 2)
        assert check(colour_at(ax, image, centre))
    assert len(lrp.visualize_features(explanation, top_k=None).axes[0].patches) == 4


def test_visualize_features_hetero_counts_each_type():
    fig = lrp.visualize_features(hetero_explanation(), top_k=None)
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels[:3] == ["paper: feature 0", "author: feature 0", "paper: feature 1"]  # 1.5, -1.2, 1.1
    assert len(labels) == 5


def test_visualize_walks_arrows_follow_the_sign():
    walks = torch.tensor([[0, 1, 2], [3, 1, 2], [2, 2, 2]])
    relevance = torch.tensor([1.0, -0.5, 0.1])
    edge_index = torch.tensor([[0, 1, 3], [1, 2, 1]])

    class Walks:  # the interface of lrp.walks(...)'s result
        def __init__(self):
            self.walks, self.relevance = walks, relevance

    for given in (Walks(), (walks, relevance)):
        fig = lrp.visualize_walks(given, edge_index, node_labels=False)
        image = render(fig)
        ax = fig.axes[0]
        arrows = [p for p in ax.patches if isinstance(p, FancyArrowPatch)]
        assert len(arrows) == 4  # the third walk only stays at node 2: self-loop steps are not drawn
        colours = [a.get_edgecolor() for a in arrows]
        assert sum(c[0] > c[2] for c in colours) == 2 and sum(c[2] > c[0] for c in colours) == 2
        pos = node_positions(ax)  # nodes 0, 1, 2, 3
        assert reddish(colour_at(ax, image, (pos[0] + pos[1]) / 2))  # the strongest walk, a straight arrow
        assert np.allclose(collection(ax, "targets").get_offsets(), pos[[2]])
        radius = ring_radius_px(fig, ax)
        assert dark_fraction(ax, image, pos[2], radius) > 0.7
        assert dark_fraction(ax, image, pos[3], radius) < 0.15
    ax = lrp.visualize_walks((walks, relevance), edge_index, top_k=1).axes[0]
    assert len([p for p in ax.patches if isinstance(p, FancyArrowPatch)]) == 2


def test_walks_of_a_gcn():
    if not hasattr(lrp, "walks"):
        pytest.skip("lrp.walks is not there yet")
    from torch_geometric.nn import GCN
    torch.manual_seed(0)
    edge_index = torch.tensor([[0, 1, 1, 2, 2, 3], [1, 0, 2, 1, 3, 2]])
    model = GCN(3, 4, num_layers=2, out_channels=2)
    walks = lrp.walks(model, torch.randn(4, 3), edge_index, 1, top_k=5)
    ax = lrp.visualize_walks(walks, edge_index).axes[0]
    steps = [(s, d) for walk in walks.walks[:5].tolist() for s, d in zip(walk[:-1], walk[1:]) if s != d]
    arrows = [p for p in ax.patches if isinstance(p, FancyArrowPatch)]
    assert len(arrows) == len(steps)
    signs = sorted(bool(r > 0) for walk, r in zip(walks.walks[:5].tolist(), walks.relevance[:5].tolist())
                   for s, d in zip(walk[:-1], walk[1:]) if s != d)
    assert sorted(bool(a.get_edgecolor()[0] > a.get_edgecolor()[2]) for a in arrows) == signs


def test_end_to_end_on_a_gcn(tmp_path):
    from torch_geometric.nn import GCN
    torch.manual_seed(0)
    edge_index = torch.tensor([[0, 1, 1, 2, 2, 3, 3, 4, 4, 0, 1, 5], [1, 0, 2, 1, 3, 2, 4, 3, 0, 4, 5, 1]])
    x = torch.randn(6, 4)
    model = GCN(4, 8, num_layers=2, out_channels=3)
    explanation = lrp.explain(model, x, edge_index, index=1)
    before = snapshot(explanation)
    fig = lrp.visualize_graph(explanation, tmp_path / "graph.png")
    assert (tmp_path / "graph.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    ax = fig.axes[0]
    relevance = explanation.node_mask.sum(dim=1)
    drawn = (relevance != 0).nonzero().view(-1)  # the receptive field: 2 hops of node 1
    colours = collection(ax, "nodes:").get_facecolors()
    assert len(colours) == 6  # node 1 reaches every node within 2 hops
    strong = relevance.abs() > 0.3 * relevance.abs().max()
    for i in drawn[strong[drawn]].tolist():
        assert (colours[i][0] > colours[i][2]) == bool(relevance[i] > 0)
    lrp.visualize_features(explanation, path=tmp_path / "features.png")
    assert (tmp_path / "features.png").stat().st_size > 1000
    assert_unchanged(before, explanation)


def test_no_global_matplotlib_state_is_touched():
    import matplotlib.pyplot as plt
    figures, params = plt.get_fignums(), dict(matplotlib.rcParams)
    lrp.visualize_graph(path_explanation())
    lrp.visualize_features(path_explanation())
    assert plt.get_fignums() == figures
    assert dict(matplotlib.rcParams) == params


def test_explanation_is_not_mutated():
    explanation = path_explanation()
    before = snapshot(explanation)
    lrp.visualize_graph(explanation, top_k=1)
    lrp.visualize_graph(explanation, k_hop=0)
    assert_unchanged(before, explanation)


@pytest.mark.parametrize("change,kwargs,message", [
    (lambda e: delattr(e, "edge_index"), {}, "edge_index: missing"),
    (lambda e: setattr(e, "edge_index", torch.zeros(3, 4, dtype=torch.long)), {}, r"shape \[2, E\]"),
    (lambda e: setattr(e, "node_mask", torch.ones(5, 2)), {}, "node_mask: expected shape"),
    (lambda e: setattr(e, "edge_mask", torch.ones(3)), {}, "edge_mask: expected one value per edge"),
    (lambda e: (delattr(e, "node_mask"), delattr(e, "edge_mask")), {}, "no relevance per node"),
    (lambda e: None, {"top_k": 0}, "top_k: expected a positive int"),
    (lambda e: None, {"k_hop": -1}, "k_hop"),
    (lambda e: None, {"backend": "graphviz"}, "backend: expected None or 'networkx'"),
    (lambda e: None, {"node_labels": ["a"]}, r"node_labels: expected one label per node \(3\)"),
    (lambda e: setattr(e, "index", torch.tensor([7])), {}, "index: positions"),
    (lambda e: delattr(e, "edge_mask"), {"top_k": 1}, "top_k: keeps the edges"),
])
def test_visualize_graph_errors(change, kwargs, message):
    explanation = path_explanation()
    change(explanation)
    with pytest.raises(ValueError, match=message):
        lrp.visualize_graph(explanation, **kwargs)


def test_other_errors():
    with pytest.raises(TypeError, match="explanation: expected"):
        lrp.visualize_graph(torch.ones(3))
    explanation = path_explanation()
    explanation.node_mask = explanation.node_mask.sum(dim=1, keepdim=True)
    with pytest.raises(ValueError, match="node_mask_type='attributes'"):
        lrp.visualize_features(explanation)
    with pytest.raises(ValueError, match="feature_names: expected one name per feature"):
        lrp.visualize_features(path_explanation(), feature_names=["a"])
    with pytest.raises(ValueError, match="top_k"):
        lrp.visualize_features(path_explanation(), top_k=-1)
    edge_index = torch.tensor([[0], [1]])
    with pytest.raises(TypeError, match="walks: expected"):
        lrp.visualize_walks(torch.ones(2, 3), edge_index)
    with pytest.raises(ValueError, match=r"one value per walk \(2\)"):
        lrp.visualize_walks((torch.tensor([[0, 1], [1, 0]]), torch.ones(3)), edge_index)
    with pytest.raises(ValueError, match=r"integer tensor \[K, L\+1\]"):
        lrp.visualize_walks((torch.ones(2, 2), torch.ones(2)), edge_index)
    with pytest.raises(ValueError, match="top_k"):
        lrp.visualize_walks((torch.tensor([[0, 1]]), torch.ones(1)), edge_index, top_k=0)
    with pytest.raises(ValueError, match=r"edge_index: expected an integer tensor of shape \[2, E\]"):
        lrp.visualize_walks((torch.tensor([[0, 1]]), torch.ones(1)), torch.ones(2, 1))


def test_missing_matplotlib_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError, match=r"pip install torch-geometric-lrp\[viz\]"):
        lrp.visualize_graph(path_explanation())


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_masks_are_refused_not_drawn(bad):
    """A NaN or inf in a mask has no place on a colour scale. Before, the
    picture was drawn: the scale fell back to +-1 (a node of relevance 1
    as deep a red as one of 4), NaN nodes were transparent, every arrow
    black."""
    for key in ("node_mask", "edge_mask"):
        explanation = path_explanation()
        mask = getattr(explanation, key).clone()
        mask.view(-1)[0] = bad
        setattr(explanation, key, mask)
        with pytest.raises(ValueError, match=f"{key}: 1 of {mask.numel()} values are NaN or inf"):
            lrp.visualize_graph(explanation)
    explanation = path_explanation()
    explanation.node_mask = explanation.node_mask.clone()
    explanation.node_mask[2, 1] = bad
    with pytest.raises(ValueError, match="NaN or inf"):
        lrp.visualize_features(explanation)
    with pytest.raises(ValueError, match="walks: relevance: 1 of 2 values are NaN or inf"):
        lrp.visualize_walks((torch.tensor([[0, 1], [1, 0]]), torch.tensor([1.0, bad])), torch.tensor([[0], [1]]))


def test_a_directed_graph_keeps_its_arrows_where_the_drawn_part_is_symmetric():
    """0 -> 1 (-2), 1 -> 0 (+2), 2 -> 1 (+1), target 0. Within one hop only
    0 <-> 1 is drawn, both directions: still two arrows of -2 and +2. Before,
    the drawn part decided, and one undirected line of 0 was drawn."""
    explanation = Explanation(edge_index=torch.tensor([[0, 1, 2], [1, 0, 1]]),
                              edge_mask=torch.tensor([-2.0, 2.0, 1.0]), x=torch.ones(3, 1),
                              node_mask=torch.zeros(3, 1), index=torch.tensor([0]))
    ax = lrp.visualize_graph(explanation, k_hop=1).axes[0]
    arrows = [p for p in ax.patches if isinstance(p, FancyArrowPatch)]
    assert len(arrows) == 2
    assert not [c for c in ax.collections if isinstance(c, LineCollection)]
    assert ax.figure.axes[-1].get_ylabel() == "edge relevance"  # not "(both directions)"


def test_hetero_labels_per_type_as_a_dict_go_to_those_ids():
    """``node_labels={'paper': {2: 'C', 0: 'A', 1: 'B'}}``: each label on
    its paper. Before, the dict's keys were drawn as labels in dict order
    (paper 0 labelled '2'); a dict keyed by node ids on a heterogeneous
    explanation was ignored, and is refused now."""
    explanation = hetero_explanation()
    as_list = lrp.visualize_graph(explanation, node_labels={"paper": ["A", "B", "C"]}).axes[0]
    as_dict = lrp.visualize_graph(explanation, node_labels={"paper": {2: "C", 0: "A", 1: "B"}}).axes[0]
    assert {t.get_text(): t.get_position() for t in as_dict.texts} == \
        {t.get_text(): t.get_position() for t in as_list.texts}
    with pytest.raises(ValueError, match="node_labels: on a heterogeneous explanation, a dict maps node types"):
        lrp.visualize_graph(explanation, node_labels={0: "A"})


def test_a_node_level_hetero_index_without_a_node_type_is_refused():
    """``lrp.explain`` on a heterogeneous graph gives ``index`` as the rows of
    the model's output, whose node type the explanation does not hold.
    Before, the picture was titled 'graph' and had no target ring; now it
    says how to name the type."""
    from torch_geometric.explain.config import ModelConfig

    explanation = hetero_explanation()
    explanation.index = torch.tensor([0])
    explanation._model_config = ModelConfig(mode="regression", task_level="node", return_type="raw")
    with pytest.raises(ValueError, match=r"names no node type.*explanation.index = \{node_type: index\}"):
        lrp.visualize_graph(explanation)


def test_features_of_a_graph_with_one_feature_are_drawn():
    """``node_mask`` ``[N, 1]`` with ``x`` ``[N, 1]`` is one feature's
    relevance (``node_mask_type='attributes'``), drawn as one bar. Before,
    refused as an 'object' mask, asking for the type it was made with."""
    explanation = Explanation(node_mask=torch.tensor([[1.0], [-3.0], [0.5]]), x=torch.ones(3, 1),
                              edge_index=torch.tensor([[0, 1], [1, 2]]))
    ax = lrp.visualize_features(explanation).axes[0]
    (bar,) = [p for p in ax.patches]
    assert bar.get_width() == pytest.approx(-1.5)


def test_walks_along_no_edge_of_the_graph_given_are_refused():
    """``visualize_walks(walks, edge_index[:, :4])``: steps along edges that
    the given graph lacks were drawn as if they were edges of it."""
    walks = (torch.tensor([[0, 1, 2], [3, 2, 2]]), torch.tensor([1.0, -0.5]))
    full = torch.tensor([[0, 1, 3], [1, 2, 2]])
    lrp.visualize_walks(walks, full)
    lrp.visualize_walks(walks, full.flip(0))  # target_to_source: the edges reversed
    with pytest.raises(ValueError, match=r"edge_index: the walks step along 1 node pairs .* \(first 3 -> 2\)"):
        lrp.visualize_walks(walks, full[:, :2])


def test_a_target_to_source_model_is_drawn_along_its_flow():
    """A GraphConv(flow='target_to_source') model on the chain 0 -> 1 -> ... -> 4
    explains node 1 from nodes 2 and 3 (it reads along the edges' direction):
    those are drawn, node 0 (zero relevance, upstream) is not. Before, the
    picture searched the neighbourhood against the edges and drew 0 and 1."""
    from torch_geometric.nn import GraphConv

    class Chain(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = GraphConv(2, 3, flow="target_to_source")
            self.c2 = GraphConv(3, 2, flow="target_to_source")

        def forward(self, x, edge_index):
            return self.c2(self.c1(x, edge_index).relu(), edge_index)

    torch.manual_seed(0)
    x = torch.rand(5, 2)
    edge_index = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4]])
    explanation = lrp.explain(Chain(), x, edge_index, index=1)
    assert explanation.flow == "target_to_source"
    assert set(explanation.node_mask.abs().sum(-1).nonzero().view(-1).tolist()) <= {1, 2, 3}
    fig = lrp.visualize_graph(explanation, node_labels=True)
    labels = {t.get_text() for t in fig.axes[0].texts}
    assert {"1", "2", "3"} <= labels and "0" not in labels and "4" not in labels


def test_walks_are_drawn_with_a_label_for_every_node_of_their_graph():
    walks = lrp.Walks(walks=torch.tensor([[0, 1, 2]]), relevance=torch.tensor([1.0]), score=1.0,
                      relevance_total=1.0, num_walks=1, index=2, target=torch.tensor(0), num_nodes=6,
                      edge_index=torch.tensor([[0, 1, 3], [1, 2, 4]]))
    fig = lrp.visualize_walks(walks, walks.edge_index, node_labels=[f"n{i}" for i in range(6)])
    assert {"n0", "n1", "n2"} <= {t.get_text() for t in fig.axes[0].texts}


def test_features_of_a_mask_without_columns_are_refused_by_name():
    with pytest.raises(ValueError, match="node_mask has no feature columns"):
        lrp.visualize_features(Explanation(node_mask=torch.zeros(3, 0)))


def test_a_summed_mask_of_one_node_is_refused_where_x_has_several_features():
    """One node explained with ``node_mask_type='object'``: ``[1, 1]``, the
    sum over x's four features. It was drawn as the bar of 'feature 0'
    (refused only for several nodes, as the docs say for all)."""
    explanation = Explanation(node_mask=torch.tensor([[1.5]]), x=torch.ones(1, 4),
                              edge_index=torch.empty(2, 0, dtype=torch.long))
    with pytest.raises(ValueError, match="relevance summed over features"):
        lrp.visualize_features(explanation)
    explanation.x = torch.ones(1, 1)  # one feature: the mask is that feature's
    (bar,) = lrp.visualize_features(explanation).axes[0].patches
    assert bar.get_width() == pytest.approx(1.5)


def test_relevance_no_message_path_brings_is_drawn_by_default():
    """A model that reads the whole graph gives relevance to nodes in
    another component than the target's: drawn by default (they were left
    out, the colour bar set without them); ``k_hop`` keeps to the hops."""
    edge_index = torch.tensor([[0, 1, 3], [1, 0, 4]])  # {0, 1} and {3, 4}; node 2 alone
    node_mask = torch.tensor([[0.2], [0.1], [0.0], [0.0], [-0.9]])
    explanation = Explanation(node_mask=node_mask, edge_mask=torch.tensor([0.1, 0.2, 0.0]), edge_index=edge_index,
                              index=0)
    ax = lrp.visualize_graph(explanation, node_labels=True).axes[0]
    drawn = sorted(int(t.get_text()) for t in ax.texts if t.get_text().isdigit())
    assert drawn == [0, 1, 4]
    assert len(node_positions(lrp.visualize_graph(explanation, k_hop=1).axes[0])) == 2


def test_a_walk_that_stays_at_its_node_is_a_circle_in_its_colour():
    """``[0, 0, 0]`` has no step to draw as an arrow; it was left out even
    as the strongest walk. It is a circle around its node, coloured by its
    relevance; a walk that moves gets none."""
    walks = torch.tensor([[0, 0, 0], [0, 1, 0], [1, 1, 1]])
    relevance = torch.tensor([0.05, 0.03, -0.02])
    fig = lrp.visualize_walks((walks, relevance), torch.tensor([[0, 1], [1, 0]]), node_labels=False)
    ax = fig.axes[0]
    stays = collection(ax, "stays")
    pos = node_positions(ax)
    assert np.allclose(stays.get_offsets(), pos[[0, 1]])
    first, second = stays.get_edgecolors()
    assert first[0] > 0.55 and first[2] < 0.45  # red, for the prediction
    assert second[2] > second[0] + 0.3  # blue, against it
    widths = stays.get_linewidths()
    assert widths[0] > widths[1]  # the stronger, the wider
    assert len([p for p in ax.patches if isinstance(p, FancyArrowPatch)]) == 2


def test_a_graph_level_hetero_target_in_a_batch_draws_the_explained_graph():
    """``index`` with a ``batch`` per node type (``batch_dict``) draws the
    explained graphs only, as for a homogeneous batch; every graph was
    drawn, titled "graph"."""
    explanation = hetero_explanation()
    from torch_geometric.explain.config import ModelConfig
    explanation._model_config = ModelConfig(mode="regression", task_level="graph", return_type="raw")
    explanation.index = torch.tensor([1])
    explanation["paper"].batch = torch.tensor([0, 1, 1])
    explanation["author"].batch = torch.tensor([0, 1])
    ax = lrp.visualize_graph(explanation, node_labels=False).axes[0]
    assert len(node_positions(ax, "nodes:paper")) == 2 and len(node_positions(ax, "nodes:author")) == 1
    assert ax.get_title().startswith("graph 1")
