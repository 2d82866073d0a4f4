"""Layer-level rules against slow reference twins (issue "Layer-level rules").

A layer-level rule treats the whole affine map between two non-linearities
(messages, gates and aggregation included) as one map. ``tests/twins.py``
writes each layer family out as that map with explicit loops over messages
and computes, in float64, the input relevance and the relevance of every
message for ``Epsilon``, ``Gamma``, ``AlphaBeta`` (``ZPlus``), ``Flat``,
``WSquare`` and ``ZBox``; see its docstring for the definitions.

Each family has one test class. Its first tests check the twin itself and
need nothing of the library:

* ``test_twin_forward_equals_pyg``: the twin's map is PyG's layer;
* ``test_twin_lrp0_is_gradient_x_input``: with zero biases, ``Epsilon(0)``
  gives gradient x input of the stock layer with its gates detached, for
  the input and for every message (edge and self-loop);
* ``test_twin_conserves_without_bias``: every rule with ``epsilon=0`` and no
  bias hands the whole seed to the inputs (and to the messages, where all of
  a layer's output passes through them);
* ``test_twin_stream_identity``: with biases, ``sum_k <z_k, g_k>`` equals the
  input relevance plus what the constant part of each stream absorbs.

``test_lrp_matches_twin`` then compares the library's relevance pass (node
relevance per input, edge relevance per input edge, self-loop relevance per
node) with the twin to 1e-6 relative, and ``test_lrp0_is_gradient_x_input``
checks the library's LRP-0 against gradient x input directly. At the end:
the twins' rule machinery against per-contribution formulas on one
``Linear``, and the issue's explosion example (two messages of 1 and
-0.999999 into one node under ``Epsilon(1.0)``).
"""
from __future__ import annotations

import copy
import importlib
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Callable, Optional

import pytest
import torch
import torch_geometric.nn as pyg_nn
from torch import nn

import twins as T
from devices import DEVICES, cpu

DTYPE = torch.float64
N, E, F_IN, F_OUT, F_EDGE = 8, 16, 4, 3, 2

RULES = {
    "epsilon": T.Epsilon(1e-3),
    "gamma": T.Gamma(0.25, 1e-9),
    "alphabeta": T.AlphaBeta(2.0, 1.0, 1e-9),
    "zplus": T.AlphaBeta(1.0, 0.0, 1e-9),  # the library's ZPlus: two streams, not four
    "flat": T.Flat(),
    "wsquare": T.WSquare(),
    "zbox": T.ZBox(-4.0, 4.5, 1e-9),  # the test inputs lie in [-3.71, 3.71] (checked); asymmetric bounds
}
EXACT_RULES = {  # epsilon = 0, for conservation
    "epsilon": T.Epsilon(0.0),
    "gamma": T.Gamma(0.25, 0.0),
    "alphabeta": T.AlphaBeta(2.0, 1.0, 0.0),
    "flat": T.Flat(),
    "wsquare": T.WSquare(),
    "zbox": T.ZBox(-4.0, 4.5, 0.0),
}


# ---------------------------------------------------------------------------
# Graphs, layers, seeds
# ---------------------------------------------------------------------------


def random_edges(seed: int, num_nodes: int = N, num_edges: int = E) -> torch.Tensor:
    """Distinct random directed edges without self-loops, in random order."""
    gen = torch.Generator().manual_seed(seed)
    pairs: list = []
    while len(pairs) < num_edges:
        s, d = torch.randint(num_nodes, (2,), generator=gen).tolist()
        if s != d and (s, d) not in pairs:
            pairs.append((s, d))
    return torch.tensor(pairs).t().contiguous()


def randomize(module: nn.Module, seed: int) -> nn.Module:
    """Every parameter random and signed (biases included: PyG zeroes them)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * 0.6)
    return module


def zero_biases(module: nn.Module) -> nn.Module:
    module = copy.deepcopy(module)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.rpartition(".")[2].endswith("bias"):
                p.zero_()
    return module


@dataclass
class Setup:
    """One layer of a family, ready to explain."""

    stock: nn.Module                       # the PyG layer (random weights)
    make: Callable[[type], nn.Module]      # build the same layer from a class
    name: Optional[str]                    # its class name in torch_geometric.nn (None: not a PyG layer)
    frozen: Optional[type]                 # a stock subclass with its gates detached
    inputs: list                           # signed inputs (x, maybe edge_attr)
    edge_index: torch.Tensor
    reference: Callable                    # (layer, inputs, rule, R) -> twins.LayerResult
    call: Callable = lambda layer, x, ei: layer(x, ei)
    message_share: Optional[int] = None    # all output passes through messages this many times
    num_nodes: int = N

    def inputs_for(self, rule) -> list:
        """Gamma is meant for non-negative inputs; ZBox for inputs within its
        bounds (checked)."""
        if isinstance(rule, T.ZBox):
            assert all(rule.low <= float(t.min()) and float(t.max()) <= rule.high for t in self.inputs), \
                "ZBox bounds must contain the test inputs"
        return [t.abs() for t in self.inputs] if isinstance(rule, T.Gamma) else list(self.inputs)

    def call_with(self, layer, inputs):
        return self.call(layer, *inputs, self.edge_index)

    def copy_as(self, cls: type, source: Optional[nn.Module] = None) -> nn.Module:
        layer = self.make(cls).to(DTYPE)
        layer.load_state_dict((source or self.stock).state_dict())
        return layer.eval()

    def gradient_model(self, source: nn.Module) -> nn.Module:
        return self.copy_as(self.frozen, source) if self.frozen is not None else source


def seed_relevance(out: torch.Tensor, seed: int) -> torch.Tensor:
    """``out`` times a random 0/1 mask (at least one 1)."""
    gen = torch.Generator().manual_seed(seed)
    mask = (torch.rand(out.shape, generator=gen) < 0.4).to(out.dtype)
    mask.view(-1)[int(torch.randint(out.numel(), (1,), generator=gen))] = 1.0
    return out.detach() * mask


def build(make: Callable[[type], nn.Module], name: Optional[str], reference: Callable, seed: int, *,
          frozen: Optional[type] = None, edge_features: bool = False, tweak: Optional[Callable] = None,
          nonnegative: bool = False, **kwargs) -> Setup:
    cls = getattr(pyg_nn, name) if name is not None else None
    stock = randomize(make(cls).to(DTYPE), seed).eval()
    if tweak is not None:
        with torch.no_grad():
            tweak(stock)
    gen = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(N, F_IN, generator=gen, dtype=DTYPE)
    if nonnegative:
        x = x.abs()
    edge_index = random_edges(seed + 2)
    inputs = [x]
    if edge_features:
        inputs.append(torch.randn(E, F_EDGE, generator=gen, dtype=DTYPE))
    return Setup(stock, make, name, frozen, inputs, edge_index, reference, **kwargs)


def single(twin_cls, needs_x: bool = False):
    """The reference of a family that is one map."""
    def reference(layer, inputs, rule, relevance, edge_index):
        twin = twin_cls(layer, inputs[0], edge_index, N) if needs_x else twin_cls(layer, edge_index, N)
        return T.single_map(twin, tuple(inputs), rule, relevance)
    return reference


def gin_reference(layer, inputs, rule, relevance, edge_index):
    return T.gin_relevance(layer, inputs[0], edge_index, rule, relevance)


def gine_reference(layer, inputs, rule, relevance, edge_index):
    return T.gine_relevance(layer, inputs[0], edge_index, inputs[1], rule, relevance)


def chain_reference(layer, inputs, rule, relevance, edge_index):
    return T.single_map(T.LinearChainTwin(layer), tuple(inputs), rule, relevance)


def one_signed_outputs(layer: nn.Module) -> None:
    """Output 0 of a GCNConv gets only positive weights and bias, output 1
    only negative ones."""
    layer.lin.weight[0] = layer.lin.weight[0].abs()
    layer.lin.weight[1] = -layer.lin.weight[1].abs()
    layer.bias[0], layer.bias[1] = 0.3, -0.2


def mlp(f_in: int = F_IN, hidden: int = 5) -> nn.Sequential:
    return nn.Sequential(nn.Linear(f_in, hidden), nn.ReLU(), nn.Linear(hidden, F_OUT))


# ---------------------------------------------------------------------------
# The library side (imported lazily: the twins' own checks need none of it)
# ---------------------------------------------------------------------------


def lrp_rule(rule):
    if rule is None:
        return None  # the library's default composite
    rules = importlib.import_module("torch_geometric_lrp.rules")
    if isinstance(rule, T.Epsilon):
        return rules.Epsilon(rule.epsilon)
    if isinstance(rule, T.Gamma):
        return rules.Gamma(rule.gamma, epsilon=rule.epsilon)
    if isinstance(rule, T.Flat):
        return rules.Flat()
    if isinstance(rule, T.WSquare):
        return rules.WSquare()
    if isinstance(rule, T.ZBox):
        return rules.ZBox(rule.low, rule.high, epsilon=rule.epsilon)
    assert isinstance(rule, T.AlphaBeta), rule
    if (rule.alpha, rule.beta) == (1.0, 0.0):
        return rules.ZPlus(epsilon=rule.epsilon)
    return rules.AlphaBeta(rule.alpha, rule.beta, epsilon=rule.epsilon)


def edge_relevance_class():
    """``EdgeRelevance``, wherever the package keeps it."""
    for where in ("torch_geometric_lrp.explainers.edges", "torch_geometric_lrp"):
        try:
            found = getattr(importlib.import_module(where), "EdgeRelevance", None)
        except ImportError:
            continue
        if found is not None:
            return found
    raise ImportError("EdgeRelevance not found in torch_geometric_lrp")


def explained_layer(setup: Setup) -> nn.Module:
    """The layer the library explains: its drop-in ``lrp.nn`` class where
    one exists (it mirrors PyG's and loads the same ``state_dict``; the
    attention layers there freeze their coefficients), else the stock one."""
    lrp_nn = importlib.import_module("torch_geometric_lrp.nn")
    cls = getattr(lrp_nn, setup.name, None) if setup.name is not None else None
    return setup.copy_as(cls) if cls is not None else copy.deepcopy(setup.stock)


def run_lrp(setup: Setup, rule, inputs: list, relevance: torch.Tensor, device: str = "cpu"):
    """One relevance pass on ``device``: the relevance of each input, of each
    input edge's messages ``[E]`` and of the self-loops the layer added
    ``[N]``, returned on the CPU."""
    lrp = importlib.import_module("torch_geometric_lrp")
    layer = explained_layer(setup).to(device)
    inputs = [t.detach().to(device).requires_grad_() for t in inputs]
    edge_index = setup.edge_index.to(device)
    with ExitStack() as stack:
        edges = None
        if any(isinstance(m, pyg_nn.MessagePassing) for m in layer.modules()):
            edges = stack.enter_context(edge_relevance_class()(layer, edge_index, setup.num_nodes))
        mode = stack.enter_context(lrp.relevance_pass(layer, rules=lrp_rule(rule)))  # a bare rule: every module
        out = setup.call(layer, *inputs, edge_index)
        rel = mode.backward(out, relevance.to(device), inputs)
    for t in (out, *rel):
        assert t.device.type == torch.device(device).type, "relevance left the model's device"
    edge = None if edges is None else cpu(edges.edge)
    loops = None if edges is None else cpu(edges.self_loops)
    return cpu(out), [cpu(r) for r in rel], edge, loops


def assert_relevance(actual, expected, what: str) -> None:
    """Equal to 1e-6 relative to the largest entry of ``expected``."""
    assert actual is not None, f"{what}: no relevance"
    actual = actual.detach().to(DTYPE)
    scale = max(float(expected.abs().max()), 1e-12)
    torch.testing.assert_close(actual, expected, rtol=1e-6, atol=1e-6 * scale, msg=lambda m: f"{what}: {m}")


# ---------------------------------------------------------------------------
# The shared tests of every family
# ---------------------------------------------------------------------------


def pytest_generate_tests(metafunc):
    cls = metafunc.cls
    if cls is not None and "config" in metafunc.fixturenames:
        metafunc.parametrize("config", list(cls.CONFIGS), ids=list(cls.CONFIGS))


class FamilyTests:
    """Mixed into one class per family; ``CONFIGS`` maps an id to a
    :class:`Setup` factory (called with a seed)."""

    CONFIGS: dict = {}
    SEED = 0
    NOT_CONSERVED: dict = {}  # (config, rule) -> why that rule loses relevance on this map
    #: Why paths of both signs meet in this family's map (a subtraction, a
    #: signed gate, two weights in a row), so that the twin's streams for
    #: AlphaBeta, ZPlus and Gamma (one weight per path, no sign in the
    #: structure) do not describe the paths the library splits by sign:
    #: checked by test_signed_rules_keep_the_signs instead (and, for EdgeConv
    #: and the linear chain, against their paths written out). By config.
    PATHS_OF_BOTH_SIGNS: dict = {}

    def setup_of(self, config) -> Setup:
        return self.CONFIGS[config](self.SEED)

    def reference(self, setup: Setup, layer, inputs, rule, relevance):
        return setup.reference(layer, inputs, rule, relevance, setup.edge_index)

    # -- the twin itself ----------------------------------------------------

    def test_twin_forward_equals_pyg(self, config):
        setup = self.setup_of(config)
        for signed in (True, False):
            inputs = setup.inputs if signed else [t.abs() for t in setup.inputs]
            out = setup.call_with(setup.stock, inputs).detach()
            relevance = seed_relevance(out, 1)
            twin = self.reference(setup, setup.stock, inputs, T.Epsilon(1e-3), relevance)
            assert_relevance(twin.out, out, "twin forward")

    def test_twin_lrp0_is_gradient_x_input(self, config):
        setup = self.setup_of(config)
        stock = zero_biases(setup.stock)
        out = setup.call_with(stock, setup.inputs).detach()
        relevance = seed_relevance(out, 2)
        twin = self.reference(setup, stock, setup.inputs, T.Epsilon(0.0), relevance)
        grads, edge, loops = T.gradient_x_input(setup.gradient_model(stock),
                                                lambda layer, *xs: setup.call_with(layer, list(xs)),
                                                setup.inputs, relevance, setup.edge_index, N)
        assert any(float(g.abs().max()) > 1e-3 for g in grads), "degenerate check: no gradient"
        for i, (r, g) in enumerate(zip(twin.inputs, grads)):
            assert_relevance(r, g, f"input {i}")
        if isinstance(twin.edge, torch.Tensor) and twin.edge.numel():
            assert float(edge.abs().max()) > 1e-3, "degenerate check: no message relevance"
            assert_relevance(twin.edge, edge, "edges")
            assert_relevance(twin.loops, loops, "self-loops")

    @pytest.mark.parametrize("rule", list(EXACT_RULES), ids=list(EXACT_RULES))
    def test_twin_conserves_without_bias(self, config, rule):
        if (config, rule) in self.NOT_CONSERVED:
            pytest.skip(self.NOT_CONSERVED[(config, rule)])
        setup = self.setup_of(config)
        rule = EXACT_RULES[rule]
        stock = zero_biases(setup.stock)
        inputs = setup.inputs_for(rule)
        relevance = seed_relevance(setup.call_with(stock, inputs), 3)
        twin = self.reference(setup, stock, inputs, rule, relevance)
        total = float(relevance.sum())
        assert abs(total) > 1e-3
        got = sum(float(r.sum()) for r in twin.inputs)
        assert got == pytest.approx(total, rel=1e-9, abs=1e-12)
        if setup.message_share is not None:
            through_messages = float(twin.edge.sum() + twin.loops.sum())
            assert through_messages == pytest.approx(setup.message_share * total, rel=1e-9, abs=1e-12)

    @pytest.mark.parametrize("rule", list(RULES), ids=list(RULES))
    def test_twin_stream_identity(self, config, rule):
        setup = self.setup_of(config)
        rule = RULES[rule]
        inputs = setup.inputs_for(rule)
        relevance = seed_relevance(setup.call_with(setup.stock, inputs), 4)
        twin = self.reference(setup, setup.stock, inputs, rule, relevance)
        for res in twin.maps:
            zg = sum(float((z * g).sum()) for z, g in zip(res.zs, res.gs))
            absorbed = sum(float((c * g).sum()) for c, g in zip(res.constants, res.gs))
            into_inputs = sum(float(r.sum()) for r in res.inputs)
            assert zg == pytest.approx(into_inputs + absorbed, rel=1e-9, abs=1e-9)
            if isinstance(rule, T.Epsilon):  # what the stabiliser does not absorb
                (z,) = res.zs
                kept = torch.where(z == 0, 0.0, res.relevance * z / T.stab(z, rule.epsilon)).sum()
                assert zg == pytest.approx(float(kept), rel=1e-9, abs=1e-12)
            if isinstance(rule, (T.Flat, T.WSquare, T.ZBox)):  # biases zeroed: only ZBox's stabiliser absorbs
                assert absorbed == 0.0
                z = res.zs[0] if len(res.zs) == 1 else res.zs[0] - res.zs[1] - res.zs[2]
                epsilon = rule.epsilon if isinstance(rule, T.ZBox) else 0.0
                kept = torch.where(z == 0, 0.0, res.relevance * z / T.stab(z, epsilon)).sum()
                assert zg == pytest.approx(float(kept), rel=1e-9, abs=1e-12)

    # -- the library against the twin ---------------------------------------

    def test_signed_rules_keep_the_signs(self, config):
        """ZPlus on the bias-free layer with a positive seed: no input gets
        negative relevance, and what no output drops reaches the inputs; AlphaBeta
        and Gamma conserve. Before, a subtraction or a negative gate in the map
        turned the positive stream's terms negative (EdgeConv: an input at
        -1.6 for a score of 0.4)."""
        lrp = importlib.import_module("torch_geometric_lrp")
        setup = self.setup_of(config)
        setup.stock = zero_biases(setup.stock)
        out = setup.call_with(setup.stock, setup.inputs).detach()
        positive = seed_relevance(out, 7).abs()
        for rule, seed in ((T.AlphaBeta(1.0, 0.0, 0.0), positive), (T.AlphaBeta(2.0, 1.0, 0.0), seed_relevance(out, 8)),
                           (T.Gamma(0.5, 0.0), seed_relevance(out, 9))):
            with lrp.RelevanceAudit() as audit:
                _, rel, _, _ = run_lrp(setup, rule, setup.inputs, seed)
            scale = float(seed.abs().sum())
            total = sum(float(r.sum()) for r in rel)
            assert total + audit.lost == pytest.approx(float(seed.sum()), rel=1e-9, abs=1e-12 * scale)
            if isinstance(rule, T.AlphaBeta) and rule.beta == 0:
                assert min(float(r.min()) for r in rel) >= -1e-12 * scale

    def test_lrp0_is_gradient_x_input(self, config):
        """The library's LRP-0 on the bias-free layer is gradient x input."""
        setup = self.setup_of(config)
        setup.stock = zero_biases(setup.stock)
        out = setup.call_with(setup.stock, setup.inputs).detach()
        relevance = seed_relevance(out, 6)
        grads, edge, loops = T.gradient_x_input(setup.gradient_model(setup.stock),
                                                lambda layer, *xs: setup.call_with(layer, list(xs)),
                                                setup.inputs, relevance, setup.edge_index, N)
        _, rel, lrp_edge, lrp_loops = run_lrp(setup, T.Epsilon(0.0), setup.inputs, relevance)
        for i, (r, g) in enumerate(zip(rel, grads)):
            assert_relevance(r, g, f"relevance of input {i}")
        if lrp_edge is not None:
            assert_relevance(lrp_edge, edge, "edge relevance")
            assert_relevance(lrp_loops, loops, "self-loop relevance")

    @pytest.mark.parametrize("device", DEVICES)
    @pytest.mark.parametrize("rule", list(RULES), ids=list(RULES))
    def test_lrp_matches_twin(self, config, rule, device):
        if isinstance(RULES[rule], (T.AlphaBeta, T.Gamma)) and config in self.PATHS_OF_BOTH_SIGNS:
            pytest.skip(self.PATHS_OF_BOTH_SIGNS[config])
        setup = self.setup_of(config)
        rule = RULES[rule]
        inputs = setup.inputs_for(rule)
        relevance = seed_relevance(setup.call_with(setup.stock, inputs), 5)
        twin = self.reference(setup, setup.stock, inputs, rule, relevance)
        out, rel, edge, loops = run_lrp(setup, rule, inputs, relevance, device)
        assert_relevance(out, twin.out, "forward in the pass")
        assert len(rel) == len(twin.inputs)
        for i, (r, t) in enumerate(zip(rel, twin.inputs)):
            assert_relevance(r, t, f"relevance of input {i}")
        if isinstance(twin.edge, torch.Tensor) and twin.edge.numel():
            assert_relevance(edge, twin.edge, "edge relevance")
            assert_relevance(loops, twin.loops, "self-loop relevance")


# ---------------------------------------------------------------------------
# One class per family
# ---------------------------------------------------------------------------


class TestGCNConv(FamilyTests):
    CONFIGS = {
        "loops-bias": lambda s: build(lambda c: c(F_IN, F_OUT), "GCNConv", single(T.GCNTwin), s),
        "loops-nobias": lambda s: build(lambda c: c(F_IN, F_OUT, bias=False), "GCNConv", single(T.GCNTwin), s,
                                        message_share=1),
        "noloops": lambda s: build(lambda c: c(F_IN, F_OUT, add_self_loops=False), "GCNConv",
                                   single(T.GCNTwin), s),
        "unnormalized": lambda s: build(lambda c: c(F_IN, F_OUT, normalize=False, add_self_loops=False),
                                        "GCNConv", single(T.GCNTwin), s),
        # x >= 0, output 0 has only positive contributions (z- = 0: AlphaBeta's c+ = 1)
        # and output 1 only negative ones (z+ = 0: c- = 1)
        "one-signed": lambda s: build(lambda c: c(F_IN, F_OUT), "GCNConv", single(T.GCNTwin), s,
                                      tweak=one_signed_outputs, nonnegative=True),
    }


class TestGraphConv(FamilyTests):
    CONFIGS = {"add": lambda s: build(lambda c: c(F_IN, F_OUT), "GraphConv", single(T.GraphConvTwin), s)}


class TestSAGEConv(FamilyTests):
    CONFIGS = {
        "mean": lambda s: build(lambda c: c(F_IN, F_OUT), "SAGEConv", single(T.SAGETwin), s),
        "sum": lambda s: build(lambda c: c(F_IN, F_OUT, aggr="sum"), "SAGEConv", single(T.SAGETwin), s),
        "mean-noroot": lambda s: build(lambda c: c(F_IN, F_OUT, root_weight=False), "SAGEConv",
                                       single(T.SAGETwin), s),
    }


class TestGINConv(FamilyTests):
    CONFIGS = {"eps0.3": lambda s: build(lambda c: c(mlp(), eps=0.3), "GINConv", gin_reference, s)}


class TestGINEConv(FamilyTests):
    CONFIGS = {"edge_dim": lambda s: build(lambda c: c(mlp(), eps=0.3, edge_dim=F_EDGE), "GINEConv",
                                           gine_reference, s, edge_features=True,
                                           call=lambda layer, x, e, ei: layer(x, ei, e))}


class TestGATConv(FamilyTests):
    CONFIGS = {
        "heads2-loops": lambda s: build(lambda c: c(F_IN, F_OUT, heads=2), "GATConv",
                                        single(T.GATTwin, needs_x=True), s, frozen=T.FrozenGATConv),
        "heads1-noloops-nobias": lambda s: build(lambda c: c(F_IN, F_OUT, add_self_loops=False, bias=False),
                                                 "GATConv", single(T.GATTwin, needs_x=True), s,
                                                 frozen=T.FrozenGATConv, message_share=1),
    }


class TestGATv2Conv(FamilyTests):
    CONFIGS = {"heads2-loops": lambda s: build(lambda c: c(F_IN, F_OUT, heads=2), "GATv2Conv",
                                               single(T.GATv2Twin, needs_x=True), s, frozen=T.FrozenGATv2Conv)}


class TestTransformerConv(FamilyTests):
    CONFIGS = {"heads2-root": lambda s: build(lambda c: c(F_IN, F_OUT, heads=2), "TransformerConv",
                                              single(T.TransformerTwin, needs_x=True), s,
                                              frozen=T.FrozenTransformerConv)}


class TestChebConv(FamilyTests):
    PATHS_OF_BOTH_SIGNS = dict.fromkeys(('K2', 'K3'), "the scaled Laplacian and T_k = 2 L T_(k-1) - T_(k-2) carry signs")
    CONFIGS = {
        "K2": lambda s: build(lambda c: c(F_IN, F_OUT, K=2), "ChebConv", single(T.ChebTwin), s),
        "K3": lambda s: build(lambda c: c(F_IN, F_OUT, K=3), "ChebConv", single(T.ChebTwin), s),
    }
    NOT_CONSERVED = {
        ("K3", "flat"): "Flat runs the map on all-ones inputs with all-ones weights: at a node with an empty "
                        "Laplacian row (here nodes 1 and 5) T_1 = 0 and T_2 = 2 L T_1 - T_0 = -1, so "
                        "z = F (T_0 + T_1 + T_2) = 0 exactly and that node's relevance is lost",
    }


class TestSGConv(FamilyTests):
    CONFIGS = {
        "K2": lambda s: build(lambda c: c(F_IN, F_OUT, K=2), "SGConv", single(T.SGTwin), s),
        "K2-nobias": lambda s: build(lambda c: c(F_IN, F_OUT, K=2, bias=False), "SGConv", single(T.SGTwin), s,
                                     message_share=2),  # every hop passes all of it
    }


class TestAPPNP(FamilyTests):
    # No weights: WSquare is Flat here, and ZBox's bound streams both run the
    # gates, so only low + high enters (z = J (x - l - h)); the comparisons
    # still check the streams.
    CONFIGS = {"K2": lambda s: build(lambda c: c(K=2, alpha=0.1), "APPNP", single(T.APPNPTwin), s)}


class TestGeneralConv(FamilyTests):
    CONFIGS = {
        "directed": lambda s: build(lambda c: c(F_IN, F_OUT, heads=2), "GeneralConv",
                                    single(T.GeneralConvTwin), s),
        "undirected": lambda s: build(lambda c: c(F_IN, F_OUT, heads=2, directed_msg=False), "GeneralConv",
                                      single(T.GeneralConvTwin), s),
    }


class TestEdgeConv(FamilyTests):
    PATHS_OF_BOTH_SIGNS = {"sum": "x_j - x_i: x_i reaches the output through W_a and through -W_b"}
    CONFIGS = {
        "sum": lambda s: build(lambda c: c(nn.Linear(2 * F_IN, F_OUT), aggr="add"), "EdgeConv",
                               single(T.EdgeConvTwin), s, message_share=1),
    }


class TestLinearChain(FamilyTests):
    PATHS_OF_BOTH_SIGNS = {"two-linears": "two weights in a row: each input reaches an output through every hidden unit"}
    CONFIGS = {"two-linears": lambda s: build(lambda c: nn.Sequential(nn.Linear(F_IN, 5), nn.Linear(5, F_OUT)),
                                              None, chain_reference, s, call=lambda layer, x, ei: layer(x))}


# ---------------------------------------------------------------------------
# The rule machinery of the twins, against per-contribution formulas
# ---------------------------------------------------------------------------


def contribution_reference(rule, x, w, b, relevance):
    """LRP of ``z = x W^T + b`` from explicit contributions ``z_ji = x_i w_ji``,
    written independently of :func:`twins.streams`. Flat, w^2 and zbox share
    out ``R_j`` by their own contributions ``c_ji`` (1, ``w_ji^2``,
    ``x_i w_ji - l w_ji^+ - h w_ji^-``): ``R_i = sum_j c_ji R_j / stab(sum_i' c_ji')``,
    nothing where that sum is 0."""
    n, f_in = x.shape
    f_out = w.shape[0]
    out = torch.zeros_like(x)
    for s in range(n):
        for j in range(f_out):
            contrib = [x[s, i] * w[j, i] for i in range(f_in)]
            if isinstance(rule, (T.Flat, T.WSquare, T.ZBox)):
                if isinstance(rule, T.Flat):
                    own = [1.0] * f_in
                elif isinstance(rule, T.WSquare):
                    own = [w[j, i] ** 2 for i in range(f_in)]
                else:
                    own = [x[s, i] * w[j, i] - rule.low * max(w[j, i], 0) - rule.high * min(w[j, i], 0)
                           for i in range(f_in)]
                z = sum(own)
                if z == 0:
                    continue
                epsilon = rule.epsilon if isinstance(rule, T.ZBox) else 0.0
                den = z + epsilon * (1 if z >= 0 else -1)
                for i in range(f_in):
                    out[s, i] += own[i] * relevance[s, j] / den
            elif isinstance(rule, (T.Epsilon, T.Gamma)):
                gamma = rule.gamma if isinstance(rule, T.Gamma) else 0.0
                contrib = [x[s, i] * (w[j, i] + gamma * max(w[j, i], 0)) for i in range(f_in)]
                z = sum(contrib) + b[j] + gamma * max(b[j], 0)
                den = z + rule.epsilon * (1 if z >= 0 else -1)
                for i in range(f_in):
                    out[s, i] += contrib[i] * relevance[s, j] / den
            else:
                zp = sum(max(c, 0) for c in contrib) + max(b[j], 0)
                zn = sum(min(c, 0) for c in contrib) + min(b[j], 0)
                cp = 1.0 if zn == 0 else rule.alpha
                cn = (1.0 if rule.beta > 0 else 0.0) if zp == 0 else -rule.beta
                for i in range(f_in):
                    c = contrib[i]
                    if c > 0:
                        out[s, i] += cp * c * relevance[s, j] / (zp + rule.epsilon)
                    elif c < 0:
                        out[s, i] += cn * c * relevance[s, j] / (zn - rule.epsilon)
    return out


@pytest.mark.parametrize("rule", list(RULES), ids=list(RULES))
def test_streams_reproduce_the_contribution_formulas(rule):
    rule = RULES[rule]
    gen = torch.Generator().manual_seed(11)
    lin = nn.Linear(F_IN, F_OUT).to(DTYPE)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(F_OUT, F_IN, generator=gen, dtype=DTYPE))
        lin.bias.copy_(torch.tensor([0.5, -0.7, 0.0], dtype=DTYPE))
    x = torch.randn(5, F_IN, generator=gen, dtype=DTYPE)
    x[0] = x[0].abs()  # a row whose contributions may be one-signed
    x[1, :] = 0.0  # a row with no contributions but the bias
    if isinstance(rule, T.Gamma):
        x = x.abs()
    relevance = lin(x).detach() * 1.5
    twin = T.single_map(T.LinearTwin(lin), (x,), rule, relevance)
    expected = contribution_reference(rule, x, lin.weight.detach(), lin.bias.detach(), relevance)
    assert_relevance(twin.inputs[0], expected, "stream engine")


# ---------------------------------------------------------------------------
# The explosion example of the issue
# ---------------------------------------------------------------------------


def explosion_setup() -> Setup:
    """Two messages of 1 and -0.999999 meet at node 2 of a GCN-like sum
    (linear first, then an unnormalised sum): z_2 = 1e-6."""
    def make(cls):
        layer = cls(1, 1, normalize=False, add_self_loops=False, bias=False)
        with torch.no_grad():
            layer.lin.weight.fill_(1.0)
        return layer

    stock = make(pyg_nn.GCNConv).to(DTYPE).eval()
    x = torch.tensor([[1.0], [-0.999999], [0.0]], dtype=DTYPE)
    edge_index = torch.tensor([[0, 1], [2, 2]])
    return Setup(stock, make, "GCNConv", None, [x], edge_index,
                 lambda layer, inputs, rule, R, ei: T.single_map(T.GCNTwin(layer, ei, 3), tuple(inputs), rule, R),
                 num_nodes=3)


def test_twin_explosion_example_stays_bounded():
    setup = explosion_setup()
    relevance = torch.tensor([[0.0], [0.0], [1.0]], dtype=DTYPE)
    twin = setup.reference(setup.stock, setup.inputs, T.Epsilon(1.0), relevance, setup.edge_index)
    z = 1.0 - 0.999999
    expected = torch.tensor([[1.0], [-0.999999], [0.0]], dtype=DTYPE) / (z + 1.0)
    assert_relevance(twin.inputs[0], expected, "explosion twin")
    assert_relevance(twin.edge, expected[:2, 0], "explosion twin edges")


def test_lrp_explosion_example_stays_bounded():
    """Op-level LRP gave about +-5e5 here: the stabiliser of the linear
    never saw the near-cancelling sum."""
    setup = explosion_setup()
    relevance = torch.tensor([[0.0], [0.0], [1.0]], dtype=DTYPE)
    twin = setup.reference(setup.stock, setup.inputs, T.Epsilon(1.0), relevance, setup.edge_index)
    out, (rx,), edge, _ = run_lrp(setup, T.Epsilon(1.0), setup.inputs, relevance)
    assert float(rx.abs().max()) < 10.0, f"input relevance exploded: {rx.flatten().tolist()}"
    assert_relevance(rx, twin.inputs[0], "explosion input relevance")
    assert_relevance(edge, twin.edge, "explosion edge relevance")


# ---------------------------------------------------------------------------
# AlphaBeta and ZPlus where paths of both signs meet: the paths written out
# ---------------------------------------------------------------------------


def path_relevance(rule: T.AlphaBeta, c: torch.Tensor, k: torch.Tensor, relevance: torch.Tensor) -> torch.Tensor:
    r"""Relevance of each path of a map from its contributions ``c``
    (``[..., outputs, paths]``) and constant terms ``k`` (``[..., outputs,
    constants]``): :math:`z^\pm` sums the contributions and constants of one
    sign, and a path gets :math:`c^+ g^+ + c^- g^-` with AlphaBeta's
    :math:`g^\pm` (``T.stream_gradients`` on :math:`z^\pm`)."""
    zp = c.clamp(min=0).sum(-1) + k.clamp(min=0).sum(-1)
    zn = c.clamp(max=0).sum(-1) + k.clamp(max=0).sum(-1)
    gp, _, _, gn, _, _ = T.stream_gradients(rule, relevance, [zp, torch.zeros_like(zp), torch.zeros_like(zp),
                                                              zn, torch.zeros_like(zn), torch.zeros_like(zn)])
    return c.clamp(min=0) * gp.unsqueeze(-1) + c.clamp(max=0) * gn.unsqueeze(-1)


def gamma_path_relevance(rule: T.Gamma, c: torch.Tensor, coefficient: torch.Tensor, k: torch.Tensor,
                         relevance: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    r"""``Gamma`` on a map from its paths: a path whose coefficient (the
    product of the weights, gates and signs along it) is positive counts
    :math:`1 + \gamma` times, a constant term likewise by its own sign;
    :math:`R_p = c_p w_p R / \mathrm{stab}(z')` with
    :math:`z' = \sum_p c_p w_p + \sum_k k w_k`. Returns the relevance of each
    path and of each constant term."""
    wc = 1 + rule.gamma * (coefficient > 0).to(c.dtype)
    wk = 1 + rule.gamma * (k > 0).to(k.dtype)
    share = T.ratio(relevance, (c * wc).sum(-1) + (k * wk).sum(-1), rule.epsilon).unsqueeze(-1)
    return c * wc * share, k * wk * share


@pytest.mark.parametrize("rule", ["alphabeta", "zplus", "gamma"])
def test_edge_conv_paths_of_both_signs(rule):
    r"""EdgeConv, :math:`z_i = \sum_{j \to i} W_a x_i + W_b (x_j - x_i) + b`:
    :math:`x_i` reaches :math:`z_i` through :math:`W_a` and through
    :math:`-W_b` on every incoming edge, each path with its own sign. Node
    and edge relevance against the paths written out with loops."""
    setup = TestEdgeConv().setup_of("sum")
    rule = RULES[rule]
    x = setup.inputs[0]
    w, b = setup.stock.nn.weight.detach(), setup.stock.nn.bias.detach()
    wa, wb = w[:, :F_IN], w[:, F_IN:]
    out = setup.call_with(setup.stock, setup.inputs).detach()
    relevance = seed_relevance(out, 9)
    edges = setup.edge_index.t().tolist()
    # per output (i, o): the paths (node, feature, edge, coefficient) and the edges' biases
    paths = [[[] for _ in range(F_OUT)] for _ in range(N)]
    for e, (j, i) in enumerate(edges):
        for o in range(F_OUT):
            for f in range(F_IN):
                paths[i][o] += [(i, f, e, wa[o, f]), (j, f, e, wb[o, f]), (i, f, e, -wb[o, f])]
    width, consts = max(len(p) for row in paths for p in row), max(1, max(sum(1 for d in edges if d[1] == i) for i in range(N)))
    c, k = torch.zeros(N, F_OUT, width, dtype=DTYPE), torch.zeros(N, F_OUT, consts, dtype=DTYPE)
    coefficients = torch.zeros_like(c)
    for i in range(N):
        for o in range(F_OUT):
            for p, (node, f, _, coefficient) in enumerate(paths[i][o]):
                c[i, o, p] = x[node, f] * coefficient
                coefficients[i, o, p] = coefficient
            for q, e in enumerate(e for e, (_, d) in enumerate(edges) if d == i):
                k[i, o, q] = b[o]
    if isinstance(rule, T.Gamma):
        per_path, per_constant = gamma_path_relevance(rule, c, coefficients, k, relevance)
    else:
        per_path = path_relevance(rule, c, k, relevance)
    node, edge = torch.zeros_like(x), torch.zeros(len(edges), dtype=DTYPE)
    for i in range(N):
        for o in range(F_OUT):
            for p, (n_, f, e, _) in enumerate(paths[i][o]):
                node[n_, f] += per_path[i, o, p]
                edge[e] += per_path[i, o, p]
    _, (got,), got_edge, _ = run_lrp(setup, rule, setup.inputs, relevance)
    assert_relevance(got, node, "node relevance")
    # the library's edge relevance is its messages' relevance, their bias share included
    if isinstance(rule, T.Gamma):
        constant_relevance = per_constant
    else:
        kp, kn = k.clamp(min=0), k.clamp(max=0)
        zp = c.clamp(min=0).sum(-1) + kp.sum(-1)
        zn = c.clamp(max=0).sum(-1) + kn.sum(-1)
        gp, _, _, gn, _, _ = T.stream_gradients(rule, relevance, [zp, 0 * zp, 0 * zp, zn, 0 * zn, 0 * zn])
        constant_relevance = kp * gp.unsqueeze(-1) + kn * gn.unsqueeze(-1)
    for i in range(N):
        for q, e in enumerate(e for e, (_, d) in enumerate(edges) if d == i):
            edge[e] += float(constant_relevance[i, :, q].sum())
    assert_relevance(got_edge, edge, "edge relevance")


@pytest.mark.parametrize("rule", ["alphabeta", "zplus", "gamma"])
def test_linear_chain_paths_of_both_signs(rule):
    r"""Two ``Linear`` in a row: input :math:`f` reaches output :math:`o`
    through every hidden unit :math:`h`, with contribution
    :math:`x_f W^{(1)}_{hf} W^{(2)}_{oh}`; the first bias reaches it as the
    constant :math:`b^{(1)}_h W^{(2)}_{oh}`, the second as :math:`b^{(2)}_o`."""
    setup = TestLinearChain().setup_of("two-linears")
    rule = RULES[rule]
    x = setup.inputs[0]
    first, second = setup.stock[0], setup.stock[1]
    w1, b1, w2, b2 = (t.detach() for t in (first.weight, first.bias, second.weight, second.bias))
    out = setup.call_with(setup.stock, setup.inputs).detach()
    relevance = seed_relevance(out, 10)
    coefficients = (w1.t()[None] * w2[:, None, :]).reshape(1, F_OUT, -1).expand(N, -1, -1)  # [N, out, f * h]
    c = x.repeat_interleave(w1.shape[0], dim=1)[:, None, :] * coefficients
    k = torch.cat([(b1[None] * w2)[None].expand(N, -1, -1), b2[None, :, None].expand(N, -1, 1)], -1)
    if isinstance(rule, T.Gamma):
        per_path = gamma_path_relevance(rule, c, coefficients, k, relevance)[0]
    else:
        per_path = path_relevance(rule, c, k, relevance)
    per_path = per_path.reshape(N, F_OUT, F_IN, -1)
    _, (got,), _, _ = run_lrp(setup, rule, setup.inputs, relevance)
    assert_relevance(got, per_path.sum(dim=(1, 3)), "input relevance")
