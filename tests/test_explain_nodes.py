"""``lrp.explain_nodes``: many targets per pass, each on its own copy of its
computation subgraph, equal to explaining them one by one."""
from __future__ import annotations

import warnings

import pytest
import torch
import torch_geometric.nn
from torch_geometric.utils import to_undirected

import torch_geometric_lrp as lrp
from explain_cases import (C, DATA, F_IN, GINE, N, NODE_MODELS, CachedGCN, Normalized, Weighted, edge_attr_data, assert_conserved, build, check_relevance,
                           logits_of, one_thread_fixture, other_target, out_dim, sparse_graph)

one_thread = pytest.fixture(autouse=True, scope="module")(one_thread_fixture)


# ===========================================================================
# 6. explain_nodes: batched == one by one on the full graph
# ===========================================================================
TARGETS = torch.tensor([0, 1, 2, 3, 17, 16, 22, 9, 29, 14, 3])  # neighbours, far apart, a repeat


@pytest.fixture(scope="module")
def full_graph_explanations():
    cache = {}

    def get(name, mode="multiclass_classification", return_type="raw"):
        key = (name, mode, return_type)
        if key not in cache:
            model = build(name, mode, return_type)
            extra = {} if out_dim(mode) > 1 else {"mode": mode}
            cache[key] = (model, [lrp.explain(model, DATA["x"], DATA["edge_index"], index=int(t), **extra)
                                  for t in TARGETS])
        return cache[key]
    return get


def assert_matches_full_graph(batched, full, targets):
    assert len(batched) == len(targets)
    for t, ex, ref in zip(targets.tolist(), batched, full):
        assert int(ex.node_index[ex.index]) == t
        assert ex.node_mask.shape == (ex.node_index.numel(), F_IN)
        torch.testing.assert_close(ex.node_mask, ref.node_mask[ex.node_index], rtol=0, atol=1e-5)
        outside = torch.ones(N, dtype=torch.bool)
        outside[ex.node_index] = False
        assert torch.all(ref.node_mask[outside] == 0)
        torch.testing.assert_close(ex.edge_mask, ref.edge_mask[ex.edge_id], rtol=0, atol=1e-5)
        torch.testing.assert_close(ex.edge_index, DATA["edge_index"][:, ex.edge_id].apply_(
            lambda v: int((ex.node_index == v).nonzero())))
        assert ex.score == pytest.approx(ref.score, rel=1e-5, abs=1e-6)
        assert int(ex.target) == int(ref.target[0])
        if "unassigned" in ex:
            assert ex.unassigned == pytest.approx(ex.score - ex.relevance_total, abs=1e-6)
        else:  # a pass of its own: measured
            assert_conserved(ex)


@pytest.mark.parametrize("batch_size", [1, 3, 200])
@pytest.mark.parametrize("name", NODE_MODELS)
def test_explain_nodes_equals_full_graph(full_graph_explanations, name, batch_size):
    model, full = full_graph_explanations(name)
    batched = lrp.explain_nodes(model, DATA["x"], DATA["edge_index"], TARGETS, batch_size=batch_size)
    assert_matches_full_graph(batched, full, TARGETS)


@pytest.mark.parametrize("mode,return_type", [("binary_classification", "probs"),
                                              ("multiclass_classification", "log_probs")])
def test_explain_nodes_other_modes(full_graph_explanations, mode, return_type):
    model, full = full_graph_explanations("gcn", mode, return_type)
    batched = lrp.explain_nodes(model, DATA["x"], DATA["edge_index"], TARGETS, batch_size=4,
                                mode=None if out_dim(mode) > 1 else mode)
    assert_matches_full_graph(batched, full, TARGETS)


def test_explain_nodes_with_target_and_view():
    model = build("gat")
    logits = logits_of(model, "node")
    target = other_target(logits, "multiclass_classification")[TARGETS]
    batched = lrp.explain_nodes(model, DATA["x"], DATA["edge_index"], TARGETS, target=target, batch_size=3)
    shown = lrp.explain_nodes(model, DATA["x"], DATA["edge_index"], TARGETS, target=target, batch_size=3,
                              mask="abs")
    for t, cls, ex, ab in zip(TARGETS.tolist(), target.tolist(), batched, shown):
        assert ex.score == pytest.approx(logits[t, cls].item(), rel=1e-5, abs=1e-6)
        full = lrp.explain(model, DATA["x"], DATA["edge_index"], index=t, target=torch.tensor([cls]))
        torch.testing.assert_close(ex.node_mask, full.node_mask[ex.node_index], rtol=0, atol=1e-5)
        torch.testing.assert_close(ab.node_mask, ex.node_mask.abs())
        torch.testing.assert_close(ab.edge_mask, ex.edge_mask.abs())


@pytest.mark.parametrize("batch_size", [1, 2, 4])
def test_a_target_as_long_as_a_batch_is_refused_whatever_the_batch_size(batch_size):
    """Two classes for four targets: each batch of two read them as its own
    (classes [0, 2, 0, 2]) where batch_size=2 and failed otherwise."""
    model = build("gcn")
    with pytest.raises(ValueError, match=rf"target: expected one entry per node \({N}\) or per target \(4\)"):
        lrp.explain_nodes(model, DATA["x"], DATA["edge_index"], [4, 1, 20, 7], target=torch.tensor([0, 2]),
                          batch_size=batch_size)


def test_a_target_per_node_is_read_per_node_when_index_lists_every_node():
    """``target=data.y`` (one class per node) with ``index`` = every node in
    another order: each node is explained for its own class, as
    ``lrp.explain`` reads the same arguments. Before, read as one class per
    target: most nodes explained for another node's class, without a word."""
    model = build("gcn")
    logits = logits_of(model, "node")
    per_node = other_target(logits, "multiclass_classification")
    order = torch.randperm(N, generator=torch.Generator().manual_seed(3))
    found = lrp.explain_nodes(model, DATA["x"], DATA["edge_index"], order, target=per_node, batch_size=7)
    assert [int(e.target) for e in found] == per_node[order].tolist()
    joint = lrp.explain(model, DATA["x"], DATA["edge_index"], index=order, target=per_node)
    torch.testing.assert_close(joint.target, per_node[order])


@pytest.mark.parametrize("strategy", ["copies", "shared"])
def test_a_target_per_row_is_read_per_row_in_a_batch_of_as_many_rows_as_nodes(strategy):
    """``target`` with one class per explained row (``index`` has another
    length than the graph has nodes) is read per row in every batch, also in
    a batch of exactly ``N`` rows. Before, such a batch read it as one class
    per node: its rows were explained for the classes of other rows."""
    model = build("gcn")
    logits = logits_of(model, "node")
    index = torch.cat([torch.arange(N).flip(0), torch.tensor([2])])  # N + 1 rows: per row, not per node
    target = other_target(logits, "multiclass_classification")[index].roll(1)
    found = lrp.explain_nodes(model, DATA["x"], DATA["edge_index"], index, target=target, batch_size=N,
                              strategy=strategy)
    assert [int(e.target) for e in found] == target.tolist()
    for t, cls, ex in zip(index.tolist(), target.tolist(), found):
        assert ex.score == pytest.approx(logits[t, cls].item(), rel=1e-5, abs=1e-6)


@pytest.mark.parametrize("warm", [False, True])
def test_explain_nodes_with_cached_gcn(warm):
    """Each batch is a new graph: neither the full graph's cached
    normalisation nor the previous batch's may be reused."""
    torch.manual_seed(0)
    model = CachedGCN(C).eval()
    x, edge_index = DATA["x"], DATA["edge_index"]
    if warm:
        model(x, edge_index)  # the user's model has cached the full graph
    targets = torch.tensor([0, 3, 17, 22])
    full = [lrp.explain(model, x, edge_index, index=int(t)) for t in targets]
    check_relevance(full[1], model, "multiclass_classification", 3)
    cache = model.conv1._cached_edge_index
    batched = lrp.explain_nodes(model, x, edge_index, targets, batch_size=2)
    assert model.conv1._cached_edge_index is cache and model.conv1.cached
    for ex, ref in zip(batched, full):
        torch.testing.assert_close(ex.node_mask, ref.node_mask[ex.node_index], rtol=0, atol=1e-5)
        assert ex.score == pytest.approx(ref.score, rel=1e-5)


def test_explain_nodes_with_edge_weight():
    model = build("gcn")
    x, edge_index = DATA["x"], DATA["edge_index"]
    edge_weight = torch.rand(edge_index.shape[1], generator=torch.Generator().manual_seed(3)) + 0.5

    weighted = Weighted(model).eval()
    targets = torch.tensor([3, 9, 22])
    batched = lrp.explain_nodes(weighted, x, edge_index, targets, batch_size=2, edge_weight=edge_weight)
    for t, ex in zip(targets.tolist(), batched):
        ref = lrp.explain(weighted, x, edge_index, index=t, edge_weight=edge_weight)
        torch.testing.assert_close(ex.node_mask, ref.node_mask[ex.node_index], rtol=0, atol=1e-5)
        torch.testing.assert_close(ex.edge_mask, ref.edge_mask[ex.edge_id], rtol=0, atol=1e-5)


def test_explain_nodes_slices_edge_attr():
    torch.manual_seed(0)
    model = GINE(C).eval()
    x, edge_index, edge_attr = edge_attr_data()
    targets = torch.tensor([3, 4, 20])
    batched = lrp.explain_nodes(model, x, edge_index, targets, batch_size=2, edge_attr=edge_attr)
    for t, ex in zip(targets.tolist(), batched):
        full = lrp.explain(model, x, edge_index, index=t, edge_attr=edge_attr)
        torch.testing.assert_close(ex.node_mask, full.node_mask[ex.node_index], rtol=0, atol=1e-5)
        torch.testing.assert_close(ex.edge_attr_mask, full.edge_attr_mask[ex.edge_id], rtol=0, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("name", NODE_MODELS)
def test_explain_nodes_larger_graph(name):
    """A few hundred nodes, many overlapping subgraphs per batch."""
    g = torch.Generator().manual_seed(7)
    n = 400
    x = torch.randn(n, F_IN, generator=g)
    edge_index = to_undirected(torch.randint(0, n, (2, 1200), generator=g), num_nodes=n)
    edge_index = edge_index[:, edge_index[0] != edge_index[1]]
    model = build(name)
    targets = torch.randperm(n, generator=g)[:60]
    batched = lrp.explain_nodes(model, x, edge_index, targets, batch_size=16)
    for t, ex in zip(targets.tolist(), batched):
        full = lrp.explain(model, x, edge_index, index=t)
        torch.testing.assert_close(ex.node_mask, full.node_mask[ex.node_index], rtol=0, atol=1e-5)
        torch.testing.assert_close(ex.edge_mask, full.edge_mask[ex.edge_id], rtol=0, atol=1e-5)
        assert ex.score == pytest.approx(full.score, rel=1e-5, abs=1e-6)


def test_a_boolean_mask_selects_its_nodes():
    """Item 8: a boolean mask means its True nodes (not the indices 0 / 1)."""
    model = build("gcn")
    mask = torch.zeros(N, dtype=torch.bool)
    mask[[5, 17]] = True
    by_mask = lrp.explain_nodes(model, DATA["x"], DATA["edge_index"], mask)
    by_index = lrp.explain_nodes(model, DATA["x"], DATA["edge_index"], torch.tensor([5, 17]))
    assert [int(ex.node_index[ex.index]) for ex in by_mask] == [5, 17]
    for a, b in zip(by_mask, by_index):
        torch.testing.assert_close(a.node_mask, b.node_mask)
    single = lrp.explain(model, DATA["x"], DATA["edge_index"], index=mask)
    assert single.score == pytest.approx(sum(ex.score for ex in by_index), rel=1e-5)
    with pytest.raises(ValueError, match="index: a boolean mask needs one entry per row"):
        lrp.explain_nodes(model, DATA["x"], DATA["edge_index"], mask[:-1])


@pytest.mark.parametrize("batch_size", [1, 3])
def test_explain_nodes_falls_back_for_a_model_that_is_not_local(batch_size):
    """A global statistic: each target is explained on the full graph, with
    a warning, and equals lrp.explain(..., subgraph=False)."""

    torch.manual_seed(0)
    model = Normalized(C).eval()
    x, edge_index = sparse_graph()
    targets = torch.tensor([4, 30])
    with pytest.warns(lrp.explainers.SubgraphWarning, match="reads the graph as a whole"):
        batched = lrp.explain_nodes(model, x, edge_index, targets, batch_size=batch_size)
    for t, ex in zip(targets.tolist(), batched):
        full = lrp.explain(model, x, edge_index, index=t, subgraph=False)
        assert ex.node_index.numel() == x.shape[0]
        torch.testing.assert_close(ex.node_mask, full.node_mask)
        assert ex.score == pytest.approx(full.score, rel=1e-5)
        assert_conserved(ex)


def test_a_graph_level_model_is_refused_with_the_graphs_own_numbers():
    """The error counts the rows and nodes of the graph the user passed, not
    those of the targets' batched subgraph copies (the cut's own row count
    sends the pass to the full graph, whose output decides)."""
    from torch_geometric.nn import GCNConv, global_mean_pool

    class Pooled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.head = GCNConv(3, 4), torch.nn.Linear(4, 2)

        def forward(self, x, edge_index, batch=None):
            return self.head(global_mean_pool(self.conv(x, edge_index).relu(), batch))

    torch.manual_seed(0)
    x, edge_index = torch.randn(19, 3), torch.randint(0, 19, (2, 40))
    with pytest.raises(ValueError, match=r"gives 1 rows for the graph's 19 nodes, .*lrp\.explain"):
        lrp.explain_nodes(Pooled(), x, edge_index)


class FirstRows(torch.nn.Module):
    """Returns the first ``batch_size`` rows only (``out[:batch_size]``, as
    models trained on NeighborLoader mini-batches do)."""

    def __init__(self):
        super().__init__()
        from torch_geometric.nn import GraphConv
        self.c1, self.c2 = GraphConv(3, 6, bias=False), GraphConv(6, 2, bias=False)

    def forward(self, x, edge_index, batch_size: int = 5):
        return self.c2(self.c1(x, edge_index).relu(), edge_index)[:batch_size]


class PerNodeParameter(torch.nn.Module):
    """A learned vector per node of the graph: not local (one-node cuts get
    ``[1, F] + [N, F]``, all N rows)."""

    def __init__(self, n):
        super().__init__()
        from torch_geometric.nn import GCNConv
        self.conv, self.own = GCNConv(3, 2), torch.nn.Parameter(torch.randn(n, 2))

    def forward(self, x, edge_index):
        return self.conv(x, edge_index) + self.own


@pytest.mark.parametrize("case", ["first_rows", "per_node_parameter"])
def test_an_output_that_is_not_one_row_per_cut_node_is_explained_on_the_full_graph(case):
    """The cut's row count tells nothing about such models: the full graph
    explains them (before, node-level calls raised a task_level error), and
    LRP-0 on the bias-free one equals gradient x input."""
    torch.manual_seed(0)
    x = torch.randn(20, 3, dtype=torch.float64)
    edge_index = torch.randint(0, 12, (2, 30))  # nodes 12..19 receive and send nothing
    model = (FirstRows() if case == "first_rows" else PerNodeParameter(20)).double().eval()
    index = 2 if case == "first_rows" else 15
    full = lrp.explain(model, x, edge_index, index=index, rules=lrp.rules.Epsilon(0.0), subgraph=False,
                       task_level="node")
    for found in (lrp.explain(model, x, edge_index, index=index, rules=lrp.rules.Epsilon(0.0), task_level="node"),
                  lrp.explain_nodes(model, x, edge_index, torch.tensor([index]), rules=lrp.rules.Epsilon(0.0))[0]):
        torch.testing.assert_close(found.node_mask, full.node_mask, rtol=1e-12, atol=1e-14)
        assert found.score == pytest.approx(full.score, rel=1e-12)
    if case == "first_rows":
        x_ = x.clone().requires_grad_()
        out = model(x_, edge_index)
        (grad,) = torch.autograd.grad(out[index, int(full.target)], x_)
        torch.testing.assert_close(full.node_mask, (x_ * grad).detach(), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("strategy", ["copies", "shared"])
def test_a_node_twice_with_both_binary_labels_is_explained_each_way(strategy):
    """``index=[7, 7]`` with ``target=[1, 0]`` asks for two explanations, +z
    and -z; ``shared`` refused it as a contradiction (it checked the joint
    seed it does not use), so a call worked or not by the strategy ``auto``
    picked. Their scores cancel: no warning that the batch does not add up."""
    import warnings

    from torch_geometric.nn import GCNConv

    class Binary(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.conv1, self.conv2 = GCNConv(F_IN, 8), GCNConv(8, 1)

        def forward(self, x, edge_index):
            return self.conv2(self.conv1(x, edge_index).relu(), edge_index)

    model, x, edge_index = Binary().eval(), DATA["x"], DATA["edge_index"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        found = lrp.explain_nodes(model, x, edge_index, torch.tensor([7, 7]), target=torch.tensor([1, 0]),
                                  mode="binary_classification", strategy=strategy)
    alone = [lrp.explain(model, x, edge_index, index=7, target=torch.tensor([label]), mode="binary_classification")
             for label in (1, 0)]
    for got, expected in zip(found, alone):
        assert got.score == pytest.approx(expected.score, rel=1e-5)
        torch.testing.assert_close(got.node_mask.sum(), expected.node_mask.sum(), rtol=1e-4, atol=1e-6)
    assert found[0].score == pytest.approx(-found[1].score, rel=1e-6)


def test_a_data_object_is_taken_as_for_lrp_explain():
    """``explain_nodes(model, data)`` failed with "missing 'edge_index'" (and
    a HeteroData did not get the heterogeneous-graph message)."""
    from torch_geometric.data import Data, HeteroData
    from torch_geometric.nn import GCNConv

    class Weighted(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.conv = GCNConv(F_IN, C)

        def forward(self, x, edge_index, edge_weight=None):
            return self.conv(x, edge_index, edge_weight)

    model = Weighted().eval()
    weight = torch.rand(DATA["edge_index"].shape[1])
    data = Data(x=DATA["x"], edge_index=DATA["edge_index"], edge_weight=weight)
    found = lrp.explain_nodes(model, data, index=torch.tensor([1, 5]))
    for got, node in zip(found, (1, 5)):
        alone = lrp.explain(model, DATA["x"], DATA["edge_index"], index=node, edge_weight=weight)
        assert got.score == pytest.approx(alone.score, rel=1e-5)
    hetero = HeteroData()
    hetero["a"].x = DATA["x"]
    hetero["a", "to", "a"].edge_index = DATA["edge_index"]
    with pytest.raises(ValueError, match="heterogeneous graphs"):
        lrp.explain_nodes(model, hetero)


class MaxFedBack(torch.nn.Module):
    """A Linear, its maximum over all nodes added back, a GCN layer, a head."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(3, 4, bias=False)
        self.conv = torch_geometric.nn.GCNConv(4, 4, bias=False)
        self.head = torch.nn.Linear(4, 2, bias=False)
        with torch.no_grad():
            self.lin.weight.abs_()

    def forward(self, x, edge_index):
        h = self.lin(x)
        h = h + h.amax(0, keepdim=True)
        return self.head(torch.relu(self.conv(h, edge_index)))


def test_copies_that_reproduce_a_statistic_of_the_whole_graph_together_fall_back():
    """Path 0-1-2-3 and an isolated node 4 that holds the maximum: the copies
    of targets 0 and 4, side by side in one batch, hold every node and give
    the full graph's outputs, yet target 0's maximum is read from target 4's
    copy. The check with unrelated nodes added tells: the batch falls back,
    with a warning, and each explanation equals gradient x input (LRP-0,
    no biases). Before, target 0's relevance of node 4 (-2.35) was booked on
    target 4's explanation, without a word."""
    x = torch.rand(5, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    x[4] = 5.0
    edge_index = torch.tensor([[0, 1, 1, 2, 2, 3], [1, 0, 2, 1, 3, 2]])
    model = MaxFedBack().double().eval()
    with pytest.warns(lrp.explainers.SubgraphWarning, match="side by side"):
        found = lrp.explain_nodes(model, x, edge_index, torch.tensor([0, 4]), batch_size=2,
                                  rules=lrp.rules.Epsilon(0.0))
    for t, ex in zip([0, 4], found):
        xg = x.clone().requires_grad_()
        out = model(xg, edge_index)
        out[t, out[t].argmax()].backward()
        node = torch.zeros(5, dtype=torch.float64).index_add_(0, ex.node_index, ex.node_mask.sum(-1))
        torch.testing.assert_close(node, (xg.grad * x).sum(-1))


class LooksUpAColumn(torch.nn.Module):
    """A float ``x`` whose first column holds category ids, looked up in an
    embedding, then a GCN layer: local, but its forward fails on features
    beyond the range of ``x``."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.emb = torch.nn.Embedding(4, 3)
        self.conv = torch_geometric.nn.GCNConv(3 + F_IN - 1, C)

    def forward(self, x, edge_index):
        return self.conv(torch.cat([self.emb(x[:, 0].long()), x[:, 1:]], dim=1), edge_index)


def test_a_local_model_that_cannot_run_on_the_unrelated_nodes_keeps_its_copies():
    """The copies' extra check adds nodes with features beyond the range of
    ``x``; a model that cannot run on those (ids out of its table) has the
    full graph's output as its proof, as before the check: no fallback."""
    x = DATA["x"].detach().double().clone()
    x[:, 0] = torch.arange(N) % 4
    model = LooksUpAColumn().double().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("error", lrp.explainers.SubgraphWarning)
        found = lrp.explain_nodes(model, x, DATA["edge_index"], torch.tensor([0, 5, 9, 13]), batch_size=2)
    for t, ex in zip([0, 5, 9, 13], found):
        alone = lrp.explain(model, x, DATA["edge_index"], index=t, subgraph=False)
        torch.testing.assert_close(ex.node_mask, alone.node_mask[ex.node_index])


class Chebyshev(torch.nn.Module):
    """``ChebConv`` with the user's edge weights: local (``K - 1`` hops), its
    Laplacian normalised by :math:`d^{-1/2}` of the weighted degrees."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch_geometric.nn.ChebConv(F_IN, C, K=2)

    def forward(self, x, edge_index, edge_weight):
        return self.conv(x, edge_index, edge_weight)


def test_positive_edge_weights_stay_positive_in_the_copies_check():
    """The copies' extra check sets the first added edges' features beyond
    the range of the input's; a positive weight set below 0 gave
    ``ChebConv`` NaN degrees, so a local model fell back to the full graph
    with a warning that it reads the graph as a whole."""
    x = DATA["x"].detach().double()
    edge_index = DATA["edge_index"]
    edge_weight = torch.rand(edge_index.shape[1], generator=torch.Generator().manual_seed(1), dtype=torch.double) + .2
    model = Chebyshev().double().eval()
    targets = [0, 5, 9, 13]
    with warnings.catch_warnings():
        warnings.simplefilter("error", lrp.explainers.SubgraphWarning)
        found = lrp.explain_nodes(model, x, edge_index, torch.tensor(targets), batch_size=2, edge_weight=edge_weight)
    for t, ex in zip(targets, found):
        assert ex.node_index.numel() < N  # on its subgraph
        alone = lrp.explain(model, x, edge_index, index=t, subgraph=False, edge_weight=edge_weight)
        torch.testing.assert_close(ex.node_mask, alone.node_mask[ex.node_index])
        torch.testing.assert_close(ex.edge_mask, alone.edge_mask[ex.edge_id])


class RingWeights(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv1, self.conv2 = torch_geometric.nn.GCNConv(3, 4), torch_geometric.nn.GCNConv(4, 2)

    def forward(self, x, edge_index, weights):
        return self.conv2(self.conv1(x, edge_index, weights).relu(), edge_index, weights)


def test_a_fallback_names_a_per_edge_input_cut_as_per_node():
    """On a graph with as many edges as nodes, a per-edge input not named
    ``edge*`` is cut as one row per node (the documented naming rule); the
    check then fails, and the warning names the input as a possible cause
    (before, it blamed the model alone)."""
    n = 12
    edge_index = torch.stack([torch.arange(n), (torch.arange(n) + 1) % n])
    x = torch.randn(n, 3, generator=torch.Generator().manual_seed(0))
    weights = torch.rand(n, generator=torch.Generator().manual_seed(1)) + 0.1
    with pytest.warns(lrp.explainers.SubgraphWarning, match="'weights' has as many rows as the graph has nodes and "
                                                             "edges, and was cut as one row per node"):
        lrp.explain_nodes(RingWeights().eval(), x, edge_index, torch.tensor([5, 9]), weights=weights)


def test_each_explanation_holds_tensors_of_its_own():
    """An explanation of ``explain_nodes`` kept or saved alone holds its own
    tensors, not views of the whole batch's (``torch.save`` of one wrote the
    batch's ``node_index`` and ``edge_id``)."""
    found = lrp.explain_nodes(build("gcn"), DATA["x"], DATA["edge_index"], torch.tensor([0, 5, 9]), batch_size=3)
    for ex in found:
        for key in ("node_index", "edge_id", "edge_index", "target", "node_mask", "edge_mask"):
            value = ex[key]
            assert value.untyped_storage().nbytes() == value.numel() * value.element_size(), key
