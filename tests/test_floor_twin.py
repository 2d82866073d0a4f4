"""The default composite end to end against an independent implementation.

``benchmarks/cost_floor.py``'s ``Floor`` writes the default composite by
hand for the benchmarks' GCN and GIN (the gradient trick on plain autograd,
no relevance mode); ``lrp.LRP()`` gets it through the relevance mode, the
composite resolution, the computation subgraph and the edge tracking. Both
run through PyG's ``Explainer``; node and edge masks must agree in float64."""
from __future__ import annotations

import importlib.util
import os
import sys

import pytest
import torch
from hypothesis import given, settings, strategies as st
from torch_geometric.explain import Explainer
from torch_geometric.utils import coalesce, remove_self_loops

import torch_geometric_lrp as lrp

ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
BENCHMARKS = os.path.join(ROOT, "benchmarks")
spec = importlib.util.spec_from_file_location("cost_floor", os.path.join(BENCHMARKS, "cost_floor.py"))
cost_floor = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cost_floor)  # it puts benchmarks/ on sys.path for its imports
while BENCHMARKS in sys.path:
    sys.path.remove(BENCHMARKS)
GNN = cost_floor.common.GNN


def graph(seed: int, n: int, e: int):
    g = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(0, n, (2, e), generator=g)
    edge_index = coalesce(remove_self_loops(edge_index)[0], num_nodes=n)
    x = torch.randn(n, 5, generator=g, dtype=torch.float64)
    return x, edge_index


def explainer(model, algorithm, level: str) -> Explainer:
    return Explainer(model, algorithm=algorithm, explanation_type="phenomenon", node_mask_type="attributes",
                     edge_mask_type="object",
                     model_config=dict(mode="multiclass_classification", task_level=level, return_type="raw"))


def both(model, level, x, edge_index, index, lrp_algorithm=None, **kwargs):
    """The explanations of ``lrp_algorithm`` (default ``lrp.LRP()``) and of the floor."""
    with torch.no_grad():
        target = model(x, edge_index, **kwargs).argmax(-1)
    return [explainer(model, algorithm, level)(x, edge_index, target=target, index=index, **kwargs)
            for algorithm in (lrp_algorithm or lrp.LRP(), cost_floor.Floor())]


def assert_same(a, b):
    for key in ("node_mask", "edge_mask"):
        scale = float(a[key].abs().max())  # 0 for the edges of a node without in-edges
        torch.testing.assert_close(b[key], a[key], rtol=0, atol=1e-10 * scale)


@pytest.mark.parametrize("kind", ["GCN", "GIN"])
@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 10_000), node=st.integers(0, 39))
def test_the_default_composite_on_nodes_matches_the_hand_written_floor(kind, seed, node):
    torch.manual_seed(seed)
    model = GNN(kind, 5, 3, hidden=8).double().eval()
    x, edge_index = graph(seed, 40, 90)
    lrp_found, floor_found = both(model, "node", x, edge_index, node)
    assert_same(lrp_found, floor_found)


@pytest.mark.parametrize("kind", ["GCN", "GIN"])
def test_the_default_composite_on_graphs_matches_the_hand_written_floor(kind):
    torch.manual_seed(0)
    model = GNN(kind, 5, 2, hidden=8, graph_level=True).double().eval()
    x, edge_index = graph(1, 25, 60)
    batch = torch.zeros(25, dtype=torch.long)
    lrp_found, floor_found = both(model, "graph", x, edge_index, 0, batch=batch)
    assert_same(lrp_found, floor_found)


def test_the_floor_would_see_a_wrong_composite():
    """The comparison can fail: the same model under one Epsilon everywhere
    (the floor keeps the default's Gamma in the middle layer) differs."""
    torch.manual_seed(0)
    model = GNN("GCN", 5, 3, hidden=8).double().eval()
    x, edge_index = graph(2, 40, 90)
    eps, floor = both(model, "node", x, edge_index, 3, lrp_algorithm=lrp.LRP(rules=lrp.rules.Epsilon(1e-6)))
    with pytest.raises(AssertionError):
        assert_same(eps, floor)
