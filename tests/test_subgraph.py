"""The computation subgraph of node-level targets
(``torch_geometric_lrp.explainers.subgraph``): a worked example, the
definition checked on random graphs, the check input, how model inputs are cut.

The end-to-end checks (the pass on the subgraph equals the pass on the full
graph, or falls back and says so) are in ``test_explain_subgraph.py``.
"""
from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_geometric.nn import APPNP, ChebConv, GCNConv, SGConv
from torch_geometric.utils import k_hop_subgraph

from torch_geometric_lrp.explainers import subgraph


def test_worked_example_on_a_path():
    """0 - 1 - 2 - 3 - 4 - 5 (both directions) plus 6 -> 0 and 1 -> 7 (one
    direction each). Target 0, one hop: the model reads 0, 1 and 6. Their
    edges: 0-1, 1-2 both ways (1's in- and out-degree), 6 -> 0, and 1 -> 7
    (1's out-degree). Ring: 2 and 7, there for the degrees only."""
    path = torch.tensor([[0, 1, 1, 2, 2, 3, 3, 4, 4, 5], [1, 0, 2, 1, 3, 2, 4, 3, 5, 4]])
    edge_index = torch.cat([path, torch.tensor([[6, 1], [0, 7]])], dim=1)
    c = subgraph.cut(torch.tensor([0]), 1, edge_index, 8)
    assert c.nodes.tolist() == [0, 1, 2, 6, 7]
    assert c.ring.tolist() == [False, False, True, False, True]
    assert c.edge_id.tolist() == [0, 1, 2, 3, 10, 11]
    assert c.edge_index.tolist() == [[0, 1, 1, 2, 3, 1], [1, 0, 2, 1, 0, 4]]
    assert c.index.tolist() == [0]
    # messages the other way: 6 only hears from the nodes it sends to
    back = subgraph.cut(torch.tensor([6]), 1, edge_index, 8, flow="target_to_source")
    assert back.nodes.tolist() == [0, 1, 6]
    assert back.ring.tolist() == [False, True, False]


@pytest.mark.parametrize("flow", ["source_to_target", "target_to_source"])
@pytest.mark.parametrize("hops", [0, 1, 2, 3])
@pytest.mark.parametrize("seed", range(4))
def test_the_cut_is_every_edge_touching_the_l_hop_nodes(seed, hops, flow):
    g = torch.Generator().manual_seed(seed)
    n = 40
    edge_index = torch.randint(0, n, (2, 70), generator=g)  # directed, with loops and repeats
    targets = torch.randint(0, n, (3,), generator=g)
    c = subgraph.cut(targets, hops, edge_index, n, flow)
    inner = set(k_hop_subgraph(targets, hops, edge_index, num_nodes=n, flow=flow)[0].tolist())
    touching = [k for k in range(edge_index.shape[1])
                if int(edge_index[0, k]) in inner or int(edge_index[1, k]) in inner]
    assert c.edge_id.tolist() == touching
    ends = set(edge_index[:, touching].reshape(-1).tolist())
    assert c.nodes.tolist() == sorted(inner | ends)
    assert torch.equal(c.nodes[c.edge_index], edge_index[:, c.edge_id])
    assert torch.equal(c.nodes[c.index], targets)
    assert set(c.nodes[~c.ring].tolist()) == inner


def test_with_context_puts_other_nodes_in_front():
    edge_index = torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 5]])
    c = subgraph.cut(torch.tensor([3]), 1, edge_index, 8)  # reads 2, 3; ring 1, 4
    assert c.nodes.tolist() == [1, 2, 3, 4]
    context = subgraph.with_context(c, 8)  # ceil(4 / 8) = 1 extra node
    assert context.nodes.tolist() == [0, 1, 2, 3, 4]  # a node outside the cut first
    assert torch.equal(context.nodes[context.edge_index], c.nodes[c.edge_index])  # the same edges, no others
    assert context.nodes[context.index].tolist() == [3]
    path = torch.stack([torch.arange(19), torch.arange(1, 20)])
    big = subgraph.cut(torch.tensor([9]), 7, path, 20)  # reads 2..9; ring 1, 10: 10 nodes
    assert big.num_nodes == 10
    small = subgraph.with_context(big, 20)  # ceil(10 / 8) = 2 nodes outside the cut
    assert small.nodes.tolist()[:2] == [0, 11]
    few = subgraph.with_context(big, 12)  # only node 0 and 11 are outside: enough here
    assert few.nodes.tolist()[:2] == [0, 11]
    tiny = subgraph.with_context(big, 11)  # one node outside (0), then the cut's own first node again
    assert tiny.nodes.tolist()[:2] == [0, 1]


def test_disjoint_union():
    edge_index = torch.tensor([[0, 1, 2], [1, 2, 3]])
    a = subgraph.cut(torch.tensor([1]), 1, edge_index, 4)
    b = subgraph.cut(torch.tensor([3]), 1, edge_index, 4)
    union, node_starts, edge_starts = subgraph.disjoint_union([a, b])
    assert node_starts == [0, a.num_nodes] and edge_starts == [0, a.edge_id.numel()]
    assert torch.equal(union.nodes[union.edge_index], edge_index[:, union.edge_id])
    assert union.nodes[union.index].tolist() == [1, 3]


def test_slice_inputs():
    edge_index = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]])
    c = subgraph.cut(torch.tensor([1]), 0, edge_index, 4)  # node 1 and its edges 0 -> 1, 1 -> 2
    assert c.nodes.tolist() == [0, 1, 2] and c.edge_id.tolist() == [0, 1]
    kwargs = dict(edge_weight=torch.arange(4.0), edge_attr=torch.arange(8.0).view(4, 2), batch=torch.arange(4),
                  flag=True, scale=torch.tensor(2.0), dense=torch.zeros(4, 4), weights=torch.ones(5))
    out, unknown = subgraph.slice_inputs(kwargs, c, num_nodes=4, num_edges=4)
    assert out["edge_weight"].tolist() == [0.0, 1.0]
    assert out["edge_attr"].tolist() == [[0.0, 1.0], [2.0, 3.0]]
    assert out["batch"].tolist() == [0, 1, 2]
    assert out["flag"] is True and out["scale"] is kwargs["scale"]
    assert out["dense"] is kwargs["dense"] and out["weights"] is kwargs["weights"]
    assert unknown == ["dense", "weights"]


def test_reaches_ring():
    edge_index = torch.tensor([[0, 1, 2], [1, 2, 3]])
    c = subgraph.cut(torch.tensor([3]), 1, edge_index, 4)  # 1 -> 2 -> 3; ring: node 1
    assert c.nodes.tolist() == [1, 2, 3] and c.ring.tolist() == [True, False, False]
    node = torch.zeros(3, 2)
    edge = torch.zeros(2)
    assert not subgraph.reaches_ring(c, node, edge)
    assert subgraph.reaches_ring(c, node, torch.tensor([1e-30, 0.0]))  # edge 1 -> 2 touches the ring
    node[0, 1] = -2.0
    assert subgraph.reaches_ring(c, node, edge)
    assert subgraph.reaches_ring(c, torch.zeros(3, 2), edge, self_loops=torch.tensor([1.0, 0.0, 0.0]))


def test_count_hops():
    model = torch.nn.ModuleList([GCNConv(4, 4), SGConv(4, 4, K=3), APPNP(K=5, alpha=0.1), ChebConv(4, 4, K=3),
                                 torch.nn.Linear(4, 4)])
    assert subgraph.count_hops(model) == 1 + 3 + 5 + 2


# ---------------------------------------------------------------------------
# Cutting many targets at once (cut_each) equals cutting them one by one
# ---------------------------------------------------------------------------
FIELDS = ["nodes", "edge_id", "edge_index", "index", "ring"]


def definition(index, hops, edge_index, n, flow):
    """The cut as the module docstring defines it, from PyG's k_hop_subgraph
    and one mask over the edge list."""
    reads = torch.zeros(n, dtype=torch.bool)
    reads[k_hop_subgraph(index, hops, edge_index, num_nodes=n, flow=flow)[0]] = True
    edge_id = (reads[edge_index[0]] | reads[edge_index[1]]).nonzero().view(-1)
    keep = reads.clone()
    keep[edge_index[:, edge_id].reshape(-1)] = True
    nodes = keep.nonzero().view(-1)
    relabel = torch.full((n,), -1)
    relabel[nodes] = torch.arange(nodes.numel())
    return subgraph.Cut(nodes=nodes, edge_id=edge_id, edge_index=relabel[edge_index[:, edge_id]],
                        index=relabel[index], ring=~reads[nodes])


def assert_same_cut(a, b):
    for name in FIELDS:
        assert torch.equal(getattr(a, name), getattr(b, name)), name


def test_cut_each_worked_example():
    """The path of the first test, targets 0, 6 and 0 again, one hop: the
    copies side by side, 0's cut twice."""
    path = torch.tensor([[0, 1, 1, 2, 2, 3, 3, 4, 4, 5], [1, 0, 2, 1, 3, 2, 4, 3, 5, 4]])
    edge_index = torch.cat([path, torch.tensor([[6, 1], [0, 7]])], dim=1)
    union, node_starts, edge_starts = subgraph.cut_each(torch.tensor([0, 6, 0]), 1, edge_index, 8)
    # 0 reads 1 and 6 (nodes 0, 1, 2, 6, 7); 6 reads nothing (6 and its edge 6 -> 0)
    assert union.nodes.tolist() == [0, 1, 2, 6, 7] + [0, 6] + [0, 1, 2, 6, 7]
    assert node_starts == [0, 5, 7] and edge_starts == [0, 6, 7]
    assert union.edge_id.tolist() == [0, 1, 2, 3, 10, 11] + [10] + [0, 1, 2, 3, 10, 11]
    assert union.index.tolist() == [0, 6, 7]
    assert union.ring.tolist() == [False, False, True, False, True] + [True, False] \
        + [False, False, True, False, True]
    assert torch.equal(union.nodes[union.edge_index], edge_index[:, union.edge_id])


@settings(max_examples=100, deadline=None)
@given(
    num_nodes=st.integers(1, 25),
    pairs=st.lists(st.tuples(st.integers(0, 24), st.integers(0, 24)), max_size=60),
    undirected=st.booleans(),
    targets=st.lists(st.integers(0, 24), min_size=1, max_size=8),
    hops=st.integers(0, 3),
    flow=st.sampled_from(["source_to_target", "target_to_source"]),
)
def test_cut_each_equals_one_cut_per_target(num_nodes, pairs, undirected, targets, hops, flow):
    """Random graphs (directed or both ways, self-loops, repeated edges,
    isolated nodes), repeated targets, both flows: ``cut_each`` is the
    disjoint union of the per-target cuts, and ``cut`` of all targets
    together (from the sorted edges or by scans) is the definition."""
    edge_index = torch.tensor(pairs, dtype=torch.long).view(-1, 2).t() % num_nodes
    if undirected:
        edge_index = torch.cat([edge_index, edge_index.flip(0)], dim=1)
    index = torch.tensor(targets) % num_nodes
    incidence = subgraph.Incidence(edge_index, num_nodes)
    union, node_starts, edge_starts = subgraph.cut_each(index, hops, edge_index, num_nodes, flow, incidence)
    expected = [definition(t.view(1), hops, edge_index, num_nodes, flow) for t in index]
    reference, ref_node_starts, ref_edge_starts = subgraph.disjoint_union(expected)
    assert (node_starts, edge_starts) == (ref_node_starts, ref_edge_starts)
    assert_same_cut(union, reference)
    for part, one in zip(subgraph.split(union, node_starts, edge_starts), expected, strict=True):
        assert_same_cut(part, one)
    expected = definition(index, hops, edge_index, num_nodes, flow)
    assert_same_cut(subgraph.cut(index, hops, edge_index, num_nodes, flow, incidence), expected)
    assert_same_cut(subgraph.cut(index, hops, edge_index, num_nodes, flow), expected)  # by scans


def test_cut_each_isolated_nodes_self_loops_and_no_edges():
    edge_index = torch.tensor([[1, 1, 2], [1, 2, 2]])  # 0 and 3 isolated; loops at 1 and 2
    union, node_starts, edge_starts = subgraph.cut_each(torch.tensor([0, 2, 3]), 2, edge_index, 4)
    assert union.nodes.tolist() == [0, 1, 2, 3] and node_starts == [0, 1, 3]
    assert union.edge_id.tolist() == [0, 1, 2] and edge_starts == [0, 0, 3]  # each loop once
    assert union.ring.tolist() == [False, False, False, False]
    empty = torch.empty(2, 0, dtype=torch.long)
    alone, node_starts, edge_starts = subgraph.cut_each(torch.tensor([1, 1]), 3, empty, 2)
    assert alone.nodes.tolist() == [1, 1] and alone.index.tolist() == [0, 1] and alone.edge_id.numel() == 0
    nothing, node_starts, edge_starts = subgraph.cut_each(torch.empty(0, dtype=torch.long), 2, edge_index, 4)
    assert nothing.num_nodes == 0 and node_starts == [] and edge_starts == []


def test_incidence_lists_the_edges_at_nodes():
    edge_index = torch.tensor([[0, 2, 0, 1, 2], [1, 0, 2, 2, 2]])
    incidence = subgraph.Incidence(edge_index, 4)
    owner, edge = incidence.edges(torch.tensor([2, 3, 0]), 0)  # edges out of 2, 3, 0
    assert owner.tolist() == [0, 0, 2, 2] and edge.tolist() == [1, 4, 0, 2]
    owner, edge = incidence.edges(torch.tensor([2]), 1)  # into 2
    assert edge.tolist() == [2, 3, 4]


def test_cut_refuses_what_it_cannot_cut():
    edge_index = torch.tensor([[0], [1]])
    with pytest.raises(ValueError, match="flow: must be 'source_to_target' or 'target_to_source'"):
        subgraph.cut(torch.tensor([0]), 1, edge_index, 2, flow="both")
    with pytest.raises(ValueError, match=r"index: targets must be in 0 \.\. 1, got \[2\]"):
        subgraph.cut_each(torch.tensor([2]), 1, edge_index, 2)  # would be node 0 of the next copy
    with pytest.raises(ValueError, match=r"edge_index: node ids must be in 0 \.\. 1"):
        subgraph.Incidence(torch.tensor([[0], [2]]), 2)
    with pytest.raises(ValueError, match=r"edge_index: node ids must be in 0 \.\. 1"):
        subgraph.cut(torch.tensor([0]), 1, torch.tensor([[-1], [0]]), 2)
