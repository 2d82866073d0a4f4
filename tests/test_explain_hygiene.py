"""The model the user passed is what gets explained, and it is handed back
exactly as it was: flags, parameters, hooks, modules. Also: living with PyG's
other explainers on the same model."""
from __future__ import annotations

import copy
import re
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.explain import Explainer
from torch_geometric.explain.algorithm import GNNExplainer
from torch_geometric.explain.algorithm.utils import clear_masks, set_masks
from torch_geometric.nn import GCNConv, MessagePassing

import torch_geometric_lrp as lrp
from explain_cases import (C, DATA, F_IN, GCN, HID, INDEX, MODELS, CachedGCN, assert_conserved, assert_same,
                           assert_same_explanation, build,
                           check_relevance, inputs, lrp_explainer, one_thread_fixture, out_dim, snapshot)

one_thread = pytest.fixture(autouse=True, scope="module")(one_thread_fixture)


# ===========================================================================
# 4. Model hygiene
# ===========================================================================
def run_both(model, name, mode="multiclass_classification", return_type="raw"):
    level = model.level
    x, edge_index, kwargs = inputs(level)
    x_before = x.clone()
    index = INDEX[level]["tensor"]
    a = lrp_explainer(model, mode, return_type, level)(x, edge_index, index=index, **kwargs)
    extra = {} if out_dim(mode) > 1 else {"mode": mode}
    b = lrp.explain(model, x, edge_index, index=index, **extra, **kwargs)
    assert torch.equal(x, x_before) and not x.requires_grad and x.grad is None
    return a, b


@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize("name", list(MODELS))
def test_model_is_left_as_it_was(name, training):
    model = build(name, "multiclass_classification", "log_probs")
    model.train(training)
    before = snapshot(model)
    a, b = run_both(model, name, return_type="log_probs")
    assert_same(before, snapshot(model))
    assert all(m.training is training for m in model.modules())
    # a model in training mode is explained in eval mode (dropout off)
    model.eval()
    reference = lrp_explainer(model, "multiclass_classification", "log_probs", model.level)(
        *inputs(model.level)[:2], index=INDEX[model.level]["tensor"], **inputs(model.level)[2])
    for explanation in (a, b):
        torch.testing.assert_close(explanation.node_mask, reference.node_mask)
        torch.testing.assert_close(explanation.edge_mask, reference.edge_mask)
        assert explanation.score == pytest.approx(reference.score, rel=1e-6)


def test_mixed_training_flags_are_kept():
    """Training with a frozen (eval-mode) part: each module keeps its own flag
    through lrp.explain and lrp.explain_nodes (PyG's own Explainer call resets
    submodules to the root's flag, so it is not used here)."""
    model = build("gin").train()
    model.conv1.nn.eval()
    before = snapshot(model)
    x, edge_index, _ = inputs("node")
    lrp.explain(model, x, edge_index, index=3)
    assert_same(before, snapshot(model))
    lrp.explain_nodes(model, x, edge_index, torch.tensor([3, 4]))
    assert_same(before, snapshot(model))


def test_model_is_left_as_it_was_after_explain_nodes():
    model = build("gat").train()
    before = snapshot(model)
    targets = torch.tensor([1, 2, 3])
    batched = lrp.explain_nodes(model, DATA["x"], DATA["edge_index"], targets, batch_size=2)
    assert_same(before, snapshot(model))
    assert all(m.training for m in model.modules())
    # explained in eval mode (GAT's attention dropout and the feature dropout off)
    reference = lrp.explain_nodes(model.eval(), DATA["x"], DATA["edge_index"], targets, batch_size=2)
    for ex, ref in zip(batched, reference):
        torch.testing.assert_close(ex.node_mask, ref.node_mask)
        assert ex.score == ref.score


class SquaredGCN(GCN):
    """``pow(3)`` has no relevance rule: the relevance pass must raise."""

    def logits(self, x, edge_index):
        return super().logits(x, edge_index).pow(3)


@pytest.mark.parametrize("training", [False, True])
def test_model_is_left_as_it_was_when_the_pass_fails(training):
    torch.manual_seed(0)
    model = SquaredGCN(C).train(training)
    x, edge_index, _ = inputs("node")
    before = snapshot(model)
    with pytest.raises(lrp.UnsupportedOpError, match="pow"):
        lrp.explain(model, x, edge_index, index=3)
    assert_same(before, snapshot(model))
    with pytest.raises(lrp.UnsupportedOpError, match="pow"):
        lrp.explain_nodes(model, x, edge_index, torch.tensor([3, 4]))
    assert_same(before, snapshot(model))
    if not training:  # PyG's Explainer itself leaves a model that raised in eval mode
        with pytest.raises(lrp.UnsupportedOpError, match="pow"):
            lrp_explainer(model, "multiclass_classification", "raw", "node")(x, edge_index, index=3)
        assert_same(before, snapshot(model))


def test_model_with_requires_grad_off_and_hooks():
    """Frozen parameters stay frozen, trainable ones trainable, user hooks stay
    and run: the model is explained as it runs."""
    model = build("gcn")
    model.conv1.lin.weight.requires_grad_(False)
    calls = []
    handle = model.conv2.register_forward_hook(lambda *a: calls.append(1))
    before = snapshot(model)
    run_both(model, "gcn")
    assert_same(before, snapshot(model))
    assert model.conv1.lin.weight.requires_grad is False and model.conv2.lin.weight.requires_grad is True
    assert len(calls) >= 2
    handle.remove()


def _replace_submodule(model):
    torch.manual_seed(5)
    model.conv2 = GCNConv(HID, C)


def _assign_state(model):
    model.load_state_dict(build("gcn", seed=3).state_dict(), assign=True)


def _assign_parameter(model):
    model.conv2.bias = torch.nn.Parameter(torch.full((C,), 5.0))


def _change_setting(model):
    model.conv2.add_self_loops = False


def _load_state_in_place(model):
    model.load_state_dict(build("gcn", seed=1).state_dict())


@pytest.mark.parametrize("change", [_replace_submodule, _assign_state, _assign_parameter, _change_setting,
                                    _load_state_in_place])
def test_a_reused_explainer_follows_the_model(change):
    """A reused ``Explainer(LRP)`` explains the model as it is now: replaced
    modules, parameters, settings and weights loaded in place."""
    model = build("gcn")
    explainer = lrp_explainer(model, "multiclass_classification", "raw", "node")
    x, edge_index, _ = inputs("node")
    before = explainer(x, edge_index, index=3)
    change(model)
    after = explainer(x, edge_index, index=3)
    assert after.score != pytest.approx(before.score, rel=1e-3)
    check_relevance(after, model, "multiclass_classification", 3)


# ===========================================================================
# 5. Living with PyG's other explainers
# ===========================================================================
def gnn_explainer(model, level="node"):
    return Explainer(model, algorithm=GNNExplainer(epochs=5), explanation_type="model",
                     node_mask_type="attributes", edge_mask_type="object",
                     model_config=dict(mode="multiclass_classification", task_level=level, return_type="raw"))


@pytest.mark.parametrize("name", ["gcn", "gat", "graph"])
def test_after_gnnexplainer(name):
    model = build(name)
    fresh = copy.deepcopy(model)
    level = model.level
    x, edge_index, kwargs = inputs(level)
    index = INDEX[level]["int"]
    gnn_explainer(model, level)(x, edge_index, index=index, **kwargs)
    # the premise: GNNExplainer leaves empty '_edge_mask' parameter slots
    assert any("_edge_mask" in m._parameters for m in model.modules() if isinstance(m, MessagePassing))
    before = snapshot(model)
    ours = lrp_explainer(model, "multiclass_classification", "raw", level)(x, edge_index, index=index, **kwargs)
    via_explain = lrp.explain(model, x, edge_index, index=index, **kwargs)
    assert_same(before, snapshot(model))  # GNNExplainer's leftovers are not ours to change
    reference = lrp.explain(fresh, x, edge_index, index=index, **kwargs)
    for explanation in (ours, via_explain):
        torch.testing.assert_close(explanation.node_mask, reference.node_mask)
        torch.testing.assert_close(explanation.edge_mask, reference.edge_mask)
    check_relevance(ours, model, "multiclass_classification", index)
    # and GNNExplainer still runs after us
    gnn_explainer(model, level)(x, edge_index, index=index, **kwargs)


def edge_mask_gradient(model, x, edge_index, index):
    """What CaptumExplainer('Saliency') does for edges: a non-leaf edge mask
    set on every layer, then the gradient of the output with respect to it."""
    leaf = torch.ones(edge_index.shape[1], requires_grad=True)
    mask = leaf * 1.0  # Captum hands the layers a tensor computed from its input
    set_masks(model, mask, edge_index, apply_sigmoid=False)
    try:
        out = model(x, edge_index)
        (grad,) = torch.autograd.grad(out[index].sum(), leaf)
    finally:
        clear_masks(model)
    return grad


def test_saliency_on_edge_masks_still_works_after_lrp():
    model = build("gcn")
    x, edge_index, _ = inputs("node")
    expected = edge_mask_gradient(copy.deepcopy(model), x, edge_index, 3)
    lrp.explain(model, x, edge_index, index=3)
    lrp_explainer(model, "multiclass_classification", "raw", "node")(x, edge_index, index=3)
    assert not any("_edge_mask" in m._parameters for m in model.modules())
    torch.testing.assert_close(edge_mask_gradient(model, x, edge_index, 3), expected)


@pytest.mark.filterwarnings("ignore:Input Tensor 0 did not already require gradients")
def test_captum_saliency_still_works_after_lrp():
    pytest.importorskip("captum", reason="captum is not installed: CaptumExplainer cannot run here")
    from torch_geometric.explain.algorithm import CaptumExplainer

    model = build("gcn")
    x, edge_index, _ = inputs("node")
    lrp.explain(model, x, edge_index, index=3)
    explanation = Explainer(model, algorithm=CaptumExplainer("Saliency"), explanation_type="model",
                            node_mask_type="attributes", edge_mask_type="object",
                            model_config=dict(mode="multiclass_classification", task_level="node",
                                              return_type="raw"))(x, edge_index, index=3)
    assert explanation.edge_mask.shape == (edge_index.shape[1],)


# ===========================================================================
# The user's model itself, not a copy (issue items 4, 5, 6, 13)
# ===========================================================================
def test_a_reused_explainer_sees_hooks_added_and_removed():
    """Item 4: a hook added after the first call changes the model's output,
    and the explanation follows it; after its removal, back again."""
    model = build("gcn")
    explainer = lrp_explainer(model, "multiclass_classification", "raw", "node")
    x, edge_index, _ = inputs("node")
    before = explainer(x, edge_index, index=3)
    handle = model.conv2.register_forward_hook(lambda module, args, out: out * 2)
    doubled = explainer(x, edge_index, index=3)
    with torch.no_grad():
        assert doubled.score == pytest.approx(model(x, edge_index)[3].max().item(), rel=1e-5)
    assert doubled.score == pytest.approx(2 * before.score, rel=1e-5)
    torch.testing.assert_close(doubled.node_mask, 2 * before.node_mask)
    handle.remove()
    after = explainer(x, edge_index, index=3)
    assert after.score == pytest.approx(before.score, rel=1e-6)


def test_a_compiled_model_is_explained_and_left_alone():
    """Item 5: ``torch.compile(model)`` is explained through the model it
    wraps, and nothing of either is replaced."""
    model = build("gcn")
    compiled = torch.compile(model)
    before = snapshot(model)
    x, edge_index, _ = inputs("node")
    ours = lrp.explain(compiled, x, edge_index, index=3)
    reference = lrp.explain(model, x, edge_index, index=3)
    assert_same(before, snapshot(model))
    assert hasattr(model, "conv1") and compiled._orig_mod is model
    torch.testing.assert_close(ours.node_mask, reference.node_mask)
    assert ours.score == pytest.approx(reference.score, rel=1e-6)



@pytest.mark.parametrize("how", ["wrapped", "in place", "root in place"])
def test_compiled_submodules_are_refused_by_name_before_the_forward(how):
    """A ``torch.compile``-d submodule, or a module compiled in place
    (``Module.compile()``), is refused naming it, by the pass and by
    ``convert``; before, the pass failed inside torch's compiler
    (``NameError: ___get_torch_function_mode_stack_at``), and ``convert``
    given a rule for the wrapper wrote the copy's modules into the
    original. The model is left as it was."""
    model = build("gcn")
    if how == "wrapped":
        model.conv2 = torch.compile(model.conv2, backend="eager")
    elif how == "in place":
        model.conv2.compile(backend="eager")
    else:
        model.compile(backend="eager")
    before = snapshot(model)
    x, edge_index, _ = inputs("node")
    name = re.escape("'(the model)'") if how == "root in place" else "'conv2'"
    with pytest.raises(lrp.UnsupportedOpError, match=f"compiled.*{name}"):
        lrp.explain(model, x, edge_index, index=3)
    with pytest.raises(lrp.UnsupportedModuleError, match=f"compiled.*{name}"):
        lrp.convert(model)
    if how == "wrapped":
        with pytest.raises(lrp.UnsupportedModuleError, match="'_orig_mod'"):
            lrp.convert(model, rules={type(model.conv2): lrp.rules.Epsilon()})
    assert_same(before, snapshot(model))

class Head(torch.nn.Module):
    """A module the library does not know (declared as coming from torch, as
    library modules are), made of ops that have relevance rules."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(HID, C)

    def forward(self, h):
        return self.lin(h)


Head.__module__ = "torch.nn.modules.head"


class WithHead(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = GCNConv(F_IN, HID)
        self.head = Head()

    def forward(self, x, edge_index):
        return self.head(F.relu(self.conv(x, edge_index)))


def test_rules_for_a_module_type_are_used():
    """Item 6: ``rules={T: rule}`` for a module type ``T`` explains with that
    rule (the old probe converted without the rules and raised)."""
    torch.manual_seed(0)
    model = WithHead().eval()
    x, edge_index, _ = inputs("node")
    tight = lrp.explain(model, x, edge_index, index=3, rules={Head: lrp.rules.Epsilon(1e-9)})
    loose = lrp.explain(model, x, edge_index, index=3, rules={Head: lrp.rules.Epsilon(10.0)})
    assert tight.score == pytest.approx(loose.score, rel=1e-6)
    assert abs(loose.absorbed) > abs(tight.absorbed) + 1e-3 * abs(tight.score)
    assert_conserved(tight)
    assert_conserved(loose)


ENCODER = None


class ReadsAGlobalEncoder(torch.nn.Module):
    """Like PyG's ``gnn_explainer_link_pred.py``: the forward calls a module
    that is not its own."""

    def __init__(self):
        super().__init__()
        self.head = torch.nn.Linear(HID, C)

    def forward(self, x, edge_index):
        return self.head(F.relu(ENCODER(x, edge_index)))


class OwnsTheEncoder(torch.nn.Module):
    def __init__(self, encoder, head):
        super().__init__()
        self.encoder, self.head = encoder, head

    def forward(self, x, edge_index):
        return self.head(F.relu(self.encoder(x, edge_index)))


class Encoder(torch.nn.Module):
    """Linear, BatchNorm, ReLU, Dropout, then ``conv``."""

    def __init__(self, conv):
        super().__init__()
        self.lin, self.norm, self.drop, self.conv = torch.nn.Linear(F_IN, F_IN), torch.nn.BatchNorm1d(F_IN), \
            torch.nn.Dropout(0.5), conv

    def forward(self, x, edge_index):
        return self.conv(self.drop(self.norm(self.lin(x)).relu()), edge_index)


@pytest.mark.parametrize("rules", ["type", "one rule", "type and catch-all"])
@pytest.mark.parametrize("conv", ["GCNConv", "GATConv", "TransformerConv"])
@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
def test_modules_outside_the_model_are_explained(rules, conv, training):
    """Item 13: the encoder the forward reaches outside ``self`` gets edge
    relevance and the rules, as if the model owned it: in eval mode (its
    training flag and batch-norm statistics left as they were), with the
    attention layers' constant coefficients. Before, an encoder in training
    mode was explained with its dropout on and moved its running statistics
    (two calls, two explanations), and its own ``lin`` took a catch-all key's
    rule over its layer's."""
    global ENCODER
    from torch_geometric.nn import GATConv, TransformerConv
    torch.manual_seed(0)
    make = {"GCNConv": lambda: GCNConv(F_IN, HID), "GATConv": lambda: GATConv(F_IN, HID, heads=2, concat=False),
            "TransformerConv": lambda: TransformerConv(F_IN, HID)}[conv]
    ENCODER = Encoder(make())
    gamma = lrp.rules.Gamma(0.5)
    rules = {"type": {type(ENCODER.conv): gamma}, "one rule": gamma,
             "type and catch-all": {type(ENCODER.conv): gamma, torch.nn.Module: lrp.rules.Epsilon(0.0)}}[rules]
    x, edge_index, _ = inputs("node")
    ENCODER.train()(x, edge_index)  # running statistics that are not the initial ones
    ENCODER.train(training)
    model = ReadsAGlobalEncoder().eval()
    owner = OwnsTheEncoder(ENCODER, model.head)
    state = copy.deepcopy(ENCODER.state_dict())
    outside = lrp.explain(model, x, edge_index, index=3, rules=rules)
    again = lrp.explain(model, x, edge_index, index=3, rules=rules)
    assert ENCODER.training == training and type(ENCODER.conv).__module__.startswith("torch_geometric.")
    for key, value in ENCODER.state_dict().items():
        torch.testing.assert_close(value, state[key], rtol=0, atol=0)
    owner.eval()
    inside = lrp.explain(owner, x, edge_index, index=3, rules=rules)
    assert outside.edge_mask.abs().sum() > 0
    for got in (outside, again):
        torch.testing.assert_close(got.edge_mask, inside.edge_mask)
        torch.testing.assert_close(got.node_mask, inside.node_mask)


def test_a_module_outside_the_model_that_needs_its_own_forward_is_refused():
    """``TransformerConv(beta=True)`` keeps its skip gate constant in the
    forward of ``torch_geometric_lrp.nn.TransformerConv``, which the pass
    can give only to the model's own modules: outside the model it is
    refused, naming what to do. Before, explained with the gate carrying
    relevance (another explanation than the same encoder owned)."""
    global ENCODER
    from torch_geometric.nn import TransformerConv
    torch.manual_seed(0)
    ENCODER = Encoder(TransformerConv(F_IN, HID, beta=True)).eval()
    x, edge_index, _ = inputs("node")
    with pytest.raises(lrp.UnsupportedOpError, match="not a submodule of the model.*Register it in the model"):
        lrp.explain(ReadsAGlobalEncoder().eval(), x, edge_index, index=3)


# ===========================================================================
# Models whose own autograd machinery reruns or replaces part of the forward
# ===========================================================================
class NotReentrant(torch.nn.Module):
    """A conv run under ``torch.utils.checkpoint(use_reentrant=False)`` (saved-tensor hooks, no Function node)."""

    def __init__(self, conv):
        super().__init__()
        self.conv, self.ckpt_grad = conv, True

    def forward(self, x, edge_index):
        if not self.ckpt_grad:
            return self.conv(x, edge_index)
        return torch.utils.checkpoint.checkpoint(self.conv, x, edge_index, use_reentrant=False)


class Rerun(torch.nn.Module):
    """``GCN -> ReLU -> (checkpointed or reversible) block -> Linear``."""

    def __init__(self, block: str):
        super().__init__()
        from torch_geometric.nn import DeepGCNLayer, GroupAddRev
        self.conv = GCNConv(F_IN, 8)
        if block == "checkpoint":
            self.block = DeepGCNLayer(GCNConv(8, 8), torch.nn.LayerNorm(8), torch.nn.ReLU(), block="res+",
                                      ckpt_grad=True)
        elif block == "checkpoint, not reentrant":
            self.block = NotReentrant(GCNConv(8, 8))
        else:
            self.block = GroupAddRev(GCNConv(4, 4), num_groups=2)
        self.head = torch.nn.Linear(8, C)

    def forward(self, x, edge_index):
        return self.head(self.block(self.conv(x, edge_index).relu(), edge_index))


@pytest.mark.parametrize("block, hint", [("checkpoint", "ckpt_grad=False"),
                                         ("checkpoint, not reentrant", "ckpt_grad=False"),
                                         ("reversible", "disable=True")])
def test_a_forward_rerun_in_the_backward_is_refused_with_what_to_do(block, hint):
    """Activation checkpointing (``DeepGCNLayer(ckpt_grad=True)``) and
    ``GroupAddRev``'s invertible Function rerun part of the forward inside
    the backward, outside the relevance pass: the error says so and how to
    switch it off, instead of autograd's own message."""
    torch.manual_seed(0)
    model = Rerun(block).eval()
    x, edge_index, _ = inputs("node")
    with pytest.raises(lrp.UnsupportedOpError, match=hint):
        lrp.explain(model, x, edge_index, index=torch.tensor([1, 2]))
    if block.startswith("checkpoint"):  # switched off as the message says
        model.block.ckpt_grad = False
    else:
        model.block.disable = True
    assert_conserved(lrp.explain(model, x, edge_index, index=torch.tensor([1, 2])))


class Between(torch.nn.Module):
    """A GCN layer, ``fn`` on its output, a linear head of ``width`` inputs."""

    def __init__(self, fn, width=8):
        super().__init__()
        self.fn = fn
        self.conv, self.head = GCNConv(F_IN, 8), torch.nn.Linear(width, C)

    def forward(self, x, edge_index):
        return self.head(self.fn(self.conv(x, edge_index).relu()))


def explained_alike(fns, width=8):
    """The explanations of ``Between(fn, width)`` for each of ``fns``, with
    the same weights; their node and edge masks must agree."""
    x, edge_index, _ = inputs("node")
    found = []
    for fn in fns:
        torch.manual_seed(0)
        found.append(lrp.explain(Between(fn, width).eval(), x, edge_index, index=torch.tensor([1, 2])))
    for other in found[1:]:
        torch.testing.assert_close(other.node_mask, found[0].node_mask)
        torch.testing.assert_close(other.edge_mask, found[0].edge_mask)
    return found


class Tripled(torch.autograd.Function):
    """``3 x`` with a backward that is not its derivative (``10 g``)."""

    @staticmethod
    def forward(ctx, x):
        return 3 * x

    @staticmethod
    def backward(ctx, grad):
        return 10 * grad


def test_a_custom_function_is_explained_through_the_ops_of_its_forward():
    """The ops a custom autograd Function's ``forward`` runs on its inputs are
    routed like any others, so its own backward (here not even the
    derivative) plays no part: the explanation equals the one of ``3 * h``."""

    found = explained_alike([Tripled.apply, lambda h: 3 * h])
    assert_conserved(found[0])


class DetachedTripled(torch.autograd.Function):
    """``3 x`` computed on a detached copy: the pass sees none of its ops."""

    @staticmethod
    def forward(ctx, x):
        return 3 * x.detach()

    @staticmethod
    def backward(ctx, grad):
        return 3 * grad


def test_a_custom_function_the_pass_cannot_see_into_is_refused_or_reported():
    """Where a custom Function's forward runs on detached copies, its own
    backward would carry the relevance as a gradient (here three times the
    score, silently, before): refused under ``strict``, counted in the
    conservation report otherwise."""

    torch.manual_seed(0)
    model = Between(DetachedTripled.apply).eval()
    x, edge_index, _ = inputs("node")
    with pytest.raises(lrp.UnsupportedOpError, match="DetachedTripled"):
        lrp.explain(model, x, edge_index, index=torch.tensor([1, 2]))
    report = lrp.check_conservation(model, x, edge_index)
    assert any("DetachedTripled" in key for key in report.unsupported) and not report.conserved()


def test_strict_false_says_what_ran_without_a_rule():
    """``strict=False`` explains a model with an op that has no relevance
    rule (``sin``) with that op's gradient, and says so, once."""

    class Sine(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.head = GCNConv(F_IN, 8), torch.nn.Linear(8, C)

        def forward(self, x, edge_index):
            return self.head(torch.sin(self.conv(x, edge_index)))

    torch.manual_seed(0)
    x, edge_index, _ = inputs("node")
    with pytest.raises(lrp.UnsupportedOpError, match="'sin'"):
        lrp.explain(Sine().eval(), x, edge_index, index=torch.tensor([1]))
    with pytest.warns(RuntimeWarning, match=r"strict=False.*sin in the model \(Sine\) \(1x\)"):
        lrp.explain(Sine().eval(), x, edge_index, index=torch.tensor([1]), strict=False)
    # counted where it ran, and not again by the walk over the autograd graph
    assert list(lrp.check_conservation(Sine().eval(), x, edge_index).unsupported) == ["sin in the model (Sine)"]


class MlpHead(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = GCNConv(F_IN, 8)
        self.head = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, C))

    def forward(self, x, edge_index):
        return self.head(self.conv(x, edge_index).relu())


@pytest.mark.filterwarnings("ignore:`torch.jit.trace:DeprecationWarning")
@pytest.mark.parametrize("how", ["script", "trace"])
def test_a_torchscript_module_is_refused_naming_it(how):
    """The ops inside a TorchScript module never reach the pass, so its
    autograd nodes carried relevance as gradients: the explanation of a
    scripted head differed from the plain head's, silently, before. Now
    refused, naming the module; ``strict=False`` reports it."""
    torch.manual_seed(0)
    plain = MlpHead().eval()
    scripted = copy.deepcopy(plain)
    scripted.head = torch.jit.script(plain.head) if how == "script" else torch.jit.trace(plain.head, torch.randn(2, 8))
    x, edge_index, _ = inputs("node")
    index = torch.tensor([1, 2])
    torch.testing.assert_close(scripted(x, edge_index), plain(x, edge_index))
    with pytest.raises(lrp.UnsupportedOpError, match=r"did not see run.*TorchScript modules: 'head'"):
        lrp.explain(scripted, x, edge_index, index=index)
    with pytest.warns(RuntimeWarning, match="an op the pass did not see"):
        lrp.explain(scripted, x, edge_index, index=index, strict=False)
    assert_conserved(lrp.explain(plain, x, edge_index, index=index))


def test_a_scripted_function_that_only_selects_is_explained():
    """What matters is whether an unseen op mixes values: a TorchScript
    function that only selects columns has the gradient of a copy, which is
    its relevance, so it is explained like the eager function."""

    @torch.jit.script
    def first_columns(h: torch.Tensor) -> torch.Tensor:
        return h[:, :4]

    explained_alike([first_columns, lambda h: h[:, :4]], width=4)


def test_a_no_grad_region_of_the_forward_is_a_constant():
    """What a forward computes under ``torch.no_grad()`` is a constant of the
    pass, as autograd sees it, like an explicit ``detach()``. A view made
    there still says ``requires_grad`` (without a ``grad_fn``): relevance
    reaching it vanished before, unmeasured (here a residual of 2.6 times
    the score); now what the constant takes is measured as absorbed."""

    class SideHead(torch.nn.Module):
        def __init__(self, how):
            super().__init__()
            self.how = how
            self.conv, self.head, self.side = GCNConv(F_IN, 8), torch.nn.Linear(8, C), torch.nn.Linear(4, C)

        def forward(self, x, edge_index):
            h = self.conv(x, edge_index).relu()
            if self.how == "no_grad":
                with torch.no_grad():
                    side = h[:, :4]
            else:
                side = h[:, :4].detach()
            return self.head(h) + self.side(side)

    x, edge_index, _ = inputs("node")
    found = []
    for how in ("no_grad", "detach"):
        torch.manual_seed(0)
        found.append(lrp.explain(SideHead(how).eval(), x, edge_index, index=torch.tensor([1, 2])))
    assert_conserved(found[0])
    assert abs(found[0].absorbed) > 0.01 * abs(found[0].score)  # the side term's share
    torch.testing.assert_close(found[0].node_mask, found[1].node_mask)
    torch.testing.assert_close(found[0].edge_mask, found[1].edge_mask)


class Reversed(torch.nn.Module):
    """A gradient reversal after the first layer, as in domain-adversarial
    training: ``"tensor"`` with a tensor hook, ``"node"`` with a pre-hook on
    the autograd node (which the pass cannot see being registered)."""

    def __init__(self, hook=None):
        super().__init__()
        self.hook, self.calls = hook, 0
        self.conv, self.head = GCNConv(F_IN, 8), torch.nn.Linear(8, C)

    def reverse(self, grad):
        self.calls += 1
        return -grad

    def forward(self, x, edge_index):
        h = self.conv(x, edge_index).relu()
        if self.hook == "tensor" and h.requires_grad:
            h.register_hook(self.reverse)
        elif self.hook == "node" and h.requires_grad:
            h.grad_fn.register_prehook(lambda grads: tuple(self.reverse(g) for g in grads))
        return self.head(h)


def test_a_gradient_hook_of_the_forward_does_not_run():
    """The backward of the pass carries relevance: a gradient hook that the
    forward registers would reverse it (it flipped the explanation's sign,
    silently, before) or record it as a gradient. It is not registered
    during the pass, with a warning; the explanation is the forward's."""
    x, edge_index, _ = inputs("node")
    torch.manual_seed(0)
    plain = Reversed().eval()
    hooked = copy.deepcopy(plain)
    hooked.hook = "tensor"
    with pytest.warns(RuntimeWarning, match=r"gradient hook .* does not run during the relevance pass"):
        found = lrp.explain(hooked, x, edge_index, index=torch.tensor([1, 2]))
    assert hooked.calls == 0
    expected = lrp.explain(plain, x, edge_index, index=torch.tensor([1, 2]))
    torch.testing.assert_close(found.node_mask, expected.node_mask)
    torch.testing.assert_close(found.edge_mask, expected.edge_mask)
    assert_conserved(found)
    hooked(x.requires_grad_(), edge_index).sum().backward()  # outside the pass the hook is the model's
    assert hooked.calls == 1


def test_relevance_that_does_not_add_up_is_reported():
    """A pre-hook on an autograd node acts on relevance unseen by any rule
    (the pass sees no call that registers it). Every op reports what it
    keeps, so the residual exposes it: a warning says the accounting does
    not add up, once per call. The model without the hook gets none."""
    x, edge_index, _ = inputs("node")
    torch.manual_seed(0)
    plain = Reversed().eval()
    hooked = copy.deepcopy(plain)
    hooked.hook = "node"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert_conserved(lrp.explain(plain, x, edge_index, index=torch.tensor([1, 2])))
    with pytest.warns(RuntimeWarning, match=r"Reversed does not add up.*residual"):
        lrp.explain(hooked, x, edge_index, index=torch.tensor([1, 2]))
    with pytest.warns(RuntimeWarning, match=r"Reversed in the batch of target nodes 1 to 2 does not add up"):
        lrp.explain_nodes(hooked, x, edge_index, torch.tensor([1, 2]))
    with pytest.warns(RuntimeWarning, match=r"Reversed at target node 1 does not add up") as found:
        lrp.explain_nodes(hooked, x, edge_index, torch.tensor([1, 2]), strategy="shared")
    assert sum("does not add up" in str(w.message) for w in found) == 1  # once per call


@pytest.mark.parametrize("weights", ["leaf", "computed"])
def test_an_input_that_requires_grad_is_a_constant(weights):
    """An input the explanation is not about (a learned ``edge_weight``,
    computed by another module or made a leaf that requires grad) is a
    constant of the pass. Before, it carried half of each message's
    relevance out of the pass, silently: the node mask was half of what it
    is with the same weights detached."""

    class Weighted(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.head = GCNConv(F_IN, 8), torch.nn.Linear(8, C)

        def forward(self, x, edge_index, edge_weight=None):
            return self.head(self.conv(x, edge_index, edge_weight).relu())

    torch.manual_seed(0)
    model = Weighted().eval()
    x, edge_index, _ = inputs("node")
    plain = torch.rand(edge_index.shape[1])
    given = plain.clone().requires_grad_() if weights == "leaf" else \
        torch.sigmoid(torch.nn.Linear(1, 1)(plain[:, None])).squeeze(-1)
    constant = given.detach()
    explainer = Explainer(model, algorithm=lrp.LRP(), explanation_type="model", node_mask_type="attributes",
                          edge_mask_type="object", model_config=dict(mode="multiclass_classification",
                                                                      task_level="node", return_type="raw"))
    for explain in (lambda w: lrp.explain(model, x, edge_index, index=torch.tensor([1, 2]), edge_weight=w),
                    lambda w: explainer(x, edge_index, index=torch.tensor([1, 2]), edge_weight=w)):
        found, expected = explain(given), explain(constant)
        torch.testing.assert_close(found.node_mask, expected.node_mask)
        torch.testing.assert_close(found.edge_mask, expected.edge_mask)
    assert not given.is_leaf or given.grad is None
    # the conservation check reads it as a constant too
    report = lrp.check_conservation(model, x, edge_index, edge_weight=given)
    assert report.conserved(), report


def test_a_parameter_given_as_an_input_stays_a_parameter():
    """A model's own parameter passed in as an input (learned edge weights
    handed to the layer from outside the model's forward) is read as it is
    where the forward takes it from the model: a weight, which the rules
    modify (here Gamma raises the positive ones), not a constant gate."""
    from torch_geometric.nn import GraphConv

    class LearnedEdges(torch.nn.Module):
        def __init__(self, own):
            super().__init__()
            self.own = own
            self.conv, self.head = GraphConv(F_IN, 8), torch.nn.Linear(8, C)
            self.weight = torch.nn.Parameter(torch.randn(inputs("node")[1].shape[1]))

        def forward(self, x, edge_index, edge_weight=None):
            weight = self.weight if self.own else edge_weight
            return self.head(self.conv(x, edge_index, weight).relu())

    x, edge_index, _ = inputs("node")
    found = []
    for own in (True, False):
        torch.manual_seed(0)
        model = LearnedEdges(own).eval()
        given = {} if own else {"edge_weight": model.weight}
        found.append(lrp.explain(model, x, edge_index, index=torch.tensor([1, 2]), rules=lrp.rules.Gamma(1.0),
                                 subgraph=False, **given))
    torch.testing.assert_close(found[1].node_mask, found[0].node_mask)
    torch.testing.assert_close(found[1].edge_mask, found[0].edge_mask)


# ===========================================================================
# Caches of another input
# ===========================================================================
def _cached_model():
    torch.manual_seed(0)
    return CachedGCN(C).eval()


def _other_graph(edge_index):
    """The same node count, another edge list (every edge rewired)."""
    return torch.stack([edge_index[0], edge_index[1].roll(5)])


@pytest.mark.parametrize("entry", ["explain", "explainer", "explain_nodes", "walks", "check_conservation"])
def test_a_cache_of_another_graph_is_refused(entry):
    """``cached=True`` layers that cached graph A read A's normalisation (and
    edges) on graph B. A pass never reads caches, so it would explain the
    model on B, not what the model computes: refused, naming the layers, and
    the caches are left as they were."""
    x, edge_index, _ = inputs("node")
    model = _cached_model()
    with torch.no_grad():
        model(x, _other_graph(edge_index))  # caches graph A
    cache = model.conv1._cached_edge_index
    with pytest.raises(ValueError, match=r"'conv1' \(GCNConv\), 'conv2' \(GCNConv\) hold a cache.*cached=False"):
        if entry == "explain":
            lrp.explain(model, x, edge_index, index=3)
        elif entry == "explainer":
            lrp_explainer(model, "multiclass_classification", "raw", "node")(x, edge_index, index=3)
        elif entry == "explain_nodes":
            lrp.explain_nodes(model, x, edge_index, torch.tensor([1, 3]))
        elif entry == "walks":
            lrp.walks(model, x, edge_index, index=3, top_k=3)
        else:
            lrp.check_conservation(model, x, edge_index)
    assert model.conv1._cached_edge_index is cache and model.conv1.cached


def test_a_cache_of_the_same_graph_explains_as_without_it():
    """The common case (cached=True on one fixed graph): the same explanation
    as the model without caches, the caches and the training flag kept."""
    x, edge_index, _ = inputs("node")
    model = _cached_model().train()
    with torch.no_grad():
        model(x, edge_index)
    cache = model.conv1._cached_edge_index
    cached = lrp.explain(model, x, edge_index, index=3)
    assert model.conv1._cached_edge_index is cache and model.training and model.conv1.training
    model.conv1._cached_edge_index = model.conv2._cached_edge_index = None
    model.conv1.cached = model.conv2.cached = False
    fresh = lrp.explain(model, x, edge_index, index=3)
    assert_same_explanation(cached, fresh, atol=1e-6)
    assert cached.score == pytest.approx(fresh.score, rel=1e-6)


def test_sgconv_features_cached_from_other_features_are_refused():
    """SGConv caches its propagated features: explaining other features
    would explain a model that ignores them."""
    from torch_geometric.nn import SGConv
    x, edge_index, _ = inputs("node")
    torch.manual_seed(0)
    model = SGConv(F_IN, C, K=2, cached=True).eval()
    with torch.no_grad():
        model(x + 1.0, edge_index)
    with pytest.raises(ValueError, match=r"SGConv.*_cached_x"):
        lrp.explain(model, x, edge_index, index=3)
    with torch.no_grad():
        model._cached_x = None
        model(x, edge_index)
    ex = lrp.explain(model, x, edge_index, index=3)
    assert ex.score == pytest.approx(model(x, edge_index)[3, ex.target].item(), rel=1e-5)


@pytest.mark.parametrize("ones", [False, True])
def test_explain_edge_masks_left_on_by_the_user_are_refused_where_they_change_the_output(ones):
    """``set_masks`` scales every message: LRP explains the layers without
    them, so masks that change the output are refused (naming
    ``clear_masks``); masks of ones change nothing and are explained
    through. The masks stay on either way."""
    x, edge_index, _ = inputs("node")
    model = build("gcn")
    reference = lrp.explain(model, x, edge_index, index=3)
    torch.manual_seed(1)
    mask = torch.ones(edge_index.shape[1]) if ones else torch.rand(edge_index.shape[1])
    set_masks(model, mask, edge_index, apply_sigmoid=False)
    try:
        if ones:
            assert_same_explanation(lrp.explain(model, x, edge_index, index=3), reference)
        else:
            with pytest.raises(ValueError, match=r"explain edge masks on \(set_masks\).*clear_masks"):
                lrp.explain(model, x, edge_index, index=3)
            with pytest.raises(ValueError, match=r"explain edge masks on \(set_masks\).*clear_masks"):
                lrp.check_conservation(model, x, edge_index)  # before: the converted copy leaves masks out
        assert all(m._explain and m._edge_mask is mask for m in model.modules() if isinstance(m, MessagePassing))
    finally:
        clear_masks(model)


@pytest.mark.parametrize("kind", ["full", "pre", "old"])
def test_a_module_backward_hook_does_not_run_during_the_pass(kind):
    """A module backward hook (a gradient monitor, per-sample gradients)
    was refused as an unknown autograd Function, and with ``strict=False``
    it was called with relevance and what it returned changed the
    explanation. It is set aside for the pass: the explanation is the
    model's without it, and the hook is the model's again afterwards."""
    x, edge_index, _ = inputs("node")
    torch.manual_seed(0)
    model = GCN(C).eval()
    expected = lrp.explain(model, x, edge_index, index=3)
    calls = []

    def tripled(module, grad_input, grad_output=None):
        calls.append(module)
        return tuple(None if g is None else 3 * g for g in grad_input)

    register = {"full": model.conv1.register_full_backward_hook,
                "pre": model.conv1.register_full_backward_pre_hook,
                "old": model.conv1.register_backward_hook}[kind]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # register_backward_hook is deprecated
        handle = register(tripled)
    for strict in (True, False):
        found = lrp.explain(model, x, edge_index, index=3, strict=strict)
        assert calls == []
        assert_same_explanation(found, expected)
    model(x.clone().requires_grad_(), edge_index).sum().backward()  # outside the pass the hook is the model's
    assert calls
    handle.remove()


def test_a_global_module_backward_hook_is_refused_naming_it():
    x, edge_index, _ = inputs("node")
    model = GCN(C).eval()
    handle = torch.nn.modules.module.register_module_full_backward_hook(lambda m, gi, go: None)
    try:
        with pytest.raises(RuntimeError, match=r"global module backward hook.*handle.remove\(\)"):
            lrp.explain(model, x, edge_index, index=3)
    finally:
        handle.remove()
    lrp.explain(model, x, edge_index, index=3)


def test_parameters_made_under_inference_mode_are_refused_naming_one():
    """A model built under ``torch.inference_mode()`` failed with torch's
    bare "Inference tensors cannot be saved for backward"."""
    x, edge_index, _ = inputs("node")
    with torch.inference_mode():
        model = GCN(C).eval()
    with pytest.raises(RuntimeError, match=r"model: 'conv1\.\w+' is an inference tensor.*load_state_dict"):
        lrp.explain(model, x, edge_index, index=3)
    rebuilt = GCN(C).eval()
    rebuilt.load_state_dict(model.state_dict())
    assert_conserved(lrp.explain(rebuilt, x, edge_index, index=3))


def test_a_forward_that_fails_with_a_cache_keeps_its_error_as_the_cause():
    """Where the model fails with its caches but runs without them, the error
    blames the caches and chains the model's own error, which may have
    another cause."""
    x, edge_index, _ = inputs("node")
    model = _cached_model()
    with torch.no_grad():
        model(x, edge_index)  # caches this graph
    failing = {"left": 1}

    def fail_once(module, args):
        if failing["left"]:
            failing["left"] -= 1
            raise RuntimeError("out of memory (once)")

    handle = model.conv1.register_forward_pre_hook(fail_once)
    try:
        with pytest.raises(ValueError, match=r"hold a cache") as raised:
            lrp.explain(model, x, edge_index, index=3)
    finally:
        handle.remove()
    assert isinstance(raised.value.__cause__, RuntimeError) and "out of memory" in str(raised.value.__cause__)


def test_one_lrp_connected_to_a_second_explainer_with_other_settings_warns():
    """PyG hands an algorithm the settings of the Explainer built with it; an
    lrp.LRP() given to a second Explainer with other settings changes what the
    first explains (its node mask became [N, 1], its edge mask went), which
    was silent before. Same settings again: no warning."""
    model = build("gcn")
    x, edge_index = DATA["x"], DATA["edge_index"]
    algorithm = lrp.LRP()
    config = dict(mode="multiclass_classification", task_level="node", return_type="raw")
    Explainer(model, algorithm=algorithm, explanation_type="model", node_mask_type="attributes",
              edge_mask_type="object", model_config=config)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        same = Explainer(model, algorithm=algorithm, explanation_type="model", node_mask_type="attributes",
                         edge_mask_type="object", model_config=config)
    with pytest.warns(RuntimeWarning, match=r"connected to an Explainer with other settings before.*Give each "
                                            r"Explainer its own lrp.LRP\(\)"):
        Explainer(model, algorithm=algorithm, explanation_type="model", node_mask_type="object",
                  edge_mask_type=None, model_config=config)
    assert same(x, edge_index, index=3).node_mask.shape == (x.shape[0], 1)  # what the warning says


def test_an_interrupt_while_the_edge_hooks_are_set_leaves_no_hook(monkeypatch):
    """EdgeRelevance is entered through an exit stack, which registers its
    exit only once its enter returns: an exception (Ctrl-C) raised inside
    the enter left its hooks on every layer, and a global forward pre-hook
    that went on hooking the message-passing layers of every model run later
    in the thread."""
    from torch.nn.modules import module as torch_modules

    from torch_geometric_lrp import mode as relevance_mode

    def hooks(model):
        return sum(len(getattr(m, a, {})) for m in model.modules() for a in
                   ("_forward_pre_hooks", "_forward_hooks", "_propagate_forward_pre_hooks", "_message_forward_hooks",
                    "_aggregate_forward_pre_hooks"))

    model = build("gcn")
    x, edge_index = DATA["x"], DATA["edge_index"]
    track = relevance_mode.RelevanceMode.track_columns

    def interrupted(self, edges):
        if edges is not None:  # the enter's last step
            raise KeyboardInterrupt
        return track(self, edges)

    monkeypatch.setattr(relevance_mode.RelevanceMode, "track_columns", interrupted)
    before = len(torch_modules._global_forward_pre_hooks)
    with pytest.raises(KeyboardInterrupt):
        lrp.explain(model, x, edge_index, index=3)
    assert hooks(model) == 0
    assert len(torch_modules._global_forward_pre_hooks) == before
