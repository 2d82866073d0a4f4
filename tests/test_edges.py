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
