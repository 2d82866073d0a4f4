"""PyG's own tools on our explanations: subgraphs, thresholds, metrics,
visualisers."""
from __future__ import annotations

import pytest
import torch
from torch_geometric.explain.metric import characterization_score, fidelity, unfaithfulness

from explain_cases import (INDEX, MODELS, build, inputs, logits_of, lrp_explainer, one_thread_fixture,
                           prediction_of, receptive_field)

one_thread = pytest.fixture(autouse=True, scope="module")(one_thread_fixture)


# ===========================================================================
# 7. PyG's tools on our explanations
# ===========================================================================
def explained(name, mask="abs", node_mask_type="attributes", **explainer_kwargs):
    model = build(name)
    level = model.level
    x, edge_index, kwargs = inputs(level)
    explainer = lrp_explainer(model, "multiclass_classification", "raw", level, mask=mask,
                              node_mask_type=node_mask_type, **explainer_kwargs)
    return explainer, explainer(x, edge_index, index=INDEX[level]["tensor"], **kwargs)


@pytest.mark.parametrize("name", list(MODELS))
def test_explanation_subgraphs(name):
    _, explanation = explained(name)
    sub = explanation.get_explanation_subgraph()
    keep = explanation.node_mask.sum(-1) > 0
    assert sub.num_nodes == int(keep.sum())
    assert 0 < sub.num_nodes < explanation.num_nodes
    torch.testing.assert_close(sub.node_mask, explanation.node_mask[keep])
    assert (sub.edge_mask > 0).all()
    complement = explanation.get_complement_subgraph()
    assert complement.num_nodes == explanation.num_nodes - sub.num_nodes


@pytest.mark.parametrize("threshold_config", [
    dict(threshold_type="topk", value=5),
    dict(threshold_type="topk_hard", value=5),
    dict(threshold_type="hard", value=0.01),
])
def test_threshold_configs(threshold_config):
    _, plain = explained("gcn")
    _, thresholded = explained("gcn", threshold_config=threshold_config)
    for key in ("node_mask", "edge_mask"):
        mask, original = thresholded[key], plain[key]
        if threshold_config["threshold_type"] == "hard":
            torch.testing.assert_close(mask, (original > 0.01).float())
            continue
        assert int((mask != 0).sum()) == 5
        top = original.flatten().topk(5).indices
        if threshold_config["threshold_type"] == "topk":
            torch.testing.assert_close(mask.flatten()[top], original.flatten()[top])
        else:
            assert torch.all(mask.flatten()[top] == 1)


@pytest.mark.parametrize("mask", ["abs", "signed"])
@pytest.mark.parametrize("name", list(MODELS))
def test_fidelity_characterization_unfaithfulness(name, mask):
    explainer, explanation = explained(name, mask=mask)
    pos, neg = fidelity(explainer, explanation)
    assert 0.0 <= pos <= 1.0 and 0.0 <= neg <= 1.0
    score = characterization_score(torch.tensor(pos), torch.tensor(neg))
    assert torch.isfinite(score) or pos == 0 or neg == 1
    value = unfaithfulness(explainer, explanation)
    assert 0.0 <= value <= 1.0
    value = unfaithfulness(explainer, explanation, top_k=2)
    assert 0.0 <= value <= 1.0


def test_fidelity_phenomenon_binary_probs():
    model = build("gcn", "binary_classification", "probs")
    x, edge_index, _ = inputs("node")
    explainer = lrp_explainer(model, "binary_classification", "probs", "node", "phenomenon", mask="positive")
    target = prediction_of(logits_of(model, "node"), "binary_classification")
    explanation = explainer(x, edge_index, target=target, index=torch.tensor([3, 17]))
    pos, neg = fidelity(explainer, explanation)
    assert 0.0 <= pos <= 1.0 and 0.0 <= neg <= 1.0


def test_groundtruth_metrics():
    pytest.importorskip("torchmetrics", reason="torchmetrics is not installed: groundtruth_metrics cannot run here")
    from torch_geometric.explain.metric import groundtruth_metrics

    _, explanation = explained("gcn")
    nodes, edges = receptive_field("node", INDEX["node"]["tensor"], 2)
    scores = groundtruth_metrics(explanation.edge_mask / explanation.edge_mask.max(), edges.float())
    assert len(scores) == 5 and all(0.0 <= s <= 1.0 for s in scores)


def _plotting(*modules):
    for module in modules:
        pytest.importorskip(module, reason=f"{module} is not installed: PyG's visualisers cannot run here")
    import matplotlib
    matplotlib.use("Agg")


def test_visualize_feature_importance(tmp_path):
    _plotting("matplotlib", "pandas")
    _, explanation = explained("gcn")
    path = tmp_path / "features.png"
    explanation.visualize_feature_importance(str(path), top_k=4)
    assert path.exists() and path.stat().st_size > 0


@pytest.mark.parametrize("mask", ["abs", "signed"])
def test_visualize_graph(tmp_path, mask):
    _plotting("matplotlib", "networkx")
    _, explanation = explained("gcn", mask=mask)
    path = tmp_path / "graph.png"
    explanation.visualize_graph(str(path), backend="networkx")
    assert path.exists() and path.stat().st_size > 0
