"""Pictures of signed relevance: on the graph, on the features, along walks.

Red is evidence for the explained prediction, blue evidence against it (the
convention of LRP papers and Zennit's heatmaps), on the diverging colormap
``coolwarm``, whose middle (relevance 0) is light grey. Every colour scale is
symmetric around 0, so an all-positive mask is drawn in reds only.

Each function returns a ``matplotlib.figure.Figure`` of its own, not
registered with ``pyplot`` (nothing global is touched, no display is needed:
it renders with Agg). Show it in a notebook by returning it, save it with
``path=`` or ``fig.savefig``. matplotlib and networkx (layouts) are imported
when a function is called: ``pip install torch-geometric-lrp[viz]``.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Optional, Union

import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData

__all__ = ["visualize_graph", "visualize_features", "visualize_walks"]

CMAP = "coolwarm"
MARKERS = "osD^vph*"  # one marker shape per node type
MAX_LABELLED = 60  # nodes drawn with their ids by default up to this many


def _matplotlib():
    """``Figure`` and the Agg canvas, or an ImportError that says what to install."""
    try:
        import matplotlib  # noqa: F401
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as error:
        raise ImportError("Pictures need matplotlib and networkx: pip install torch-geometric-lrp[viz] "
                          "(or pip install matplotlib networkx).") from error
    return Figure, FigureCanvasAgg


def _networkx():
    try:
        import networkx
    except ImportError as error:
        raise ImportError("Graph layouts need networkx: pip install torch-geometric-lrp[viz] "
                          "(or pip install matplotlib networkx).") from error
    return networkx


def _figure(width: float, height: float):
    Figure, FigureCanvasAgg = _matplotlib()
    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)  # renders without a display; fig.canvas.draw() works
    return fig


def _finish(fig, path):
    if path is not None:
        fig.savefig(path)
    return fig


def _norm(values: Optional[Tensor]):
    """A colour scale symmetric around 0 that reaches the largest |value|."""
    from matplotlib.colors import Normalize
    top = float(values.abs().max()) if values is not None and values.numel() else 0.0
    top = top if top > 0 else 1.0
    return Normalize(-top, top)


def _colours(values: Tensor, norm) -> list:
    from matplotlib import colormaps
    return [tuple(c) for c in colormaps[CMAP](norm(values.double().numpy()))]


def _colorbar(fig, ax, norm, label: str) -> None:
    from matplotlib import colormaps
    from matplotlib.cm import ScalarMappable
    fig.colorbar(ScalarMappable(norm=norm, cmap=colormaps[CMAP]), ax=ax, shrink=0.6, pad=0.01, label=label)


def _check_top_k(top_k, allow_none: bool = True) -> None:
    if top_k is None and allow_none:
        return
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k <= 0:
        raise ValueError(f"top_k: expected a positive int{' or None' if allow_none else ''}, got {top_k!r}.")


def _edge_index(value, name: str) -> Tensor:
    if isinstance(value, Tensor) and value.is_floating_point() and value.dim() == 2 and value.size(0) == 2:
        raise ValueError(f"{name}: expected an integer tensor of shape [2, E], got {value.dtype}; pass "
                         f"edge_index.long().")
    if not isinstance(value, Tensor) or value.layout != torch.strided or value.dim() != 2 or value.size(0) != 2:
        shape = tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__
        sparse = (isinstance(value, Tensor) and value.layout != torch.strided) or \
            type(value).__name__ == "SparseTensor"
        raise ValueError(f"{name}: expected an integer tensor of shape [2, E], got {shape}. " + (
            "A sparse adjacency (as lrp.explain keeps it, where it was the input) is drawn from its edge list: "
            "set explanation.edge_index = torch_geometric.utils.to_edge_index(adj)[0], in the adjacency's order, "
            "which is the edge mask's." if sparse else
            "Explanations from lrp.explain carry it; for others set explanation.edge_index = edge_index."))
    return value.detach().long().cpu()


# --- what to draw: one homogeneous view of an explanation ----------------------------------------------

@dataclass
class _Graph:
    """An explanation as one graph: global node ids, node types kept apart."""

    edge_index: Tensor  # [2, E]
    node_relevance: Optional[Tensor]  # [N], summed over features
    edge_relevance: Optional[Tensor]  # [E]
    node_type: Tensor  # [N], position in type_names
    type_names: list[str]  # [] for a homogeneous explanation
    labels: list[str]  # default label of each node
    targets: Tensor  # nodes to outline
    pairs: Tensor  # [2, T] explained edges (edge-level targets)
    members: Optional[Tensor]  # [N] bool: nodes of the explained graphs (graph-level), None: all
    name: str  # what is explained, for the title
    flow: str = "source_to_target"  # the model's message flow (explanation.flow where lrp kept it)

    @property
    def num_nodes(self) -> int:
        return self.node_type.numel()


def _finite(values: Tensor, name: str) -> Tensor:
    """``values``, refused where they hold NaN or inf: a colour scale over them
    would put every finite value at an end or make the elements invisible."""
    bad = ~torch.isfinite(values)
    if bad.any():
        raise ValueError(f"{name}: {int(bad.sum())} of {values.numel()} values are NaN or inf, which a picture "
                         f"cannot show on a scale. lrp.explain warns where the explained output depends on a "
                         f"non-finite value (an input or an overflow); explain finite inputs.")
    return values


def _node_relevance(node_mask, num_nodes: int, name: str) -> Optional[Tensor]:
    """Node relevance summed over features, or None when the mask has none per node."""
    if node_mask is None:
        return None
    node_mask = _finite(node_mask.detach().cpu(), name)
    if node_mask.dim() == 1 and node_mask.numel() == num_nodes:
        return node_mask.double()
    if node_mask.dim() == 2 and node_mask.size(0) == num_nodes:
        return node_mask.double().sum(dim=1)
    if node_mask.dim() == 2 and node_mask.size(0) == 1:  # common_attributes: summed over the nodes
        return None
    raise ValueError(f"{name}: expected shape [N, F] or [N, 1] with N = {num_nodes} nodes, "
                     f"got {tuple(node_mask.shape)}.")


def _edge_relevance(edge_mask, num_edges: int, name: str) -> Optional[Tensor]:
    if edge_mask is None:
        return None
    if not isinstance(edge_mask, Tensor) or edge_mask.numel() != num_edges:
        shape = tuple(edge_mask.shape) if isinstance(edge_mask, Tensor) else type(edge_mask).__name__
        raise ValueError(f"{name}: expected one value per edge ({num_edges}), got {shape}.")
    return _finite(edge_mask.detach().cpu().double().view(-1), name)


def _num_nodes(store, edge_indices: list[tuple[Tensor, int]]) -> int:
    """Nodes of a store: from ``x`` or ``node_mask``, else the largest id in its edges."""
    for key in ("x", "node_mask"):
        value = store.get(key) if hasattr(store, "get") else None
        if isinstance(value, Tensor) and value.dim() >= 1 and not (key == "node_mask" and value.size(0) == 1):
            return value.size(0)
    ids = [e[row].max().item() + 1 for e, row in edge_indices if e.numel()]
    return int(max(ids, default=0))


def _positions(index, size: int, what: str) -> Tensor:
    """``explanation.index`` (an int, positions or a boolean mask) as positions."""
    t = torch.tensor([index]) if isinstance(index, int) else torch.as_tensor(index).detach().cpu()
    if t.dtype == torch.bool:
        if t.numel() != size:
            raise ValueError(f"explanation.index: a boolean mask needs one entry per {what} ({size}), "
                             f"got {t.numel()}.")
        return t.nonzero().view(-1)
    t = t.view(-1).long()
    if t.numel() and (t.min() < 0 or t.max() >= size):
        raise ValueError(f"explanation.index: positions {t.tolist()} out of range for {size} {what}s.")
    return t


def _task_level(explanation, index) -> str:
    config = getattr(explanation, "_model_config", None)
    level = getattr(config, "task_level", None)
    if level is not None:
        return getattr(level, "value", str(level))
    if explanation.get("edge_label_index") is not None:
        return "edge"
    return "node" if index is not None else "graph"


def _named(ids: list[str], what: str) -> str:
    if not ids:
        return what
    shown = ", ".join(ids[:5]) + (", ..." if len(ids) > 5 else "")
    return f"{what}{'s' if len(ids) > 1 else ''} {shown}"


def _homogeneous(explanation: Data) -> _Graph:
    if explanation.get("edge_index") is None:
        raise ValueError("explanation.edge_index: missing. Explanations from lrp.explain carry it; "
                         "for others set explanation.edge_index = edge_index.")
    edge_index = _edge_index(explanation.edge_index, "explanation.edge_index")
    n = _num_nodes(explanation, [(edge_index, 0), (edge_index, 1)])
    nodes = _node_relevance(explanation.get("node_mask"), n, "explanation.node_mask")
    edges = _edge_relevance(explanation.get("edge_mask"), edge_index.size(1), "explanation.edge_mask")
    if nodes is None and edges is None:
        raise ValueError("explanation: has no relevance per node (node_mask [N, F] or [N, 1]) and none per edge "
                         "(edge_mask [E]) to draw; explain with node_mask_type='attributes' or 'object', or "
                         "edge_mask_type='object'.")
    node_index = explanation.get("node_index")  # global ids of a subgraph (lrp.explain_nodes)
    labels = [str(i) for i in (node_index.tolist() if isinstance(node_index, Tensor) else range(n))]
    index = explanation.get("index")
    level = _task_level(explanation, index)
    targets, pairs, members = torch.empty(0, dtype=torch.long), torch.empty(2, 0, dtype=torch.long), None
    name = "graph"
    if level == "node" and index is not None:
        targets = _positions(index, n, "node")
        name = _named([labels[i] for i in targets.tolist()], "node")
    elif level == "edge":
        label_index = explanation.get("edge_label_index")
        candidates = edge_index if label_index is None else _edge_index(label_index, "explanation.edge_label_index")
        rows = torch.arange(candidates.size(1)) if index is None else _positions(index, candidates.size(1), "edge")
        pairs = candidates[:, rows]
        targets = pairs.view(-1).unique()
        name = _named([f"{labels[s]}→{labels[d]}" for s, d in pairs.t().tolist()], "edge")
    elif level == "graph" and index is not None and isinstance(explanation.get("batch"), Tensor):
        graphs = _positions(index, int(explanation.batch.max()) + 1, "graph")
        members = torch.isin(explanation.batch.detach().cpu(), graphs)
        name = _named([str(i) for i in graphs.tolist()], "graph")
    return _Graph(edge_index, nodes, edges, torch.zeros(n, dtype=torch.long), [], labels, targets, pairs,
                  members, name, _flow(explanation))


def _heterogeneous(explanation: HeteroData) -> _Graph:
    node_types = list(explanation.node_types)
    edge_types = [t for t in explanation.edge_types if explanation[t].get("edge_index") is not None]
    edge_indices = {t: _edge_index(explanation[t].edge_index, f"explanation[{t!r}].edge_index") for t in edge_types}
    if not edge_types:
        raise ValueError("explanation: no edge type has an edge_index; set explanation[edge_type].edge_index.")
    sizes = {}
    for nt in node_types:
        rows = [(e, 0) for t, e in edge_indices.items() if t[0] == nt] + \
               [(e, 1) for t, e in edge_indices.items() if t[-1] == nt]
        sizes[nt] = _num_nodes(explanation[nt], rows)
    offsets, start = {}, 0
    for nt in node_types:
        offsets[nt], start = start, start + sizes[nt]
    node_parts = [_node_relevance(explanation[nt].get("node_mask"), sizes[nt], f"explanation[{nt!r}].node_mask")
                  for nt in node_types]
    edge_parts = [_edge_relevance(explanation[t].get("edge_mask"), edge_indices[t].size(1),
                                  f"explanation[{t!r}].edge_mask") for t in edge_types]
    if all(p is None for p in node_parts) and all(p is None for p in edge_parts):
        raise ValueError("explanation: no node type has a node_mask and no edge type an edge_mask to draw.")
    nodes = None if all(p is None for p in node_parts) else torch.cat(
        [torch.zeros(sizes[nt], dtype=torch.double) if p is None else p for nt, p in zip(node_types, node_parts)])
    edges = None if all(p is None for p in edge_parts) else torch.cat(
        [torch.zeros(edge_indices[t].size(1), dtype=torch.double) if p is None else p
         for t, p in zip(edge_types, edge_parts)])
    edge_index = torch.cat([edge_indices[t] + torch.tensor([[offsets[t[0]]], [offsets[t[-1]]]])
                            for t in edge_types], dim=1)
    node_type = torch.cat([torch.full((sizes[nt],), i, dtype=torch.long) for i, nt in enumerate(node_types)])
    labels = [str(i) for nt in node_types for i in range(sizes[nt])]
    index = explanation.get("index")
    targets, names = [], []
    if isinstance(index, Mapping):  # {node_type: index}: node-level targets of those types
        for nt, idx in index.items():
            if nt not in offsets:
                raise ValueError(f"explanation.index: node type {nt!r} is not one of {node_types}.")
            positions = _positions(idx, sizes[nt], f"{nt!r} node")
            targets.append(positions + offsets[nt])
            names += [f"{nt} {i}" for i in positions.tolist()]
    elif index is not None and _task_level(explanation, index) == "node":
        raise ValueError(f"explanation.index: {index!r} names no node type, so the target cannot be marked (the "
                         f"model's output rows belong to one node type, which the explanation does not hold). Set "
                         f"explanation.index = {{node_type: index}} (e.g. {{{node_types[0]!r}: explanation.index}}) "
                         f"before drawing.")
    targets = torch.cat(targets) if targets else torch.empty(0, dtype=torch.long)
    name = f"node{'s' if len(names) > 1 else ''} " + ", ".join(names[:5]) if names else "graph"
    members = None
    batches = [explanation[nt].get("batch") for nt in node_types]
    if index is not None and not isinstance(index, Mapping) and all(isinstance(b, Tensor) for b in batches):
        # graph-level targets of a batch (batch_dict): the explained graphs, as for a homogeneous graph
        graphs = _positions(index, max(int(b.max()) + 1 if b.numel() else 0 for b in batches), "graph")
        members = torch.cat([torch.isin(b.detach().cpu(), graphs) for b in batches])
        name = _named([str(i) for i in graphs.tolist()], "graph")
    return _Graph(edge_index, nodes, edges, node_type, [str(nt) for nt in node_types], labels, targets,
                  torch.empty(2, 0, dtype=torch.long), members, name, _flow(explanation))


def _as_graph(explanation) -> _Graph:
    if isinstance(explanation, HeteroData):
        return _heterogeneous(explanation)
    if isinstance(explanation, Data):
        return _homogeneous(explanation)
    raise TypeError(f"explanation: expected a torch_geometric.explain.Explanation or HeteroExplanation, "
                    f"got {type(explanation).__name__}.")


# --- which nodes and edges -----------------------------------------------------------------------------

def _flow(explanation) -> str:
    flow = explanation.get("flow") if isinstance(explanation, Data) else getattr(explanation, "flow", None)
    if flow not in (None, "source_to_target", "target_to_source"):
        raise ValueError(f"explanation.flow: expected 'source_to_target' or 'target_to_source', got {flow!r}.")
    return flow or "source_to_target"


def _hops(edge_index: Tensor, num_nodes: int, targets: Tensor, flow: str = "source_to_target") -> Tensor:
    """Hops from each node to the nearest target along the message flow
    (``src -> dst``, or ``dst -> src`` under ``flow="target_to_source"``);
    -1 where no message reaches a target."""
    if flow == "target_to_source":
        edge_index = edge_index.flip(0)
    dist = torch.full((num_nodes,), -1, dtype=torch.long)
    dist[targets] = 0
    frontier = torch.zeros(num_nodes, dtype=torch.bool)
    frontier[targets] = True
    hop = 0
    while frontier.any():
        hop += 1
        reached = torch.zeros(num_nodes, dtype=torch.bool)
        reached[edge_index[0, frontier[edge_index[1]]]] = True
        frontier = reached & (dist < 0)
        dist[frontier] = hop
    return dist


def _receptive_hops(g: _Graph, dist: Tensor) -> int:
    """The fewest hops around the targets that hold every node and edge with
    nonzero relevance (that a message path connects to them)."""
    hops = [1]
    if g.node_relevance is not None:
        d = dist[(g.node_relevance != 0) & (dist >= 0)]
        hops.append(int(d.max()) if d.numel() else 0)
    if g.edge_relevance is not None:
        reader = 0 if g.flow == "target_to_source" else 1  # the end that reads the message
        d = dist[g.edge_index[reader, g.edge_relevance != 0]]
        d = d[d >= 0]
        hops.append(int(d.max()) + 1 if d.numel() else 0)
    return max(hops)


def _relevant_nodes(g: _Graph) -> Tensor:
    """Nodes with nonzero relevance, or at an end of an edge with it."""
    found = torch.zeros(g.num_nodes, dtype=torch.bool)
    if g.node_relevance is not None:
        found |= g.node_relevance != 0
    if g.edge_relevance is not None:
        found[g.edge_index[:, g.edge_relevance != 0].reshape(-1)] = True
    return found


@dataclass
class _Edges:
    pairs: list[tuple[int, int]]
    relevance: Optional[Tensor]
    directed: bool


def _edges_to_draw(g: _Graph, keep: Tensor) -> _Edges:
    """Edges between kept nodes, duplicates summed; on an undirected graph one
    line per node pair with the relevance of both directions summed."""
    src, dst = g.edge_index
    n = g.num_nodes
    # directed or not is the graph's, not the drawn part's: a part that happens
    # to hold both directions of its edges is still drawn with arrows
    loops = src == dst
    directed = not torch.isin((dst * n + src)[~loops], (src * n + dst)[~loops]).all()
    inside = keep[src] & keep[dst] & ~loops
    src, dst = src[inside], dst[inside]
    relevance = g.edge_relevance[inside] if g.edge_relevance is not None else torch.zeros(src.numel())
    keys = src * n + dst
    if not directed:
        keys = torch.minimum(src, dst) * n + torch.maximum(src, dst)
    unique, inverse = keys.unique(return_inverse=True)
    summed = torch.zeros(unique.numel(), dtype=torch.double).index_add_(0, inverse, relevance.double())
    pairs = [(k // n, k % n) for k in unique.tolist()]
    return _Edges(pairs, summed if g.edge_relevance is not None else None, bool(directed))


def _layout(nodes: list[int], pairs: list[tuple[int, int]]) -> dict:
    nx = _networkx()
    graph = nx.Graph()
    graph.add_nodes_from(nodes)
    graph.add_edges_from(pairs)
    return nx.spring_layout(graph, seed=0)


def _node_size(count: int) -> float:
    return max(40.0, min(320.0, 6000.0 / max(count, 1)))


def _resolve_labels(node_labels, g: _Graph, drawn: int) -> Optional[list[str]]:
    if node_labels is None:
        return g.labels if drawn <= MAX_LABELLED else None
    if node_labels is False:
        return None
    if node_labels is True:
        return g.labels
    if g.type_names and isinstance(node_labels, Mapping):  # {node_type: labels}
        unknown = [k for k in node_labels if k not in g.type_names]
        if unknown:
            raise ValueError(f"node_labels: on a heterogeneous explanation, a dict maps node types "
                             f"({g.type_names}) to labels (a sequence, or {{node id: label}}); got keys {unknown}.")
        labels = list(g.labels)
        for i, nt in enumerate(g.type_names):
            given = node_labels.get(nt)
            if given is None:
                continue
            ids = (g.node_type == i).nonzero().view(-1).tolist()
            if isinstance(given, Mapping):  # {node id within the type: label}
                for j, local in enumerate(ids):
                    labels[local] = str(given.get(j, ""))
                continue
            if len(given) != len(ids):
                raise ValueError(f"node_labels[{nt!r}]: expected {len(ids)} labels, got {len(given)}.")
            for j, label in zip(ids, given):
                labels[j] = str(label)
        return labels
    if isinstance(node_labels, Mapping):  # {node id as drawn (node_index of a subgraph): label}
        return [str(node_labels.get(int(shown), "")) for shown in g.labels]
    if isinstance(node_labels, Sequence) and not isinstance(node_labels, str):
        if len(node_labels) != g.num_nodes:
            raise ValueError(f"node_labels: expected one label per node ({g.num_nodes}), got {len(node_labels)}.")
        return [str(label) for label in node_labels]
    raise ValueError(f"node_labels: expected None, a bool, a sequence with one label per node or a dict, "
                     f"got {type(node_labels).__name__}.")


def _draw_nodes(ax, pos: dict, nodes: list[int], colours: list, g_types: Tensor, type_names: list[str],
                size: float) -> None:
    for t in range(max(len(type_names), 1)):
        chosen = [(i, c) for i, c in zip(nodes, colours) if int(g_types[i]) == t]
        if not chosen:
            continue
        ax.scatter([pos[i][0] for i, _ in chosen], [pos[i][1] for i, _ in chosen], s=size,
                   c=[c for _, c in chosen], marker=MARKERS[t % len(MARKERS)], edgecolors="#444444",
                   linewidths=0.6, zorder=3, gid=f"nodes:{type_names[t] if type_names else ''}")


def _draw_ring(ax, pos: dict, targets: list[int], size: float) -> None:
    if targets:
        ax.scatter([pos[i][0] for i in targets], [pos[i][1] for i in targets], s=size * 2.6, marker="o",
                   facecolors="none", edgecolors="black", linewidths=2.5, zorder=4, gid="targets")


def _draw_labels(ax, pos: dict, nodes: list[int], labels: Optional[list[str]], values: Optional[Tensor],
                 norm, count: int) -> None:
    if labels is None:
        return
    for k, i in enumerate(nodes):
        dark = values is not None and abs(norm(float(values[k])) - 0.5) > 0.35
        ax.text(pos[i][0], pos[i][1], labels[i], ha="center", va="center", fontsize=7 if count <= 30 else 5.5,
                color="white" if dark else "black", zorder=5)


def _arrow(ax, start, end, colour, width: float, rad: float, shrink: float, alpha: float = 1.0, zorder=2):
    from matplotlib.patches import FancyArrowPatch
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=8 + 2.5 * width, linewidth=width,
                                 color=colour, alpha=alpha, shrinkA=shrink, shrinkB=shrink,
                                 connectionstyle=f"arc3,rad={rad}", zorder=zorder))


def _select(g: _Graph, k_hop: Optional[int], top_k: Optional[int]) -> tuple[list[int], _Edges]:
    """The nodes and edges to draw: the targets' receptive field (or the whole
    graph), then, with ``top_k``, its strongest edges, their nodes and the targets."""
    if g.targets.numel():
        dist = _hops(g.edge_index, g.num_nodes, g.targets, g.flow)
        hops = _receptive_hops(g, dist) if k_hop is None else k_hop
        keep = (dist >= 0) & (dist <= hops)
        if k_hop is None:  # relevance that no message path brings (a model that reads the whole graph)
            keep |= _relevant_nodes(g)
    else:
        keep = torch.ones(g.num_nodes, dtype=torch.bool) if g.members is None else g.members.clone()
    edges = _edges_to_draw(g, keep)
    if top_k is not None:
        order = edges.relevance.abs().argsort(descending=True, stable=True)[:top_k]
        edges = _Edges([edges.pairs[i] for i in order.tolist()], edges.relevance[order], edges.directed)
        keep = torch.zeros(g.num_nodes, dtype=torch.bool)
        keep[g.targets] = True
        keep[torch.tensor([i for pair in edges.pairs for i in pair], dtype=torch.long)] = True
    return keep.nonzero().view(-1).tolist(), edges


def _draw_edges(ax, pos: dict, edges: _Edges, shrink: float) -> None:
    """Colour and width by relevance, the strongest on top; arrows on a directed graph."""
    if not edges.pairs:
        return
    values = edges.relevance if edges.relevance is not None else torch.zeros(len(edges.pairs))
    colours = _colours(values, _norm(values)) if edges.relevance is not None else ["#bbbbbb"] * len(values)
    widths = (0.6 + 5.4 * values.abs() / (values.abs().max() or 1.0)).tolist()
    order = values.abs().argsort().tolist()
    if edges.directed:
        for e in order:
            s, d = edges.pairs[e]
            _arrow(ax, pos[s], pos[d], colours[e], widths[e], 0.12, shrink)
        return
    from matplotlib.collections import LineCollection
    ax.add_collection(LineCollection([(pos[edges.pairs[e][0]], pos[edges.pairs[e][1]]) for e in order],
                                     colors=[colours[e] for e in order], linewidths=[widths[e] for e in order],
                                     capstyle="round", zorder=2, gid="edges"))


def _legend(fig, g: _Graph, explained: list) -> None:
    """Node types (marker shapes), the ring, the explained edge: below the picture."""
    from matplotlib.lines import Line2D
    handles = [Line2D([], [], marker=MARKERS[i % len(MARKERS)], linestyle="", color="#bbbbbb",
                      markeredgecolor="#444444", label=nt) for i, nt in enumerate(g.type_names)]
    if g.targets.numel():
        handles.append(Line2D([], [], marker="o", linestyle="", markerfacecolor="none", markeredgecolor="black",
                              markeredgewidth=2, markersize=10, label="explained"))
    if explained:
        handles.append(Line2D([], [], color="black", linestyle="--", label="explained edge"))
    if handles:
        fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), fontsize=8, frameon=False)


def visualize_graph(
    explanation,
    path: Optional[str] = None,
    *,
    k_hop: Optional[int] = None,
    node_labels: Union[None, bool, Sequence, Mapping] = None,
    top_k: Optional[int] = None,
    backend: Optional[str] = None,
):
    """Draw an explanation on its graph: signed node and edge relevance.

    Node colour is the node's relevance summed over features, edge colour and
    width the edge's relevance (``edge_mask``), each on its own colour scale,
    symmetric around 0 (red: for the prediction, blue: against), with a
    colorbar each. The explained nodes carry a thick black ring; an explained
    edge (edge-level targets) is a dashed black line between its two ringed
    ends. Node types of a ``HeteroExplanation`` get their own marker shapes
    (and a legend entry); all edge types are drawn.

    Which nodes: for node- and edge-level targets, the receptive field, i.e.
    the nodes within ``k_hop`` hops of the targets along the message flow;
    ``k_hop`` defaults to the fewest hops that hold every node and edge with
    nonzero relevance, and nodes with relevance that no message path
    connects to the targets (a model that reads the whole graph) are drawn
    too. For graph-level targets, the whole graph (the
    explained graphs of ``batch`` when ``batch`` and ``index`` are set).
    Edges between drawn nodes are drawn; on an undirected graph once per node
    pair, with the relevance of both directions summed, on a directed graph
    as arrows. Input self-loops and ``self_loop_relevance`` (self-loops added
    inside layers) are not drawn. Nodes are laid out by networkx's
    ``spring_layout`` (seed 0) and drawn in ascending order of their id.

    Parameters
    ----------
    explanation : Explanation or HeteroExplanation
        Needs ``edge_index`` (per edge type) and a ``node_mask`` or an
        ``edge_mask``. Targets come from ``index`` (for a
        ``HeteroExplanation``: ``{node_type: index}``; any other index draws
        its whole graph), explained edges from ``edge_label_index`` where
        present. It is not changed.
    path : str, optional
        Also save the picture there.
    k_hop : int, optional
        Hops around the targets to draw.
    node_labels : bool, sequence or dict, optional
        ``None``: node ids (global ids ``node_index`` of an
        ``lrp.explain_nodes`` subgraph) when at most 60 nodes are drawn;
        ``True``/``False``: always/never ids; a sequence with one label per
        node (in the explanation's order), a ``{node id: label}`` dict keyed
        by the ids drawn (global ids ``node_index`` of a subgraph), or
        ``{node_type: labels}`` for a ``HeteroExplanation``.
    top_k : int, optional
        Keep only the ``top_k`` edges of largest |relevance|, their end nodes
        and the targets.
    backend : str, optional
        ``None`` or ``'networkx'`` (networkx layout, matplotlib drawing).

    Returns
    -------
    matplotlib.figure.Figure
    """
    if backend not in (None, "networkx"):
        raise ValueError(f"backend: expected None or 'networkx' (networkx layout drawn with matplotlib), "
                         f"got {backend!r}.")
    _matplotlib(), _networkx()
    _check_top_k(top_k)
    if k_hop is not None and (isinstance(k_hop, bool) or not isinstance(k_hop, int) or k_hop < 0):
        raise ValueError(f"k_hop: expected a non-negative int or None, got {k_hop!r}.")
    g = _as_graph(explanation)
    if top_k is not None and g.edge_relevance is None:
        raise ValueError("top_k: keeps the edges of largest |relevance|, but the explanation has no edge_mask; "
                         "leave top_k=None or explain with edge_mask_type='object'.")

    nodes, edges = _select(g, k_hop, top_k)
    labels = _resolve_labels(node_labels, g, len(nodes))
    explained = [tuple(p) for p in g.pairs.t().tolist()]
    pos = _layout(nodes, edges.pairs + [p for p in explained if p[0] != p[1]])

    fig = _figure(7.5, 6.0)
    ax = fig.add_subplot()
    size = _node_size(len(nodes))
    shrink = (size ** 0.5) / 2 + 1  # node radius in points
    _draw_edges(ax, pos, edges, shrink)
    for s, d in explained:
        ax.plot([pos[s][0], pos[d][0]], [pos[s][1], pos[d][1]], color="black", linestyle="--", linewidth=1.5,
                zorder=2.5)
    node_values = g.node_relevance[nodes] if g.node_relevance is not None else None
    node_norm = _norm(node_values)
    colours = _colours(node_values, node_norm) if node_values is not None else ["#dddddd"] * len(nodes)
    _draw_nodes(ax, pos, nodes, colours, g.node_type, g.type_names, size)
    _draw_ring(ax, pos, g.targets.tolist(), size)
    _draw_labels(ax, pos, nodes, labels, node_values, node_norm, len(nodes))

    _legend(fig, g, explained)
    if node_values is not None:
        _colorbar(fig, ax, node_norm, "node relevance (sum over features)")
    if edges.relevance is not None:
        _colorbar(fig, ax, _norm(edges.relevance), "edge relevance" + ("" if edges.directed else " (both directions)"))
    score = explanation.get("score")
    ax.set_title(g.name + (f" · score {score:+.3g}" if isinstance(score, (int, float)) else ""), fontsize=10)
    ax.margins(0.06)
    ax.axis("off")
    return _finish(fig, path)


# --- features --------------------------------------------------------------------------------------------

def _feature_relevance(node_mask, name: str, x=None) -> Tensor:
    if not isinstance(node_mask, Tensor) or node_mask.dim() != 2:
        shape = tuple(node_mask.shape) if isinstance(node_mask, Tensor) else type(node_mask).__name__
        raise ValueError(f"{name}: expected a node mask of shape [N, F], got {shape}; explain with "
                         f"node_mask_type='attributes'.")
    # x of one feature ([N, 1], or [N] ids of one categorical column): [N, 1] is then per feature
    one_feature = isinstance(x, Tensor) and (x.dim() == 1 or (x.dim() == 2 and x.size(1) == 1))
    # a [N, 1] mask of several nodes, or of one node whose x has several features, is summed over features
    summed = node_mask.size(0) > 1 or (isinstance(x, Tensor) and x.dim() == 2 and x.size(1) > 1)
    if node_mask.size(1) == 1 and summed and not one_feature:
        raise ValueError(f"{name}: has shape {tuple(node_mask.shape)}, relevance summed over features "
                         f"(node_mask_type='object'); explain with node_mask_type='attributes' to see features.")
    return _finite(node_mask.detach().cpu().double(), name).sum(dim=0)


def _names(given, count: int, name: str) -> list[str]:
    if given is None:
        return [f"feature {j}" for j in range(count)]
    if isinstance(given, str):
        raise ValueError(f"{name}: expected a sequence of names, one per feature ({count}), got a string {given!r}; "
                         f"pass list(...) of names.")
    if not isinstance(given, Sequence) or len(given) != count:
        got = len(given) if isinstance(given, Sequence) else type(given).__name__
        raise ValueError(f"{name}: expected one name per feature ({count}), got {got}.")
    return [str(n) for n in given]


def _feature_table(explanation, feature_names) -> tuple[Tensor, list[str]]:
    """Relevance per feature (summed over nodes) and its names; per node type for hetero."""
    if isinstance(explanation, HeteroData):
        if feature_names is not None and not isinstance(feature_names, Mapping):
            raise ValueError("feature_names: for a HeteroExplanation, expected {node_type: names}.")
        values, names = [], []
        for nt in explanation.node_types:
            mask = explanation[nt].get("node_mask")
            if mask is None:
                continue
            values.append(_feature_relevance(mask, f"explanation[{nt!r}].node_mask", explanation[nt].get("x")))
            given = (feature_names or {}).get(nt)
            names += [f"{nt}: {n}" for n in _names(given, values[-1].numel(), f"feature_names[{nt!r}]")]
        if not values:
            raise ValueError("explanation: no node type has a node_mask; explain with node_mask_type='attributes'.")
        return torch.cat(values), names
    if isinstance(explanation, Data):
        values = _feature_relevance(explanation.get("node_mask"), "explanation.node_mask", explanation.get("x"))
        return values, _names(feature_names, values.numel(), "feature_names")
    raise TypeError(f"explanation: expected a torch_geometric.explain.Explanation or HeteroExplanation, "
                    f"got {type(explanation).__name__}.")


def visualize_features(explanation, top_k: Optional[int] = 10, path: Optional[str] = None,
                       feature_names: Union[None, Sequence[str], Mapping] = None):
    """Draw feature relevance as a signed horizontal bar chart.

    The relevance of each input feature, summed over nodes (``node_mask``
    ``[N, F]``, or ``[1, F]``), the ``top_k`` of largest |relevance| from the
    top down: red bars for positive relevance (for the prediction), blue for
    negative. For a ``HeteroExplanation`` each node type's features count
    separately (``"type: name"``).

    Parameters
    ----------
    explanation : Explanation or HeteroExplanation
        Needs ``node_mask`` with one column per feature. It is not changed.
    top_k : int, optional
        Bars to draw (``None``: every feature).
    path : str, optional
        Also save the picture there.
    feature_names : sequence of str or dict, optional
        One name per feature (``{node_type: names}`` for a
        ``HeteroExplanation``); default ``"feature j"``.

    Returns
    -------
    matplotlib.figure.Figure
    """
    _matplotlib()
    _check_top_k(top_k)
    values, names = _feature_table(explanation, feature_names)
    if not values.numel():
        raise ValueError("explanation: node_mask has no feature columns (shape [N, 0]): no feature relevance to "
                         "draw.")
    order = values.abs().argsort(descending=True, stable=True)[: top_k or values.numel()].tolist()
    shown = values[order]
    from matplotlib import colormaps
    red, blue = colormaps[CMAP](1.0), colormaps[CMAP](0.0)
    colours = [red if v > 0 else blue if v < 0 else "#bbbbbb" for v in shown.tolist()]
    fig = _figure(6.5, 1.2 + 0.32 * len(order))
    ax = fig.add_subplot()
    ax.barh(range(len(order)), shown.numpy(), color=colours, edgecolor="none", height=0.7, gid="bars")
    ax.set_yticks(range(len(order)), [names[j] for j in order], fontsize=8)
    ax.invert_yaxis()  # the largest |relevance| on top
    ax.axvline(0.0, color="#444444", linewidth=0.8)
    top = float(shown.abs().max()) or 1.0
    ax.set_xlim(-1.1 * top if (shown < 0).any() else -0.05 * top, 1.1 * top if (shown > 0).any() else 0.05 * top)
    ax.set_xlabel("relevance, summed over nodes (red: for, blue: against)", fontsize=9)
    ax.set_title(f"feature relevance: top {len(order)} of {values.numel()} by |relevance|", fontsize=10)
    ax.spines[["top", "right"]].set_visible(False)
    return _finish(fig, path)


# --- walks -----------------------------------------------------------------------------------------------

def _walks_and_relevance(walks) -> tuple[Tensor, Tensor]:
    if isinstance(walks, (tuple, list)) and len(walks) == 2:
        paths, relevance = walks
    elif hasattr(walks, "walks") and hasattr(walks, "relevance"):
        paths, relevance = walks.walks, walks.relevance
    else:
        raise TypeError(f"walks: expected lrp.walks(...)'s result (with .walks and .relevance) or a tuple "
                        f"(walks [K, L+1], relevance [K]), got {type(walks).__name__}.")
    if not isinstance(paths, Tensor) or paths.dim() != 2 or paths.is_floating_point() or paths.size(1) < 2:
        shape = tuple(paths.shape) if isinstance(paths, Tensor) else type(paths).__name__
        raise ValueError(f"walks: expected an integer tensor [K, L+1] of node ids (L >= 1 steps), got {shape}.")
    if not isinstance(relevance, Tensor) or relevance.numel() != paths.size(0):
        shape = tuple(relevance.shape) if isinstance(relevance, Tensor) else type(relevance).__name__
        raise ValueError(f"walks: expected relevance with one value per walk ({paths.size(0)}), got {shape}.")
    if paths.size(0) == 0:
        raise ValueError("walks: no walks to draw (K = 0).")
    return paths.detach().cpu().long(), _finite(relevance.detach().cpu().double().view(-1), "walks: relevance")


def _draw_stays(ax, pos: dict, paths: Tensor, colours: list, strength: list, size: float) -> None:
    """Walks that never leave their node (no arrow to draw) as circles
    around it in the walk's colour, wider the stronger; several at one node
    nested, the strongest innermost."""
    stays = [k for k in range(paths.size(0)) if bool((paths[k] == paths[k, 0]).all())]
    if not stays:
        return
    count: dict = {}
    xy, sizes, edge_colours, widths = [], [], [], []
    for k in stays:  # strongest first
        node = int(paths[k, 0])
        j = count[node] = count.get(node, 0) + 1
        xy.append(pos[node])
        sizes.append(size * (1.6 + 0.7 * j) ** 2)
        edge_colours.append(colours[k])
        widths.append(0.8 + 3.2 * strength[k])
    ax.scatter(*zip(*xy), s=sizes, facecolors="none", edgecolors=edge_colours, linewidths=widths, zorder=4,
               gid="stays")


def visualize_walks(walks, edge_index: Tensor, path: Optional[str] = None, *, top_k: Optional[int] = 10,
                    node_labels: Union[None, bool, Sequence, Mapping] = None):
    """Draw the most relevant walks as arrows along the graph.

    Each walk (node ids in message order: the input node first, the explained
    node last) is a chain of arrows coloured by its relevance on a colour scale
    symmetric around 0 (red: for the prediction, blue: against), wider and
    more opaque the larger its |relevance|; the strongest walk is drawn on top
    and walks are bent apart so that shared steps stay visible. Steps that stay
    at a node (self-loops) are not drawn; a walk that never leaves its node is
    a circle around it in the walk's colour. The nodes on the walks and the edges
    of ``edge_index`` between them (thin grey) are laid out by networkx's
    ``spring_layout`` (seed 0); the explained nodes (last column) carry a
    thick black ring.

    Parameters
    ----------
    walks : object with ``.walks`` and ``.relevance``, or tuple
        ``lrp.walks(...)``'s result, or ``(walks, relevance)``: a LongTensor
        ``[K, L+1]`` and a Tensor ``[K]``.
    edge_index : LongTensor
        The graph's edges ``[2, E]``, node ids as in ``walks``.
    path : str, optional
        Also save the picture there.
    top_k : int, optional
        Draw the ``top_k`` walks of largest |relevance| (``None``: all).
    node_labels : bool, sequence or dict, optional
        As for :func:`~torch_geometric_lrp.visualize.visualize_graph` (default: node ids up to 60 nodes).

    Returns
    -------
    matplotlib.figure.Figure
    """
    _matplotlib(), _networkx()
    _check_top_k(top_k)
    paths, relevance = _walks_and_relevance(walks)
    edge_index = _edge_index(edge_index, "edge_index")
    total = relevance.numel()
    order = relevance.abs().argsort(descending=True, stable=True)[: top_k or total]
    paths, relevance = paths[order], relevance[order]
    # the graph's node count: a Walks result knows it (isolated nodes past the last id included)
    n = max(int(paths.max()) + 1, int(edge_index.max()) + 1 if edge_index.numel() else 0,
            int(getattr(walks, "num_nodes", 0) or 0))
    if paths.min() < 0:
        raise ValueError("walks: node ids must be non-negative.")
    g = _Graph(edge_index, None, None, torch.zeros(n, dtype=torch.long), [], [str(i) for i in range(n)],
               paths[:, -1].unique(), torch.empty(2, 0, dtype=torch.long), None, "walks")
    keep = torch.zeros(n, dtype=torch.bool)
    keep[paths.view(-1)] = True
    background = _edges_to_draw(g, keep)
    steps = {(s, d) for walk in paths.tolist() for s, d in zip(walk[:-1], walk[1:]) if s != d}
    # the steps looked up among the edges as keys (one tensor op, not a Python set of every edge)
    pairs = torch.tensor(sorted(steps), dtype=torch.long).view(-1, 2)
    keys = torch.cat([edge_index[0] * n + edge_index[1], edge_index[1] * n + edge_index[0]])
    missing = pairs[~torch.isin(pairs[:, 0] * n + pairs[:, 1], keys)].tolist()
    if missing:  # a step along no edge: the walks are of another graph (or edge_index is cut short)
        raise ValueError(f"edge_index: the walks step along {len(missing)} node pairs that are no edge of it in "
                         f"either direction (first {missing[0][0]} -> {missing[0][1]}); pass the edges the walks "
                         f"were computed on.")
    nodes = keep.nonzero().view(-1).tolist()
    labels = _resolve_labels(node_labels, g, len(nodes))
    pos = _layout(nodes, background.pairs + sorted(steps))

    fig = _figure(7.0, 6.0)
    ax = fig.add_subplot()
    size = _node_size(len(nodes))
    shrink = (size ** 0.5) / 2 + 1
    if background.pairs:
        from matplotlib.collections import LineCollection
        ax.add_collection(LineCollection([(pos[s], pos[d]) for s, d in background.pairs], colors="#cccccc",
                                         linewidths=0.8, zorder=1, gid="graph"))
    norm = _norm(relevance)
    colours = _colours(relevance, norm)
    strength = (relevance.abs() / (relevance.abs().max() or 1.0)).tolist()
    for k in reversed(range(paths.size(0))):  # the strongest walk last, on top
        rad = 0.0 if k == 0 else 0.08 * ((k + 1) // 2) * (1 if k % 2 else -1)  # 0, .08, -.08, .16, ...
        walk = paths[k].tolist()
        for s, d in zip(walk[:-1], walk[1:]):
            if s != d:
                _arrow(ax, pos[s], pos[d], colours[k], 0.8 + 3.2 * strength[k], rad, shrink,
                       alpha=0.35 + 0.65 * strength[k], zorder=2 + strength[k])
    _draw_nodes(ax, pos, nodes, ["#eeeeee"] * len(nodes), g.node_type, [], size)
    _draw_ring(ax, pos, g.targets.tolist(), size)
    _draw_stays(ax, pos, paths, colours, strength, size)
    _draw_labels(ax, pos, nodes, labels, None, norm, len(nodes))
    _colorbar(fig, ax, norm, "walk relevance")
    count = getattr(walks, "num_walks", total)  # lrp.walks(top_k=k) knows how many walks there are
    ax.set_title(f"top {paths.size(0)} of {count} walks by |relevance|", fontsize=10)
    ax.margins(0.06)
    ax.axis("off")
    return _finish(fig, path)
