"""Passes on a cut propagate only the messages the targets read
(``explainers/trim.py``): the hop distances against PyG's ``k_hop_subgraph``,
the messages each layer propagates against a count on the input graph, and
the explanations against the full graph's."""
from __future__ import annotations

import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_geometric.nn import FiLMConv, MessagePassing, RGCNConv
from torch_geometric.utils import k_hop_subgraph

import torch_geometric_lrp as lrp
from conftest import TRIM_MIN_EDGES
from explain_cases import F_IN, GINE, assert_same_explanation, build, one_thread_fixture, sparse_graph
from torch_geometric_lrp.explainers import core, subgraph, trim

one_thread = pytest.fixture(autouse=True, scope="module")(one_thread_fixture)


@st.composite
def graphs(draw):
    n = draw(st.integers(1, 12))
    pairs = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=30))
    edge_index = torch.tensor(pairs, dtype=torch.long).view(-1, 2).t()
    index = torch.tensor(draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=3)))
    return n, edge_index, index


@settings(max_examples=60, deadline=None)
@given(graphs(), st.integers(0, 3), st.sampled_from(["source_to_target", "target_to_source"]))
def test_hop_distance_is_where_k_hop_subgraph_first_reaches_a_node(graph, hops, flow):
    n, edge_index, index = graph
    hop = trim.hop_distance(edge_index, index, n, hops, flow)
    for h in range(hops + 1):
        within = torch.zeros(n, dtype=torch.bool)
        within[k_hop_subgraph(index, h, edge_index, num_nodes=n, flow=flow)[0]] = True
        assert torch.equal(hop <= h, within), h
    assert bool((hop <= hops + 1).all())


def within(index: int, hops: int, edge_index, n: int) -> torch.Tensor:
    inside = torch.zeros(n, dtype=torch.bool)
    if hops >= 0:
        inside[k_hop_subgraph(torch.tensor([index]), hops, edge_index, num_nodes=n)[0]] = True
    return inside


class Relational(torch.nn.Module):
    """Two layers that propagate once per relation (3 relations)."""

    def __init__(self, conv):
        super().__init__()
        self.conv1, self.conv2 = conv(F_IN, 16, 3), conv(16, 4, 3)

    def forward(self, x, edge_index, edge_type):
        return self.conv2(self.conv1(x, edge_index, edge_type).relu(), edge_index, edge_type)


def model_and_inputs(name):
    torch.manual_seed(0)
    x, edge_index = sparse_graph()
    kwargs = {}
    if name == "gine":
        model = GINE(3).eval()
        kwargs["edge_attr"] = torch.randn(edge_index.shape[1], 4)
    elif name in ("rgcn", "film"):
        model = Relational(RGCNConv if name == "rgcn" else FiLMConv).eval()
        kwargs["edge_type"] = torch.randint(0, 3, (edge_index.shape[1],))
    else:
        model = build(name)
    return model.double(), x.double(), edge_index, {k: v.double() if v.is_floating_point() else v
                                                     for k, v in kwargs.items()}


@pytest.mark.parametrize("name", ["gcn", "gin", "gat", "gine", "rgcn", "film"])
def test_each_layer_propagates_only_what_the_target_reads(name):
    """Counted on the input graph: the first layer's messages are the edges
    into the nodes within 1 hop of the target, the second's those into the
    target (plus the self-loops GCN and GAT add there; relational layers
    propagate once per relation, all at one depth). The explanation is the
    full graph's."""
    model, x, edge_index, kwargs = model_and_inputs(name)
    n, t = x.shape[0], 5
    seen = []  # per propagation: (layer, number of messages)
    hooks = [m.register_message_forward_hook(lambda m, inputs, out: seen.append((m, out.shape[0])))
             for m in model.modules() if isinstance(m, MessagePassing)]
    with warnings.catch_warnings():
        warnings.simplefilter("error", lrp.explainers.SubgraphWarning)
        on_cut = lrp.explain(model, x, edge_index, index=t, **kwargs)
    for h in hooks:
        h.remove()
    loops = name in ("gcn", "gat")
    layers = [model.conv1, model.conv2]
    per_layer = {id(layer): sum(k for m, k in seen[-(6 if name in ("rgcn", "film") else 2):] if m is layer)
                 for layer in layers}  # the pass's propagations are the last ones
    for depth, layer in enumerate(layers):
        reads = within(t, 1 - depth, edge_index, n)
        expected = int(reads[edge_index[1]].sum()) + (int(reads.sum()) if loops else 0)
        assert per_layer[id(layer)] == expected, (depth, seen)
    assert_same_explanation(on_cut, lrp.explain(model, x, edge_index, index=t, subgraph=False, **kwargs), atol=1e-12)


def test_cuts_below_the_threshold_run_untrimmed(monkeypatch):
    """With the library's ``TRIM_MIN_EDGES``, a cut of fewer edges propagates
    every edge of its pass in every layer, and explains the target as the
    trimmed pass does (to 1e-12)."""
    model, x, edge_index, _ = model_and_inputs("gcn")
    n, t = x.shape[0], 5
    trimmed = lrp.explain(model, x, edge_index, index=t)  # the suite's threshold: 0
    monkeypatch.setattr(core, "TRIM_MIN_EDGES", TRIM_MIN_EDGES)
    assert edge_index.shape[1] < TRIM_MIN_EDGES
    seen = []
    hooks = [m.register_message_forward_hook(lambda m, inputs, out: seen.append(out.shape[0]))
             for m in model.modules() if isinstance(m, MessagePassing)]
    untrimmed = lrp.explain(model, x, edge_index, index=t)
    for h in hooks:
        h.remove()
    # both layers: every edge into S_2 (the lean pass) and GCN's self-loop at every node of the cut
    reads = within(t, 2, edge_index, n)
    cut_nodes = subgraph.cut(torch.tensor([t]), 2, edge_index, n).num_nodes
    assert seen[-2:] == [int(reads[edge_index[1]].sum()) + cut_nodes] * 2
    assert_same_explanation(untrimmed, trimmed, atol=1e-12)


def test_a_pass_trimmed_too_far_runs_again_untrimmed(monkeypatch):
    """Were a layer's depth overcounted, the trimmed pass would give the
    target another output: the check sees it, the cut runs again in full
    and untrimmed, without a warning, and the explanation is the full graph's."""
    real = trim.Trimming._depth
    monkeypatch.setattr(trim.Trimming, "_depth", lambda self, layer: real(self, layer) + 1)
    model, x, edge_index, _ = model_and_inputs("gcn")
    edges, forward = [], core.Pass.forward

    def spy(self, x, edge_index, kwargs):
        out = forward(self, x, edge_index, kwargs)
        edges.append((edge_index.shape[1], self._trimming is not None and self._trimming.dropped))
        return out

    monkeypatch.setattr(core.Pass, "forward", spy)
    with warnings.catch_warnings():
        warnings.simplefilter("error", lrp.explainers.SubgraphWarning)
        on_cut = lrp.explain(model, x, edge_index, index=5)
    assert [dropped for _, dropped in edges] == [True, False]
    assert edges[0][0] < edges[1][0]  # lean, then in full
    assert_same_explanation(on_cut, lrp.explain(model, x, edge_index, index=5, subgraph=False), atol=1e-12)


def test_explain_nodes_trims_and_equals_one_by_one():
    model, x, edge_index, _ = model_and_inputs("gat")
    targets = torch.tensor([5, 6, 30, 5])
    listed = lrp.explain_nodes(model, x, edge_index, targets, batch_size=4, strategy="copies")
    shared = lrp.explain_nodes(model, x, edge_index, targets, batch_size=4, strategy="shared")
    for ex, sh, t in zip(listed, shared, targets.tolist()):
        one = lrp.explain(model, x, edge_index, index=t, subgraph=False)
        for got in (ex, sh):
            torch.testing.assert_close(got.node_mask, one.node_mask[got.node_index], rtol=0, atol=1e-12)
            torch.testing.assert_close(got.edge_mask, one.edge_mask[got.edge_id], rtol=0, atol=1e-12)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), max_size=25),
       st.lists(st.tuples(st.integers(0, 8), st.integers(0, 8)), max_size=25))
def test_messages_are_matched_to_edges_by_pair_in_order(edges, messages):
    """The routing of a trimmed layer's messages (a subset of the edges, in
    order, plus self-loops): each message finds the input edge with its
    pair, the k-th repeat of a pair the k-th edge with it, against a loop;
    the same with the edges sorted once beforehand (node ids past their
    largest fall back to a sort of their own)."""
    from torch_geometric_lrp.explainers.edges import SortedEdges, match_edges
    e = torch.tensor(edges, dtype=torch.long).view(-1, 2).t()
    m = torch.tensor(messages, dtype=torch.long).view(-1, 2).t()
    expected, used = [], set()
    for pair in messages:
        k = next((j for j, p in enumerate(edges) if p == pair and j not in used), -1)
        used.add(k)
        expected.append(k)
    assert match_edges(e, m).tolist() == expected
    if e.numel():
        assert match_edges(e, m, SortedEdges.of(e)).tolist() == expected
