"""Mask types and views, and edge relevance (per-layer conservation,
self-loops, duplicate edges, edge features)."""
from __future__ import annotations

import itertools

import pytest
import torch

import torch_geometric_lrp as lrp
from explain_cases import (C, GINE, edge_attr_data, MODELS, REL, assert_conserved, build, inputs, lrp_explainer,
                           one_thread_fixture, receptive_field, INDEX)

one_thread = pytest.fixture(autouse=True, scope="module")(one_thread_fixture)


# ===========================================================================
# 2. Mask types and views
# ===========================================================================
MASK_TYPES = [(n, e) for n, e in itertools.product(["attributes", "object", "common_attributes", None],
                                                   ["object", None]) if (n, e) != (None, None)]


@pytest.mark.parametrize("node_mask_type,edge_mask_type", MASK_TYPES)
@pytest.mark.parametrize("name", list(MODELS))
def test_mask_types(name, node_mask_type, edge_mask_type):
    model = build(name)
    level = model.level
    x, edge_index, kwargs = inputs(level)
    index = INDEX[level]["tensor"]
    full = lrp_explainer(model, "multiclass_classification", "raw", level)(x, edge_index, index=index, **kwargs)
    explanation = lrp_explainer(model, "multiclass_classification", "raw", level, node_mask_type=node_mask_type,
                                edge_mask_type=edge_mask_type)(x, edge_index, index=index, **kwargs)
    shapes = {"attributes": tuple(x.shape), "object": (x.shape[0], 1), "common_attributes": (1, x.shape[1])}
    if node_mask_type is None:
        assert explanation.get("node_mask") is None
    else:
        assert tuple(explanation.node_mask.shape) == shapes[node_mask_type]
        reduced = {"attributes": full.node_mask, "object": full.node_mask.sum(-1, keepdim=True),
                   "common_attributes": full.node_mask.sum(0, keepdim=True)}[node_mask_type]
        torch.testing.assert_close(explanation.node_mask, reduced)
    if edge_mask_type is None:
        assert explanation.get("edge_mask") is None
    else:
        torch.testing.assert_close(explanation.edge_mask, full.edge_mask)
    assert explanation.score == pytest.approx(full.score, rel=1e-6)
    assert_conserved(explanation)
    assert explanation.validate_masks()


@pytest.mark.parametrize("node_mask_type", ["attributes", "object", "common_attributes"])
@pytest.mark.parametrize("view", ["abs", "positive"])
@pytest.mark.parametrize("name", ["gcn", "gat", "graph", "link"])
def test_mask_views(name, view, node_mask_type):
    model = build(name)
    level = model.level
    x, edge_index, kwargs = inputs(level)
    index = INDEX[level]["tensor"]
    rules = lrp.rules.Epsilon()  # signed contributions everywhere: both signs reach the masks
    signed = lrp_explainer(model, "multiclass_classification", "raw", level, node_mask_type=node_mask_type,
                           rules=rules)(x, edge_index, index=index, **kwargs)
    shown = lrp_explainer(model, "multiclass_classification", "raw", level, node_mask_type=node_mask_type,
                          mask=view, rules=rules)(x, edge_index, index=index, **kwargs)
    fn = torch.abs if view == "abs" else (lambda t: t.clamp(min=0))
    assert (signed.edge_mask < 0).any(), "no negative relevance: the test is vacuous"
    if node_mask_type == "attributes":
        assert (signed.node_mask < 0).any(), "no negative relevance: the test is vacuous"
    for key in ("node_mask", "edge_mask"):
        assert (shown[key] >= 0).all()
        torch.testing.assert_close(shown[key], fn(signed[key]))
    assert shown.score == signed.score and shown.relevance_total == signed.relevance_total


def test_mask_argument_is_checked():
    with pytest.raises(ValueError, match="mask: must be one of"):
        lrp.LRP(mask="absolute")


@pytest.mark.parametrize("edge_mask_type", ["attributes", "common_attributes"])
def test_edge_mask_type_must_be_object(edge_mask_type):
    with pytest.raises(ValueError):
        lrp_explainer(build("gcn"), "multiclass_classification", "raw", "node", edge_mask_type=edge_mask_type)


# ===========================================================================
# 3. Edge relevance: per-layer conservation, self-loops, edge features
# ===========================================================================
@pytest.mark.parametrize("mode", ["multiclass_classification", "binary_classification"])
@pytest.mark.parametrize("name", ["gcn", "gat", "graph", "link"])
def test_edge_relevance_sums_over_layers(name, mode):
    """Bias-free, every layer hands the whole score to its messages: input
    edges plus the self-loops the layers add carry ``layers x score``."""
    model = build(name, mode, bias=False)
    level = model.level
    x, edge_index, kwargs = inputs(level)
    explanation = lrp_explainer(model, mode, "raw", level)(x, edge_index, index=INDEX[level]["tensor"], **kwargs)
    loops = explanation.self_loop_relevance
    assert loops.abs().sum() > 0  # GCN and GAT add self-loops
    assert explanation.edge_mask.sum().item() + loops.sum().item() == pytest.approx(
        model.hops * explanation.score, rel=1e-3)
    # and no bias: the inputs get the score (up to the epsilon stabiliser)
    assert explanation.relevance_total == pytest.approx(explanation.score, rel=1e-3)


def test_gin_adds_no_self_loops():
    model = build("gin")
    x, edge_index, _ = inputs("node")
    explanation = lrp_explainer(model, "multiclass_classification", "raw", "node")(x, edge_index, index=3)
    assert torch.all(explanation.self_loop_relevance == 0)
    assert explanation.edge_mask.abs().sum() > 0


def test_input_self_loop_and_duplicate_edges():
    """An input self-loop is an input edge (GCN keeps it instead of adding
    one); a duplicated edge gets relevance on both copies."""
    model = build("gcn", bias=False)
    x, edge_index, _ = inputs("node")
    edge_index = torch.cat([edge_index, torch.tensor([[3, 4], [3, 3]])], dim=1)  # loop 3->3, duplicate 4->3
    explanation = lrp_explainer(model, "multiclass_classification", "raw", "node")(x, edge_index, index=3)
    loop, duplicate = edge_index.shape[1] - 2, edge_index.shape[1] - 1
    original = ((edge_index[0] == 4) & (edge_index[1] == 3)).nonzero().view(-1)[0]
    assert explanation.edge_mask[loop] != 0
    assert explanation.self_loop_relevance[3] == 0, "node 3's own loop is an input edge"
    assert explanation.edge_mask[duplicate] != 0
    torch.testing.assert_close(explanation.edge_mask[duplicate], explanation.edge_mask[original])
    assert explanation.edge_mask.sum().item() + explanation.self_loop_relevance.sum().item() == pytest.approx(
        2 * explanation.score, rel=1e-3)


@pytest.mark.parametrize("api", ["explainer", "explain"])
def test_edge_attr_mask(api):
    torch.manual_seed(0)
    model = GINE(C).eval()
    x, edge_index, edge_attr = edge_attr_data()
    if api == "explainer":
        explanation = lrp_explainer(model, "multiclass_classification", "raw", "node")(
            x, edge_index, index=torch.tensor([3, 17]), edge_attr=edge_attr)
    else:
        explanation = lrp.explain(model, x, edge_index, index=torch.tensor([3, 17]), edge_attr=edge_attr)
    assert explanation.edge_attr_mask.shape == edge_attr.shape
    logits = model.logits(x, edge_index, edge_attr).detach()
    assert explanation.score == pytest.approx(logits[[3, 17]].max(-1).values.sum().item(), rel=REL)
    node_total = explanation.node_mask.sum().item()
    attr_total = explanation.edge_attr_mask.sum().item()
    assert attr_total != 0
    assert explanation.relevance_total == pytest.approx(node_total + attr_total, rel=1e-5, abs=1e-6)
    assert_conserved(explanation)
    _, edges = receptive_field("node", torch.tensor([3, 17]), 2)
    assert torch.all(explanation.edge_attr_mask[~edges] == 0)
