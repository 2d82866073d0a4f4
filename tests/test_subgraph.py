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
    direction each). Target 0, one hop: the model reads 0, 1 and 6, first in
    the cut. Their edges: 0-1, 1-2 both ways (1's in- and out-degree),
    6 -> 0, and 1 -> 7 (1's out-degree). Ring: 2 and 7, there for the degrees
    only, after them (1's outside neighbours: slots 0 and 1)."""
    path = torch.tensor([[0, 1, 1, 2, 2, 3, 3, 4, 4, 5], [1, 0, 2, 1, 3, 2, 4, 3, 5, 4]])
    edge_index = torch.cat([path, torch.tensor([[6, 1], [0, 7]])], dim=1)
    c = subgraph.cut(torch.tensor([0]), 1, edge_index, 8)
    assert c.nodes.tolist() == [0, 1, 6, 2, 7]
    assert c.ring.tolist() == [False, False, False, True, True]
    assert c.edge_id.tolist() == [0, 1, 2, 3, 10, 11]
    assert c.edge_index.tolist() == [[0, 1, 1, 3, 2, 1], [1, 0, 3, 1, 0, 4]]
    assert c.index.tolist() == [0]
    # messages the other way: 6 only hears from the nodes it sends to; ring: 1
    back = subgraph.cut(torch.tensor([6]), 1, edge_index, 8, flow="target_to_source")
    assert back.nodes.tolist() == [0, 6, 1]
    assert back.ring.tolist() == [False, False, True]


def test_worked_example_of_ring_slots():
    """Target 0 hears from 1 and 2 (one hop); 1 hears from 3 and 4, 2 from 4
    and 5 (outside). The outside neighbours of each inner node are numbered
    in ascending order, and the k-th ones share ring node k: slot 0 stands
    for 3 (of 1) and 4 (of 2), slot 1 for 4 (of 1) and 5 (of 2). Five nodes
    instead of six, every edge kept, no two of them made parallel."""
    edge_index = torch.tensor([[3, 1, 4, 2, 4, 5], [1, 0, 1, 0, 2, 2]])
    c = subgraph.cut(torch.tensor([0]), 1, edge_index, 6)
    assert c.nodes.tolist() == [0, 1, 2, 3, 4]  # a slot sits at the smallest node it stands for
    assert c.ring.tolist() == [False, False, False, True, True]
    assert c.edge_id.tolist() == [0, 1, 2, 3, 4, 5]
    assert c.edge_index.tolist() == [[3, 1, 4, 2, 3, 4], [1, 0, 1, 0, 2, 2]]
    full, inner, edges = subgraph.spelled_out(c, edge_index, 6)
    assert full.nodes.tolist() == [0, 1, 2, 3, 4, 5] and inner.tolist() == [0, 1, 2]
    assert edges.tolist() == list(range(6))  # a full cut: its edges are all of the subgraph's
    assert torch.equal(full.nodes[full.edge_index], edge_index)
    assert full.ring.tolist() == [False, False, False, True, True, True] and full.index.tolist() == [0]


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
    assert c.nodes[~c.ring].tolist() == sorted(inner) and not c.ring[:len(inner)].any()  # inner nodes first
    assert torch.equal(c.nodes[c.index], targets)
    # every inner node keeps its edges, and so its in- and out-degree
    ends, kept = c.nodes[c.edge_index], edge_index[:, c.edge_id]
    assert torch.equal(torch.where(c.ring[c.edge_index], -1, ends), torch.where(c.ring[c.edge_index], -1, kept))
    assert not (c.ring[c.edge_index[0]] & c.ring[c.edge_index[1]]).any()  # no edge inside the ring
    pairs = {tuple(p) for p in kept.t().tolist()}
    assert len({tuple(p) for p in c.edge_index.t().tolist()}) == len(pairs)  # no two edges made parallel
    slots = max((len({o for o in (a if b == k else b for a, b in pairs if k in (a, b)) if o not in inner})
                 for k in inner), default=0)
    assert int(c.ring.sum()) == slots  # as many ring nodes as the most outside neighbours of one node
    # spelled out, the ring is every end of those edges outside S_L
    full, _, _ = subgraph.spelled_out(c, edge_index, n)
    assert full.nodes.tolist() == sorted(inner | set(kept.reshape(-1).tolist()))
    assert torch.equal(full.nodes[full.edge_index], kept) and torch.equal(full.nodes[full.index], targets)
    assert set(full.nodes[~full.ring].tolist()) == inner


def test_with_context_puts_other_nodes_in_front():
    edge_index = torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 5]])
    c = subgraph.cut(torch.tensor([3]), 1, edge_index, 8)  # reads 2, 3; one ring slot for 1 (of 2) and 4 (of 3)
    assert c.nodes.tolist() == [2, 3, 1]
    context = subgraph.with_context(c, 8)  # at least 3 extra nodes (ceil(3 / 8) = 1)
    assert context.nodes.tolist() == [0, 4, 5, 2, 3, 1]  # nodes outside the cut first
    assert torch.equal(context.nodes[context.edge_index], c.nodes[c.edge_index])  # the same edges, no others
    assert context.nodes[context.index].tolist() == [3]
    path = torch.stack([torch.arange(19), torch.arange(1, 20)])
    big = subgraph.cut(torch.tensor([9]), 7, path, 20)  # reads 2..9; one ring slot for 1 and 10: 9 nodes
    assert big.num_nodes == 9
    small = subgraph.with_context(big, 20)  # max(ceil(9 / 8), 3) = 3 nodes outside the cut
    assert small.nodes.tolist()[:3] == [0, 10, 11]
    few = subgraph.with_context(big, 11)  # only node 0 and 10 are outside, then a node of the cut again
    assert few.nodes.tolist()[:3] == [0, 10, 1]
    tiny = subgraph.with_context(big, 10)  # one node outside (0), then nodes of the cut again
    assert tiny.nodes.tolist()[:3] == [0, 1, 2]
    one = subgraph.with_context(subgraph.cut(torch.tensor([0]), 1, torch.empty(2, 0, dtype=torch.long), 1), 1)
    assert one.nodes.tolist() == [0, 0, 0, 0]  # a one-node graph: its node copied


def test_context_features_lie_beyond_the_range_of_x():
    """The first two added nodes of the context check get features above
    and below every node's, so that a maximum or minimum over the nodes
    moves too; the other rows are the nodes' own features, integer features
    are copied as they are."""
    edge_index = torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 5]])
    context = subgraph.with_context(subgraph.cut(torch.tensor([3]), 1, edge_index, 8), 8)
    x = torch.randn(8, 4)
    got = subgraph.context_features(x, context)
    assert bool((got[0] > x.amax(dim=0)).all()) and bool((got[1] < x.amin(dim=0)).all())
    torch.testing.assert_close(got[2:], x[context.nodes[2:]])
    categories = torch.randint(0, 5, (8,))
    assert torch.equal(subgraph.context_features(categories, context), categories[context.nodes])


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
    assert c.nodes.tolist() == [1, 0, 2] and c.edge_id.tolist() == [0, 1]  # ring slots 0 and 2 after it
    kwargs = dict(edge_weight=torch.arange(4.0), edge_attr=torch.arange(8.0).view(4, 2), batch=torch.arange(4),
                  flag=True, scale=torch.tensor(2.0), dense=torch.zeros(4, 4), weights=torch.ones(5))
    out, unknown = subgraph.slice_inputs(kwargs, c, num_nodes=4, num_edges=4)
    assert out["edge_weight"].tolist() == [0.0, 1.0]
    assert out["edge_attr"].tolist() == [[0.0, 1.0], [2.0, 3.0]]
    assert out["batch"].tolist() == [1, 0, 2]
    assert out["flag"] is True and out["scale"] is kwargs["scale"]
    assert out["dense"] is kwargs["dense"] and out["weights"] is kwargs["weights"]
    assert unknown == ["dense", "weights"]


def test_reaches_ring():
    edge_index = torch.tensor([[0, 1, 2], [1, 2, 3]])
    c = subgraph.cut(torch.tensor([3]), 1, edge_index, 4)  # 1 -> 2 -> 3; ring: node 1, last
    assert c.nodes.tolist() == [2, 3, 1] and c.ring.tolist() == [False, False, True]
    node = torch.zeros(3, 2)
    edge = torch.zeros(2)
    assert not subgraph.reaches_ring(c, node, edge)
    assert subgraph.reaches_ring(c, node, torch.tensor([1e-30, 0.0]))  # edge 1 -> 2 touches the ring
    node[2, 1] = -2.0
    assert subgraph.reaches_ring(c, node, edge)
    assert subgraph.reaches_ring(c, torch.zeros(3, 2), edge, self_loops=torch.tensor([0.0, 0.0, 1.0]))


def test_count_hops():
    model = torch.nn.ModuleList([GCNConv(4, 4), SGConv(4, 4, K=3), APPNP(K=5, alpha=0.1), ChebConv(4, 4, K=3),
                                 torch.nn.Linear(4, 4)])
    assert subgraph.count_hops(model) == 1 + 3 + 5 + 2


# ---------------------------------------------------------------------------
# Cutting many targets at once (cut_each) equals cutting them one by one
# ---------------------------------------------------------------------------
FIELDS = ["nodes", "edge_id", "edge_index", "index", "ring"]


def definition(index, hops, edge_index, n, flow, lean=False):
    """The cut as the module docstring defines it, from PyG's k_hop_subgraph
    and one mask over the edge list, its ring slots numbered by explicit
    loops. ``lean``: only the edges whose reading end is in S_L."""
    reads = torch.zeros(n, dtype=torch.bool)
    reads[k_hop_subgraph(index, hops, edge_index, num_nodes=n, flow=flow)[0]] = True
    reader = 1 if flow == "source_to_target" else 0
    keep = reads[edge_index[reader]] if lean else reads[edge_index[0]] | reads[edge_index[1]]
    edge_id = keep.nonzero().view(-1)
    ends = edge_index[:, edge_id].t().tolist()
    inner = reads.nonzero().view(-1).tolist()
    slot = {}  # (inner node, outside neighbour) -> slot
    for k in inner:
        outside = sorted({b if a == k else a for a, b in ends if k in (a, b)} - set(inner))
        slot.update({(k, o): s for s, o in enumerate(outside)})
    num_slots = max(slot.values(), default=-1) + 1
    nodes = inner + [min(o for (_, o), s in slot.items() if s == t) for t in range(num_slots)]
    where = {v: k for k, v in enumerate(inner)}
    edges = [[where[a] if reads[a] else len(inner) + slot[(b, a)],
              where[b] if reads[b] else len(inner) + slot[(a, b)]] for a, b in ends]
    return subgraph.Cut(nodes=torch.tensor(nodes, dtype=torch.long), edge_id=edge_id,
                        edge_index=torch.tensor(edges, dtype=torch.long).view(-1, 2).t(),
                        index=torch.tensor([nodes.index(int(t)) for t in index], dtype=torch.long),
                        ring=~reads[torch.tensor(nodes, dtype=torch.long)])


def spelled_out_definition(t, hops, edge_index, n, flow):
    """The subgraph of target ``t`` as listed in its explanation, by a loop:
    S_L, every edge touching it, their ends; the ring is every node outside S_L."""
    inner = set(k_hop_subgraph(t.view(1), hops, edge_index, num_nodes=n, flow=flow)[0].tolist())
    edge_id = [k for k, (a, b) in enumerate(edge_index.t().tolist()) if a in inner or b in inner]
    nodes = sorted(inner | set(edge_index[:, edge_id].reshape(-1).tolist()))
    where = {v: k for k, v in enumerate(nodes)}
    edges = [[where[int(a)], where[int(b)]] for a, b in edge_index[:, edge_id].t()]
    return subgraph.Cut(nodes=torch.tensor(nodes, dtype=torch.long), edge_id=torch.tensor(edge_id, dtype=torch.long),
                        edge_index=torch.tensor(edges, dtype=torch.long).view(-1, 2).t(),
                        index=torch.tensor([where[int(t)]]), ring=torch.tensor([v not in inner for v in nodes]))


def assert_same_cut(a, b):
    for name in FIELDS:
        assert torch.equal(getattr(a, name), getattr(b, name)), name


def test_cut_each_worked_example():
    """The path of the first test, targets 0, 6 and 0 again, one hop: the
    copies side by side, 0's cut twice."""
    path = torch.tensor([[0, 1, 1, 2, 2, 3, 3, 4, 4, 5], [1, 0, 2, 1, 3, 2, 4, 3, 5, 4]])
    edge_index = torch.cat([path, torch.tensor([[6, 1], [0, 7]])], dim=1)
    union, node_starts, edge_starts = subgraph.cut_each(torch.tensor([0, 6, 0]), 1, edge_index, 8)
    # 0 reads 1 and 6 (ring: 2 and 7, 1's outside neighbours); 6 reads nothing (6 and its edge 6 -> 0)
    assert union.nodes.tolist() == [0, 1, 6, 2, 7] + [6, 0] + [0, 1, 6, 2, 7]
    assert node_starts == [0, 5, 7] and edge_starts == [0, 6, 7]
    assert union.edge_id.tolist() == [0, 1, 2, 3, 10, 11] + [10] + [0, 1, 2, 3, 10, 11]
    assert union.index.tolist() == [0, 5, 7]
    assert union.ring.tolist() == [False, False, False, True, True] + [False, True] \
        + [False, False, False, True, True]
    assert torch.equal(union.nodes[union.edge_index], edge_index[:, union.edge_id])


@settings(max_examples=100, deadline=None)
@given(
    num_nodes=st.integers(1, 25),
    pairs=st.lists(st.tuples(st.integers(0, 24), st.integers(0, 24)), max_size=60),
    undirected=st.booleans(),
    targets=st.lists(st.integers(0, 24), min_size=1, max_size=8),
    hops=st.integers(0, 3),
    flow=st.sampled_from(["source_to_target", "target_to_source"]),
    lean=st.booleans(),
)
def test_cut_each_equals_one_cut_per_target(num_nodes, pairs, undirected, targets, hops, flow, lean):
    """Random graphs (directed or both ways, self-loops, repeated edges,
    isolated nodes), repeated targets, both flows, in full and lean: ``cut_each``
    is the disjoint union of the per-target cuts, and ``cut`` of all targets
    together (from the sorted edges or by scans) is the definition."""
    edge_index = torch.tensor(pairs, dtype=torch.long).view(-1, 2).t() % num_nodes
    if undirected:
        edge_index = torch.cat([edge_index, edge_index.flip(0)], dim=1)
    index = torch.tensor(targets) % num_nodes
    incidence = subgraph.Incidence(edge_index, num_nodes)
    union, node_starts, edge_starts = subgraph.cut_each(index, hops, edge_index, num_nodes, flow, incidence, lean)
    expected = [definition(t.view(1), hops, edge_index, num_nodes, flow, lean) for t in index]
    reference, ref_node_starts, ref_edge_starts = subgraph.disjoint_union(expected)
    assert (node_starts, edge_starts) == (ref_node_starts, ref_edge_starts)
    assert_same_cut(union, reference)
    parts = subgraph.split(union, node_starts, edge_starts)
    for part, one in zip(parts, expected, strict=True):
        assert_same_cut(part, one)
    # each subgraph as the explanations list it: the same from full and lean cuts
    spelled = subgraph.spelled_out_each(parts, incidence, flow)
    for t, part, (full, inner, edges) in zip(index, parts, spelled, strict=True):
        assert_same_cut(full, spelled_out_definition(t, hops, edge_index, num_nodes, flow))
        assert torch.equal(full.nodes[inner], part.nodes[~part.ring]) and torch.equal(full.edge_id[edges],
                                                                                         part.edge_id)
    expected = definition(index, hops, edge_index, num_nodes, flow, lean)
    assert_same_cut(subgraph.cut(index, hops, edge_index, num_nodes, flow, incidence, lean), expected)
    assert_same_cut(subgraph.cut(index, hops, edge_index, num_nodes, flow, lean=lean), expected)  # by scans
    if lean:  # the edges of the full cut without the messages into its ring
        full = definition(index, hops, edge_index, num_nodes, flow)
        slim = subgraph.lean(full, flow)
        assert torch.equal(expected.edge_id, full.edge_id if slim is None else slim[0].edge_id)


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


def test_ring_slots_of_node_keys_too_large_to_pair():
    """Past int64 for ``k * n + neighbour`` (graphs of hundreds of millions of
    nodes, many copies), the slots are numbered the same way."""
    g = torch.Generator().manual_seed(0)
    local = torch.randint(0, 50, (2, 300), generator=g)
    group = torch.randint(0, 4, (300,), generator=g)
    outside = torch.zeros(2, 300, dtype=torch.bool)
    outside[0, :150] = True
    outside[1, 150:250] = True
    small = subgraph._ring_slots(group * 50 + local, outside, 50)
    assert int(small.max()) > 0
    assert torch.equal(subgraph._ring_slots(group * 2 ** 40 + local, outside, 2 ** 40), small)


@settings(max_examples=60, deadline=None)
@given(keys=st.lists(st.integers(0, 40), max_size=80), spare=st.integers(0, 60))
def test_unique_keys_and_membership_by_marks_or_by_sorting(keys, spare):
    """Both ways of ``_unique`` and ``_isin`` (marks where the key space is no
    larger than the keys, a sort or binary search elsewhere) give
    ``torch.unique``'s keys and inverse and ``torch.isin``'s answer."""
    keys = torch.tensor(keys, dtype=torch.long)
    bound = (int(keys.max()) + 1 if keys.numel() else 0) + spare
    found, inverse = subgraph._unique(keys, bound, return_inverse=True)
    expected, expected_inverse = torch.unique(keys, return_inverse=True)
    assert torch.equal(found, expected) and torch.equal(inverse, expected_inverse)
    assert torch.equal(subgraph._unique(keys, bound), expected)
    members = expected[::2].contiguous()  # ascending
    assert torch.equal(subgraph._isin(keys, members, bound), torch.isin(keys, members))


def test_spelled_out_refuses_a_cut_of_another_flow():
    """A lean cut spelled out under the other flow would put its edge
    relevance on the wrong edges: refused, naming the flow."""
    edge_index = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]])  # a directed 4-cycle
    lean = subgraph.cut(torch.tensor([1]), 1, edge_index, 4, lean=True)  # reads 0 -> 1 and 1's own in-edges
    full, inner, edges = subgraph.spelled_out(lean, edge_index, 4)
    assert torch.equal(full.edge_id[edges], lean.edge_id)
    with pytest.raises(ValueError, match="flow='target_to_source'"):
        subgraph.spelled_out(lean, edge_index, 4, flow="target_to_source")


@pytest.mark.parametrize("flow", ["source_to_target", "target_to_source"])
def test_with_context_gives_the_added_nodes_edges_that_reach_no_node_the_targets_read(flow):
    """With the graph's edges, the added nodes get edges in front of the
    cut's: one into and one out of each ring slot, and into the first added
    node more than the graph's largest in-degree (under ``flow``). None
    touches a node of ``S_L``, so no degree there changes; the edges copy
    edges of the cut (their features follow)."""
    g = torch.Generator().manual_seed(0)
    edge_index = torch.randint(0, 30, (2, 90), generator=g)
    edge_index = edge_index[:, edge_index[0] != edge_index[1]]
    if flow == "target_to_source":
        edge_index = edge_index.flip(0)
    c = subgraph.cut(torch.tensor([3]), 2, edge_index, 30, flow=flow)
    context = subgraph.with_context(c, 30, edge_index, flow)
    k = context.num_nodes - c.num_nodes
    front = context.edge_index[:, :context.added_edges]
    assert torch.equal(context.edge_index[:, context.added_edges:], c.edge_index + k)
    assert torch.equal(context.edge_id[context.added_edges:], c.edge_id)
    assert bool(torch.isin(context.edge_id[:context.added_edges], c.edge_id).all())
    inner = (~context.ring).nonzero().view(-1)  # S_L: the cut's nodes the model reads
    assert not bool(torch.isin(front, inner).any())
    into = 1 if flow == "source_to_target" else 0
    ring = c.ring.nonzero().view(-1) + k
    for slot in ring.tolist():
        assert int((front[into] == slot).sum()) == 1 and int((front[1 - into] == slot).sum()) == 1
    largest = int(torch.bincount(edge_index[into]).max())
    assert int(torch.bincount(context.edge_index[into]).max()) > largest  # the largest in-degree moves
