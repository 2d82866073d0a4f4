"""Models, data and checks shared by the ``test_explain_*`` files.

Every model here is a plain PyG model (GCN, GIN with an MLP inside, GAT with
several heads, a graph classifier with mean pooling, a GCN link predictor)
that can end in a softmax / log-softmax / sigmoid. Each one also has
``logits()``: the same forward without that final activation, from which the
tests compute the score they expect (LRP starts from the target's logit).
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.explain import Explainer, Explanation
from torch_geometric.nn import MLP, GATConv, GCNConv, GINConv, GINEConv, MessagePassing, global_mean_pool
from torch_geometric.utils import to_undirected

import torch_geometric_lrp as lrp

N, F_IN, C, HID = 30, 6, 3, 16
REL = 1e-4


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


class Normalized(GCN):
    """Not local: its hidden features are normalised over all nodes."""

    def logits(self, x, edge_index):
        h = F.normalize(F.relu(self.conv1(x, edge_index)), dim=0)
        return self.conv2(h, edge_index)


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
                  edge_mask_type="object", mask="signed", rules=None, **kwargs) -> Explainer:
    return Explainer(
        model, algorithm=lrp.LRP(mask=mask, rules=rules), explanation_type=explanation_type, node_mask_type=node_mask_type,
        edge_mask_type=edge_mask_type, model_config=dict(mode=mode, task_level=level, return_type=return_type),
        **kwargs,
    )


def explained_target(explanation: Explanation, rows: torch.Tensor) -> torch.Tensor:
    """The target of each explained row: ``lrp.explain`` keeps one per
    explained row, PyG's ``Explainer`` one per output row."""
    target = explanation.target
    return target if target.shape[0] == rows.numel() else target[rows]


def assert_conserved(explanation: Explanation, rel: float = REL) -> None:
    """The measured accounting adds up: what the inputs got, what biases and
    stabilisers reported absorbing and what was lost leave no residual.

    Float rounding grows with the magnitudes summed, not with their sum: a
    score that is a sum of outputs of both signs (all rows of a regression)
    can be far smaller than the relevance of its inputs, so the tolerance
    also counts float32's rounding of the summed input relevance."""
    scale = abs(explanation.score) + abs(explanation.absorbed) + abs(explanation.relevance_total)
    summed = float(explanation.node_mask.abs().sum()) if explanation.get("node_mask") is not None else 0.0
    assert abs(explanation.residual) <= rel * scale + 1e-5 + 1e-6 * summed, \
        f"residual {explanation.residual} of score {explanation.score}"
    assert explanation.residual == pytest.approx(
        explanation.score - explanation.relevance_total - explanation.absorbed - explanation.lost, abs=1e-9)


def check_relevance(explanation: Explanation, model: Model, mode: str, index, target_given=None):
    """Score = logit of the target; measured conservation; target =
    prediction for model explanations; zeros outside the receptive field."""
    level = model.level
    logits = logits_of(model, level)
    rows = rows_of(index, logits.shape[0])
    if target_given is None:
        target = prediction_of(logits, mode)
        got = explained_target(explanation, rows)
        if mode == "regression":
            torch.testing.assert_close(got.view(-1), target.view(-1)[rows])
        else:
            assert torch.equal(got.view(-1), target.view(-1)[rows]), "model explanation: target != prediction"
    else:
        target = target_given
    expected = expected_score(logits, mode, target, rows)
    assert explanation.score == pytest.approx(expected, rel=REL, abs=1e-6), "score is not the target's logit"
    assert_conserved(explanation)

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





def one_thread_fixture():
    """The graphs here are tiny: intra-op threads only contend (on a loaded
    two-core machine a 30-row scatter took milliseconds instead of microseconds)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def assert_same_explanation(a: Explanation, b: Explanation, atol: float = 1e-5):
    for key in ("node_mask", "edge_mask", "self_loop_relevance", "edge_attr_mask"):
        if key in b:
            torch.testing.assert_close(a[key], b[key], rtol=0, atol=atol, msg=key)
    for key in ("score", "relevance_total", "absorbed", "lost"):
        assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-6), key


def sparse_graph():
    """A ring of 48 nodes with a few chords: a 2-layer model's computation
    subgraph is a small part of it."""
    g = torch.Generator().manual_seed(11)
    n = 48
    x = torch.randn(n, F_IN, generator=g)
    edge_index = ring_with_chords(n, 3, g)
    edge_index = torch.cat([edge_index, torch.tensor([[40], [5]])], dim=1)  # one directed edge
    return x, edge_index


class PassSizes(list):
    """The number of nodes of every call of a ``Pass`` method: the relevance
    forwards (``Pass.forward``) or the plain checking forwards (``Pass.plain``)."""


def spy_pass_sizes(monkeypatch, method: str = "forward") -> PassSizes:
    from torch_geometric_lrp.explainers import core
    sizes, real = PassSizes(), getattr(core.Pass, method)

    def spy(self, x, *args, **kwargs):
        sizes.append(x.shape[0])
        return real(self, x, *args, **kwargs)

    monkeypatch.setattr(core.Pass, method, spy)
    return sizes


class CachedGCN(GCN):
    """``cached=True``, as in PyG's transductive examples."""

    def __init__(self, out):
        super().__init__(out)
        self.conv1 = GCNConv(F_IN, HID, cached=True)
        self.conv2 = GCNConv(HID, out, cached=True)


class Weighted(torch.nn.Module):
    """A GCN whose forward passes ``edge_weight`` to both layers."""

    def __init__(self, gcn: GCN):
        super().__init__()
        self.inner = gcn

    def forward(self, x, edge_index, edge_weight):
        h = F.relu(self.inner.conv1(x, edge_index, edge_weight))
        return self.inner.conv2(h, edge_index, edge_weight)


def edge_attr_data():
    x, edge_index, _ = inputs("node")
    edge_attr = torch.randn(edge_index.shape[1], 4, generator=torch.Generator().manual_seed(5))
    return x, edge_index, edge_attr
