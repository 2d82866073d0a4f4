"""End to end: ``lrp.LRP`` inside PyG's ``Explainer``, ``lrp.explain`` and
``lrp.explain_nodes`` on stock PyG models, and PyG's own tools on the result.

Every model here is a plain PyG model (GCN, GIN with an MLP inside, GAT with
several heads, a graph classifier with mean pooling, a GCN link predictor)
that can end in a softmax / log-softmax / sigmoid. Each one also has
``logits()``: the same forward without that final activation, from which the
tests compute the score they expect (LRP starts from the target's logit).

For each explanation the tests check: mask shapes; ``score ==
relevance_total + absorbed + lost``; that the score is the target's logit
(the prediction's for ``explanation_type='model'``); zeros outside the
receptive field of the explained outputs; per-layer conservation of edge
relevance on bias-free models; the mask views; and that the model is handed
back exactly as it was.
"""
from __future__ import annotations

import copy
import importlib
import itertools

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.explain import Explainer, Explanation, GNNExplainer
from torch_geometric.explain.algorithm.utils import clear_masks, set_masks
from torch_geometric.explain.metric import characterization_score, fidelity, unfaithfulness
from torch_geometric.nn import MLP, GATConv, GCNConv, GINConv, GINEConv, MessagePassing, global_mean_pool
from torch_geometric.utils import to_undirected

import torch_geometric_lrp as lrp

N, F_IN, C, HID = 30, 6, 3, 16
REL = 1e-4


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """The graphs here are tiny: intra-op threads only contend (on a loaded
    two-core machine a 30-row scatter took milliseconds instead of microseconds)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# (mode, return_type) pairs PyG's ModelConfig accepts.
MODES = [
    ("binary_classification", "raw"),
    ("binary_classification", "probs"),
    ("multiclass_classification", "raw"),
    ("multiclass_classification", "log_probs"),
    ("multiclass_classification", "probs"),
    ("regression", "raw"),
]
ACT = {("binary_classification", "probs"): "sigmoid",
       ("multiclass_classification", "log_probs"): "log_softmax",
       ("multiclass_classification", "probs"): "softmax"}


def out_dim(mode: str) -> int:
    return C if mode == "multiclass_classification" else 1


def finish(h: torch.Tensor, act) -> torch.Tensor:
    if act is None:
        return h
    if act == "sigmoid":
        return torch.sigmoid(h)
    return getattr(F, act)(h, dim=-1)


# ---------------------------------------------------------------------------
# Models: stock PyG layers; ``act`` is the final activation (None for raw).
# ---------------------------------------------------------------------------
class Model(torch.nn.Module):
    level = "node"
    hops = 2  # message-passing layers

    def forward(self, x, edge_index, **kwargs):
        return finish(self.logits(x, edge_index, **kwargs), self.act)


class GCN(Model):
    def __init__(self, out, act=None, bias=True):
        super().__init__()
        self.act = act
        self.conv1 = GCNConv(F_IN, HID, bias=bias)
        self.conv2 = GCNConv(HID, out, bias=bias)

    def logits(self, x, edge_index):
        x = F.relu(self.conv1(x, edge_index))
        x = F.dropout(x, p=0.5, training=self.training)
        return self.conv2(x, edge_index)


class GIN(Model):
    def __init__(self, out, act=None, bias=True):
        super().__init__()
        self.act = act
        self.conv1 = GINConv(MLP([F_IN, HID, HID], bias=bias))
        self.conv2 = GINConv(MLP([HID, HID, out], bias=bias), train_eps=True)

    def logits(self, x, edge_index):
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)


class GAT(Model):
    def __init__(self, out, act=None, bias=True):
        super().__init__()
        self.act = act
        self.conv1 = GATConv(F_IN, 8, heads=3, dropout=0.3, bias=bias)
        self.conv2 = GATConv(24, out, heads=2, concat=False, bias=bias)

    def logits(self, x, edge_index):
        x = F.elu(self.conv1(x, edge_index))
        x = F.dropout(x, p=0.3, training=self.training)
        return self.conv2(x, edge_index)


class GraphClassifier(Model):
    level = "graph"

    def __init__(self, out, act=None, bias=True):
        super().__init__()
        self.act = act
        self.conv1 = GCNConv(F_IN, HID, bias=bias)
        self.conv2 = GCNConv(HID, HID, bias=bias)
        self.lin = torch.nn.Linear(HID, out, bias=bias)

    def logits(self, x, edge_index, batch):
        x = F.relu(self.conv1(x, edge_index))
        x = F.relu(self.conv2(x, edge_index))
        return self.lin(global_mean_pool(x, batch))


class LinkPredictor(Model):
    """GCN encoder; score of a pair = ``(z[src] * z[dst]).sum(-1)`` (one
    output), or a linear head on ``z[src] * z[dst]`` (several classes)."""
    level = "edge"

    def __init__(self, out, act=None, bias=True):
        super().__init__()
        self.act = act
        self.conv1 = GCNConv(F_IN, HID, bias=bias)
        self.conv2 = GCNConv(HID, HID, bias=bias)
        self.head = torch.nn.Linear(HID, out, bias=bias) if out > 1 else None

    def logits(self, x, edge_index, edge_label_index):
        z = self.conv2(F.relu(self.conv1(x, edge_index)), edge_index)
        h = z[edge_label_index[0]] * z[edge_label_index[1]]
        return h.sum(dim=-1) if self.head is None else self.head(h)


class GINE(Model):
    """Reads ``edge_attr`` (GINEConv adds it to every message)."""

    def __init__(self, out, act=None, bias=True):
        super().__init__()
        self.act = act
        self.conv1 = GINEConv(MLP([F_IN, HID, HID], bias=bias), edge_dim=4)
        self.conv2 = GINEConv(MLP([HID, HID, out], bias=bias), edge_dim=4)

    def logits(self, x, edge_index, edge_attr):
        return self.conv2(self.conv1(x, edge_index, edge_attr).relu(), edge_index, edge_attr)


MODELS = {"gcn": GCN, "gin": GIN, "gat": GAT, "graph": GraphClassifier, "link": LinkPredictor}
NODE_MODELS = ["gcn", "gin", "gat"]


def build(name: str, mode: str = "multiclass_classification", return_type: str = "raw", bias: bool = True,
          seed: int = 0) -> Model:
    torch.manual_seed(seed)
    model = MODELS[name](out_dim(mode), ACT.get((mode, return_type)), bias=bias)
    model.eval()
    return model


# ---------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------
def ring_with_chords(n: int, chords: int, generator: torch.Generator, offset: int = 0) -> torch.Tensor:
    src = torch.arange(n)
    ring = torch.stack([src, (src + 1) % n])
    extra = torch.randint(0, n, (2, chords), generator=generator)
    extra = extra[:, extra[0] != extra[1]]
    return to_undirected(torch.cat([ring, extra], dim=1), num_nodes=n) + offset


def make_data():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(N, F_IN, generator=g)
    edge_index = ring_with_chords(N, 6, g)
    # one directed edge, so that direction matters for the receptive field
    edge_index = torch.cat([edge_index, torch.tensor([[2], [17]])], dim=1)
    sizes = [7, 9, 8]
    offsets = [0, 7, 16]
    graph_edge_index = torch.cat([ring_with_chords(s, 2, g, o) for s, o in zip(sizes, offsets)], dim=1)
    batch = torch.cat([torch.full((s,), i) for i, s in enumerate(sizes)])
    graph_x = torch.randn(sum(sizes), F_IN, generator=g)
    edge_label_index = torch.tensor([[0, 4, 10, 15, 22, 7, 28], [3, 9, 11, 27, 2, 7, 13]])
    return dict(x=x, edge_index=edge_index, graph_x=graph_x, graph_edge_index=graph_edge_index, batch=batch,
                edge_label_index=edge_label_index)


DATA = make_data()


def inputs(level: str):
    """``(x, edge_index, kwargs)`` for a task level."""
    if level == "graph":
        return DATA["graph_x"], DATA["graph_edge_index"], {"batch": DATA["batch"]}
    if level == "edge":
        return DATA["x"], DATA["edge_index"], {"edge_label_index": DATA["edge_label_index"]}
    return DATA["x"], DATA["edge_index"], {}


# index kinds: an int, a tensor of several, None (all outputs)
INDEX = {
    "node": {"int": 3, "tensor": torch.tensor([3, 17, 22]), "none": None},
    "graph": {"int": 1, "tensor": torch.tensor([0, 2]), "none": None},
    "edge": {"int": 2, "tensor": torch.tensor([0, 3, 5]), "none": None},
}


def rows_of(index, num_rows: int) -> torch.Tensor:
    if index is None:
        return torch.arange(num_rows)
    return torch.as_tensor(index).view(-1)


# ---------------------------------------------------------------------------
# What the tests expect
# ---------------------------------------------------------------------------
@torch.no_grad()
def logits_of(model: Model, level: str) -> torch.Tensor:
    x, edge_index, kwargs = inputs(level)
    return model.logits(x, edge_index, **kwargs)


def prediction_of(logits: torch.Tensor, mode: str) -> torch.Tensor:
    if mode == "multiclass_classification":
        return logits.argmax(dim=-1)
    if mode == "binary_classification":
        return (logits.view(logits.shape[0]) > 0).long()
    return logits


def other_target(logits: torch.Tensor, mode: str) -> torch.Tensor:
    """A target that differs from the prediction everywhere (phenomenon)."""
    prediction = prediction_of(logits, mode)
    if mode == "multiclass_classification":
        return (prediction + 1) % C
    if mode == "binary_classification":
        return 1 - prediction
    return prediction + 1.0


def expected_score(logits: torch.Tensor, mode: str, target, rows: torch.Tensor) -> float:
    flat = logits.view(logits.shape[0], -1)[rows]
    if mode == "regression":
        return flat.sum().item()
    target = target.view(-1)[rows]
    if mode == "binary_classification":
        return torch.where(target == 1, flat[:, 0], -flat[:, 0]).sum().item()
    return flat.gather(1, target.view(-1, 1)).sum().item()


def receptive_field(level: str, rows: torch.Tensor, hops: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Nodes that can reach the explained outputs, and edges whose messages
    can (an edge j -> i is used when i is at most ``hops - 1`` hops away)."""
    x, edge_index, kwargs = inputs(level)
    n = x.shape[0]
    if level == "graph":
        nodes = torch.isin(kwargs["batch"], rows)
        return nodes, nodes[edge_index[1]]
    seeds = rows if level == "node" else kwargs["edge_label_index"][:, rows].reshape(-1)
    reach = [torch.zeros(n, dtype=torch.bool)]
    reach[0][seeds] = True
    for _ in range(hops):
        step = reach[-1].clone()
        step[edge_index[0][reach[-1][edge_index[1]]]] = True
        reach.append(step)
    return reach[hops], reach[hops - 1][edge_index[1]]


def lrp_explainer(model, mode, return_type, level, explanation_type="model", node_mask_type="attributes",
                  edge_mask_type="object", mask="signed", **kwargs) -> Explainer:
    return Explainer(
        model, algorithm=lrp.LRP(mask=mask), explanation_type=explanation_type, node_mask_type=node_mask_type,
        edge_mask_type=edge_mask_type, model_config=dict(mode=mode, task_level=level, return_type=return_type),
        **kwargs,
    )


def check_relevance(explanation: Explanation, model: Model, mode: str, index, target_given=None):
    """Score = logit of the target; conservation; target = prediction for
    model explanations; zeros outside the receptive field."""
    level = model.level
    logits = logits_of(model, level)
    rows = rows_of(index, logits.shape[0])
    if target_given is None:
        target = prediction_of(logits, mode)
        if mode == "regression":
            torch.testing.assert_close(explanation.target.view(-1), target.view(-1))
        else:
            assert torch.equal(explanation.target.view(-1), target.view(-1)), "model explanation: target != prediction"
    else:
        target = target_given
    expected = expected_score(logits, mode, target, rows)
    assert explanation.score == pytest.approx(expected, rel=REL, abs=1e-6), "score is not the target's logit"
    total = explanation.relevance_total + explanation.absorbed + explanation.lost
    assert total == pytest.approx(explanation.score, rel=REL, abs=1e-6), "score != relevance_total + absorbed + lost"

    nodes, edges = receptive_field(level, rows, model.hops)
    node_mask, edge_mask = explanation.node_mask, explanation.edge_mask
    if node_mask is not None and node_mask.shape[0] == nodes.numel():
        assert torch.all(node_mask[~nodes] == 0), "node relevance outside the receptive field"
        assert node_mask[nodes].abs().sum() > 0
    if edge_mask is not None:
        assert torch.all(edge_mask[~edges] == 0), "edge relevance outside the receptive field"
        assert edge_mask[edges].abs().sum() > 0


# ---------------------------------------------------------------------------
# Helpers for the model hygiene checks
# ---------------------------------------------------------------------------
_GLOBAL_HOOKS = ["_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
                 "_global_backward_pre_hooks", "_global_forward_hooks_always_called"]


def snapshot(model: torch.nn.Module) -> dict:
    snap = {
        "state": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "params": [(n, id(p), p.requires_grad, p.grad is None) for n, p in model.named_parameters()],
        "modules": [(n, type(m), m.training, sorted(vars(m)), sorted(m._parameters), sorted(m._buffers))
                    for n, m in model.named_modules()],
        "hooks": [(n, k, len(v)) for n, m in model.named_modules() for k, v in sorted(vars(m).items())
                  if "hook" in k and isinstance(v, dict)],
        "global": [len(getattr(torch.nn.modules.module, h, {})) for h in _GLOBAL_HOOKS],
        "mp": [(n, m._explain, m._edge_mask is None, m._loop_mask is None, m._apply_sigmoid,
                "_edge_mask" in m._parameters, getattr(m, "fuse", None))
               for n, m in model.named_modules() if isinstance(m, MessagePassing)],
    }
    return snap


def assert_same(before: dict, after: dict) -> None:
    assert before["state"].keys() == after["state"].keys()
    for key, value in before["state"].items():
        assert torch.equal(value, after["state"][key]), f"state_dict['{key}'] changed"
    for key in ("params", "modules", "hooks", "global", "mp"):
        assert before[key] == after[key], f"model {key} changed"


# ===========================================================================
# 1. Every (task level, mode, return type, explanation type, index) through
#    PyG's Explainer and through lrp.explain.
# ===========================================================================
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
    """``lrp.explain`` infers the task level, mode (where the output tells)
    and return type, and gives what the Explainer gives."""
    model = build(name, mode, return_type)
    level = model.level
    x, edge_index, kwargs = inputs(level)
    index = INDEX[level][index_kind]
    target = other_target(logits_of(model, level), mode) if explanation_type == "phenomenon" else None
    # A one-output model must say whether it is binary or regression, unless
    # a float target (regression) says it.
    needs_mode = out_dim(mode) == 1 and not (mode == "regression" and target is not None)
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
    assert torch.equal(explanation.target, torch.ones(N, dtype=torch.long))
    assert explanation.score == pytest.approx(logits[[3, 17]].sum().item(), rel=REL)


class SqueezedSigmoidGCN(GCN):
    """A binary model whose sigmoid output is reshaped afterwards."""

    def __init__(self):
        super().__init__(1)

    def forward(self, x, edge_index):
        return torch.sigmoid(self.logits(x, edge_index)).squeeze(-1)


def test_explain_infers_probs_through_a_reshape():
    torch.manual_seed(0)
    model = SqueezedSigmoidGCN().eval()
    x, edge_index, _ = inputs("node")
    explanation = lrp.explain(model, x, edge_index, index=3, mode="binary_classification")
    assert explanation._model_config.return_type.value == "probs"
    logits = logits_of(model, "node").view(-1)
    assert torch.equal(explanation.target, (logits > 0).long())


def test_score_is_the_logit_through_a_reshape():
    torch.manual_seed(0)
    model = SqueezedSigmoidGCN().eval()
    x, edge_index, _ = inputs("node")
    explanation = lrp.explain(model, x, edge_index, index=3, mode="binary_classification")
    logit = logits_of(model, "node").view(-1)[3].item()
    assert explanation.score == pytest.approx(abs(logit), rel=REL)


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
    torch.testing.assert_close(a.node_mask, b.node_mask)


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
    total = explanation.relevance_total + explanation.absorbed + explanation.lost
    assert total == pytest.approx(explanation.score, rel=REL, abs=1e-6)
    assert explanation.validate_masks()


@pytest.mark.parametrize("node_mask_type", ["attributes", "object", "common_attributes"])
@pytest.mark.parametrize("view", ["abs", "positive"])
@pytest.mark.parametrize("name", ["gcn", "gat", "graph", "link"])
def test_mask_views(name, view, node_mask_type):
    model = build(name)
    level = model.level
    x, edge_index, kwargs = inputs(level)
    index = INDEX[level]["tensor"]
    signed = lrp_explainer(model, "multiclass_classification", "raw", level, node_mask_type=node_mask_type)(
        x, edge_index, index=index, **kwargs)
    shown = lrp_explainer(model, "multiclass_classification", "raw", level, node_mask_type=node_mask_type,
                          mask=view)(x, edge_index, index=index, **kwargs)
    fn = torch.abs if view == "abs" else (lambda t: t.clamp(min=0))
    assert (signed.node_mask < 0).any() and (signed.edge_mask < 0).any(), "no negative relevance: the test is vacuous"
    for key in ("node_mask", "edge_mask"):
        assert (shown[key] >= 0).all()
        torch.testing.assert_close(shown[key], fn(signed[key]))
    assert shown.score == signed.score and shown.relevance_total == signed.relevance_total


def test_mask_argument_is_checked():
    with pytest.raises(ValueError, match="mask"):
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


def edge_attr_data():
    x, edge_index, _ = inputs("node")
    edge_attr = torch.randn(edge_index.shape[1], 4, generator=torch.Generator().manual_seed(5))
    return x, edge_index, edge_attr


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
    total = explanation.relevance_total + explanation.absorbed + explanation.lost
    assert total == pytest.approx(explanation.score, rel=REL)
    _, edges = receptive_field("node", torch.tensor([3, 17]), 2)
    assert torch.all(explanation.edge_attr_mask[~edges] == 0)


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
    """``pow`` has no relevance rule: the relevance pass must raise."""

    def logits(self, x, edge_index):
        return super().logits(x, edge_index).pow(2)


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
    (and are not called by the relevance pass on the user's modules)."""
    model = build("gcn")
    model.conv1.lin.weight.requires_grad_(False)
    calls = []
    handle = model.conv2.register_forward_hook(lambda *a: calls.append(1))
    before = snapshot(model)
    run_both(model, "gcn")
    assert_same(before, snapshot(model))
    assert model.conv1.lin.weight.requires_grad is False and model.conv2.lin.weight.requires_grad is True
    handle.remove()


def test_converted_model_is_cached_and_follows_the_weights():
    model = build("gcn")
    algorithm = lrp.LRP()
    explainer = Explainer(model, algorithm=algorithm, explanation_type="model", node_mask_type="attributes",
                          edge_mask_type="object",
                          model_config=dict(mode="multiclass_classification", task_level="node", return_type="raw"))
    x, edge_index, _ = inputs("node")
    first = explainer(x, edge_index, index=3)
    converted = algorithm.lrp_model(model)
    assert algorithm.lrp_model(model) is converted
    assert converted is not model
    # new weights (loaded in place, as training does) are seen by the cached copy
    state = build("gcn", seed=1).state_dict()
    model.load_state_dict(state)
    second = explainer(x, edge_index, index=3)
    assert algorithm.lrp_model(model) is converted
    assert second.score != pytest.approx(first.score)
    check_relevance(second, model, "multiclass_classification", 3)


def _replace_submodule(model):
    torch.manual_seed(5)
    model.conv2 = GCNConv(HID, C)


def _assign_state(model):
    model.load_state_dict(build("gcn", seed=3).state_dict(), assign=True)


def _assign_parameter(model):
    model.conv2.bias = torch.nn.Parameter(torch.full((C,), 5.0))


def _change_setting(model):
    model.conv2.add_self_loops = False


@pytest.mark.parametrize("change", [_replace_submodule, _assign_state, _assign_parameter, _change_setting])
def test_cached_conversion_follows_replaced_parts(change):
    """The cached LRP copy holds the objects it was made from: a replaced
    module, parameter or setting must not leave it explaining the old model."""
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
# 6. explain_nodes: batched == one by one on the full graph
# ===========================================================================
TARGETS = torch.tensor([0, 1, 2, 3, 17, 16, 22, 9, 29, 14, 3])  # neighbours, far apart, a repeat


@pytest.fixture(scope="module")
def full_graph_explanations():
    cache = {}

    def get(name, mode="multiclass_classification", return_type="raw"):
        key = (name, mode, return_type)
        if key not in cache:
            model = build(name, mode, return_type)
            extra = {} if out_dim(mode) > 1 else {"mode": mode}
            cache[key] = (model, [lrp.explain(model, DATA["x"], DATA["edge_index"], index=int(t), **extra)
                                  for t in TARGETS])
        return cache[key]
    return get


def assert_matches_full_graph(batched, full, targets):
    assert len(batched) == len(targets)
    for t, ex, ref in zip(targets.tolist(), batched, full):
        assert int(ex.node_index[ex.index]) == t
        assert ex.node_mask.shape == (ex.node_index.numel(), F_IN)
        torch.testing.assert_close(ex.node_mask, ref.node_mask[ex.node_index], rtol=0, atol=1e-5)
        outside = torch.ones(N, dtype=torch.bool)
        outside[ex.node_index] = False
        assert torch.all(ref.node_mask[outside] == 0)
        torch.testing.assert_close(ex.edge_mask, ref.edge_mask[ex.edge_id], rtol=0, atol=1e-5)
        torch.testing.assert_close(ex.edge_index, DATA["edge_index"][:, ex.edge_id].apply_(
            lambda v: int((ex.node_index == v).nonzero())))
        assert ex.score == pytest.approx(ref.score, rel=1e-5, abs=1e-6)
        assert int(ex.target) == int(ref.target[t])
        assert ex.unassigned == pytest.approx(ex.score - ex.relevance_total, abs=1e-6)


@pytest.mark.parametrize("batch_size", [1, 3, 200])
@pytest.mark.parametrize("name", NODE_MODELS)
def test_explain_nodes_equals_full_graph(full_graph_explanations, name, batch_size):
    model, full = full_graph_explanations(name)
    batched = lrp.explain_nodes(model, DATA["x"], DATA["edge_index"], TARGETS, batch_size=batch_size)
    assert_matches_full_graph(batched, full, TARGETS)


@pytest.mark.parametrize("mode,return_type", [("binary_classification", "probs"),
                                              ("multiclass_classification", "log_probs")])
def test_explain_nodes_other_modes(full_graph_explanations, mode, return_type):
    model, full = full_graph_explanations("gcn", mode, return_type)
    batched = lrp.explain_nodes(model, DATA["x"], DATA["edge_index"], TARGETS, batch_size=4,
                                mode=None if out_dim(mode) > 1 else mode)
    assert_matches_full_graph(batched, full, TARGETS)


def test_explain_nodes_with_target_and_view():
    model = build("gat")
    logits = logits_of(model, "node")
    target = other_target(logits, "multiclass_classification")[TARGETS]
    batched = lrp.explain_nodes(model, DATA["x"], DATA["edge_index"], TARGETS, target=target, batch_size=3)
    shown = lrp.explain_nodes(model, DATA["x"], DATA["edge_index"], TARGETS, target=target, batch_size=3,
                              mask="abs")
    for t, cls, ex, ab in zip(TARGETS.tolist(), target.tolist(), batched, shown):
        assert ex.score == pytest.approx(logits[t, cls].item(), rel=1e-5, abs=1e-6)
        full = lrp.explain(model, DATA["x"], DATA["edge_index"], index=t, target=torch.tensor([cls]))
        torch.testing.assert_close(ex.node_mask, full.node_mask[ex.node_index], rtol=0, atol=1e-5)
        torch.testing.assert_close(ab.node_mask, ex.node_mask.abs())
        torch.testing.assert_close(ab.edge_mask, ex.edge_mask.abs())


class CachedGCN(GCN):
    """``cached=True``, as in PyG's transductive examples."""

    def __init__(self, out):
        super().__init__(out)
        self.conv1 = GCNConv(F_IN, HID, cached=True)
        self.conv2 = GCNConv(HID, out, cached=True)


@pytest.mark.parametrize("warm", [False, True])
def test_explain_nodes_with_cached_gcn(warm):
    """Each batch is a new graph: neither the full graph's cached
    normalisation nor the previous batch's may be reused."""
    torch.manual_seed(0)
    model = CachedGCN(C).eval()
    x, edge_index = DATA["x"], DATA["edge_index"]
    if warm:
        model(x, edge_index)  # the user's model has cached the full graph
    targets = torch.tensor([0, 3, 17, 22])
    full = [lrp.explain(model, x, edge_index, index=int(t)) for t in targets]
    check_relevance(full[1], model, "multiclass_classification", 3)
    cache = model.conv1._cached_edge_index
    batched = lrp.explain_nodes(model, x, edge_index, targets, batch_size=2)
    assert model.conv1._cached_edge_index is cache and model.conv1.cached
    for ex, ref in zip(batched, full):
        torch.testing.assert_close(ex.node_mask, ref.node_mask[ex.node_index], rtol=0, atol=1e-5)
        assert ex.score == pytest.approx(ref.score, rel=1e-5)


class Weighted(torch.nn.Module):
    """A GCN whose forward passes ``edge_weight`` to both layers."""

    def __init__(self, gcn: GCN):
        super().__init__()
        self.inner = gcn

    def forward(self, x, edge_index, edge_weight):
        h = F.relu(self.inner.conv1(x, edge_index, edge_weight))
        return self.inner.conv2(h, edge_index, edge_weight)


def test_explain_nodes_with_edge_weight():
    model = build("gcn")
    x, edge_index = DATA["x"], DATA["edge_index"]
    edge_weight = torch.rand(edge_index.shape[1], generator=torch.Generator().manual_seed(3)) + 0.5

    weighted = Weighted(model).eval()
    targets = torch.tensor([3, 9, 22])
    batched = lrp.explain_nodes(weighted, x, edge_index, targets, batch_size=2, edge_weight=edge_weight)
    for t, ex in zip(targets.tolist(), batched):
        ref = lrp.explain(weighted, x, edge_index, index=t, edge_weight=edge_weight)
        torch.testing.assert_close(ex.node_mask, ref.node_mask[ex.node_index], rtol=0, atol=1e-5)
        torch.testing.assert_close(ex.edge_mask, ref.edge_mask[ex.edge_id], rtol=0, atol=1e-5)


def test_explain_nodes_slices_edge_attr():
    torch.manual_seed(0)
    model = GINE(C).eval()
    x, edge_index, edge_attr = edge_attr_data()
    targets = torch.tensor([3, 4, 20])
    batched = lrp.explain_nodes(model, x, edge_index, targets, batch_size=2, edge_attr=edge_attr)
    for t, ex in zip(targets.tolist(), batched):
        full = lrp.explain(model, x, edge_index, index=t, edge_attr=edge_attr)
        torch.testing.assert_close(ex.node_mask, full.node_mask[ex.node_index], rtol=0, atol=1e-5)
        torch.testing.assert_close(ex.edge_attr_mask, full.edge_attr_mask[ex.edge_id], rtol=0, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("name", NODE_MODELS)
def test_explain_nodes_larger_graph(name):
    """A few hundred nodes, many overlapping subgraphs per batch."""
    g = torch.Generator().manual_seed(7)
    n = 400
    x = torch.randn(n, F_IN, generator=g)
    edge_index = to_undirected(torch.randint(0, n, (2, 1200), generator=g), num_nodes=n)
    edge_index = edge_index[:, edge_index[0] != edge_index[1]]
    model = build(name)
    targets = torch.randperm(n, generator=g)[:60]
    batched = lrp.explain_nodes(model, x, edge_index, targets, batch_size=16)
    for t, ex in zip(targets.tolist(), batched):
        full = lrp.explain(model, x, edge_index, index=t)
        torch.testing.assert_close(ex.node_mask, full.node_mask[ex.node_index], rtol=0, atol=1e-5)
        torch.testing.assert_close(ex.edge_mask, full.edge_mask[ex.edge_id], rtol=0, atol=1e-5)
        assert ex.score == pytest.approx(full.score, rel=1e-5, abs=1e-6)


# ===========================================================================
# 6b. LRP(subgraph=True): the pass on the targets' computation subgraph
# ===========================================================================
def sparse_graph():
    """A ring of 48 nodes with a few chords: a 2-layer model's computation
    subgraph (3 hops) is a small part of it."""
    g = torch.Generator().manual_seed(11)
    n = 48
    x = torch.randn(n, F_IN, generator=g)
    edge_index = ring_with_chords(n, 3, g)
    edge_index = torch.cat([edge_index, torch.tensor([[40], [5]])], dim=1)  # one directed edge
    return x, edge_index


@pytest.fixture
def pass_sizes(monkeypatch):
    """The number of nodes of every relevance pass LRP runs."""
    algorithm = importlib.import_module("torch_geometric_lrp.explain.algorithm")  # lrp.explain is a function
    sizes, real = [], algorithm.run_relevance

    def spy(lrp_model, x, *args, **kwargs):
        sizes.append(x.shape[0])
        return real(lrp_model, x, *args, **kwargs)

    monkeypatch.setattr(algorithm, "run_relevance", spy)
    return sizes


def assert_same_explanation(a: Explanation, b: Explanation):
    for key in ("node_mask", "edge_mask", "self_loop_relevance", "edge_attr_mask"):
        if key in b:
            torch.testing.assert_close(a[key], b[key], rtol=0, atol=1e-5, msg=key)
    for key in ("score", "relevance_total", "absorbed", "lost"):
        assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-6), key


@pytest.mark.parametrize("index", [5, [5, 6], [0, 24, 24]])
@pytest.mark.parametrize("name", NODE_MODELS)
def test_subgraph_equals_full_graph(name, index, pass_sizes):
    model = build(name)
    x, edge_index = sparse_graph()
    index = index if isinstance(index, int) else torch.tensor(index)
    on_subgraph = lrp.explain(model, x, edge_index, index=index)
    on_full_graph = lrp.explain(model, x, edge_index, index=index, subgraph=False)
    assert pass_sizes[0] < x.shape[0] // 2 and pass_sizes[1] == x.shape[0]
    assert_same_explanation(on_subgraph, on_full_graph)


@pytest.mark.parametrize("mode,return_type", [("binary_classification", "probs"), ("regression", "raw"),
                                              ("multiclass_classification", "log_probs")])
def test_subgraph_equals_full_graph_in_other_modes(mode, return_type, pass_sizes):
    model = build("gcn", mode, return_type)
    x, edge_index = sparse_graph()
    extra = {} if mode == "multiclass_classification" else {"mode": mode}
    a = lrp.explain(model, x, edge_index, index=torch.tensor([3, 30]), **extra)
    b = lrp.explain(model, x, edge_index, index=torch.tensor([3, 30]), subgraph=False, **extra)
    assert pass_sizes[0] < x.shape[0]
    assert_same_explanation(a, b)


def test_subgraph_with_a_target_per_node(pass_sizes):
    """Phenomenon explanations: a target for every node is cut to the subgraph."""
    model = build("gat")
    x, edge_index = sparse_graph()
    target = torch.arange(x.shape[0]) % C
    a, b = (lrp.explain(model, x, edge_index, index=torch.tensor([7, 8]), target=target, subgraph=s)
            for s in (True, False))
    assert pass_sizes[0] < x.shape[0]
    assert_same_explanation(a, b)
    assert a.target.tolist() == target.tolist()  # PyG's Explainer keeps the full target


def test_subgraph_cuts_edge_inputs(pass_sizes):
    torch.manual_seed(0)
    x, edge_index = sparse_graph()
    edge_attr = torch.randn(edge_index.shape[1], 4, generator=torch.Generator().manual_seed(5))
    edge_weight = torch.rand(edge_index.shape[1], generator=torch.Generator().manual_seed(6)) + 0.5
    gine = GINE(C).eval()
    a, b = (lrp.explain(gine, x, edge_index, index=9, edge_attr=edge_attr, subgraph=s) for s in (True, False))
    assert_same_explanation(a, b)
    weighted = Weighted(build("gcn")).eval()
    c, d = (lrp.explain(weighted, x, edge_index, index=9, edge_weight=edge_weight, subgraph=s)
            for s in (True, False))
    assert_same_explanation(c, d)
    assert pass_sizes[0] < x.shape[0] and pass_sizes[2] < x.shape[0]


def test_subgraph_with_a_cached_gcn(pass_sizes):
    """The subgraph is a new graph: the copy does not reuse the full graph's
    normalisation, and the user's model keeps its cache."""
    torch.manual_seed(0)
    model = CachedGCN(C).eval()
    x, edge_index = sparse_graph()
    with torch.no_grad():
        model(x, edge_index)
    cache = model.conv1._cached_edge_index
    a, b = (lrp.explain(model, x, edge_index, index=12, subgraph=s) for s in (True, False))
    assert pass_sizes[0] < x.shape[0]
    assert_same_explanation(a, b)
    assert model.conv1._cached_edge_index is cache and model.conv1.cached


def test_subgraph_is_skipped_for_inputs_it_cannot_cut(pass_sizes):
    """A tensor input that is neither per node nor per edge (here a dense
    ``[N, N]`` matrix) leaves the pass on the full graph."""
    gcn = build("gcn")

    class WithDense(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = gcn

        def forward(self, x, edge_index, dense):
            return self.inner(x, edge_index)

    x, edge_index = sparse_graph()
    lrp.explain(WithDense().eval(), x, edge_index, index=3, dense=torch.zeros(x.shape[0], x.shape[0]))
    assert pass_sizes == [x.shape[0]]


class GlobalContext(GCN):
    """Adds the mean over all nodes: every node reaches every other."""

    def logits(self, x, edge_index):
        h = F.relu(self.conv1(x, edge_index))
        return self.conv2(h + h.mean(dim=0, keepdim=True), edge_index)


class SharedLayer(Model):
    """One layer applied three times: three hops, one MessagePassing module."""

    def __init__(self, out, act=None, bias=True):
        super().__init__()
        self.act = act
        self.conv = GCNConv(F_IN, F_IN, bias=bias)
        self.head = torch.nn.Linear(F_IN, out, bias=bias)

    def logits(self, x, edge_index):
        for _ in range(3):
            x = F.relu(self.conv(x, edge_index))
        return self.head(x)


@pytest.mark.parametrize("cls", [GlobalContext, SharedLayer])
def test_model_that_is_not_local_is_explained_on_the_full_graph(cls, pass_sizes):
    """Relevance on the outermost hop proves the model reaches further than
    it seems: LRP repeats the pass on the full graph, and uses the full graph
    for that model from then on; explain_nodes refuses."""
    torch.manual_seed(0)
    model = cls(C).eval()
    x, edge_index = sparse_graph()
    explainer = lrp_explainer(model, "multiclass_classification", "raw", "node")
    first = explainer(x, edge_index, index=10)
    second = explainer(x, edge_index, index=11)
    assert pass_sizes == [pass_sizes[0], x.shape[0], x.shape[0]] and pass_sizes[0] < x.shape[0]
    assert_same_explanation(first, lrp.explain(model, x, edge_index, index=10, subgraph=False))
    assert_same_explanation(second, lrp.explain(model, x, edge_index, index=11, subgraph=False))
    with pytest.raises(ValueError, match="not local in"):
        lrp.explain_nodes(model, x, edge_index, torch.tensor([10, 11]))


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
