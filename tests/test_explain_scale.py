"""``lrp.explain_nodes`` at scale: every node by default, the sparse output
(``output='sparse'``) equal to the list output entry by entry, and the
subgraphs of a call cut from one sort of the edge list."""
from __future__ import annotations

import pytest
import torch

import torch_geometric_lrp as lrp
from explain_cases import (C, DATA, GINE, N, NODE_MODELS, Normalized, build, edge_attr_data, one_thread_fixture,
                           sparse_graph)
from torch_geometric_lrp.explainers import api, subgraph

one_thread = pytest.fixture(autouse=True, scope="module")(one_thread_fixture)

TARGETS = torch.tensor([0, 1, 17, 22, 9, 1, 29])  # neighbours, far apart, a repeat


def dense_rows(explanations, num_nodes, num_edges, key="node_mask"):
    """What the sparse output must hold, built from the list output."""
    nodes = torch.zeros(len(explanations), num_nodes)
    edges = torch.zeros(len(explanations), num_edges)
    for k, ex in enumerate(explanations):
        nodes[k, ex.node_index] = ex[key].sum(dim=-1)
        edges[k, ex.edge_id] = ex.edge_mask
    return nodes, edges


def assert_sparse_equals_list(result, explanations, index, num_nodes, num_edges):
    assert isinstance(result, api.NodeRelevance)
    assert torch.equal(result.index, index)
    nodes, edges = dense_rows(explanations, num_nodes, num_edges)
    for matrix, dense in ((result.node_relevance, nodes), (result.edge_relevance, edges)):
        assert matrix.layout == torch.sparse_coo and matrix.shape == dense.shape
        assert torch.equal(matrix.to_dense(), dense)  # the same numbers, not close ones
        assert torch.all(matrix._values() != 0)  # zeros are not stored
        assert torch.equal(matrix._indices(), matrix.coalesce().indices())  # built coalesced
    assert result.target.tolist() == [ex.target.tolist() for ex in explanations]
    assert result.score.dtype == torch.float64
    assert result.score.tolist() == [ex.score for ex in explanations]
    assert result.relevance_total.tolist() == [ex.relevance_total for ex in explanations]


@pytest.mark.parametrize("batch_size", [1, 3])
@pytest.mark.parametrize("name", NODE_MODELS)
def test_sparse_output_equals_the_list(name, batch_size):
    model = build(name)
    x, edge_index = DATA["x"], DATA["edge_index"]
    listed = lrp.explain_nodes(model, x, edge_index, TARGETS, batch_size=batch_size)
    result = lrp.explain_nodes(model, x, edge_index, TARGETS, batch_size=batch_size, output="sparse")
    assert_sparse_equals_list(result, listed, TARGETS, N, edge_index.shape[1])
    assert result.edge_attr_relevance is None
    # the node row of target 17 is the summed node mask of lrp.explain for 17 alone
    full = lrp.explain(model, x, edge_index, index=17, node_mask_type="object")
    torch.testing.assert_close(result.node_relevance.to_dense()[2], full.node_mask.view(-1), rtol=0, atol=1e-5)


def test_every_node_by_default():
    model = build("gcn")
    x, edge_index = DATA["x"], DATA["edge_index"]
    every = lrp.explain_nodes(model, x, edge_index, batch_size=8, output="sparse")
    listed = lrp.explain_nodes(model, x, edge_index, torch.arange(N), batch_size=8)
    assert [int(ex.node_index[ex.index]) for ex in listed] == list(range(N))
    assert_sparse_equals_list(every, listed, torch.arange(N), N, edge_index.shape[1])
    assert len(lrp.explain_nodes(model, x, edge_index, batch_size=8)) == N


def test_sparse_output_with_a_mask_view_and_boolean_targets():
    model = build("gat")
    x, edge_index = DATA["x"], DATA["edge_index"]
    chosen = torch.zeros(N, dtype=torch.bool)
    chosen[[3, 17, 22]] = True
    signed = lrp.explain_nodes(model, x, edge_index, chosen, output="sparse")
    shown = lrp.explain_nodes(model, x, edge_index, chosen, output="sparse", mask="abs")
    assert signed.index.tolist() == [3, 17, 22]
    # the view applies to the node's summed relevance, as node_mask_type='object' in lrp.explain
    assert torch.equal(shown.node_relevance.to_dense(), signed.node_relevance.to_dense().abs())
    assert torch.equal(shown.edge_relevance.to_dense(), signed.edge_relevance.to_dense().abs())
    assert torch.equal(shown.score, signed.score)


def test_sparse_output_with_edge_attr():
    torch.manual_seed(0)
    model = GINE(C).eval()
    x, edge_index, edge_attr = edge_attr_data()
    targets = torch.tensor([3, 4, 20])
    listed = lrp.explain_nodes(model, x, edge_index, targets, batch_size=2, edge_attr=edge_attr)
    result = lrp.explain_nodes(model, x, edge_index, targets, batch_size=2, edge_attr=edge_attr, output="sparse")
    assert_sparse_equals_list(result, listed, targets, N, edge_index.shape[1])
    expected = torch.zeros(3, edge_index.shape[1])
    for k, ex in enumerate(listed):
        expected[k, ex.edge_id] = ex.edge_attr_mask.sum(dim=-1)
    assert result.edge_attr_relevance is not None and result.edge_attr_relevance.to_dense().abs().sum() > 0
    assert torch.equal(result.edge_attr_relevance.to_dense(), expected)


def test_sparse_output_after_a_fallback_to_the_full_graph():
    torch.manual_seed(0)
    model = Normalized(C).eval()
    x, edge_index = sparse_graph()
    targets = torch.tensor([4, 30])
    with pytest.warns(lrp.explainers.SubgraphWarning):
        listed = lrp.explain_nodes(model, x, edge_index, targets, batch_size=2)
    with pytest.warns(lrp.explainers.SubgraphWarning):
        result = lrp.explain_nodes(model, x, edge_index, targets, batch_size=2, output="sparse")
    assert listed[0].node_index.numel() == x.shape[0]  # explained on the full graph
    assert_sparse_equals_list(result, listed, targets, x.shape[0], edge_index.shape[1])


def test_no_targets():
    model = build("gcn")
    x, edge_index = DATA["x"], DATA["edge_index"]
    none = torch.empty(0, dtype=torch.long)
    assert lrp.explain_nodes(model, x, edge_index, none) == []
    result = lrp.explain_nodes(model, x, edge_index, none, output="sparse")
    assert result.node_relevance.shape == (0, N) and result.edge_relevance.shape == (0, edge_index.shape[1])
    assert result.score.numel() == 0 and result.target.numel() == 0


def test_one_sort_of_the_edge_list_per_call(monkeypatch):
    """The subgraphs of all batches come from one Incidence; PyG's
    k_hop_subgraph (a scan of the edge list per call) is not used."""
    built = []
    real = subgraph.Incidence

    def counted(*args):
        built.append(args)
        return real(*args)

    def refused(*args, **kwargs):
        raise AssertionError("k_hop_subgraph scans the whole edge list")

    monkeypatch.setattr(api, "Incidence", counted)
    monkeypatch.setattr("torch_geometric.utils.k_hop_subgraph", refused)
    model = build("gcn")
    for output in ("list", "sparse"):
        lrp.explain_nodes(model, DATA["x"], DATA["edge_index"], TARGETS, batch_size=2, output=output)
    assert len(built) == 2  # one per call, not one per batch (4 batches each) or per target


def test_progress_bar(capsys):
    model = build("gcn")
    lrp.explain_nodes(model, DATA["x"], DATA["edge_index"], TARGETS, batch_size=3, progress=True, output="sparse")
    err = capsys.readouterr().err
    assert "LRP" in err and "3/3" in err and "<" in err  # batches done / all, elapsed < left


def test_bad_arguments_are_named():
    model = build("gcn")
    x, edge_index = DATA["x"], DATA["edge_index"]
    with pytest.raises(ValueError, match=r"output: must be one of \['list', 'sparse'\], got 'dense'"):
        lrp.explain_nodes(model, x, edge_index, TARGETS, output="dense")
    with pytest.raises(ValueError, match="distributed: must be None, True or False, got 'yes'"):
        lrp.explain_nodes(model, x, edge_index, TARGETS, distributed="yes")
    with pytest.raises(ValueError, match="distributed: True needs an initialised default process group"):
        lrp.explain_nodes(model, x, edge_index, TARGETS, distributed=True)


# ---------------------------------------------------------------------------
# strategy: disjoint copies against one forward on the union
# ---------------------------------------------------------------------------

def assert_same_parts(a, b):
    """Two lists of explanations with the same subgraphs and, in float64,
    the same relevance (summation order may differ)."""
    assert len(a) == len(b)
    for ea, eb in zip(a, b):
        assert torch.equal(ea.node_index, eb.node_index) and torch.equal(ea.edge_id, eb.edge_id)
        assert ea.index == eb.index and torch.equal(ea.target, eb.target)
        for key in ("node_mask", "edge_mask", "self_loop_relevance", "edge_attr_mask"):
            if key in ea or key in eb:
                torch.testing.assert_close(ea[key], eb[key], rtol=0, atol=1e-12)
        assert ea.score == pytest.approx(eb.score, rel=1e-12)


@pytest.mark.parametrize("name", NODE_MODELS)
def test_shared_forward_equals_copies_and_one_by_one(name):
    model = build(name).double()
    x, edge_index = DATA["x"].double(), DATA["edge_index"]
    copies = lrp.explain_nodes(model, x, edge_index, TARGETS, batch_size=4, strategy="copies")
    shared = lrp.explain_nodes(model, x, edge_index, TARGETS, batch_size=4, strategy="shared")
    one = [lrp.explain_nodes(model, x, edge_index, TARGETS[k:k + 1], batch_size=1)[0]
           for k in range(TARGETS.numel())]
    assert_same_parts(shared, copies)
    assert_same_parts(shared, one)
    # each target had a backward of its own: its accounting is measured, as one by one
    for s, o in zip(shared, one):
        assert "absorbed" in s and s.absorbed == pytest.approx(o.absorbed, rel=1e-9, abs=1e-12)
    # the overlap is real: the union of a batch is smaller than its copies
    graph = subgraph.Incidence(edge_index, N)
    union = subgraph.cut(TARGETS[:4], 3, edge_index, N, incidence=graph)
    copies_cut, _, _ = subgraph.cut_each(TARGETS[:4], 3, edge_index, N, incidence=graph)
    assert union.num_nodes < copies_cut.num_nodes


def test_shared_forward_with_edge_attr_a_mask_and_sparse_output():
    torch.manual_seed(0)
    model = GINE(C).double().eval()
    x, edge_index, edge_attr = edge_attr_data()
    x, edge_attr = x.double(), edge_attr.double()
    chosen = torch.zeros(x.shape[0], dtype=torch.bool)
    chosen[[3, 4, 20]] = True
    copies = lrp.explain_nodes(model, x, edge_index, chosen, edge_attr=edge_attr, strategy="copies")
    shared = lrp.explain_nodes(model, x, edge_index, chosen, edge_attr=edge_attr, strategy="shared")
    assert_same_parts(shared, copies)
    assert shared[0].edge_attr_mask.abs().sum() > 0
    model, x, edge_attr = model.float(), x.float(), edge_attr.float()
    listed = lrp.explain_nodes(model, x, edge_index, chosen, edge_attr=edge_attr, strategy="shared")
    dense = lrp.explain_nodes(model, x, edge_index, chosen, edge_attr=edge_attr, strategy="shared", output="sparse")
    assert_sparse_equals_list(dense, listed, chosen.nonzero().view(-1), x.shape[0], edge_index.shape[1])


def test_shared_forward_falls_back_like_the_copies():
    torch.manual_seed(0)
    model = Normalized(C).eval()
    x, edge_index = sparse_graph()
    targets = torch.tensor([4, 30])
    with pytest.warns(lrp.explainers.SubgraphWarning):
        copies = lrp.explain_nodes(model, x, edge_index, targets, strategy="copies")
    with pytest.warns(lrp.explainers.SubgraphWarning):
        shared = lrp.explain_nodes(model, x, edge_index, targets, strategy="shared")
    assert shared[0].node_index.numel() == x.shape[0]  # explained on the full graph
    assert_same_parts(shared, copies)


def test_auto_strategy_follows_the_sizes(monkeypatch):
    chosen = []
    way = api._way
    monkeypatch.setattr(api, "_way", lambda *a: chosen.append(way(*a)) or chosen[-1])
    model = build("gcn")
    x, edge_index = DATA["x"], DATA["edge_index"]
    # every node of this small graph: the subgraphs overlap and the union is the cheaper
    monkeypatch.setattr(api, "BACKWARD_OVERHEAD", 0)
    lrp.explain_nodes(model, x, edge_index, batch_size=8)
    assert set(chosen) == {"shared"}
    # a fixed cost per backward larger than the graph: the copies
    chosen.clear()
    monkeypatch.setattr(api, "BACKWARD_OVERHEAD", 10 ** 6)
    lrp.explain_nodes(model, x, edge_index, batch_size=8)
    assert set(chosen) == {"copies"}
    # one target per batch: always the copies (its subgraph is the union)
    chosen.clear()
    monkeypatch.setattr(api, "BACKWARD_OVERHEAD", 0)
    lrp.explain_nodes(model, x, edge_index, TARGETS, batch_size=1)
    assert set(chosen) == {"copies"}


def test_strategy_is_checked():
    model = build("gcn")
    with pytest.raises(ValueError, match="strategy"):
        lrp.explain_nodes(model, DATA["x"], DATA["edge_index"], TARGETS, strategy="union")


def test_auto_runs_large_copies_in_passes_of_the_budget(monkeypatch):
    """Under 'auto', a batch of copies larger than the budget runs as
    several passes (one per run of targets): the relevance is that of the
    whole batch as copies, and a target alone in its pass has its accounting
    measured, as one by one."""
    passes = []
    on_cut = api.on_cut
    monkeypatch.setattr(api, "on_cut", lambda *a, **k: passes.append(a[4].index.numel()) or on_cut(*a, **k))
    model = build("gcn").double()
    x, edge_index = DATA["x"].double(), DATA["edge_index"]
    graph = subgraph.Incidence(edge_index, N)
    own = subgraph.split(*subgraph.cut_each(TARGETS, 3, edge_index, N, incidence=graph))
    sizes = [c.num_nodes + c.edge_id.numel() for c in own]
    # room for the first two targets' subgraphs together, and for any one alone
    for budget in ("COPIES_BUDGET", "TRIMMED_BUDGET"):  # passes on full and on trimmed cuts alike
        monkeypatch.setattr(api, budget, max(sizes[0] + sizes[1], max(sizes)))
    monkeypatch.setattr(api, "BACKWARD_OVERHEAD", 10 ** 6)  # the copies, not the union
    runs = lrp.explain_nodes(model, x, edge_index, TARGETS, batch_size=TARGETS.numel())
    assert passes[0] == 2 and len(passes) > 1 and sum(passes) == TARGETS.numel()
    passes.clear()
    whole = lrp.explain_nodes(model, x, edge_index, TARGETS, batch_size=TARGETS.numel(), strategy="copies")
    assert passes == [TARGETS.numel()]  # an explicit strategy keeps one pass per batch
    assert_same_parts(runs, whole)
    one = [lrp.explain_nodes(model, x, edge_index, TARGETS[k:k + 1], batch_size=1)[0]
           for k in range(TARGETS.numel())]
    assert "absorbed" not in runs[0]  # shared a pass with target 1
    alone = [k for k, ex in enumerate(runs) if "absorbed" in ex]
    assert alone, "some target has a pass of its own"
    for k in alone:
        assert runs[k].absorbed == pytest.approx(one[k].absorbed, rel=1e-9, abs=1e-12)
