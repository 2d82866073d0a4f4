"""Relevance through graph networks written the way a PyG user writes them.

The models are ``torch_geometric.nn.MetaLayer`` blocks (Battaglia et al.'s
graph-network block: an edge update, a node update that aggregates the new
edge messages with ``torch_geometric.utils.scatter``, and a global update that
aggregates nodes and edges per graph), built from stock ``torch.nn.Linear``,
``Sequential``, ``ReLU`` and ``torch.cat``. Nothing in them knows about LRP:
the relevance pass gives their torch ops relevance semantics.

Everything runs in float64 with ``bias=False`` and the LRP-0 rule
(``Epsilon(0.0)``), so no relevance is absorbed: the input relevance plus the
relevance the audit counts as lost (it reached an output equal to 0) equals the
seeded relevance.
"""
from __future__ import annotations

import pytest
import torch
from torch import nn
from torch_geometric.nn import MetaLayer
from torch_geometric.utils import scatter

import torch_geometric_lrp as lrp

DTYPE = torch.float64
AGGRS = ["sum", "mean", "max"]


# ---------------------------------------------------------------------------
# Graph-network blocks, as in PyG's MetaLayer documentation
# ---------------------------------------------------------------------------
def mlp(*sizes: int, final_relu: bool = False) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b, bias=False))
        if i < len(sizes) - 2 or final_relu:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class EdgeModel(nn.Module):
    """e' = mlp([x_src, x_dst, e, u[graph]]); any of the parts may be off."""

    def __init__(self, f_x, f_e, f_u, out, hidden=8, use_nodes=True, use_global=True, final_relu=False):
        super().__init__()
        self.use_nodes, self.use_global = use_nodes, use_global
        f_in = f_e + (2 * f_x if use_nodes else 0) + (f_u if use_global else 0)
        self.edge_mlp = mlp(f_in, hidden, out, final_relu=final_relu)

    def forward(self, src, dest, edge_attr, u, batch):
        parts = [src, dest, edge_attr] if self.use_nodes else [edge_attr]
        if self.use_global:
            parts.append(u[batch])
        return self.edge_mlp(torch.cat(parts, dim=1))


class NodeModel(nn.Module):
    """m = mlp1([x_src, e']) per edge; a = scatter(m, dst, reduce=aggr);
    x' = mlp2([x, a, u[graph]])."""

    def __init__(self, f_x, f_e, f_u, out, aggr="sum", hidden=8, use_edges=True, use_global=True,
                 final_relu=False):
        super().__init__()
        self.aggr, self.use_edges, self.use_global = aggr, use_edges, use_global
        if use_edges:
            self.node_mlp_1 = mlp(f_x + f_e, hidden, hidden, final_relu=True)
        f_in = f_x + (hidden if use_edges else 0) + (f_u if use_global else 0)
        self.node_mlp_2 = mlp(f_in, hidden, out, final_relu=final_relu)

    def forward(self, x, edge_index, edge_attr, u, batch):
        parts = [x]
        if self.use_edges:
            row, col = edge_index
            message = self.node_mlp_1(torch.cat([x[row], edge_attr], dim=1))
            parts.append(scatter(message, col, dim=0, dim_size=x.size(0), reduce=self.aggr))
        if self.use_global:
            parts.append(u[batch])
        return self.node_mlp_2(torch.cat(parts, dim=1))


class GlobalModel(nn.Module):
    """u' = mlp([u, aggr(x' of the graph), aggr(e' of the graph)])."""

    def __init__(self, f_x, f_e, f_u, out, aggr="sum", hidden=8, use_graph=True, final_relu=False):
        super().__init__()
        self.aggr, self.use_graph = aggr, use_graph
        f_in = f_u + (f_x + f_e if use_graph else 0)
        self.global_mlp = mlp(f_in, hidden, out, final_relu=final_relu)

    def forward(self, x, edge_index, edge_attr, u, batch):
        parts = [u]
        if self.use_graph:
            graphs = u.size(0)
            parts.append(scatter(x, batch, dim=0, dim_size=graphs, reduce=self.aggr))
            parts.append(scatter(edge_attr, batch[edge_index[0]], dim=0, dim_size=graphs, reduce=self.aggr))
        return self.global_mlp(torch.cat(parts, dim=1))


def full_block(f_x, f_e, f_u, out_x, out_e, out_u, aggr="sum", global_aggr=None, final_relu=False):
    """A full MetaLayer: every update reads everything it can."""
    return MetaLayer(
        EdgeModel(f_x, f_e, f_u, out_e, final_relu=final_relu),
        NodeModel(f_x, out_e, f_u, out_x, aggr=aggr, final_relu=final_relu),
        GlobalModel(out_x, out_e, f_u, out_u, aggr=global_aggr or aggr, final_relu=final_relu),
    )


class EncodeProcessDecode(nn.Module):
    """Encoder (independent edge / node / global blocks), a core MetaLayer
    applied ``steps`` times with shared weights, decoder (independent blocks)."""

    def __init__(self, f_x, f_e, f_u, hidden=8, out=2, steps=2, core_aggr="max", core_global_aggr="sum"):
        super().__init__()
        h = hidden
        self.encoder = MetaLayer(
            EdgeModel(f_x, f_e, f_u, h, use_nodes=False, use_global=False, final_relu=True),
            NodeModel(f_x, h, f_u, h, use_edges=False, use_global=False, final_relu=True),
            GlobalModel(h, h, f_u, h, use_graph=False, final_relu=True),
        )
        self.core = full_block(h, h, h, h, h, h, aggr=core_aggr, global_aggr=core_global_aggr, final_relu=True)
        self.decoder = MetaLayer(
            EdgeModel(h, h, h, out, use_nodes=False, use_global=False),
            NodeModel(h, h, h, out, use_edges=False, use_global=False),
            GlobalModel(h, h, h, out, use_graph=False),
        )
        self.steps = steps

    def forward(self, x, edge_index, edge_attr, u, batch):
        x, edge_attr, u = self.encoder(x, edge_index, edge_attr, u, batch)
        for _ in range(self.steps):
            x, edge_attr, u = self.core(x, edge_index, edge_attr, u, batch)
        return self.decoder(x, edge_index, edge_attr, u, batch)


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------
def random_graphs(sizes=(5,), f_x=3, f_e=2, f_u=4, seed=0):
    """A batch of random directed graphs (one per entry of ``sizes``) in which
    every node has at least one incoming edge, plus random features."""
    g = torch.Generator().manual_seed(seed)
    edges, batch, offset = [], [], 0
    for graph, n in enumerate(sizes):
        ring = torch.stack([torch.arange(n), (torch.arange(n) + 1) % n])  # every node has an in-edge
        extra = torch.randint(0, n, (2, n), generator=g)
        extra = extra[:, extra[0] != extra[1]]
        edges.append(torch.cat([ring, extra], dim=1) + offset)
        batch += [graph] * n
        offset += n
    edge_index = torch.cat(edges, dim=1)
    x = torch.randn(offset, f_x, generator=g, dtype=DTYPE)
    edge_attr = torch.randn(edge_index.size(1), f_e, generator=g, dtype=DTYPE)
    u = torch.randn(len(sizes), f_u, generator=g, dtype=DTYPE)
    return x, edge_index, edge_attr, u, torch.tensor(batch)


def signed_seed(outputs, generator):
    """A signed random relevance per output, 0 where the output is 0."""
    return [torch.randn(o.shape, generator=generator, dtype=o.dtype) * (o != 0) for o in outputs]


def relevance(model, x, edge_index, edge_attr, u, batch, seeds):
    """Run ``model`` in a relevance pass, seed its (x, edge_attr, u) outputs
    with ``seeds`` (None: no relevance on that output) and return the outputs,
    the input relevances and the audit."""
    inputs = [t.detach().clone().requires_grad_() for t in (x, edge_attr, u)]
    with lrp.relevance_pass(model, default_rule=lrp.rules.Epsilon(0.0)):
        outputs = model(inputs[0], edge_index, inputs[1], inputs[2], batch)
        if callable(seeds):
            seeds = seeds(outputs)
        pairs = [(o, s) for o, s in zip(outputs, seeds) if s is not None]
        with lrp.RelevanceAudit() as audit:
            torch.autograd.backward([o for o, _ in pairs], [s for _, s in pairs])
    grads = [t.grad if t.grad is not None else torch.zeros_like(t) for t in inputs]
    return [o.detach() for o in outputs], grads, audit, seeds


def assert_conserves(grads, audit, seeds):
    total = sum(s.sum().item() for s in seeds if s is not None)
    got = sum(g.sum().item() for g in grads) + audit.lost
    assert got == pytest.approx(total, rel=1e-5)
    # LRP-0 without biases: nothing is absorbed, only lost at zero outputs
    assert audit.absorbed == pytest.approx(0.0, abs=1e-8 * max(1.0, abs(total)))


# ---------------------------------------------------------------------------
# 1. one MetaLayer, each aggregation
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("aggr", AGGRS)
def test_meta_layer_conserves_and_reaches_every_input(aggr):
    torch.manual_seed(1)
    x, edge_index, edge_attr, u, batch = random_graphs(sizes=(6,))
    model = full_block(3, 2, 4, out_x=3, out_e=2, out_u=2, aggr=aggr).to(DTYPE)
    with torch.no_grad():
        expected = model(x, edge_index, edge_attr, u, batch)

    g = torch.Generator().manual_seed(2)
    outputs, grads, audit, seeds = relevance(
        model, x, edge_index, edge_attr, u, batch, lambda outs: signed_seed(outs, g))

    for out, ref in zip(outputs, expected):
        torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    assert all(bool((s != 0).any()) for s in seeds)
    for name, grad in zip(("x", "edge_attr", "u"), grads):
        assert bool((grad != 0).any()), f"no relevance reached {name}"
        assert torch.isfinite(grad).all()
    assert_conserves(grads, audit, seeds)


@pytest.mark.parametrize("aggr", AGGRS)
def test_meta_layer_output_relevance_of_each_kind_reaches_inputs(aggr):
    """Seeding only the node, only the edge or only the global output also
    conserves; the global output's relevance reaches node and edge inputs
    through the per-graph aggregation."""
    x, edge_index, edge_attr, u, batch = random_graphs(sizes=(6,), seed=3)
    torch.manual_seed(4)
    model = full_block(3, 2, 4, out_x=3, out_e=2, out_u=2, aggr=aggr).to(DTYPE)
    for which in range(3):
        g = torch.Generator().manual_seed(5 + which)

        def seeds(outs):
            s = signed_seed(outs, g)
            return [t if i == which else None for i, t in enumerate(s)]

        _, grads, audit, used = relevance(model, x, edge_index, edge_attr, u, batch, seeds)
        assert_conserves(grads, audit, used)
        if which == 2:  # global output: every input kind is upstream of it
            assert all(bool((grad != 0).any()) for grad in grads)


# ---------------------------------------------------------------------------
# 2. encoder - core (2 shared steps) - decoder on a batch of 2 graphs
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("core_aggr", AGGRS)
def test_encode_process_decode_conserves_and_keeps_graphs_apart(core_aggr):
    x, edge_index, edge_attr, u, batch = random_graphs(sizes=(5, 7), seed=10)
    torch.manual_seed(11)
    model = EncodeProcessDecode(3, 2, 4, core_aggr=core_aggr).to(DTYPE)
    with torch.no_grad():
        expected = model(x, edge_index, edge_attr, u, batch)

    # all outputs of both graphs
    g = torch.Generator().manual_seed(12)
    outputs, grads, audit, seeds = relevance(
        model, x, edge_index, edge_attr, u, batch, lambda outs: signed_seed(outs, g))
    for out, ref in zip(outputs, expected):
        torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    for name, grad in zip(("x", "edge_attr", "u"), grads):
        assert bool((grad != 0).any()), f"no relevance reached {name}"
    assert_conserves(grads, audit, seeds)

    # only graph 0's outputs: graph 1's inputs get exactly nothing
    edge_graph = batch[edge_index[0]]
    owners = (batch, edge_graph, torch.arange(u.size(0)))

    def graph0(outs):
        s = signed_seed(outs, torch.Generator().manual_seed(13))
        return [t * (owner == 0).unsqueeze(1) for t, owner in zip(s, owners)]

    _, grads, audit, seeds = relevance(model, x, edge_index, edge_attr, u, batch, graph0)
    assert_conserves(grads, audit, seeds)
    for name, grad, owner in zip(("x", "edge_attr", "u"), grads, owners):
        assert bool((grad[owner == 0] != 0).any()), f"graph 0's {name} got no relevance"
        assert bool((grad[owner == 1] == 0).all()), f"relevance of graph 0 leaked into graph 1's {name}"


# ---------------------------------------------------------------------------
# 3. a hand-worked example
# ---------------------------------------------------------------------------
class SumEdge(nn.Module):
    """e'_k = x_src + x_dst + e_k (a Linear with weight [1, 1, 1])."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 1, bias=False)
        nn.init.ones_(self.lin.weight)

    def forward(self, src, dest, edge_attr, u, batch):
        return self.lin(torch.cat([src, dest, edge_attr], dim=1))


class SumNode(nn.Module):
    """x'_i = x_i + aggr_{k: dst(k) = i} e'_k (a Linear with weight [1, 1])."""

    def __init__(self, aggr):
        super().__init__()
        self.aggr = aggr
        self.lin = nn.Linear(2, 1, bias=False)
        nn.init.ones_(self.lin.weight)

    def forward(self, x, edge_index, edge_attr, u, batch):
        agg = scatter(edge_attr, edge_index[1], dim=0, dim_size=x.size(0), reduce=self.aggr)
        return self.lin(torch.cat([x, agg], dim=1))


class SumGlobal(nn.Module):
    """u' = u + sum_i x'_i + sum_k e'_k (a Linear with weight [1, 1, 1])."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 1, bias=False)
        nn.init.ones_(self.lin.weight)

    def forward(self, x, edge_index, edge_attr, u, batch):
        nodes = scatter(x, batch, dim=0, dim_size=u.size(0), reduce="sum")
        edges = scatter(edge_attr, batch[edge_index[0]], dim=0, dim_size=u.size(0), reduce="sum")
        return self.lin(torch.cat([u, nodes, edges], dim=1))


# 3 nodes x = [1, 2, 3], 2 edges 0 -> 2 (e_0 = 4) and 1 -> 2 (e_1 = 5), u = 1.
HAND_X = [[1.0], [2.0], [3.0]]
HAND_EDGES = [[0, 1], [2, 2]]
HAND_E = [[4.0], [5.0]]
HAND_U = [[1.0]]

# Edge update: e'_0 = 1 + 3 + 4 = 8, e'_1 = 2 + 3 + 5 = 10.
# Nodes 0 and 1 have no incoming edge (aggregate 0): x'_0 = 1, x'_1 = 2.
# Node 2 aggregates {8, 10}; the node-2 output is seeded with its own value.
HAND_NODE = {
    # sum: a_2 = 18, x'_2 = 3 + 18 = 21, R = 21.
    #   linear: R_x2 = 3 * 21/21 = 3, R_a2 = 18
    #   scatter sum: R_e'0 = 8 * 18/18 = 8, R_e'1 = 10
    #   edge linear e'_0 = 1 + 3 + 4 with R 8:   R_x0 += 1, R_x2 += 3, R_e0 = 4
    #   edge linear e'_1 = 2 + 3 + 5 with R 10:  R_x1 += 2, R_x2 += 3, R_e1 = 5
    #   x: [1, 2, 3 + 3 + 3 = 9], e: [4, 5]; total 21
    "sum": (21.0, [1.0, 2.0, 9.0], [4.0, 5.0]),
    # mean: a_2 = 9, x'_2 = 12, R = 12.
    #   linear: R_x2 = 3, R_a2 = 9
    #   scatter mean splits as the sum 18: R_e'0 = 8 * 9/18 = 4, R_e'1 = 10 * 9/18 = 5
    #   e'_0 = 8 with R 4: R_x0 = 1/2, R_x2 += 3/2, R_e0 = 2
    #   e'_1 = 10 with R 5: R_x1 = 1, R_x2 += 3/2, R_e1 = 5/2
    #   x: [0.5, 1, 3 + 1.5 + 1.5 = 6], e: [2, 2.5]; total 12
    "mean": (12.0, [0.5, 1.0, 6.0], [2.0, 2.5]),
    # max: a_2 = max(8, 10) = 10, x'_2 = 13, R = 13.
    #   linear: R_x2 = 3, R_a2 = 10; the max hands all 10 to e'_1, none to e'_0
    #   e'_1 = 10 with R 10: R_x1 = 2, R_x2 += 3, R_e1 = 5
    #   x: [0, 2, 6], e: [0, 5]; total 13
    "max": (13.0, [0.0, 2.0, 6.0], [0.0, 5.0]),
}


def hand_inputs():
    x = torch.tensor(HAND_X, dtype=DTYPE)
    edge_attr = torch.tensor(HAND_E, dtype=DTYPE)
    u = torch.tensor(HAND_U, dtype=DTYPE)
    return x, torch.tensor(HAND_EDGES), edge_attr, u, torch.zeros(3, dtype=torch.long)


@pytest.mark.parametrize("aggr", AGGRS)
def test_hand_worked_node_relevance(aggr):
    value, rx, re = HAND_NODE[aggr]
    model = MetaLayer(SumEdge(), SumNode(aggr)).to(DTYPE)
    x, edge_index, edge_attr, u, batch = hand_inputs()

    def seed_node_2(outs):
        sx = torch.zeros_like(outs[0])
        sx[2] = outs[0][2]
        return [sx, None, None]

    outputs, grads, audit, seeds = relevance(model, x, edge_index, edge_attr, u, batch, seed_node_2)
    assert outputs[0].flatten().tolist() == [1.0, 2.0, value]
    assert outputs[1].flatten().tolist() == [8.0, 10.0]
    assert grads[0].flatten().tolist() == pytest.approx(rx, abs=1e-12)
    assert grads[1].flatten().tolist() == pytest.approx(re, abs=1e-12)
    assert grads[2].flatten().tolist() == [0.0]
    assert audit.lost == 0.0
    assert_conserves(grads, audit, seeds)


def test_hand_worked_global_relevance():
    # Same graph with the sum node update and a global update:
    #   x' = [1, 2, 21], e' = [8, 10], u' = u + sum x' + sum e' = 1 + 24 + 18 = 43.
    # Seed u' with R = 43.
    #   global linear: R_u = 1, R_(sum x') = 24, R_(sum e') = 18
    #   node sum 24 -> R_x'0 = 1, R_x'1 = 2, R_x'2 = 21; edge sum 18 -> R_e'0 = 8, R_e'1 = 10
    #   x'_0 = x_0 + 0 with R 1 -> R_x0 += 1 (its empty aggregate is 0, gets 0)
    #   x'_1 = x_1 + 0 with R 2 -> R_x1 += 2
    #   x'_2 = 21 with R 21 -> as in the node case: R_x2 += 3, R_e'0 += 8, R_e'1 += 10
    #   e'_0 = 1 + 3 + 4 with R 8 + 8 = 16  -> R_x0 += 2, R_x2 += 6, R_e0 = 8
    #   e'_1 = 2 + 3 + 5 with R 10 + 10 = 20 -> R_x1 += 4, R_x2 += 6, R_e1 = 10
    #   x: [3, 6, 15], e: [8, 10], u: [1]; total 43.
    # (The network is linear with positive values, so LRP-0 is gradient x input:
    #  d u'/d x_2 = 5 (x'_2, e'_0 twice, e'_1 twice) and 5 * 3 = 15.)
    model = MetaLayer(SumEdge(), SumNode("sum"), SumGlobal()).to(DTYPE)
    x, edge_index, edge_attr, u, batch = hand_inputs()
    outputs, grads, audit, seeds = relevance(
        model, x, edge_index, edge_attr, u, batch, lambda outs: [None, None, outs[2].clone()])
    assert outputs[2].item() == 43.0
    assert grads[0].flatten().tolist() == pytest.approx([3.0, 6.0, 15.0], abs=1e-12)
    assert grads[1].flatten().tolist() == pytest.approx([8.0, 10.0], abs=1e-12)
    assert grads[2].flatten().tolist() == pytest.approx([1.0], abs=1e-12)
    assert audit.lost == 0.0


# ---------------------------------------------------------------------------
# 4. node-only seed: nothing outside the receptive field
# ---------------------------------------------------------------------------
class NodeStack(nn.Module):
    """``layers`` MetaLayers without a global update (a global update would
    make every node depend on every other)."""

    def __init__(self, f_x, f_e, layers, aggr, edge_update):
        super().__init__()
        h = 4
        blocks = []
        for i in range(layers):
            fx_in = f_x if i == 0 else h
            fe_in = f_e if (i == 0 or not edge_update) else h
            edge = EdgeModel(fx_in, fe_in, 0, h, use_global=False, final_relu=True) if edge_update else None
            fe_node = h if edge_update else f_e
            node = NodeModel(fx_in, fe_node, 0, h, aggr=aggr, use_global=False, final_relu=i < layers - 1)
            blocks.append(MetaLayer(edge, node))
        self.blocks = nn.ModuleList(blocks)

    def forward(self, x, edge_index, edge_attr, u, batch):
        for block in self.blocks:
            x, edge_attr, _ = block(x, edge_index, edge_attr, u, batch)
        return x, edge_attr, u


def receptive_field(edge_index, target, layers, edge_update):
    """Input nodes and edges the node output ``target`` can depend on.

    Going back through one block: a node output needs its own input and the
    (new) edges into it; a new edge needs its source, its destination and its
    old attribute."""
    src, dst = edge_index.tolist()
    nodes, edges = {target}, set()
    for _ in range(layers):
        into = {k for k, d in enumerate(dst) if d in nodes}
        edges |= into  # their (old) attributes, in every block
        if edge_update:
            nodes = nodes | {src[k] for k in edges} | {dst[k] for k in edges}
        else:
            nodes = nodes | {src[k] for k in into}
    return nodes, edges


@pytest.mark.parametrize("edge_update", [True, False], ids=["edge+node", "node-only"])
@pytest.mark.parametrize("aggr", AGGRS)
def test_node_seed_stays_in_receptive_field(aggr, edge_update):
    # a directed chain 0 -> 1 -> ... -> 9 with two extra edges
    n = 10
    chain = [[i, i + 1] for i in range(n - 1)]
    edge_index = torch.tensor(chain + [[8, 6], [2, 9]]).t()
    g = torch.Generator().manual_seed(20)
    x = torch.randn(n, 3, generator=g, dtype=DTYPE)
    edge_attr = torch.randn(edge_index.size(1), 2, generator=g, dtype=DTYPE)
    u = torch.zeros(1, 0, dtype=DTYPE)
    batch = torch.zeros(n, dtype=torch.long)
    torch.manual_seed(21)
    layers, target = 2, 6
    model = NodeStack(3, 2, layers, aggr, edge_update).to(DTYPE)

    def seed_target(outs):
        sx = torch.zeros_like(outs[0])
        sx[target] = torch.randn(outs[0].size(1), generator=g, dtype=DTYPE) * (outs[0][target] != 0)
        return [sx, None, None]

    _, grads, audit, seeds = relevance(model, x, edge_index, edge_attr, u, batch, seed_target)
    assert bool((seeds[0] != 0).any())
    assert_conserves(grads, audit, seeds)

    nodes, edges = receptive_field(edge_index, target, layers, edge_update)
    outside_nodes = sorted(set(range(n)) - nodes)
    outside_edges = sorted(set(range(edge_index.size(1))) - edges)
    assert outside_nodes and outside_edges  # the check below is not vacuous
    assert bool((grads[0][outside_nodes] == 0).all()), grads[0]
    assert bool((grads[1][outside_edges] == 0).all()), grads[1]
    assert bool((grads[0][sorted(nodes)] != 0).any())
    assert bool((grads[1][sorted(edges)] != 0).any())


# ---------------------------------------------------------------------------
# relevance seeded on an output that is exactly 0 is lost, and counted
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("aggr", AGGRS)
def test_relevance_on_a_zero_output_is_counted_as_lost(aggr):
    # node 3 has no incoming edge and zero features, so without biases and
    # without a global input its node output is exactly 0; seeding it (an
    # unmasked seed of ones) hands that relevance to nobody.
    x, edge_index, edge_attr, _, _ = random_graphs(sizes=(3,), seed=30)
    x = torch.cat([x, torch.zeros(1, x.size(1), dtype=DTYPE)])
    edge_index = torch.cat([edge_index, torch.tensor([[3], [0]])], dim=1)  # 3 -> 0 only
    edge_attr = torch.cat([edge_attr, torch.ones(1, edge_attr.size(1), dtype=DTYPE)])
    u, batch = torch.zeros(1, 0, dtype=DTYPE), torch.zeros(4, dtype=torch.long)
    torch.manual_seed(31)
    model = NodeStack(3, 2, 1, aggr, edge_update=True).to(DTYPE)

    outputs, grads, audit, seeds = relevance(
        model, x, edge_index, edge_attr, u, batch, lambda outs: [torch.ones_like(outs[0]), None, None])
    assert bool((outputs[0][3] == 0).all()) and bool((outputs[0][:3] != 0).all())
    assert audit.lost == pytest.approx(outputs[0].size(1), rel=1e-12)  # the 4 ones of node 3
    assert_conserves(grads, audit, seeds)
    assert bool((grads[0][3] == 0).all())
