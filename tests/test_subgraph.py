"""The computation subgraph of node-level targets
(``torch_geometric_lrp.explain.subgraph``): a worked example, PyG's
``k_hop_subgraph`` as the reference, and how model inputs are cut.

The end-to-end checks (the pass on the subgraph equals the pass on the full
graph; models that are not local fall back or raise) are in
``test_explainer.py``, section 6b.
"""
from __future__ import annotations

import importlib

import pytest
import torch
from torch_geometric.nn import APPNP, GCNConv, SGConv
from torch_geometric.utils import k_hop_subgraph

subgraph = importlib.import_module("torch_geometric_lrp.explain.subgraph")  # lrp.explain is a function


def test_worked_example_on_a_path():
    """0 - 1 - 2 - 3 - 4 - 5 (both directions) plus 6 -> 0 (one direction).
    Target 0, one hop: the model reads 1 and 6; their degrees need 2 (and
    6's in-neighbours: none). Ring: nodes exactly 2 hops away."""
    path = torch.tensor([[0, 1, 1, 2, 2, 3, 3, 4, 4, 5], [1, 0, 2, 1, 3, 2, 4, 3, 5, 4]])
    edge_index = torch.cat([path, torch.tensor([[6], [0]])], dim=1)
    sub = subgraph.receptive_field(torch.tensor([0]), 1, edge_index, 7)
    assert sub.nodes.tolist() == [0, 1, 2, 6]
    assert sub.ring.tolist() == [False, False, True, False]
    assert sub.edge_id.tolist() == [0, 1, 2, 3, 10]  # 0-1, 1-2 both ways, 6 -> 0
    assert sub.edge_index.tolist() == [[0, 1, 1, 2, 3], [1, 0, 2, 1, 0]]
    assert sub.index.tolist() == [0]
    # messages the other way: 0 only hears from nodes it sends to
    back = subgraph.receptive_field(torch.tensor([6]), 1, edge_index, 7, flow="target_to_source")
    assert back.nodes.tolist() == [0, 1, 6]
    assert back.ring.tolist() == [False, True, False]


@pytest.mark.parametrize("flow", ["source_to_target", "target_to_source"])
@pytest.mark.parametrize("hops", [0, 1, 2, 3])
@pytest.mark.parametrize("seed", range(4))
def test_matches_k_hop_subgraph(seed, hops, flow):
    g = torch.Generator().manual_seed(seed)
    n = 40
    edge_index = torch.randint(0, n, (2, 70), generator=g)  # directed, with loops and repeats
    targets = torch.randint(0, n, (3,), generator=g)
    sub = subgraph.receptive_field(targets, hops, edge_index, n, flow)
    nodes, ref_edge_index, mapping, edge_mask = k_hop_subgraph(targets, hops + 1, edge_index, relabel_nodes=True,
                                                               num_nodes=n, flow=flow)
    assert sub.nodes.tolist() == nodes.tolist()
    assert sub.edge_id.tolist() == edge_mask.nonzero().view(-1).tolist()
    assert sub.edge_index.tolist() == ref_edge_index.tolist()
    assert sub.index.tolist() == mapping.tolist()
    inner = k_hop_subgraph(targets, hops, edge_index, num_nodes=n, flow=flow)[0]
    assert sub.nodes[sub.ring].tolist() == sorted(set(nodes.tolist()) - set(inner.tolist()))


def test_slice_inputs():
    edge_index = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]])
    sub = subgraph.receptive_field(torch.tensor([1]), 0, edge_index, 4)  # nodes 0, 1; edge 0 -> 1
    assert sub.nodes.tolist() == [0, 1] and sub.edge_id.tolist() == [0]
    kwargs = dict(edge_weight=torch.arange(4.0), edge_attr=torch.arange(8.0).view(4, 2), batch=torch.arange(4),
                  flag=True, scale=torch.tensor(2.0), dense=torch.zeros(4, 4), weights=torch.ones(5))
    out, unknown = subgraph.slice_inputs(kwargs, sub, num_nodes=4, num_edges=4)
    assert out["edge_weight"].tolist() == [0.0]
    assert out["edge_attr"].tolist() == [[0.0, 1.0]]
    assert out["batch"].tolist() == [0, 1]
    assert out["flag"] is True and out["scale"] is kwargs["scale"]
    assert out["dense"] is kwargs["dense"] and out["weights"] is kwargs["weights"]
    assert unknown == ["dense", "weights"]


def test_reaches_ring():
    edge_index = torch.tensor([[0, 1, 2], [1, 2, 3]])
    sub = subgraph.receptive_field(torch.tensor([3]), 1, edge_index, 4)  # 1 -> 2 -> 3; ring: node 1
    assert sub.nodes.tolist() == [1, 2, 3] and sub.ring.tolist() == [True, False, False]
    node = torch.zeros(3, 2)
    edge = torch.zeros(2)
    assert not subgraph.reaches_ring(sub, node, edge)
    assert subgraph.reaches_ring(sub, node, torch.tensor([1e-30, 0.0]))  # edge 1 -> 2 touches the ring
    node[0, 1] = -2.0
    assert subgraph.reaches_ring(sub, node, edge)
    assert subgraph.reaches_ring(sub, torch.zeros(3, 2), edge, self_loops=torch.tensor([1.0, 0.0, 0.0]))


def test_count_hops():
    model = torch.nn.ModuleList([GCNConv(4, 4), SGConv(4, 4, K=3), APPNP(K=5, alpha=0.1), torch.nn.Linear(4, 4)])
    assert subgraph.count_hops(model) == 1 + 3 + 5
