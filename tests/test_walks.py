"""Relevant walks and subgraph relevance against slow dense references."""
from __future__ import annotations

import dataclasses
import itertools

import pytest
import torch
from hypothesis import given, settings, strategies as st
from torch_geometric.nn import APPNP, GATConv, GCNConv, GINConv, GraphConv, SAGEConv, global_add_pool
from torch_geometric.nn.conv.gcn_conv import gcn_norm
from torch_geometric.utils import erdos_renyi_graph, to_dense_adj

import torch_geometric_lrp as lrp
from torch_geometric_lrp.rules import AlphaBeta, Epsilon, Gamma


def graph(n=7, p=0.35, seed=0, features=3, directed=False):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=g, dtype=torch.float64)
    torch.manual_seed(seed)
    return x, erdos_renyi_graph(n, p, directed=directed)


class Net(torch.nn.Module):
    """``layers`` x (conv -> ReLU), the last conv without ReLU, optional head."""

    def __init__(self, kind="GCN", channels=(3, 4, 3), bias=True, head=None):
        super().__init__()
        make = {
            "GCN": lambda i, o: GCNConv(i, o, bias=bias),
            "GraphConv": lambda i, o: GraphConv(i, o, bias=bias),
            "SAGE": lambda i, o: SAGEConv(i, o, bias=bias),
            "GIN": lambda i, o: GINConv(torch.nn.Sequential(torch.nn.Linear(i, o), torch.nn.ReLU(),
                                                            torch.nn.Linear(o, o))),
            "GAT": lambda i, o: GATConv(i, o, heads=2, concat=False, bias=bias),
        }[kind]
        self.convs = torch.nn.ModuleList(make(i, o) for i, o in zip(channels[:-1], channels[1:]))
        self.head = None if head is None else torch.nn.Linear(channels[-1], head)

    def forward(self, x, edge_index, batch=None):
        for k, conv in enumerate(self.convs):
            x = conv(x, edge_index)
            if k < len(self.convs) - 1 or self.head is not None:
                x = x.relu()
        if batch is not None:
            x = global_add_pool(x, batch)
        return x if self.head is None else self.head(x)


def model_of(kind="GCN", seed=0, **kw):
    torch.manual_seed(seed)
    model = Net(kind, **kw).double()
    for p in model.parameters():  # biases away from 0, so that they matter
        if p.dim() == 1:
            torch.nn.init.uniform_(p, -0.5, 0.5)
    return model.eval()


def dense_gcn(edge_index, n):
    """``A[i, j]``: the GCN coefficient of message j -> i, self-loops included."""
    ei, w = gcn_norm(edge_index, None, n, add_self_loops=True, dtype=torch.float64)
    return to_dense_adj(ei, edge_attr=w, max_num_nodes=n)[0].T


def reference_walks(model, x, edge_index, t, c, rule):
    """GNN-LRP walk relevance of a 2-layer GCN with biases and no head, one
    rule on both layers, by explicit loops over walks (a -> b -> t):

    R^b_k = h_bk sum_c' A[t, b] W~2[k, c'] R2[t, c'] / s(z~2[t, c'])
    R^ab = sum_f x_af sum_k A[b, a] W~1[f, k] R^b_k / s(z~1[b, k])
    with z~ = A h W~ + b~ (W~ = W + g W+, b~ = b + g b+ for Gamma(g); the
    plain map for Epsilon) and s(z) = z + eps sign(z).
    """
    n = x.shape[0]
    A = dense_gcn(edge_index, n)
    gamma = rule.gamma if isinstance(rule, Gamma) else 0.0
    eps = rule.epsilon

    def mod(p):
        return p + gamma * p.clamp(min=0)

    def stab(z):
        return z + eps * torch.where(z >= 0, 1.0, -1.0).to(z.dtype)

    c1, c2 = model.convs
    W1, W2 = c1.lin.weight.detach().T, c2.lin.weight.detach().T
    b1, b2 = c1.bias.detach(), c2.bias.detach()
    z1 = A @ x @ W1 + b1
    h1 = z1.relu()
    z2 = A @ h1 @ W2 + b2
    zt1, zt2 = A @ x @ mod(W1) + mod(b1), A @ h1 @ mod(W2) + mod(b2)
    out = {}
    for a, b in itertools.product(range(n), range(n)):
        if A[t, b] == 0 or A[b, a] == 0:
            continue
        Rb = torch.zeros(W2.shape[0], dtype=torch.float64)
        for k in range(W2.shape[0]):
            Rb[k] = h1[b, k] * A[t, b] * mod(W2)[k, c] * z2[t, c] / stab(zt2[t, c])
        r = 0.0
        for f in range(x.shape[1]):
            for k in range(W1.shape[1]):
                r += x[a, f] * A[b, a] * mod(W1)[f, k] * Rb[k] / stab(zt1[b, k])
        out[(a, b, t)] = float(r)
    return out


def test_lrp0_walks_equal_the_dense_formula():
    """Bias-free 2-layer GCN under LRP-0 (the issue's formula):
    R(a, b, t) = sum_{f,k} A[t,b] W2[k,c] D1[b,k] A[b,a] X[a,f] W1[f,k]."""
    x, ei = graph(8, 0.3, seed=1, directed=True)
    model = model_of("GCN", seed=1, bias=False)
    t = 2
    w = lrp.walks(model, x, ei, t, rules=Epsilon(0.0))
    c = int(w.target)
    A = dense_gcn(ei, 8)
    W1, W2 = model.convs[0].lin.weight.detach().T, model.convs[1].lin.weight.detach().T
    D1 = ((A @ x @ W1) > 0).double()
    expected = {}
    for a, b in itertools.product(range(8), range(8)):
        r = sum(A[t, b] * W2[k, c] * D1[b, k] * A[b, a] * x[a, f] * W1[f, k]
                for f in range(3) for k in range(4))
        if A[t, b] != 0 and A[b, a] != 0:
            expected[(a, b, t)] = float(r)
    got = {tuple(p): float(r) for p, r in zip(w.walks.tolist(), w.relevance)}
    assert set(got) <= set(expected)
    for key, value in expected.items():
        assert got.get(key, 0.0) == pytest.approx(value, abs=1e-8)
    out = model(x, ei)
    assert sum(got.values()) == pytest.approx(float(out[t, c].detach()), abs=1e-8)  # no bias: walks sum to the score


@pytest.mark.parametrize("rule", [Epsilon(0.1), Gamma(0.25, epsilon=1e-9), Gamma(1.0, epsilon=0.05)])
def test_walks_with_biases_equal_the_gnn_lrp_reference(rule):
    x, ei = graph(7, 0.35, seed=2, directed=True)
    model = model_of("GCN", seed=2)
    t = 4
    w = lrp.walks(model, x, ei, t, rules=rule)
    expected = reference_walks(model, x, ei, t, int(w.target), rule)
    got = {tuple(p): float(r) for p, r in zip(w.walks.tolist(), w.relevance)}
    assert len(got) == w.num_walks and set(got) <= set(expected)
    scale = max(abs(v) for v in expected.values())
    for key, value in expected.items():
        assert got.get(key, 0.0) == pytest.approx(value, abs=1e-8 * scale)


@pytest.mark.parametrize("kind", ["GCN", "GraphConv", "SAGE", "GIN", "GAT"])
@pytest.mark.parametrize("rule", [None, Epsilon(1e-3), Gamma(0.25), AlphaBeta(2, 1)])
def test_walks_split_first_order_relevance(kind, rule):
    """Walks sum to the relevance of x that lrp.explain gives (its own
    backward), node by node over their start nodes."""
    x, ei = graph(7, 0.35, seed=3)
    model = model_of(kind, seed=3, channels=(3, 4, 4, 3))
    w = lrp.walks(model, x, ei, 1, rules=rule)
    explanation = lrp.explain(model, x, ei, index=1, rules=rule, subgraph=False)
    first = explanation.node_mask.sum(dim=-1)
    per_start = torch.zeros(7, dtype=torch.float64).index_add_(0, w.walks[:, 0], w.relevance)
    torch.testing.assert_close(per_start, first, rtol=1e-9, atol=1e-10)
    assert w.relevance_total == pytest.approx(explanation.relevance_total, rel=1e-9)
    assert w.walks.shape[1] == 4 and bool((w.walks[:, -1] == 1).all())
    assert len(w) == w.num_walks
    assert bool((w.relevance.abs()[:-1] >= w.relevance.abs()[1:]).all())  # largest first


class WithPropagation(torch.nn.Module):
    """GraphConv -> ReLU -> LGConv (no weight) -> ReLU -> GraphConv."""

    def __init__(self):
        super().__init__()
        from torch_geometric.nn import LGConv
        self.first, self.middle, self.last = GraphConv(3, 4), LGConv(), GraphConv(4, 3)

    def forward(self, x, edge_index):
        x = self.first(x, edge_index).relu()
        return self.last(self.middle(x, edge_index).relu(), edge_index)


@pytest.mark.parametrize("rule", [Gamma(0.25), Epsilon(1e-3)])
def test_walks_through_a_layer_without_weights_split_first_order_relevance(rule):
    """Under ``Gamma`` every path of a layer without weights (``LGConv``) has
    a positive coefficient, so its two streams are one tensor: the walks
    read its relevance once, not once per stream."""
    x, ei = graph(7, 0.35, seed=4)
    torch.manual_seed(4)
    model = WithPropagation().double().eval()
    w = lrp.walks(model, x, ei, 1, rules=rule)
    explanation = lrp.explain(model, x, ei, index=1, rules=rule, subgraph=False)
    per_start = torch.zeros(7, dtype=torch.float64).index_add_(0, w.walks[:, 0], w.relevance)
    torch.testing.assert_close(per_start, explanation.node_mask.sum(dim=-1), rtol=1e-9, atol=1e-10)


def test_walks_follow_edges_and_self_steps():
    x, ei = graph(9, 0.25, seed=4, directed=True)
    model = model_of("GCN", seed=4, channels=(3, 4, 4, 3))
    w = lrp.walks(model, x, ei, 0)
    allowed = {tuple(e) for e in ei.T.tolist()} | {(v, v) for v in range(9)}
    for walk in w.walks.tolist():
        assert all((a, b) in allowed for a, b in zip(walk[:-1], walk[1:]))


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 10_000), k=st.integers(1, 12))
def test_top_k_equals_the_top_of_every_walk(seed, k):
    x, ei = graph(8, 0.3, seed=seed)
    model = model_of("GraphConv", seed=seed, channels=(3, 4, 4, 2))
    every = lrp.walks(model, x, ei, seed % 8, rules=Gamma(0.25))
    top = lrp.walks(model, x, ei, seed % 8, rules=Gamma(0.25), top_k=k)
    k = min(k, len(every))
    assert len(top) == k and top.num_walks == every.num_walks
    torch.testing.assert_close(top.relevance.abs(), every.relevance[:k].abs(), rtol=1e-12, atol=1e-15)
    lookup = {tuple(p): float(r) for p, r in zip(every.walks.tolist(), every.relevance)}
    for p, r in zip(top.walks.tolist(), top.relevance.tolist()):
        assert lookup[tuple(p)] == pytest.approx(r, rel=1e-12, abs=1e-15)


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 10_000), k=st.integers(1, 15))
def test_best_first_search_equals_the_top_of_every_walk(seed, k):
    """The search over the blocks with its max-product bound (the path
    ``walks(top_k=k)`` takes where the blocks are cheaper than the walk
    suffixes) against exhaustive enumeration."""
    from torch_geometric_lrp import higher_order as H
    x, ei = graph(8, 0.35, seed=seed, directed=bool(seed % 2))
    model = model_of("GIN" if seed % 3 else "GCN", seed=seed, channels=(3, 4, 4, 3))

    def both(steps, info):
        structure = H._structure(steps, info["start"])
        return H._search(steps, structure, info["start"], k), H._enumerate(steps, structure, info["start"])

    (top, top_values), (every, values) = H._run(model, x, ei, seed % 8, None, AlphaBeta(2, 1), None, {}, both)
    order = torch.sort(values.abs(), descending=True, stable=True).indices
    k = min(k, values.numel())
    assert top.shape == (k, 4)
    torch.testing.assert_close(top_values.abs(), values[order][:k].abs(), rtol=1e-12, atol=1e-15)
    lookup = {tuple(p): float(v) for p, v in zip(every.tolist(), values)}
    for p, v in zip(top.tolist(), top_values.tolist()):
        assert lookup[tuple(p)] == pytest.approx(v, rel=1e-12, abs=1e-15)


def test_subgraph_relevance_is_the_walks_inside_the_set():
    x, ei = graph(8, 0.35, seed=5)
    model = model_of("GIN", seed=5, channels=(3, 4, 4, 3))
    w = lrp.walks(model, x, ei, 3, rules=Gamma(0.25))
    g = torch.Generator().manual_seed(0)
    sets = [torch.randperm(8, generator=g)[:s] for s in (2, 4, 6)] + [torch.arange(8)]
    batch = lrp.subgraph_relevance(model, x, ei, sets, 3, rules=Gamma(0.25))
    for s, value in zip(sets, batch):
        inside = torch.isin(w.walks, s).all(dim=1)
        expected = float(w.relevance[inside].sum())
        assert float(value) == pytest.approx(expected, abs=1e-10)
        one = lrp.subgraph_relevance(model, x, ei, s, 3, rules=Gamma(0.25))
        assert isinstance(one, float) and one == pytest.approx(float(value), abs=1e-12)
    assert float(batch[-1]) == pytest.approx(w.relevance_total, rel=1e-9)
    mask = torch.zeros(8, dtype=torch.bool)
    mask[sets[1]] = True
    assert lrp.subgraph_relevance(model, x, ei, mask, 3, rules=Gamma(0.25)) == pytest.approx(float(batch[1]))
    # the empty set holds no walk (an empty list was read as float ids before, and refused)
    assert lrp.subgraph_relevance(model, x, ei, [], 3, rules=Gamma(0.25)) == 0.0
    with pytest.raises(TypeError, match="nodes: expected node ids"):
        lrp.subgraph_relevance(model, x, ei, "abc", 3)


@pytest.mark.parametrize("kind", ["GCN", "GIN"])
@pytest.mark.parametrize("alpha", [0.05, 0.5, 1.0])
def test_relaxed_subgraph_relevance_weights_each_walk_by_its_positions_outside(kind, alpha):
    # sGNN-LRP's alpha: a walk that visits S counts alpha ** (positions outside S), one that never does not
    x, ei = graph(8, 0.35, seed=5)
    model = model_of(kind, seed=5, channels=(3, 4, 4, 3))
    w = lrp.walks(model, x, ei, 3, rules=Gamma(0.25))
    assert len(w) >= 10  # walks that carry relevance
    g = torch.Generator().manual_seed(1)
    sets = [torch.randperm(8, generator=g)[:s] for s in (1, 3, 5)]
    values = lrp.subgraph_relevance(model, x, ei, sets, 3, rules=Gamma(0.25), alpha=alpha)
    for s, value in zip(sets, values):
        hits = torch.isin(w.walks, s)
        weight = torch.where(hits.any(dim=1), alpha ** (~hits).sum(dim=1).double(), 0.0)
        expected = float((weight * w.relevance).sum())
        assert float(value) == pytest.approx(expected, rel=1e-9, abs=1e-12)
    strict = lrp.subgraph_relevance(model, x, ei, sets, 3, rules=Gamma(0.25))
    assert not torch.allclose(values, strict)  # the relaxation changes the value
    one = lrp.subgraph_relevance(model, x, ei, sets[1], 3, rules=Gamma(0.25), alpha=alpha)
    assert one == pytest.approx(float(values[1]), rel=1e-12)


def test_leave_one_out_subgraph_relevance_is_the_walks_through_a_node():
    x, ei = graph(7, 0.4, seed=6)
    model = model_of("GCN", seed=6, channels=(3, 4, 4, 3))
    w = lrp.walks(model, x, ei, 5)
    everything = lrp.subgraph_relevance(model, x, ei, torch.arange(7), 5)
    without = lrp.subgraph_relevance(model, x, ei, ~torch.eye(7, dtype=torch.bool), 5)
    torch.testing.assert_close(everything - without, w.node_mask(), rtol=1e-9, atol=1e-12)


def test_graph_level_walks_end_at_every_node_of_the_graph():
    x, ei = graph(10, 0.3, seed=7)
    keep = (ei < 5).all(0) | (ei >= 5).all(0)  # two graphs: nodes 0-4 and 5-9
    ei = ei[:, keep]
    batch = torch.tensor([0] * 5 + [1] * 5)
    model = model_of("GIN", seed=7, channels=(3, 4, 4), head=2)
    w = lrp.walks(model, x, ei, 1, batch=batch)
    assert bool((w.walks >= 5).all())
    assert set(w.walks[:, -1].tolist()) == set(range(5, 10))
    explanation = lrp.explain(model, x, ei, index=1, batch=batch)
    per_start = torch.zeros(10, dtype=torch.float64).index_add_(0, w.walks[:, 0], w.relevance)
    torch.testing.assert_close(per_start, explanation.node_mask.sum(-1), rtol=1e-9, atol=1e-10)


def test_explanation_view_counts_every_step():
    x, ei = graph(7, 0.35, seed=8)
    model = model_of("GCN", seed=8, channels=(3, 4, 4, 3))
    w = lrp.walks(model, x, ei, 2)
    explanation = w.to_explanation(x)
    explanation.validate(raise_on_error=True)
    steps = w.walks.shape[1] - 1
    total = float(explanation.edge_mask.sum() + explanation.self_loop_relevance.sum())
    assert total == pytest.approx(steps * float(w.relevance.sum()), rel=1e-9)
    # a walk's relevance lands on the edges it takes
    one = lrp.walks(model, x, ei, 2, top_k=1)
    a, b = one.walks[0, 0].item(), one.walks[0, 1].item()
    edge, loops = one.edge_mask()
    if a != b:
        at = ((ei[0] == a) & (ei[1] == b)).nonzero().view(-1)
        assert float(edge[at].sum()) == pytest.approx(float(one.relevance[0]) * int((one.walks[0, :-1] == a).logical_and(
            one.walks[0, 1:] == b).sum()))
    assert explanation.node_mask.shape == (7, 1)


def test_absolute_masks_add_the_walk_magnitudes():
    x, ei = graph(7, 0.35, seed=8)
    model = model_of("GCN", seed=8, channels=(3, 4, 4, 3))
    w = lrp.walks(model, x, ei, 2)
    assert bool((w.relevance < 0).any()) and bool((w.relevance > 0).any())  # the signs differ, so it matters
    mass = torch.zeros(7, dtype=torch.float64)
    for walk, value in zip(w.walks.tolist(), w.relevance.tolist()):  # slow twin: one walk at a time
        for v in set(walk):
            mass[v] += abs(value)
    torch.testing.assert_close(w.node_mask(absolute=True), mass, rtol=1e-12, atol=1e-14)
    assert not torch.allclose(w.node_mask(), mass)
    positive = dataclasses.replace(w, relevance=w.relevance.abs())
    for got, expected in zip(w.edge_mask(absolute=True), positive.edge_mask()):
        torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-14)
    explanation = w.to_explanation(x, absolute=True)
    torch.testing.assert_close(explanation.node_mask[:, 0], mass, rtol=1e-12, atol=1e-14)
    assert bool((explanation.edge_mask >= 0).all())


def test_the_model_is_left_as_it_was():
    x, ei = graph(7, 0.35, seed=9)
    model = model_of("GAT", seed=9, channels=(3, 4, 3))
    before = model(x, ei)
    hooks = [dict(m._forward_hooks) for m in model.modules()]
    lrp.walks(model, x, ei, 0, top_k=3)
    lrp.subgraph_relevance(model, x, ei, [0, 1, 2], 0)
    assert [dict(m._forward_hooks) for m in model.modules()] == hooks
    torch.testing.assert_close(model(x, ei), before)


def test_the_backward_steps_run_past_the_mode(routed):
    """The walk steps and the search work on gradients, which carry no
    relevance: they run past the relevance mode (every routed call costs
    Python time), so no backward is started through it."""
    x, ei = graph(7, 0.35, seed=3)
    model = model_of("GCN", seed=3)
    found = lrp.walks(model, x, ei, 0, top_k=3)
    assert routed and torch.autograd.grad not in routed
    assert found.relevance.numel() == 3


class Residual(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = GCNConv(3, 3), GCNConv(3, 3)

    def forward(self, x, edge_index):
        h = self.a(x, edge_index).relu()
        return self.b(h, edge_index) + h


def test_refusals_name_the_argument():
    x, ei = graph(7, 0.35, seed=10)
    model = model_of("GCN", seed=10)
    with pytest.raises(ValueError, match="skip or residual"):
        lrp.walks(Residual().double(), x, ei, 0)
    with pytest.raises(ValueError, match="APPNP"):
        lrp.walks(torch.nn.Sequential(APPNP(K=3, alpha=0.1)), x, ei, 0)
    with pytest.raises(ValueError, match="top_k"):
        lrp.walks(model, x, ei, 0, top_k=0)
    with pytest.raises(ValueError, match=r"there are \d+ walks"):
        lrp.walks(model, x, ei, 0, max_walks=2)
    with pytest.raises(ValueError, match="index"):
        lrp.walks(model, x, ei, 70)
    with pytest.raises(ValueError, match="index"):
        lrp.walks(model, x, ei, torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="nodes"):
        lrp.subgraph_relevance(model, x, ei, torch.zeros(3, dtype=torch.bool), 0)
    with pytest.raises(ValueError, match="nodes"):
        lrp.subgraph_relevance(model, x, ei, [0, 99], 0)
    for alpha in (-0.1, 1.5):
        with pytest.raises(ValueError, match="alpha"):
            lrp.subgraph_relevance(model, x, ei, [0, 1], 0, alpha=alpha)
    with pytest.raises(TypeError, match="rules"):
        lrp.walks(model, x, ei, 0, rules="gamma")
    with pytest.raises(ValueError, match="message-passing"):
        lrp.walks(torch.nn.Linear(3, 2).double(), x, ei, 0)


class Global(torch.nn.Module):
    """Reads a statistic over all nodes: its subgraph does not explain it."""

    def __init__(self):
        super().__init__()
        self.a, self.b = GCNConv(3, 4), GCNConv(4, 3)

    def forward(self, x, edge_index):
        h = self.a(x, edge_index).relu()
        return self.b(h - h.detach().mean(0), edge_index)


def test_a_node_of_a_large_graph_is_explained_on_its_subgraph():
    x, ei = graph(80, 0.025, seed=11)
    model = model_of("GCN", seed=11)
    w = lrp.walks(model, x, ei, 7)
    explanation = lrp.explain(model, x, ei, index=7, subgraph=False)
    per_start = torch.zeros(80, dtype=torch.float64).index_add_(0, w.walks[:, 0], w.relevance)
    torch.testing.assert_close(per_start, explanation.node_mask.sum(-1), rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(w.node_relevance, explanation.node_mask.sum(-1), rtol=1e-9, atol=1e-12)
    assert bool((w.walks[:, -1] == 7).all()) and w.num_nodes == 80
    inside = lrp.subgraph_relevance(model, x, ei, torch.arange(80), 7)
    assert inside == pytest.approx(w.relevance_total, rel=1e-9)


def test_a_model_that_reads_the_whole_graph_falls_back_to_it():
    x, ei = graph(80, 0.025, seed=12)
    torch.manual_seed(12)
    model = Global().double().eval()
    with pytest.warns(lrp.SubgraphWarning):
        w = lrp.walks(model, x, ei, 3)
    explanation = lrp.explain(model, x, ei, index=3, subgraph=False)
    per_start = torch.zeros(80, dtype=torch.float64).index_add_(0, w.walks[:, 0], w.relevance)
    torch.testing.assert_close(per_start, explanation.node_mask.sum(-1), rtol=1e-9, atol=1e-12)


def test_a_packed_step_that_leaves_its_neighbourhoods_is_rerun_one_suffix_per_seed():
    from torch_geometric_lrp import higher_order as H
    x, ei = graph(9, 0.3, seed=15)
    model = model_of("GCN", seed=15, channels=(3, 4, 4, 3))

    def both(steps, info):
        start = info["start"]
        right = [H._neighbours(pairs, steps.n) for pairs in info["messages"]]
        wrong = [[[i] for i in range(steps.n)] for _ in right]  # self steps only: every step leaks
        return H._enumerate_suffixes(steps, start, right), H._enumerate_suffixes(steps, start, wrong)

    (p1, v1), (p2, v2) = H._run(model, x, ei, 4, None, None, None, {}, both)
    one = {tuple(p): float(v) for p, v in zip(p1.tolist(), v1)}
    two = {tuple(p): float(v) for p, v in zip(p2.tolist(), v2)}
    assert one.keys() == two.keys()
    assert all(one[k] == pytest.approx(two[k], rel=1e-12, abs=1e-15) for k in one)


def test_a_backward_that_vmap_cannot_batch_is_run_seed_by_seed(monkeypatch):
    x, ei = graph(7, 0.35, seed=13)
    model = model_of("GCN", seed=13, channels=(3, 4, 4, 3))
    batched = lrp.walks(model, x, ei, 2, rules=Gamma(0.25))
    grad = torch.autograd.grad

    def no_vmap(*args, **kwargs):
        if kwargs.get("is_grads_batched"):
            raise RuntimeError("vmap: aten::scatter_add_(self, *extra_args) is not possible")
        return grad(*args, **kwargs)

    monkeypatch.setattr(torch.autograd, "grad", no_vmap)
    one_by_one = lrp.walks(model, x, ei, 2, rules=Gamma(0.25))
    assert torch.equal(one_by_one.walks, batched.walks)
    torch.testing.assert_close(one_by_one.relevance, batched.relevance, rtol=1e-12, atol=1e-15)


class Undirected(torch.nn.Module):
    """Passes messages along both directions of the edges it is given."""

    def __init__(self):
        super().__init__()
        self.a, self.b = GCNConv(3, 4), GCNConv(4, 3)

    def forward(self, x, edge_index):
        from torch_geometric.utils import to_undirected
        edge_index = to_undirected(edge_index)
        return self.b(self.a(x, edge_index).relu(), edge_index)


@pytest.mark.parametrize("make", [lambda: model_of("GIN", seed=14, channels=(3, 4, 4, 3)),
                                  lambda: Undirected().double().eval()])
def test_the_two_ways_to_enumerate_agree(make):
    """Suffixes pushed down in packed seeds and the blocks give the same
    walks (the model picks the cheaper), also where the layers pass messages
    along other edges than the given ones (made undirected inside)."""
    from torch_geometric_lrp import higher_order as H
    x, ei = graph(9, 0.3, seed=14, directed=True)
    torch.manual_seed(14)
    model = make()

    def both(steps, info):
        start = info["start"]
        neighbours = [H._neighbours(pairs, steps.n) for pairs in info["messages"]]
        packed = H._enumerate_suffixes(steps, start, neighbours)
        structure = H._structure(steps, start)
        return packed, H._enumerate(steps, structure, start), info["first"]

    (p1, v1), (p2, v2), first = H._run(model, x, ei, 4, None, Gamma(0.25), None, {}, both)
    one = {tuple(p): float(v) for p, v in zip(p1.tolist(), v1)}
    two = {tuple(p): float(v) for p, v in zip(p2.tolist(), v2)}
    assert one.keys() == two.keys() and len(one) == p1.shape[0]
    for key in one:
        assert one[key] == pytest.approx(two[key], rel=1e-9, abs=1e-14)
    per_start = torch.zeros(9, dtype=torch.float64).index_add_(0, p1[:, 0], v1)
    torch.testing.assert_close(per_start, first.sum(-1), rtol=1e-9, atol=1e-12)


class Categorical(torch.nn.Module):
    """Embedding of integer node categories, then two GCN layers."""

    def __init__(self):
        super().__init__()
        self.embedding = torch.nn.Embedding(5, 3)
        self.convs = torch.nn.ModuleList([GCNConv(3, 4), GCNConv(4, 3)])

    def body(self, h, edge_index):
        return self.convs[1](self.convs[0](h, edge_index).relu(), edge_index)

    def forward(self, x, edge_index):
        return self.body(self.embedding(x), edge_index)


class OnEmbedding(torch.nn.Module):
    def __init__(self, categorical):
        super().__init__()
        self.categorical = categorical

    def forward(self, h, edge_index):
        return self.categorical.body(h, edge_index)


def test_walks_of_integer_categories_start_at_their_embeddings():
    """Walks of a model that looks its integer x up in an embedding equal
    the walks of the same layers explained on the embedded features."""
    _, ei = graph(8, 0.3, seed=16)
    x = torch.randint(0, 5, (8,), generator=torch.Generator().manual_seed(16))
    torch.manual_seed(16)
    model = Categorical().double().eval()
    w = lrp.walks(model, x, ei, 3, rules=Gamma(0.25))
    twin = lrp.walks(OnEmbedding(model), model.embedding(x).detach(), ei, 3, rules=Gamma(0.25))
    assert torch.equal(w.walks, twin.walks)
    torch.testing.assert_close(w.relevance, twin.relevance, rtol=1e-12, atol=1e-15)
    explanation = lrp.explain(model, x, ei, index=3, rules=Gamma(0.25), subgraph=False)
    torch.testing.assert_close(w.node_relevance, explanation.node_mask.sum(-1), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("call", ["walks", "top_k", "subgraph_relevance"])
def test_an_open_audit_counts_the_walks_pass_once(call):
    """Inside a ``RelevanceAudit``, ``lrp.walks`` and
    ``lrp.subgraph_relevance`` report what biases and stabilisers absorbed,
    once, as ``lrp.explain`` of the same target does: score = input
    relevance + absorbed + lost. Before, the audit saw the level-to-level
    steps (the stabilisers' share once per step, the biases not at all):
    absorbed 2.5e-6 where the explanation's was 0.117."""
    x, edge_index = graph(n=9, p=0.4)
    model = model_of("GCN")
    rules = Gamma(0.25)
    explanation = lrp.explain(model, x, edge_index, index=2, rules=rules)
    assert abs(float(explanation.absorbed)) > 1e-3  # the biases matter
    with lrp.RelevanceAudit() as audit:
        if call == "subgraph_relevance":
            lrp.subgraph_relevance(model, x, edge_index, [0, 1, 2, 3], index=2, rules=rules)
        else:
            lrp.walks(model, x, edge_index, index=2, rules=rules, top_k=3 if call == "top_k" else None)
    assert audit.absorbed == pytest.approx(float(explanation.absorbed), rel=1e-9)
    assert audit.lost == pytest.approx(float(explanation.lost), rel=1e-9, abs=1e-12)


class _TwoHops(torch.nn.Module):
    """A custom layer that propagates twice in one call (two hops), or a GCN
    whose hidden layer is mixed with the sum over all nodes."""

    def __init__(self, kind):
        super().__init__()
        from torch_geometric.nn import GCNConv, MessagePassing

        class TwoHop(MessagePassing):
            def __init__(self):
                super().__init__(aggr="add")
                self.lin = torch.nn.Linear(3, 4)

            def forward(self, x, edge_index):
                return self.propagate(edge_index, x=self.propagate(edge_index, x=self.lin(x)))

        self.kind = kind
        self.c1 = TwoHop() if kind == "two_propagates" else GCNConv(3, 4)
        self.c2 = GCNConv(4, 3)

    def forward(self, x, edge_index):
        h = self.c1(x, edge_index).relu()
        if self.kind == "sum_over_nodes":
            h = h + h.sum(0, keepdim=True)
        return self.c2(h, edge_index)


@pytest.mark.parametrize("kind", ["two_propagates", "sum_over_nodes"])
def test_relevance_that_moves_outside_the_messages_is_refused(kind):
    """Every step of a walk must be a message of its layer (or a node to
    itself). A layer that propagates twice per call, or a sum over the nodes
    between layers, moves relevance along pairs that are no message: its
    'walks' would step between nodes no edge joins. Refused, naming the pair
    (lrp.explain still explains the model)."""
    torch.manual_seed(0)
    x = torch.randn(7, 3, dtype=torch.float64)
    edge_index = torch.tensor([(0, 1), (1, 0), (1, 2), (2, 3), (3, 1), (4, 3), (5, 4), (4, 5), (6, 4), (2, 6)]).T
    model = _TwoHops(kind).double().eval()
    with pytest.raises(ValueError, match=r"passed no message .* does not\s+split into walks along edges"):
        lrp.walks(model, x, edge_index, 2)
    lrp.explain(model, x, edge_index, index=2)


def test_walks_take_the_mode_of_a_one_output_model():
    """A model with one raw output per row needs ``mode``; walks and
    subgraph_relevance take it as lrp.explain does (before, the advice to pass
    it sent ``mode`` to the model's forward)."""
    from torch_geometric.nn import GCNConv
    torch.manual_seed(0)
    x, ei = graph(7, 0.35, seed=13)

    class One(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.c2 = GCNConv(3, 4), GCNConv(4, 1)

        def forward(self, x, edge_index):
            return self.c2(self.c1(x, edge_index).relu(), edge_index)

    model = One().double().eval()
    with pytest.raises(ValueError, match="mode='binary_classification' or mode='regression'"):
        lrp.walks(model, x, ei, 2)
    found = lrp.walks(model, x, ei, 2, mode="regression")
    reference = lrp.explain(model, x, ei, index=2, mode="regression")
    assert found.score == pytest.approx(reference.score, rel=1e-12)
    assert found.relevance.sum().item() == pytest.approx(reference.node_mask.sum().item(), rel=1e-9)
    assert lrp.subgraph_relevance(model, x, ei, torch.arange(x.shape[0]), 2, mode="regression") == \
        pytest.approx(found.relevance_total, rel=1e-9)
    with pytest.raises(ValueError, match="mode: must be one of"):
        lrp.walks(model, x, ei, 2, mode="ranking")


def test_a_list_of_zero_dim_tensors_is_one_node_set():
    """``list(tensor([1, 2]))`` holds node ids, as ``[1, 2]`` does (before:
    read as two sets of one node each)."""
    x, ei = graph(7, 0.35, seed=13)
    model = model_of("GCN", seed=13, channels=(3, 4, 4, 3))
    expected = lrp.subgraph_relevance(model, x, ei, [1, 2], 2)
    assert lrp.subgraph_relevance(model, x, ei, list(torch.tensor([1, 2])), 2) == pytest.approx(expected, rel=1e-12)


def test_walks_of_exactly_zero_relevance_are_not_listed():
    """A model with dead hidden units (all-zero weights) computes the same
    function as the one without them, and lists the same walks: both ways of
    enumerating keep only walks that carry relevance."""
    from torch_geometric.nn import GCNConv

    class Net(torch.nn.Module):
        def __init__(self, hidden):
            super().__init__()
            self.convs = torch.nn.ModuleList([GCNConv(2, hidden), GCNConv(hidden, 2)])

        def forward(self, x, edge_index):
            return self.convs[1](self.convs[0](x, edge_index).relu(), edge_index)

    x = torch.ones(6, 2, dtype=torch.float64)
    x[0], x[5] = torch.tensor([0.5, -1.0]), torch.tensor([2.0, 1.0])
    ei = torch.tensor([[1, 2, 3, 4, 0, 0, 0, 0, 5, 0], [0, 0, 0, 0, 1, 2, 3, 4, 0, 5]])
    torch.manual_seed(1)
    small = Net(2).double().eval()
    for p in small.parameters():
        if p.dim() == 1:
            torch.nn.init.uniform_(p, -0.5, 0.5)
    big = Net(40).double().eval()
    with torch.no_grad():
        for p in big.parameters():
            p.zero_()
        big.convs[0].lin.weight[:2] = small.convs[0].lin.weight
        big.convs[0].bias[:2] = small.convs[0].bias
        big.convs[1].lin.weight[:, :2] = small.convs[1].lin.weight
        big.convs[1].bias[:] = small.convs[1].bias
    a, b = lrp.walks(small, x, ei, 0), lrp.walks(big, x, ei, 0)
    assert bool((a.relevance != 0).all()) and bool((b.relevance != 0).all())
    assert a.num_walks == a.walks.shape[0] == b.num_walks == b.walks.shape[0]
    assert {tuple(w) for w in a.walks.tolist()} == {tuple(w) for w in b.walks.tolist()}


def test_dirgnnconv_is_refused_by_name():
    """DirGNNConv's two convs run side by side (in- and out-edges); before,
    they were taken for two levels of a chain and refused as a skip."""
    from torch_geometric.nn import DirGNNConv

    class Directed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = DirGNNConv(GraphConv(3, 4), root_weight=False)
            self.c2 = DirGNNConv(GraphConv(4, 3), root_weight=False)

        def forward(self, x, edge_index):
            return self.c2(self.c1(x, edge_index).relu(), edge_index)

    x, ei = graph(7, 0.35, seed=13)
    with pytest.raises(ValueError, match="DirGNNConv runs two message-passing layers side by side"):
        lrp.walks(Directed().double().eval(), x, ei, 2)


def test_a_nan_the_target_does_not_read_leaves_walks_as_they_are():
    """A NaN feature outside node 0's receptive field makes another node's
    attention NaN: walks and subgraph relevance are those of the clean input
    (before: 'atol must be greater than or equal to zero, but got -nan')."""
    torch.manual_seed(0)

    class Attention(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.c2 = GATConv(4, 4, heads=1), GATConv(4, 3, heads=1)

        def forward(self, x, edge_index):
            return self.c2(self.c1(x, edge_index).relu(), edge_index)

    model = Attention().double().eval()
    x = torch.randn(6, 4, dtype=torch.float64)
    ei = torch.tensor([[1, 2, 0, 3, 4, 5], [0, 0, 1, 2, 5, 4]])
    clean = lrp.walks(model, x, ei, 0, target=torch.tensor(0))
    clean_set = lrp.subgraph_relevance(model, x, ei, [0, 1, 2], 0, target=torch.tensor(0))
    x = x.clone()
    x[5, 0] = float("nan")
    found = lrp.walks(model, x, ei, 0, target=torch.tensor(0))
    assert {tuple(w) for w in found.walks.tolist()} == {tuple(w) for w in clean.walks.tolist()}
    torch.testing.assert_close(found.relevance, clean.relevance, rtol=1e-12, atol=1e-15)
    assert lrp.subgraph_relevance(model, x, ei, [0, 1, 2], 0, target=torch.tensor(0)) == \
        pytest.approx(clean_set, rel=1e-12)


def test_walks_of_a_non_finite_output_are_refused_by_name():
    """A NaN the target reads makes its score NaN: walks and subgraph
    relevance say so (before: 'atol must be greater than or equal to zero')."""
    x, ei = graph(7, 0.35, seed=13)
    model = model_of("GCN", seed=13, channels=(3, 4, 4, 3))
    x = x.clone()
    x[:, 0] = float("nan")
    with pytest.raises(ValueError, match="index: the output explained, row 2, is not finite"):
        lrp.walks(model, x, ei, 2)
    with pytest.raises(ValueError, match="is not finite"):
        lrp.subgraph_relevance(model, x, ei, [1, 2], 2)


def test_graph_level_walks_as_an_explanation_keep_their_graph():
    """to_explanation of a graph-level target carries the task level and the
    batch (as lrp.explain's does): pictures drew it as node 1 of graph 0."""
    from torch_geometric_lrp.visualize import _as_graph
    x, ei = graph(10, 0.3, seed=7)
    ei = ei[:, (ei < 5).all(0) | (ei >= 5).all(0)]
    batch = torch.tensor([0] * 5 + [1] * 5)
    w = lrp.walks(model_of("GIN", seed=7, channels=(3, 4, 4), head=2), x, ei, 1, batch=batch)
    explanation = w.to_explanation(x)
    assert explanation._model_config.task_level.value == "graph"
    assert torch.equal(explanation.batch, batch)
    drawn = _as_graph(explanation)
    assert drawn.targets.numel() == 0 and torch.equal(drawn.members, batch == 1)


def test_walk_edge_masks_of_an_int32_graph_of_many_nodes():
    """Keys source * N + target pass 2**31 at N = 50,000: with an int32
    edge_index they wrapped, and steps matched no edge."""
    n = 50_000
    edge_index = torch.tensor([[40_000, n - 1], [n - 1, n - 1]], dtype=torch.int32)
    w = lrp.Walks(walks=torch.tensor([[40_000, n - 1, n - 1]]), relevance=torch.tensor([0.5], dtype=torch.float64),
                  score=0.5, relevance_total=0.5, num_walks=1, index=n - 1, target=torch.tensor(0), num_nodes=n,
                  edge_index=edge_index)
    edge, loops = w.edge_mask()
    assert edge.tolist() == [0.5, 0.5] and float(loops.abs().sum()) == 0


def test_best_first_search_in_float32_keeps_the_order_of_magnitudes():
    """A bound rounded in float32 fell one unit below a walk's value, which
    then came one place late (dense graph: the best-first search runs)."""
    import torch_geometric_lrp.higher_order as ho
    g = torch.Generator().manual_seed(12)
    x = torch.randn(10, 2, generator=g, dtype=torch.float64)
    pairs = [(i, j) for i in range(10) for j in range(i + 1, 10) if torch.rand(1, generator=g).item() < 0.7]
    ei = torch.tensor(pairs + [(j, i) for i, j in pairs]).t()
    torch.manual_seed(12)
    model = Net("GCN", bias=False, channels=(2, 2, 2, 2)).eval()
    searched = []
    search = ho._search
    try:
        ho._search = lambda *a, **k: (searched.append(1), search(*a, **k))[1]
        w = lrp.walks(model, x.float(), ei, 0, rules=Epsilon(0), top_k=17)
    finally:
        ho._search = search
    assert searched
    magnitudes = w.relevance.abs()
    assert bool((magnitudes[:-1] >= magnitudes[1:]).all())


class _LeakCovered(torch.nn.Module):
    """Three GCN layers without self-loops, the first one's output mixed with
    its sum over all nodes: relevance moves between nodes outside the messages."""

    def __init__(self):
        super().__init__()
        make = lambda i, o: GCNConv(i, o, add_self_loops=False, normalize=False, bias=False)
        self.c1, self.c2, self.c3 = make(3, 4), make(4, 4), make(4, 2)

    def forward(self, x, edge_index):
        h = self.c1(x, edge_index).relu()
        h = h + h.sum(0, keepdim=True)
        return self.c3(self.c2(h, edge_index).relu(), edge_index)


def test_a_leak_that_the_packed_neighbourhoods_cover_is_enumerated_exactly_and_refused():
    """The suffixes packed in one seed have neighbourhoods that cover every
    node the sum over the nodes reaches: the stray relevance landed on rows
    of other suffixes and was credited to them, along real edges, so nothing
    refused it (before: lrp.walks returned wrong walks). The packed step
    must give the blocks' walks (exact, some along non-edges), and lrp.walks
    refuses them, naming a pair."""
    from torch_geometric_lrp import higher_order as H
    torch.manual_seed(0)
    x = torch.rand(5, 3, dtype=torch.float64) + 0.1
    ei = torch.tensor([[0, 4, 2, 1, 3], [1, 1, 3, 4, 4]])
    model = _LeakCovered().double().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.abs_()  # every unit alive

    def both(steps, info):
        start = info["start"]
        neighbours = [H._neighbours(pairs, steps.n) for pairs in info["messages"]]
        return H._enumerate_suffixes(steps, start, neighbours), H._enumerate(steps, H._structure(steps, start), start)

    (p1, v1), (p2, v2) = H._run(model, x, ei, 4, None, Epsilon(0), None, {}, both)
    one = {tuple(p): float(v) for p, v in zip(p1.tolist(), v1) if v != 0}
    two = {tuple(p): float(v) for p, v in zip(p2.tolist(), v2) if v != 0}
    assert one.keys() == two.keys()
    assert all(one[k] == pytest.approx(two[k], rel=1e-9, abs=1e-14) for k in one)
    with pytest.raises(ValueError, match=r"passed no message .* does not\s+split into walks along edges"):
        lrp.walks(model, x, ei, 4, rules=Epsilon(0))


@pytest.mark.parametrize("kind", ["GCN", "GAT", "GIN"])
def test_a_packed_step_of_layers_inside_their_messages_is_not_rerun(kind, monkeypatch):
    """The check that a packed step kept each suffix's relevance in its own
    neighbourhood costs one seed more per step, not a rerun one suffix per
    seed, for layers that pass relevance only along their messages."""
    from torch_geometric_lrp import higher_order as H
    x, ei = graph(12, 0.25, seed=16)
    model = model_of(kind, seed=16, channels=(3, 4, 4, 3))
    calls = []  # per step: (rerun one suffix per seed, suffixes shared seeds)
    step = H._step_suffixes
    monkeypatch.setattr(H, "_step_suffixes",
                        lambda *a: (calls.append((a[-1] is None, len(a[4]) < len(a[2]))), step(*a))[1])
    w = lrp.walks(model, x, ei, 3, rules=Gamma(0.25))
    assert calls and not any(rerun for rerun, _ in calls)
    assert any(shared for _, shared in calls)  # so the check ran
    assert float(w.relevance.sum()) == pytest.approx(w.relevance_total, rel=1e-9)


def test_edge_mask_books_a_step_along_a_reversed_edge_on_that_edge():
    """A model that makes its edges undirected inside forward steps along
    pairs whose reverse only is in edge_index. Such a step lands on the
    reverse edge (visualize_walks draws it along that edge), so edge_mask
    and self_loop_relevance still sum to L times the walks' relevance
    (before: those steps were dropped). Slow twin: one step at a time."""
    torch.manual_seed(0)
    x = torch.randn(5, 3, dtype=torch.float64)
    ei = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4]])  # a directed path
    w = lrp.walks(Undirected().double().eval(), x, ei, 2)
    forward = {(a, b): k for k, (a, b) in enumerate(ei.t().tolist())}
    assert any((a, b) not in forward and a != b for walk in w.walks.tolist() for a, b in itertools.pairwise(walk))
    edge, loops = torch.zeros(4, dtype=torch.float64), torch.zeros(5, dtype=torch.float64)
    for walk, value in zip(w.walks.tolist(), w.relevance.tolist()):
        for a, b in itertools.pairwise(walk):
            if a == b:
                loops[a] += value
            else:
                edge[forward[(a, b)] if (a, b) in forward else forward[(b, a)]] += value
    got_edge, got_loops = w.edge_mask()
    torch.testing.assert_close(got_edge, edge, rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(got_loops, loops, rtol=1e-12, atol=1e-15)
    L = w.walks.shape[1] - 1
    assert float(got_edge.sum() + got_loops.sum()) == pytest.approx(L * float(w.relevance.sum()), rel=1e-9)


def test_edge_mask_warns_of_steps_along_no_edge_with_their_relevance():
    """Steps along pairs that are no edge of edge_index in either direction
    have no entry in edge_mask: a warning says how much relevance that is
    (before: dropped silently)."""
    w = lrp.Walks(walks=torch.tensor([[0, 1, 2], [2, 2, 2]]), relevance=torch.tensor([0.75, 0.25], dtype=torch.float64),
                  score=1.0, relevance_total=1.0, num_walks=2, index=2, target=torch.tensor(0), num_nodes=3,
                  edge_index=torch.tensor([[1], [2]]))
    with pytest.warns(UserWarning, match=r"edge_mask: walk steps along 1 node pair .*0 -> 1.* 0\.75 "):
        edge, loops = w.edge_mask()
    assert edge.tolist() == [0.75] and loops.tolist() == [0.0, 0.0, 0.5]


def test_an_empty_batch_of_node_sets_gives_an_empty_result():
    """A boolean [0, N] batch holds no sets: no values (before: a bare
    IndexError from inside the pass)."""
    x, ei = graph(7, 0.35, seed=13)
    model = model_of("GCN", seed=13, channels=(3, 4, 4, 3))
    found = lrp.subgraph_relevance(model, x, ei, torch.zeros(0, 7, dtype=torch.bool), 2)
    assert isinstance(found, torch.Tensor) and found.shape == (0,) and found.dtype == torch.float64
    assert lrp.subgraph_relevance(model, x, ei, torch.zeros(0, 7, dtype=torch.bool), 2, alpha=0.5).shape == (0,)


def test_a_uint8_node_set_is_refused_by_name():
    """torch indexes with a uint8 tensor as a mask, the library elsewhere
    reads integers as ids: a 0/1 uint8 mask was taken for the node ids {0, 1}."""
    x, ei = graph(7, 0.35, seed=13)
    model = model_of("GCN", seed=13, channels=(3, 4, 4, 3))
    mask = torch.tensor([0, 1, 1, 0, 0, 0, 0], dtype=torch.uint8)
    with pytest.raises(TypeError, match=r"nodes: a uint8 tensor .* nodes\.bool\(\) .* nodes\.long\(\)"):
        lrp.subgraph_relevance(model, x, ei, mask, 2)
    with pytest.raises(TypeError, match=r"nodes\[1\]: a uint8"):
        lrp.subgraph_relevance(model, x, ei, [[0, 1], mask], 2)
    with pytest.raises(TypeError, match=r"nodes: a uint8"):
        lrp.subgraph_relevance(model, x, ei, mask[None].expand(2, -1), 2)


def test_subgraph_relevance_refuses_relevance_that_moves_outside_the_messages():
    """A per-graph norm between the layers moves relevance between every two
    nodes: ``walks`` refused the model, ``subgraph_relevance`` returned a
    value that is no sum of walks (on a path, S({1, 6}) != S({1}) though no
    walk into node 1 reaches node 6)."""
    from torch_geometric.nn.norm import GraphNorm

    class Normed(torch.nn.Module):
        def __init__(self, norm: bool):
            super().__init__()
            torch.manual_seed(1)
            self.c1, self.c2 = GCNConv(3, 4), GCNConv(4, 3)
            self.norm = GraphNorm(4) if norm else torch.nn.Identity()

        def forward(self, x, edge_index):
            return self.c2(self.norm(self.c1(x, edge_index)).relu(), edge_index)

    n = 8
    path = torch.arange(n - 1)
    edge_index = torch.cat([torch.stack([path, path + 1]), torch.stack([path + 1, path])], 1)
    x = torch.randn(n, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    plain = Normed(False).double().eval()
    alone = lrp.subgraph_relevance(plain, x, edge_index, nodes=[1], index=1, rules=lrp.rules.Epsilon(0.0))
    assert lrp.subgraph_relevance(plain, x, edge_index, nodes=[1, 6], index=1,
                                  rules=lrp.rules.Epsilon(0.0)) == pytest.approx(alone, rel=1e-12)
    with pytest.raises(ValueError, match="moves information between nodes outside its messages"):
        lrp.subgraph_relevance(Normed(True).double().eval(), x, edge_index, nodes=[1, 6], index=1,
                               rules=lrp.rules.Epsilon(0.0))


def test_walks_of_layers_that_build_their_output_in_a_buffer():
    """A layer that writes its output into a buffer (``out[idx] =
    lin(h[idx])``, as ``MFConv`` does with ``index_copy_``) under rules
    that differ between modules: the walks read the user's buffer, not the
    map standing for it, and lost relevance (37% of the total on small
    activations). Now they sum to the relevance, as written out of place."""
    from torch_geometric.nn import MessagePassing
    from torch_geometric.utils import degree

    class BufferConv(MessagePassing):
        def __init__(self, a, b, in_place: bool):
            super().__init__(aggr="add")
            self.in_place = in_place
            self.low, self.high = torch.nn.Linear(a, b, bias=False), torch.nn.Linear(a, b, bias=False)

        def forward(self, x, edge_index):
            h = self.propagate(edge_index, x=x)
            busy = degree(edge_index[1], x.shape[0], dtype=torch.long) > 1
            out = h.new_zeros(h.shape[0], self.low.out_features)
            for group, lin in ((False, self.low), (True, self.high)):
                idx = (busy == group).nonzero().view(-1)
                if self.in_place:
                    out[idx] = lin(h[idx])
                else:
                    out = out.index_copy(0, idx, lin(h[idx]))
            return out

    class Net(torch.nn.Module):
        def __init__(self, in_place: bool):
            super().__init__()
            torch.manual_seed(0)
            self.c1, self.c2 = BufferConv(5, 8, in_place), BufferConv(8, 8, in_place)
            self.head = torch.nn.Linear(8, 3, bias=False)

        def forward(self, x, edge_index):
            return self.head(self.c2(self.c1(x, edge_index).relu(), edge_index).relu())

    g = torch.Generator().manual_seed(1)
    edge_index = torch.randint(0, 30, (2, 60), generator=g)
    edge_index = edge_index[:, edge_index[0] != edge_index[1]]
    x = torch.randn(30, 5, generator=g, dtype=torch.float64) * 1e-4
    rules = {"c1": lrp.rules.Epsilon(0.0), "c2": lrp.rules.Epsilon(0.0), "head": lrp.rules.Epsilon(1e-12)}
    totals = []
    for in_place in (False, True):
        model = Net(in_place).double().eval()
        found = lrp.walks(model, x, edge_index, index=0, rules=rules)
        assert float(found.relevance.sum()) == pytest.approx(found.relevance_total, rel=1e-9)
        totals.append(found.relevance_total)
    assert totals[1] == pytest.approx(totals[0], rel=1e-9)
