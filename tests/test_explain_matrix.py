"""Every (task level, mode, return type, explanation type, index) through
PyG's ``Explainer`` with ``lrp.LRP`` and through ``lrp.explain``, and what
``lrp.explain`` reads off the model's output.

For each explanation: mask shapes; the score is the target's logit (the
prediction's for ``explanation_type='model'``); the measured accounting
leaves no residual; zeros outside the receptive field of the explained outputs.
"""
from __future__ import annotations

import pytest
import torch

import torch_geometric_lrp as lrp
from explain_cases import (GCN, INDEX, MODELS, MODES, N, REL, build, check_relevance, inputs, logits_of,
                           lrp_explainer, one_thread_fixture, other_target, out_dim)

one_thread = pytest.fixture(autouse=True, scope="module")(one_thread_fixture)

LEVEL_CASES = [(name, kind) for name in MODELS for kind in INDEX[MODELS[name].level]]


@pytest.mark.parametrize("explanation_type", ["model", "phenomenon"])
@pytest.mark.parametrize("mode,return_type", MODES)
@pytest.mark.parametrize("name,index_kind", LEVEL_CASES)
def test_explainer_matrix(name, index_kind, mode, return_type, explanation_type):
    model = build(name, mode, return_type)
    level = model.level
    x, edge_index, kwargs = inputs(level)
    index = INDEX[level][index_kind]
    target = other_target(logits_of(model, level), mode) if explanation_type == "phenomenon" else None
    explainer = lrp_explainer(model, mode, return_type, level, explanation_type)
    explanation = explainer(x, edge_index, target=target, index=index, **kwargs)

    assert explanation.node_mask.shape == x.shape
    assert explanation.edge_mask.shape == (edge_index.shape[1],)
    assert explanation.self_loop_relevance.shape == (x.shape[0],)
    assert "edge_attr_mask" not in explanation
    check_relevance(explanation, model, mode, index, target)


@pytest.mark.parametrize("explanation_type", ["model", "phenomenon"])
@pytest.mark.parametrize("mode,return_type", MODES)
@pytest.mark.parametrize("name,index_kind", LEVEL_CASES)
def test_explain_matrix(name, index_kind, mode, return_type, explanation_type):
    """``lrp.explain`` reads the task level, mode (where the output tells)
    and return type off its one forward, and gives what the Explainer gives."""
    model = build(name, mode, return_type)
    level = model.level
    x, edge_index, kwargs = inputs(level)
    index = INDEX[level][index_kind]
    target = other_target(logits_of(model, level), mode) if explanation_type == "phenomenon" else None
    # A single raw output per row must say whether it is binary or regression.
    needs_mode = out_dim(mode) == 1 and return_type == "raw"
    extra = {"mode": mode} if needs_mode else {}
    explanation = lrp.explain(model, x, edge_index, index=index, target=target, **extra, **kwargs)

    config = explanation._model_config
    assert (config.task_level.value, config.mode.value, config.return_type.value) == (level, mode, return_type)
    assert explanation.node_mask.shape == x.shape and explanation.edge_mask.shape == (edge_index.shape[1],)
    check_relevance(explanation, model, mode, index, target)

    reference = lrp_explainer(model, mode, return_type, level, explanation_type)(
        x, edge_index, target=target, index=index, **kwargs)
    torch.testing.assert_close(explanation.node_mask, reference.node_mask)
    torch.testing.assert_close(explanation.edge_mask, reference.edge_mask)


def test_one_raw_output_needs_a_mode():
    model = build("gcn", "binary_classification", "raw")
    x, edge_index, _ = inputs("node")
    with pytest.raises(ValueError, match="mode: the model has one raw output per row"):
        lrp.explain(model, x, edge_index, index=3)


def test_explain_infers_raw_for_binary_logits_in_unit_interval():
    """Raw binary logits that all lie in [0, 1] are not probabilities: the
    model has no final sigmoid, so the return type is 'raw' and positive
    logits are predicted class 1 (a 'probs' guess thresholds them at 0.5)."""
    model = build("gcn", "binary_classification", "raw")
    with torch.no_grad():
        model.conv2.lin.weight.mul_(1e-3)
        model.conv2.bias.fill_(0.25)
    x, edge_index, _ = inputs("node")
    logits = logits_of(model, "node")
    assert bool(((logits > 0) & (logits < 0.5)).all())
    explanation = lrp.explain(model, x, edge_index, index=torch.tensor([3, 17]), mode="binary_classification")
    assert explanation._model_config.return_type.value == "raw"
    assert torch.equal(explanation.target, torch.ones(2, dtype=torch.long))
    assert explanation.score == pytest.approx(logits[[3, 17]].sum().item(), rel=REL)


class SqueezedSigmoidGCN(GCN):
    """A binary model whose sigmoid output is reshaped afterwards."""

    def __init__(self):
        super().__init__(1)

    def forward(self, x, edge_index):
        return torch.sigmoid(self.logits(x, edge_index)).squeeze(-1)


def test_explain_infers_binary_probs_through_a_reshape():
    torch.manual_seed(0)
    model = SqueezedSigmoidGCN().eval()
    x, edge_index, _ = inputs("node")
    explanation = lrp.explain(model, x, edge_index, index=3)
    config = explanation._model_config
    assert (config.mode.value, config.return_type.value) == ("binary_classification", "probs")
    logit = logits_of(model, "node").view(-1)[3]
    assert torch.equal(explanation.target, (logit > 0).long().view(1))
    assert explanation.score == pytest.approx(abs(logit.item()), rel=REL)


def test_explain_infers_edge_level_with_as_many_pairs_as_nodes():
    model = build("link")
    x, edge_index, _ = inputs("edge")
    edge_label_index = torch.stack([torch.arange(N), (torch.arange(N) * 7 + 1) % N])
    explanation = lrp.explain(model, x, edge_index, index=2, edge_label_index=edge_label_index)
    assert explanation._model_config.task_level.value == "edge"
    logits = model.logits(x, edge_index, edge_label_index).detach()
    assert explanation.score == pytest.approx(logits[2].max().item(), rel=REL)


def test_explain_target_per_index():
    """A target with one entry per explained index means the same as a full one."""
    model = build("gcn")
    x, edge_index, _ = inputs("node")
    index = torch.tensor([3, 17, 22])
    full = other_target(logits_of(model, "node"), "multiclass_classification")
    a = lrp.explain(model, x, edge_index, index=index, target=full)
    b = lrp.explain(model, x, edge_index, index=index, target=full[index])
    assert a.score == pytest.approx(b.score, rel=1e-6)
    assert torch.equal(a.target, full[index]) and torch.equal(b.target, full[index])
    torch.testing.assert_close(a.node_mask, b.node_mask)
