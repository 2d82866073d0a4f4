"""Routing of message relevance back to input edges
(``torch_geometric_lrp.explainers.edges.route``), worked by hand for both of its
paths: a layer's messages that start with the input edges in order (what
``add_remaining_self_loops`` produces) and messages in any order."""
from __future__ import annotations


import torch

from torch_geometric_lrp.explainers import edges as edges_module


def as_list(value, size):
    return list(range(size))[value] if isinstance(value, slice) else value.tolist()


def test_route_when_messages_start_with_the_input_edges():
    edges = torch.tensor([[0, 1, 2], [1, 2, 0]])
    # input edges, then self-loops of nodes 0..2, then a pair that is neither
    messages = torch.tensor([[0, 1, 2, 0, 1, 2, 2], [1, 2, 0, 0, 1, 2, 1]])
    r = edges_module.route(edges, messages)
    assert as_list(r.message, 7) == [0, 1, 2] and as_list(r.edge, 3) == [0, 1, 2]
    assert r.loop.tolist() == [3, 4, 5] and r.loop_node.tolist() == [0, 1, 2]
    assert r.other.tolist() == [6]


def test_route_in_any_order_with_repeated_pairs():
    # input: 0->1 twice, 1->1 (an input self-loop), 2->0
    edges = torch.tensor([[0, 0, 1, 2], [1, 1, 1, 0]])
    # messages: 2->0, 0->1 three times (the third has no input twin), loop 1->1 (an input edge), loop 2->2
    messages = torch.tensor([[2, 0, 0, 1, 0, 2], [0, 1, 1, 1, 1, 2]])
    r = edges_module.route(edges, messages)
    pairs = dict(zip(r.message.tolist(), r.edge.tolist()))
    assert pairs == {0: 3, 1: 0, 2: 1, 3: 2}  # repeated pairs matched in order
    assert r.loop.tolist() == [5] and r.loop_node.tolist() == [2]  # only loops that are not input edges
    assert r.other.tolist() == [4]


# ---------------------------------------------------------------------------
# Messages over pairs that are no edges of the graph
# ---------------------------------------------------------------------------

import warnings  # noqa: E402

import pytest  # noqa: E402
from torch_geometric.nn import GCNConv, GraphConv, MessagePassing  # noqa: E402
from torch_geometric.utils import to_undirected  # noqa: E402

import torch_geometric_lrp as lrp  # noqa: E402

DTYPE = torch.float64


class SumInto(MessagePassing):
    """Sums node features into one node per graph, over pairs ``(i, batch[i])``
    (the shape of AttentiveFP's molecule-level attention)."""

    def __init__(self):
        super().__init__(aggr="add")

    def forward(self, x, batch):
        pairs = torch.stack([torch.arange(x.shape[0]), batch])
        out = x.new_zeros(int(batch.max()) + 1, x.shape[1])
        return self.propagate(pairs, x=(x, out))

    def message(self, x_j):
        return x_j


class Readout(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = GraphConv(3, 4, bias=False)
        self.readout = SumInto()
        self.head = torch.nn.Linear(4, 2, bias=False)

    def forward(self, x, edge_index, batch, edge_weight=None):
        return self.head(self.readout(self.conv(x, edge_index, edge_weight).relu(), batch))


def test_a_readout_into_one_node_per_graph_is_on_no_edge():
    """Pairs (i, batch[i]) that coincide with input edges (1 -> 0, 2 -> 0) or a
    self-loop (0 -> 0) are a readout, not the graph's edges: edge_mask holds
    only the graph layer's messages. Reference: LRP-0 on this bias-free ReLU
    model is gradient x input, so edge relevance is the gradient of a
    multiplier on each edge's message (GraphConv's edge_weight)."""
    torch.manual_seed(0)
    model = Readout().to(DTYPE)
    x = torch.rand(4, 3, dtype=DTYPE)
    edge_index = torch.tensor([[1, 2, 3, 0], [0, 0, 2, 3]])
    batch = torch.zeros(4, dtype=torch.long)
    with pytest.warns(RuntimeWarning, match="into other nodes than the graph's"):
        e = lrp.explain(model, x, edge_index, batch=batch, index=0, target=1, rules=lrp.rules.Epsilon(0.0))
    m = torch.ones(edge_index.shape[1], dtype=DTYPE, requires_grad=True)
    score = model(x, edge_index, batch, m)[0, 1]
    reference, = torch.autograd.grad(score, m)
    torch.testing.assert_close(e.edge_mask, reference, rtol=1e-9, atol=1e-12)
    assert e.self_loop_relevance.abs().max() < 1e-12  # the pair 0 -> 0 is no self-loop
    assert abs(float(e.node_mask.sum()) - score.item()) < 1e-9  # the readout's relevance is in the nodes


class Symmetrised(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = GraphConv(3, 2, bias=False)

    def forward(self, x, edge_index):
        return self.conv(x, to_undirected(edge_index))


def test_messages_over_edges_the_model_builds_warn_with_their_relevance():
    """to_undirected inside the forward: the reversed pairs' messages are no
    input edges; edge_mask keeps the input edges' relevance and a warning
    gives what is not in it (the reversed edges' gradient x input)."""
    torch.manual_seed(0)
    model = Symmetrised().to(DTYPE)
    x = torch.rand(3, 3, dtype=DTYPE)
    edge_index = torch.tensor([[0, 1], [1, 2]])
    with pytest.warns(RuntimeWarning, match="neither input edges nor self-loops") as record:
        e = lrp.explain(model, x, edge_index, index=1, target=0, rules=lrp.rules.Epsilon(0.0))
    full = to_undirected(edge_index)
    m = torch.ones(full.shape[1], dtype=DTYPE, requires_grad=True)
    score = model.conv(x, full, m)[1, 0]
    per_pair, = torch.autograd.grad(score, m)
    pairs = {tuple(p): float(r) for p, r in zip(full.t().tolist(), per_pair)}
    assert e.edge_mask.tolist() == pytest.approx([pairs[(0, 1)], pairs[(1, 2)]], rel=1e-9, abs=1e-12)
    missing = pairs[(1, 0)] + pairs[(2, 1)]
    assert abs(missing) > 1e-3
    assert f"{missing:.3g}" in str(record[0].message)


def test_every_message_on_an_input_edge_does_not_warn():
    torch.manual_seed(0)
    model = Symmetrised().to(DTYPE)
    x = torch.rand(3, 3, dtype=DTYPE)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lrp.explain(model, x, to_undirected(torch.tensor([[0, 1], [1, 2]])), index=1, target=torch.tensor([0]))


def test_one_number_is_the_target_of_every_explained_row():
    torch.manual_seed(0)
    model = Symmetrised().to(DTYPE)
    x = torch.rand(3, 3, dtype=DTYPE)
    edge_index = to_undirected(torch.tensor([[0, 1], [1, 2]]))
    for index in (1, [0, 2]):
        one = lrp.explain(model, x, edge_index, index=index, target=1)
        rows = torch.tensor([index]).view(-1)
        each = lrp.explain(model, x, edge_index, index=index, target=torch.ones(rows.numel(), dtype=torch.long))
        assert one.target.tolist() == [1] * rows.numel()
        torch.testing.assert_close(one.node_mask, each.node_mask, rtol=0, atol=0)



# ---------------------------------------------------------------------------
# Layers over the input's edges reordered, extended, or into a prefix of nodes
# ---------------------------------------------------------------------------

from torch_geometric.utils import coalesce  # noqa: E402


class TwoLayers(torch.nn.Module):
    """Two bias-free GraphConv layers over edges that ``edges_of`` builds from
    the input's, each input edge's messages multiplied by ``weight`` (the
    reference's multiplier; ``None`` in the explained model)."""

    def __init__(self, edges_of, width=3):
        super().__init__()
        self.edges_of = edges_of
        self.conv1, self.conv2 = GraphConv(width, 4, bias=False), GraphConv(4, 2, bias=False)

    def forward(self, x, edge_index, weight=None):
        x, edges, w = self.edges_of(x, edge_index, weight)
        h = self.conv1(x, edges, w).relu()
        return self.conv2(h, edges, w)[:edge_index.max() + 1]


def multiplier_gradient(model, x, edge_index, row, column):
    m = torch.ones(edge_index.shape[1], dtype=DTYPE, requires_grad=True)
    return torch.autograd.grad(model(x, edge_index, m)[row, column], m)[0]


def test_edges_a_model_sorts_are_booked_by_their_pairs():
    """An undirected graph listed by target, sorted by source in the forward
    (coalesce): the sorted list equals the input reversed, which once sent
    each message to its reverse edge. Each input edge takes its own pair's
    messages, as for the same graph listed by source."""
    def sorted_(x, edge_index, weight):
        if weight is None:
            return x, coalesce(edge_index), None
        edges, weight = coalesce(edge_index, weight)
        return x, edges, weight

    torch.manual_seed(0)
    model = TwoLayers(sorted_).to(DTYPE)
    x = torch.rand(4, 3, dtype=DTYPE)
    edge_index = torch.tensor([[1, 3, 0, 2, 1, 3, 0, 2], [0, 0, 1, 1, 2, 2, 3, 3]])
    assert torch.equal(coalesce(edge_index), edge_index.flip(0))
    e = lrp.explain(model, x, edge_index, index=0, target=torch.tensor([1]), rules=lrp.rules.Epsilon(0.0))
    torch.testing.assert_close(e.edge_mask, multiplier_gradient(model, x, edge_index, 0, 1), rtol=1e-9, atol=1e-12)


def test_a_virtual_node_keeps_the_input_edges_and_warns_for_its_own():
    """Edges into and out of a virtual node (node N) follow the input edges:
    the input edges keep their messages' relevance, and the warning gives the
    virtual edges' (before, every message of such a layer was left out)."""
    def with_virtual_node(x, edge_index, weight):
        n = x.shape[0]
        ring = torch.arange(n)
        virtual = torch.full((n,), n)
        edges = torch.cat([edge_index, torch.stack([ring, virtual]), torch.stack([virtual, ring])], dim=1)
        x = torch.cat([x, x.new_zeros(1, x.shape[1])])
        return x, edges, None if weight is None else torch.cat([weight, weight.new_ones(2 * n)])

    torch.manual_seed(0)
    model = TwoLayers(with_virtual_node).to(DTYPE)
    x = torch.rand(4, 3, dtype=DTYPE)
    edge_index = torch.tensor([[0, 1, 2], [1, 2, 3]])
    with pytest.warns(RuntimeWarning, match="neither input edges nor self-loops") as record:
        e = lrp.explain(model, x, edge_index, index=3, target=torch.tensor([0]), rules=lrp.rules.Epsilon(0.0))
    torch.testing.assert_close(e.edge_mask, multiplier_gradient(model, x, edge_index, 3, 0), rtol=1e-9, atol=1e-12)
    m = torch.ones(edge_index.shape[1] + 2 * x.shape[0], dtype=DTYPE, requires_grad=True)

    def every_edge_weighted(x, edge_index, weight):
        x, edges, _ = with_virtual_node(x, edge_index, None)
        return x, edges, m

    twin = TwoLayers(every_edge_weighted).to(DTYPE)
    twin.load_state_dict(model.state_dict())
    virtual = torch.autograd.grad(twin(x, edge_index)[3, 0], m)[0][edge_index.shape[1]:]
    assert abs(float(virtual.sum())) > 1e-3
    assert f"({float(virtual.sum()):.3g}," in str(record[0].message)


def test_a_bipartite_layer_over_a_prefix_of_the_nodes_propagates_over_the_input_edges():
    """``conv((h, h[:n]), edge_index, size=(N, n))`` with every input edge
    into the first n nodes (PyG's sampled-layer pattern): its messages are the
    input edges, booked on them, with no warning."""
    class Prefix(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.conv2 = GraphConv(3, 4, bias=False), GraphConv(4, 2, bias=False)

        def forward(self, x, edge_index, weight=None):
            h = self.conv1(x, edge_index, weight).relu()
            return self.conv2((h, h[:3]), edge_index, weight, size=(x.shape[0], 3))

    torch.manual_seed(0)
    model = Prefix().to(DTYPE)
    x = torch.rand(6, 3, dtype=DTYPE)
    edge_index = torch.tensor([[3, 4, 5, 1, 2, 0], [0, 1, 2, 0, 1, 2]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        e = lrp.explain(model, x, edge_index, index=1, target=torch.tensor([0]), rules=lrp.rules.Epsilon(0.0),
                        task_level="node")
    torch.testing.assert_close(e.edge_mask, multiplier_gradient(model, x, edge_index, 1, 0), rtol=1e-9, atol=1e-12)


def test_hypergraph_conv_books_each_incidence_both_ways():
    """HypergraphConv propagates over the incidence, then over it flipped:
    message k of either way is incidence k's (PyG's set_masks gives the
    reference); pairs would mean nothing between nodes and hyperedges."""
    from torch_geometric.explain.algorithm.utils import clear_masks, set_masks
    from torch_geometric.nn import HypergraphConv

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.lin = HypergraphConv(4, 4, bias=False), torch.nn.Linear(4, 2, bias=False)

        def forward(self, x, edge_index):
            return self.lin(self.conv(x, edge_index).relu())

    torch.manual_seed(0)
    incidence = torch.tensor([[0, 1, 2, 1, 3, 2, 3, 4], [0, 0, 0, 1, 1, 2, 2, 2]])
    x = torch.randn(5, 4, dtype=DTYPE)
    model = Net().to(DTYPE).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        e = lrp.explain(model, x, incidence, index=torch.arange(5), rules=lrp.rules.Epsilon(0.0), subgraph=False)
    target = model(x, incidence).argmax(-1)
    m = torch.ones(incidence.shape[1], dtype=DTYPE, requires_grad=True)
    set_masks(model, m, incidence, apply_sigmoid=False)
    try:
        reference, = torch.autograd.grad(model(x, incidence)[torch.arange(5), target].sum(), m)
    finally:
        clear_masks(model)
    torch.testing.assert_close(e.edge_mask, reference, rtol=1e-9, atol=1e-12)


def test_a_graph_classifier_that_reuses_a_layer_is_explained_without_a_subgraph_warning():
    """A graph-level model is explained on its whole graph: a layer applied
    twice is no reason to warn about a subgraph there."""
    from torch_geometric.nn import GCNConv, global_mean_pool

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.lin = GCNConv(3, 3), torch.nn.Linear(3, 2)

        def forward(self, x, edge_index, batch):
            h = self.conv(self.conv(x, edge_index).relu(), edge_index).relu()
            return self.lin(global_mean_pool(h, batch))

    torch.manual_seed(0)
    n = 60  # a ring per graph, 30 nodes each: a subgraph would pay off for a node-level model
    ring = torch.arange(n)
    x, edge_index = torch.rand(n, 3, dtype=DTYPE), torch.stack([ring, (ring + 1) % 30 + 30 * (ring // 30)])
    batch = ring // 30
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lrp.explain(Net().to(DTYPE), x, edge_index, batch=batch, index=1)


def test_rgcn_pair_under_two_relations_books_each_message_on_its_edge():
    """RGCNConv propagates once per relation over ``edge_index[:, edge_type == r]``:
    a (source, target) pair under two relations is two edges, and each gets
    its own relation's message (by hand: LRP-0, one layer, sum aggregation,
    no bias: the message ``x_j W_r`` at the target's class)."""
    from torch_geometric.nn import RGCNConv
    torch.manual_seed(0)
    x = torch.randn(3, 2, dtype=torch.float64)
    edge_index = torch.tensor([[0, 0, 2], [1, 1, 1]])
    edge_type = torch.tensor([1, 0, 0])
    conv = RGCNConv(2, 2, num_relations=2, aggr="add", bias=False).double()
    for subgraph in (True, False):
        found = lrp.explain(conv, x, edge_index, edge_type=edge_type, index=1, target=torch.tensor([0]),
                            rules=lrp.rules.Epsilon(0.0), subgraph=subgraph)
        expected = torch.stack([(x[j] @ conv.weight[r])[0] for j, r in zip(edge_index[0].tolist(),
                                                                           edge_type.tolist())])
        torch.testing.assert_close(found.edge_mask, expected.detach(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("layer", ["RGCNConv", "FiLMConv", "FastRGCNConv"])
def test_relational_edge_masks_follow_a_permutation_of_the_edges(layer):
    """Listing the edges (with their types) in another order lists their
    relevance in that order, also where pairs repeat under several relations."""
    import torch_geometric.nn as pyg_nn
    torch.manual_seed(0)
    x = torch.randn(4, 3, dtype=torch.float64)
    edge_index = torch.tensor([[0, 0, 2, 3, 0], [1, 1, 1, 1, 1]])
    edge_type = torch.tensor([1, 0, 0, 1, 2])
    model = getattr(pyg_nn, layer)(3, 2, num_relations=3).double().eval()
    perm = torch.tensor([3, 1, 4, 0, 2])
    a = lrp.explain(model, x, edge_index, edge_type=edge_type, index=1, target=torch.tensor([0]))
    b = lrp.explain(model, x, edge_index[:, perm], edge_type=edge_type[perm], index=1, target=torch.tensor([0]))
    torch.testing.assert_close(b.edge_mask, a.edge_mask[perm], rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(b.node_mask, a.node_mask, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("how", ["mask", "Tensor.index_select", "torch.index_select"])
def test_a_layer_over_selected_columns_books_each_message_on_its_column(how):
    """A first layer over some of the input's columns (pairs (0, 1) and
    (2, 1) listed twice): each message goes to the column it came from,
    whichever way the columns are selected; the reference is LRP-0's
    ``w * dS/dw`` with a weight of ones on each column's messages."""
    from torch_geometric.nn import GraphConv
    import torch_geometric_lrp as lrp
    edge_index = torch.tensor([[0, 2, 0, 3, 2, 4], [1, 1, 1, 1, 1, 3]])
    columns = torch.tensor([0, 2, 4])
    x = torch.randn(5, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.c2 = GraphConv(3, 4, bias=False), GraphConv(4, 4, bias=False)
            self.head = torch.nn.Linear(4, 2, bias=False)

        def forward(self, x, edge_index):
            if how == "mask":
                sub = edge_index[:, torch.isin(torch.arange(edge_index.shape[1]), columns)]
            elif how == "Tensor.index_select":
                sub = edge_index.index_select(1, columns)
            else:
                sub = torch.index_select(edge_index, 1, columns)
            return self.head(self.c2(self.c1(x, sub).relu(), edge_index).relu())

    torch.manual_seed(0)
    model = Net().double().eval()
    found = lrp.explain(model, x, edge_index, index=1, target=torch.tensor([0]), rules=lrp.rules.Epsilon(0.0),
                        subgraph=False)
    weight = torch.ones(edge_index.shape[1], dtype=torch.float64, requires_grad=True)
    hooks = [model.c1.register_message_forward_hook(lambda m, i, out: out * weight[columns].view(-1, 1)),
             model.c2.register_message_forward_hook(lambda m, i, out: out * weight.view(-1, 1))]
    (expected,) = torch.autograd.grad(model(x, edge_index)[1, 0], weight)
    for h in hooks:
        h.remove()
    torch.testing.assert_close(found.edge_mask, expected, rtol=1e-9, atol=1e-12)


def test_a_selection_equal_to_the_last_list_keeps_its_own_columns():
    """Layer 1 propagates over a copy of the input's edges (not followed),
    layer 2 over the input's columns swapped where a pair repeats: both lists
    hold the same pairs, and layer 2's messages still go to the columns they
    came from (their edge weights differ). Reference: LRP-0's w * dS/dw."""
    from torch_geometric.nn import GraphConv
    import torch_geometric_lrp as lrp
    edge_index = torch.tensor([[0, 2, 0, 3], [1, 1, 1, 1]])
    perm = torch.tensor([2, 1, 0, 3])  # columns 0 and 2 hold the same pair
    weight = torch.tensor([0.5, 1.0, 2.0, 1.5], dtype=torch.float64)
    x = torch.randn(4, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.c2 = GraphConv(3, 4, bias=False), GraphConv(4, 2, bias=False)

        def forward(self, x, edge_index, edge_weight):
            copy = torch.stack([edge_index[0], edge_index[1]])
            h = self.c1(x, copy, edge_weight).relu()
            return self.c2(h, edge_index[:, perm], edge_weight[perm])

    torch.manual_seed(0)
    model = Net().double().eval()
    found = lrp.explain(model, x, edge_index, edge_weight=weight, index=1, target=torch.tensor([0]),
                        rules=lrp.rules.Epsilon(0.0), subgraph=False)
    ones = torch.ones(4, dtype=torch.float64, requires_grad=True)
    hooks = [model.c1.register_message_forward_hook(lambda m, i, out: out * ones.view(-1, 1)),
             model.c2.register_message_forward_hook(lambda m, i, out: out * ones[perm].view(-1, 1))]
    (expected,) = torch.autograd.grad(model(x, edge_index, weight)[1, 0], ones)
    for h in hooks:
        h.remove()
    torch.testing.assert_close(found.edge_mask, expected, rtol=1e-9, atol=1e-12)


class DropTwo(torch.nn.Module):
    """Layer 1 on the graph; layer 2 on the graph without nodes 0 and 1,
    relabelled (``subgraph(relabel_nodes=True)``): its pairs, renumbered,
    equal the input's first pairs."""

    def __init__(self):
        super().__init__()
        self.c1, self.c2 = GraphConv(3, 4, bias=False), GraphConv(4, 4, bias=False)
        self.head = torch.nn.Linear(4, 2, bias=False)

    def forward(self, x, edge_index, weight=None):
        from torch_geometric.nn import global_add_pool
        from torch_geometric.utils import subgraph
        h = self.c1(x, edge_index, weight).relu()
        keep = torch.arange(2, x.shape[0])
        kept, _ = subgraph(keep, edge_index, relabel_nodes=True, num_nodes=x.shape[0])
        return self.head(global_add_pool(self.c2(h[keep], kept).relu(), None))


def test_pairs_of_a_relabelled_graph_are_on_no_input_edge():
    """Layer 2's pairs (0, 1), (1, 0), ... join relabelled nodes 2, 3, ...: no
    input edge, although the same ids are. edge_mask holds layer 1's messages
    only (LRP-0: the gradient of a multiplier on each of its messages), and a
    warning names the pooled graph. Before, layer 2's messages were added
    onto input edges (0, 1) and (1, 0), whose ends it dropped."""
    torch.manual_seed(0)
    model = DropTwo().to(DTYPE).eval()
    x = torch.randn(6, 3, dtype=DTYPE)
    ring = torch.arange(6)
    edge_index = torch.stack([torch.cat([ring, (ring + 1) % 6]), torch.cat([(ring + 1) % 6, ring])])
    with pytest.warns(RuntimeWarning, match="TopKPooling"):
        e = lrp.explain(model, x, edge_index, index=0, target=torch.tensor([1]), rules=lrp.rules.Epsilon(0.0))
    torch.testing.assert_close(e.edge_mask, multiplier_gradient(model, x, edge_index, 0, 1), rtol=1e-9, atol=1e-12)


class Pooled(torch.nn.Module):
    def __init__(self, conv):
        super().__init__()
        from torch_geometric.nn import TopKPooling
        self.c1, self.pool, self.c2 = GraphConv(3, 8), TopKPooling(8, ratio=0.5), conv
        self.head = torch.nn.Linear(8, 3)

    def forward(self, x, edge_index, batch):
        from torch_geometric.nn import global_mean_pool
        h = self.c1(x, edge_index).relu()
        h, edge_index, _, batch, _, _ = self.pool(h, edge_index, batch=batch)
        return self.head(global_mean_pool(self.c2(h, edge_index).relu(), batch))


@pytest.mark.parametrize("conv", ["GraphConv", "GCNConv"])
def test_a_pooled_graph_puts_no_edge_or_self_loop_relevance_on_other_graphs(conv):
    """TopKPooling in a batch of four rings: explaining graph g books nothing
    on the other graphs' edges or self-loops (their nodes get 0 already);
    the pooled graph's node ids once matched other graphs' input pairs."""
    from torch_geometric.nn import GCNConv
    sizes = [6, 8, 5, 7]
    rings, batch, start = [], [], 0
    for g, n in enumerate(sizes):
        ring = torch.arange(n)
        rings.append(torch.stack([torch.cat([ring, (ring + 1) % n]), torch.cat([(ring + 1) % n, ring])]) + start)
        batch.append(torch.full((n,), g))
        start += n
    edge_index, batch = torch.cat(rings, 1), torch.cat(batch)
    x = torch.randn(start, 3, generator=torch.Generator().manual_seed(1), dtype=DTYPE)
    torch.manual_seed(0)
    model = Pooled(GraphConv(8, 8) if conv == "GraphConv" else GCNConv(8, 8)).to(DTYPE).eval()
    for g in range(len(sizes)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            e = lrp.explain(model, x, edge_index, index=g, batch=batch)
        outside = batch[edge_index[0]] != g
        assert e.edge_mask[outside].abs().max() == 0
        assert e.self_loop_relevance[batch != g].abs().max() == 0
        assert e.node_mask[batch != g].abs().max() == 0
        assert e.edge_mask[~outside].abs().max() > 0


def test_a_layer_over_a_narrowed_prefix_keeps_its_input_edges():
    """PyG's trim_to_layer pattern: layer 2 propagates into the first nodes
    over the first input columns (``narrow``): the same ids, booked on those
    edges without a warning (LRP-0 reference: a multiplier's gradient)."""
    class Trimmed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.c2 = GraphConv(3, 4, bias=False), GraphConv(4, 2, bias=False)

        def forward(self, x, edge_index, weight=None):
            h = self.c1(x, edge_index, weight).relu()
            w = None if weight is None else weight.narrow(0, 0, 4)
            return self.c2(h.narrow(0, 0, 3), edge_index.narrow(1, 0, 4), w)

    torch.manual_seed(0)
    model = Trimmed().to(DTYPE)
    x = torch.rand(6, 3, dtype=DTYPE)
    edge_index = torch.tensor([[1, 2, 0, 1, 3, 4, 5, 3], [0, 1, 2, 2, 1, 0, 2, 5]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        e = lrp.explain(model, x, edge_index, index=1, target=torch.tensor([0]), rules=lrp.rules.Epsilon(0.0),
                        subgraph=False, task_level="node")
    torch.testing.assert_close(e.edge_mask, multiplier_gradient(model, x, edge_index, 1, 0), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("how", ["narrow", "subgraph"])
def test_a_gcn_layer_on_a_prefix_of_the_nodes_keeps_its_input_edges(how):
    """GCNConv adds self-loops to the edges its forward gets, so it propagates
    over a new list; on the first nodes, over the input's columns (narrowed,
    as trim_to_layer does, or masked, as subgraph without relabelling does),
    the ids are the graph's: booked on those edges, without a warning.
    Reference: LRP-0's multiplier on each message (self-loops: 1)."""
    from torch_geometric.nn import GCNConv
    from torch_geometric.utils import subgraph
    edge_index = torch.tensor([[1, 2, 0, 1, 3, 4, 5, 3], [0, 1, 2, 2, 1, 0, 2, 5]])
    if how == "narrow":
        kept = torch.arange(4)
    else:
        kept = ((edge_index < 3).all(0)).nonzero().view(-1)
    weight = torch.ones(edge_index.shape[1], dtype=DTYPE, requires_grad=True)

    class Prefix(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.c2 = GCNConv(3, 4, bias=False), GCNConv(4, 2, bias=False)

        def forward(self, x, edge_index):
            h = self.c1(x, edge_index).relu()[:3]
            inner = edge_index.narrow(1, 0, 4) if how == "narrow" else \
                subgraph(torch.arange(3), edge_index, num_nodes=x.shape[0])[0]
            return self.c2(h, inner)

    torch.manual_seed(0)
    model = Prefix().to(DTYPE)
    x = torch.rand(6, 3, dtype=DTYPE)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        e = lrp.explain(model, x, edge_index, index=1, target=torch.tensor([0]), rules=lrp.rules.Epsilon(0.0),
                        subgraph=False, task_level="node")
    loops = [torch.ones(n, dtype=DTYPE) for n in (6, 3)]
    hooks = [model.c1.register_message_forward_hook(lambda m, i, out: out * torch.cat([weight, loops[0]])[:, None]),
             model.c2.register_message_forward_hook(
                 lambda m, i, out: out * torch.cat([weight[kept], loops[1]])[:, None])]
    try:
        (expected,) = torch.autograd.grad(model(x, edge_index)[1, 0], weight)
    finally:
        for h in hooks:
            h.remove()
    torch.testing.assert_close(e.edge_mask, expected, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("built", ["TopKPooling", "SelectTopK + FilterEdges"])
def test_a_pool_that_keeps_every_node_still_renumbers_them(built):
    """TopKPooling(ratio=10) on a 6-node graph keeps all six, sorted by score:
    as many nodes as the input, numbered anew (also built from its public
    parts). Layer 2's pairs are no input edges; edge_mask is layer 1's
    messages alone (reference: LRP-0 with the pooling gate held constant,
    detached, is a multiplier's gradient)."""
    from torch_geometric.explain.algorithm.utils import clear_masks, set_masks
    from torch_geometric.nn import TopKPooling, global_mean_pool
    from torch_geometric.nn.pool.connect import FilterEdges
    from torch_geometric.nn.pool.select import SelectTopK

    def gate(s):
        return torch.tanh(s).detach()

    class KeepAll(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.c2 = GraphConv(3, 8, bias=False), GraphConv(8, 8, bias=False)
            if built == "TopKPooling":
                self.pool = TopKPooling(8, ratio=10, nonlinearity=gate)
            else:
                self.select, self.connect = SelectTopK(8, ratio=10, act=gate), FilterEdges()
            self.head = torch.nn.Linear(8, 2, bias=False)

        def forward(self, x, edge_index, batch):
            h = self.c1(x, edge_index).relu()
            if built == "TopKPooling":
                h, pooled, _, batch, perm, _ = self.pool(h, edge_index, batch=batch)
            else:
                kept = self.select(h, batch)
                perm, pooled = kept.node_index, self.connect(kept, edge_index, batch=batch).edge_index
                h, batch = h[perm] * kept.weight.view(-1, 1), batch[perm]
            assert perm.numel() == x.shape[0]
            return self.head(global_mean_pool(self.c2(h, pooled).relu(), batch))

    torch.manual_seed(0)
    model = KeepAll().to(DTYPE).eval()
    ring = torch.arange(6)
    edge_index = torch.stack([torch.cat([ring, (ring + 1) % 6]), torch.cat([(ring + 1) % 6, ring])])
    x, batch = torch.randn(6, 3, dtype=DTYPE), torch.zeros(6, dtype=torch.long)
    with pytest.warns(RuntimeWarning, match="TopKPooling"):
        e = lrp.explain(model, x, edge_index, index=0, batch=batch, target=torch.tensor([1]),
                        rules=lrp.rules.Epsilon(0.0))
    m = torch.ones(edge_index.shape[1], dtype=DTYPE, requires_grad=True)
    set_masks(model.c1, m, edge_index, apply_sigmoid=False)
    try:
        (reference,) = torch.autograd.grad(model(x, edge_index, batch)[0, 1], m)
    finally:
        clear_masks(model.c1)
    torch.testing.assert_close(e.edge_mask, reference, rtol=1e-9, atol=1e-12)


def test_a_layer_that_renumbers_the_edges_its_forward_got_books_none_on_them():
    """A custom layer gets the input's edges and propagates over the subgraph
    of its second half, relabelled: its pairs are no input edges (the forward
    got the graph's edges, but propagates over other pairs than theirs)."""
    from torch_geometric.nn import MessagePassing
    from torch_geometric.utils import subgraph

    class SubConv(MessagePassing):
        def __init__(self):
            super().__init__(aggr="add")
            self.lin = torch.nn.Linear(4, 2, bias=False)

        def forward(self, x, edge_index, subset):
            inner, _ = subgraph(subset, edge_index, relabel_nodes=True, num_nodes=x.shape[0])
            return self.propagate(inner, x=self.lin(x[subset]))

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.c2 = GraphConv(3, 4, bias=False), SubConv()

        def forward(self, x, edge_index):
            subset = torch.arange(3, 6)
            return self.c2(self.c1(x, edge_index).relu(), edge_index, subset)

    torch.manual_seed(3)
    model = Net().to(DTYPE).eval()
    x = torch.randn(6, 3, dtype=DTYPE)
    # pair (4, 5) is (1, 2) renumbered, and (1, 2) is an input edge too
    edge_index = torch.tensor([[1, 4, 0, 3, 5], [2, 5, 1, 4, 3]])
    with pytest.warns(RuntimeWarning, match="neither input edges nor self-loops"):
        e = lrp.explain(model, x, edge_index, index=2, target=torch.tensor([0]), rules=lrp.rules.Epsilon(0.0),
                        subgraph=False, task_level="node")
    # output row 2 (node 5) reads layer 2's message over renumbered (1, 2), i.e. from node 4, which reads
    # layer 1's message over (3, 4): only that input edge carries relevance, not input edge (1, 2)
    assert e.edge_mask[[0, 1, 2, 4]].abs().max() == 0 and float(e.edge_mask[3].abs()) > 0


@pytest.mark.parametrize("prepare", ["to_undirected", "clone"])
def test_a_unet_layer_after_unpooling_books_its_input_graph_edges(prepare):
    """A U-Net prepares its edge list once (to_undirected of an undirected
    input, a clone: the graph's ids) and runs layer 1 on it, pools, and runs
    layer 3 on it again after unpooling: both layers' messages are input
    edges (after pooling, an edge list a layer got before it keeps the
    graph's numbering). Reference: LRP-0 multipliers on layers 1 and 3."""
    from torch_geometric.nn import TopKPooling, global_add_pool
    from torch_geometric.utils import to_undirected

    class UNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.c2, self.c3 = (GraphConv(3, 6, bias=False), GraphConv(6, 6, bias=False),
                                         GraphConv(6, 6, bias=False))
            self.pool = TopKPooling(6, ratio=0.5, nonlinearity=lambda s: torch.tanh(s).detach())
            self.head = torch.nn.Linear(6, 2, bias=False)

        def forward(self, x, edge_index):
            edges = to_undirected(edge_index) if prepare == "to_undirected" else edge_index.clone()
            h = self.c1(x, edges).relu()
            pooled, pooled_edges, _, _, perm, _ = self.pool(h, edges)
            up = torch.zeros_like(h)
            up[perm] = self.c2(pooled, pooled_edges).relu()
            return self.head(global_add_pool(self.c3(h + up, edges).relu(), None))

    torch.manual_seed(1)
    model = UNet().to(DTYPE).eval()
    ring = torch.arange(8)
    edge_index = torch.stack([torch.cat([ring, (ring + 1) % 8]), torch.cat([(ring + 1) % 8, ring])])
    x = torch.randn(8, 3, dtype=DTYPE)
    with pytest.warns(RuntimeWarning, match="TopKPooling"):  # layer 2's share only
        e = lrp.explain(model, x, edge_index, index=0, target=torch.tensor([1]), rules=lrp.rules.Epsilon(0.0))
    weights = {}
    hooks = [layer.register_message_forward_hook(
        lambda m, i, out: out * weights.setdefault(m, torch.ones(out.shape[0], dtype=DTYPE,
                                                                 requires_grad=True)).view(-1, 1))
        for layer in (model.c1, model.c3)]
    try:
        score = model(x, edge_index)[0, 1]
        expected = sum(torch.autograd.grad(score, [weights[model.c1], weights[model.c3]]))
    finally:
        for h in hooks:
            h.remove()
    used = to_undirected(edge_index) if prepare == "to_undirected" else edge_index
    assert torch.equal(used, edge_index) or prepare == "to_undirected"
    position = {tuple(p): k for k, p in enumerate(edge_index.t().tolist())}
    reference = torch.zeros(edge_index.shape[1], dtype=DTYPE)
    for k, pair in enumerate(used.t().tolist()):
        reference[position[tuple(pair)]] += expected[k]
    torch.testing.assert_close(e.edge_mask, reference, rtol=1e-9, atol=1e-12)


def test_a_layer_over_a_sparse_adjacency_of_its_own_is_named():
    """PANConv builds a SparseTensor path matrix from edge_index and
    aggregates over it fused: no message is seen, so edge_mask has nothing of
    it; a warning says so (before: all zeros, without a word)."""
    from torch_geometric.nn import PANConv, global_add_pool
    pytest.importorskip("torch_sparse")  # PANConv builds a torch_sparse.SparseTensor

    class Pan(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.head = PANConv(3, 4, filter_size=1), torch.nn.Linear(4, 2)

        def forward(self, x, edge_index):
            h, _ = self.conv(x, edge_index)
            return self.head(global_add_pool(h.relu(), None))

    torch.manual_seed(0)
    model = Pan().eval()  # float32: PANConv's path matrix is
    ring = torch.arange(5)
    edge_index = torch.stack([torch.cat([ring, (ring + 1) % 5]), torch.cat([(ring + 1) % 5, ring])])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch's notes on sparse tensors
        with pytest.warns(RuntimeWarning, match="PANConv in Pan propagated over a sparse adjacency it built itself"):
            e = lrp.explain(model, torch.randn(5, 3), edge_index, index=0)
    assert float(e.edge_mask.abs().sum()) == 0 and abs(float(e.residual)) < 1e-5


class AddsAVirtualNode(torch.nn.Module):
    """Adds a node linked both ways to every node, then two GCN layers
    (which add a self-loop at every node, the virtual one included)."""

    def __init__(self):
        super().__init__()
        self.c1, self.c2 = GCNConv(4, 8), GCNConv(8, 3)

    def forward(self, x, edge_index):
        n = x.shape[0]
        nodes, virtual = torch.arange(n), torch.full((n,), n)
        edges = torch.cat([edge_index, torch.stack([nodes, virtual]), torch.stack([virtual, nodes])], 1)
        h = self.c1(torch.cat([x, x.new_zeros(1, x.shape[1])]), edges).relu()
        return self.c2(h, edges)[:n]


def test_a_self_loop_at_a_node_the_model_added_is_booked_off_the_input():
    """The self-loop a GCN layer adds at a virtual node is no node of the
    input: its relevance is reported with the messages off the input's edges
    (warned). Before, the bookkeeping failed with an IndexError wherever the
    input had no self-loop of its own."""
    torch.manual_seed(0)
    model = AddsAVirtualNode().double().eval()
    x, edge_index = torch.randn(3, 4, dtype=torch.float64), torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    with pytest.warns(RuntimeWarning, match="LRP"):
        explanation = lrp.explain(model, x, edge_index, index=0, subgraph=False)
    assert abs(explanation.residual) < 1e-12
    assert explanation.self_loop_relevance.shape == (3,)
