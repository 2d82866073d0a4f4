"""More PyG layers against slow reference twins, and through PyG's ``Explainer``.

The harness is the one of ``tests/test_layer_twins.py`` (its ``FamilyTests``:
the twin against PyG's forward and against gradient x input, the twin's
conservation and stream identity, then the library's node, edge and
self-loop relevance against the twin to 1e-6 relative for ``Epsilon``,
``Gamma`` and ``AlphaBeta``). The twins are in ``tests/twins_more.py``.

Layers with a product of two signals (FiLM, ResGatedGraph, NNConv with
``edge_attr`` explained) check gradient x input against a stock subclass whose
products are ``1/2 (a b~ + a~ b)`` and whose sigmoid is a gate: its gradient x
input is LRP-0 under the product rule.

Then every layer the twins verify goes through ``lrp.convert`` and through
``torch_geometric.explain.Explainer`` with ``lrp.LRP()``.
"""
from __future__ import annotations

import pytest
import torch
import torch_geometric.nn as pyg_nn
from torch import nn
from torch_geometric.explain import Explainer
from torch_geometric.nn.models.attentive_fp import GATEConv

import twins as T
import twins_more as M
from test_layer_twins import (DTYPE, E, F_EDGE, F_IN, F_OUT, N, RULES, FamilyTests, assert_relevance, build,
                              lrp_rule, random_edges, run_lrp, seed_relevance, single)
from test_layer_twins import pytest_generate_tests  # noqa: F401  (parametrizes ``config``)

import torch_geometric_lrp as lrp

RELATIONS = 2
EDGE_TYPE = torch.arange(E) % RELATIONS
EDGE_ATTR = torch.randn(E, F_EDGE, generator=torch.Generator().manual_seed(7), dtype=DTYPE)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny tensors: intra-op threads only contend on a shared machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def typed(layer, x, edge_index):
    return layer(x, edge_index, EDGE_TYPE.to(edge_index.device))


def with_edge_attr(layer, x, edge_attr, edge_index):
    return layer(x, edge_index, edge_attr)


# ---------------------------------------------------------------------------
# One class per layer
# ---------------------------------------------------------------------------


class TestTAGConv(FamilyTests):
    CONFIGS = {
        "K2": lambda s: build(lambda c: c(F_IN, F_OUT, K=2), "TAGConv", single(M.TAGTwin), s),
        "K3-nobias": lambda s: build(lambda c: c(F_IN, F_OUT, K=3, bias=False), "TAGConv", single(M.TAGTwin), s),
    }


class TestSSGConv(FamilyTests):
    CONFIGS = {"K2": lambda s: build(lambda c: c(F_IN, F_OUT, alpha=0.3, K=2), "SSGConv", single(M.SSGTwin), s)}


class TestMixHopConv(FamilyTests):
    CONFIGS = {
        "powers012": lambda s: build(lambda c: c(F_IN, F_OUT), "MixHopConv", single(M.MixHopTwin), s),
        "powers02": lambda s: build(lambda c: c(F_IN, F_OUT, powers=[2, 0]), "MixHopConv", single(M.MixHopTwin), s),
    }


def initial_is_input(layer, x, edge_index):
    return layer(x, x, edge_index)  # x_0: the layer's own input


class TestGCN2Conv(FamilyTests):
    CONFIGS = {
        "shared": lambda s: build(lambda c: c(F_IN, alpha=0.2), "GCN2Conv", single(M.GCN2Twin), s,
                                  call=initial_is_input),
        "two-weights": lambda s: build(lambda c: c(F_IN, alpha=0.3, theta=0.5, layer=2, shared_weights=False),
                                       "GCN2Conv", single(M.GCN2Twin), s, call=initial_is_input),
        "not-normalized": lambda s: build(lambda c: c(F_IN, alpha=0.2, normalize=False), "GCN2Conv",
                                          single(M.GCN2Twin), s, call=initial_is_input),
    }


class TestClusterGCNConv(FamilyTests):
    CONFIGS = {"lambda0.5": lambda s: build(lambda c: c(F_IN, F_OUT, diag_lambda=0.5), "ClusterGCNConv",
                                            single(M.ClusterGCNTwin), s)}


class TestLEConv(FamilyTests):
    CONFIGS = {"bias": lambda s: build(lambda c: c(F_IN, F_OUT), "LEConv", single(M.LETwin), s)}
    PATHS_OF_BOTH_SIGNS = {"bias": "deg_i lin1(x_i) - lin2(x_j): a subtraction"}


class TestAGNNConv(FamilyTests):
    CONFIGS = {"loops": lambda s: build(lambda c: c(), "AGNNConv", single(M.AGNNTwin, needs_x=True), s,
                                        frozen=M.FrozenAGNNConv, message_share=1)}


@pytest.mark.parametrize("rule_name", list(RULES))
@pytest.mark.parametrize("heads,qkv_bias", [(1, False), (2, True)])
def test_sgformer_attention_against_its_twin(rule_name, heads, qkv_bias):
    """``SGFormerAttention`` (linear attention over all node pairs) with the
    attention frozen: the library's node relevance equals the dense twin's
    under every rule; its forward in a pass equals PyG's. Before, the pass
    refused it (a norm of the queries, then an einsum of two signals)."""
    torch.manual_seed(heads)
    layer = pyg_nn.SGFormerAttention(F_IN, heads=heads, head_channels=3, qkv_bias=qkv_bias).to(DTYPE).eval()
    if qkv_bias:
        with torch.no_grad():
            layer.v.bias.normal_()
    x = torch.randn(1, N, F_IN, generator=torch.Generator().manual_seed(5), dtype=DTYPE)
    twin = M.SGFormerAttentionTwin(layer, x[0])
    out = twin.forward((x[0],), twin.params()).unsqueeze(0)
    relevance = seed_relevance(out, heads)
    rule = RULES[rule_name]
    with lrp.relevance_pass(layer, rules=lrp_rule(rule)) as mode:
        watched = mode.watch(x)
        explained = layer(watched)
        (got,) = mode.backward(explained, relevance, [watched])
    torch.testing.assert_close(explained.detach(), out, rtol=1e-10, atol=1e-12)
    if isinstance(rule, (T.AlphaBeta, T.Gamma)):
        # the attention weights (normalised dot products) carry signs, so paths of
        # both signs meet: the twin's one-weight-per-path streams do not apply
        # (test_layer_twins.FamilyTests.test_signed_rules_keep_the_signs). The
        # relevance adds up; with a positive seed ZPlus gives no input negative
        # relevance
        seed = relevance.abs() if isinstance(rule, T.AlphaBeta) and rule.beta == 0 else relevance
        with lrp.relevance_pass(layer, rules=lrp_rule(rule)) as mode:
            watched = mode.watch(x)
            with lrp.RelevanceAudit() as audit:
                (signed,) = mode.backward(layer(watched), seed, [watched])
        assert float(signed.sum()) + audit.absorbed + audit.lost == pytest.approx(float(seed.sum()), rel=1e-6)
        if seed is not relevance:
            assert float(signed.min()) >= -1e-12 * float(seed.sum())
        return
    expected = T.single_map(twin, (x[0],), rule, relevance[0]).inputs[0]
    assert_relevance(got[0], expected, f"SGFormerAttention / {rule_name}")
    assert type(layer) is pyg_nn.SGFormerAttention  # swapped back


def test_sgformer_attention_in_a_pass_computes_what_pyg_computes():
    """In float32 (PyG's forward builds a float32 tensor of ones, so it runs
    in float32 only), with padding masked, the pass's forward equals PyG's."""
    torch.manual_seed(0)
    layer = pyg_nn.SGFormerAttention(F_IN, heads=2, head_channels=3, qkv_bias=True).eval()
    x = torch.randn(2, N, F_IN)
    mask = torch.ones(2, N, dtype=torch.bool)
    mask[1, N - 3:] = False
    want = layer(x.clone(), mask)
    with lrp.relevance_pass(layer) as mode:
        got = layer(mode.watch(x), mask)
    torch.testing.assert_close(got.detach(), want, rtol=1e-5, atol=1e-6)


def test_sgformer_is_explained_through_explainer():
    """The whole ``SGFormer`` model (GCN branch, attention branch, masks of
    padded batches) through PyG's ``Explainer``: its accounting adds up."""
    torch.manual_seed(0)
    model = pyg_nn.SGFormer(F_IN, 8, 3, trans_num_layers=1, trans_num_heads=2, gnn_num_layers=2).eval()
    x = torch.randn(N, F_IN)
    edge_index = random_edges(4)
    batch = torch.tensor([0] * (N // 2) + [1] * (N - N // 2))
    explainer = Explainer(model, algorithm=lrp.LRP(), explanation_type="model", node_mask_type="attributes",
                          edge_mask_type="object",
                          model_config=dict(mode="multiclass_classification", task_level="node", return_type="raw"))
    explanation = explainer(x, edge_index, index=1, batch=batch)
    assert abs(explanation.residual) <= 1e-4 * abs(explanation.score)
    assert float(explanation.node_mask.abs().sum()) > 0
    converted = lrp.convert(model)
    assert type(converted.trans_conv.attns[0]) is lrp.nn.SGFormerAttention
    torch.testing.assert_close(converted(x, edge_index, batch), model(x, edge_index, batch))
    through_convert = lrp.explain(converted, x, edge_index, index=1, batch=batch)
    torch.testing.assert_close(through_convert.node_mask, explanation.node_mask)


# References of the layers that are not one map of x alone:
# (layer, inputs, rule, relevance, edge_index) -> twins.LayerResult


def gate_reference(layer, xs, rule, relevance, edge_index):
    return T.single_map(M.GATETwin(layer, xs[0], xs[1], edge_index, N), tuple(xs), rule, relevance)


def rgcn_reference(layer, xs, rule, relevance, edge_index):
    return T.single_map(M.RGCNTwin(layer, edge_index, EDGE_TYPE, N), tuple(xs), rule, relevance)


def nnconv_constant_reference(layer, xs, rule, relevance, edge_index):
    return T.single_map(M.NNConvTwin(layer, EDGE_ATTR, edge_index, N), tuple(xs), rule, relevance)


def nnconv_reference(layer, xs, rule, relevance, edge_index):
    return M.nnconv_relevance(layer, xs[0], xs[1], edge_index, rule, relevance)


def film_reference(layer, xs, rule, relevance, edge_index):
    edge_type = EDGE_TYPE if layer.num_relations > 1 else None
    return M.film_relevance(layer, xs[0], edge_index, edge_type, rule, relevance)


def res_gated_reference(layer, xs, rule, relevance, edge_index):
    return M.res_gated_relevance(layer, xs[0], edge_index, rule, relevance)


def arma_reference(layer, xs, rule, relevance, edge_index):
    return M.arma_relevance(layer, xs[0], edge_index, rule, relevance)


class TestGATEConv(FamilyTests):
    CONFIGS = {"edge_dim": lambda s: build(lambda c: (c or GATEConv)(F_IN, F_IN, F_EDGE), None, gate_reference, s,
                                           frozen=M.FrozenGATEConv, edge_features=True, call=with_edge_attr)}


def rgcn(name: str, **kwargs):
    return lambda s: build(lambda c: c(F_IN, F_OUT, RELATIONS, **kwargs), name, rgcn_reference, s, call=typed)


class TestRGCNConv(FamilyTests):
    CONFIGS = {"mean": rgcn("RGCNConv"), "add-nobias": rgcn("RGCNConv", aggr="add", bias=False),
               "bases": rgcn("RGCNConv", num_bases=2)}


class TestFastRGCNConv(FamilyTests):
    CONFIGS = {"mean": rgcn("FastRGCNConv"), "bases": rgcn("FastRGCNConv", num_bases=2)}


def nnconv(c):
    return c(F_IN, F_OUT, nn.Linear(F_EDGE, F_IN * F_OUT))


class TestNNConv(FamilyTests):
    PATHS_OF_BOTH_SIGNS = {"edge_attr-constant": "the edge weights, gates here, carry signs"}
    CONFIGS = {
        # edge_attr a constant of the pass: the edge weights are gates
        "edge_attr-constant": lambda s: build(nnconv, "NNConv", nnconv_constant_reference, s,
                                              call=lambda layer, x, ei: layer(x, ei, EDGE_ATTR.to(ei.device))),
        # edge_attr explained: x_j times the edge weights is a product of two signals
        "edge_attr-explained": lambda s: build(nnconv, "NNConv", nnconv_reference, s, frozen=M.FrozenNNConv,
                                               edge_features=True, call=with_edge_attr),
    }


class TestFiLMConv(FamilyTests):
    CONFIGS = {
        "one-relation": lambda s: build(lambda c: c(F_IN, F_OUT), "FiLMConv", film_reference, s,
                                        frozen=M.FrozenFiLMConv),
        "two-relations": lambda s: build(lambda c: c(F_IN, F_OUT, num_relations=RELATIONS), "FiLMConv",
                                         film_reference, s, frozen=M.FrozenFiLMConv, call=typed),
    }


class TestResGatedGraphConv(FamilyTests):
    CONFIGS = {"sigmoid": lambda s: build(lambda c: c(F_IN, F_OUT), "ResGatedGraphConv", res_gated_reference, s,
                                          frozen=M.FrozenResGatedGraphConv)}


class TestARMAConv(FamilyTests):
    CONFIGS = {
        "stacks2-layers2": lambda s: build(lambda c: c(F_IN, F_OUT, num_stacks=2, num_layers=2), "ARMAConv",
                                           arma_reference, s),
        "stacks3-layers1-shared": lambda s: build(
            lambda c: c(F_IN, F_OUT, num_stacks=3, num_layers=1, shared_weights=True), "ARMAConv", arma_reference, s),
    }

    # its messages are [K, E, C]: gradient x input books them along node_dim
    def test_twin_lrp0_is_gradient_x_input(self, config, monkeypatch):
        monkeypatch.setattr(T, "gradient_x_input", M.gradient_x_input)
        super().test_twin_lrp0_is_gradient_x_input(config)

    def test_lrp0_is_gradient_x_input(self, config, monkeypatch):
        monkeypatch.setattr(T, "gradient_x_input", M.gradient_x_input)
        super().test_lrp0_is_gradient_x_input(config)


class TestPropagation(FamilyTests):
    """Layers without weights: only the gates and the aggregation."""

    CONFIGS = {
        "SimpleConv-sum-root": lambda s: build(lambda c: c(aggr="sum", combine_root="sum"), "SimpleConv",
                                               single(M.PropagationTwin), s),
        "SimpleConv-mean-self_loop": lambda s: build(lambda c: c(aggr="mean", combine_root="self_loop"),
                                                     "SimpleConv", single(M.PropagationTwin), s, message_share=1),
        "LGConv": lambda s: build(lambda c: c(), "LGConv", single(M.PropagationTwin), s, message_share=1),
        "WLConvContinuous": lambda s: build(lambda c: c(), "WLConvContinuous", single(M.PropagationTwin), s),
    }


# ---------------------------------------------------------------------------
# DirGNNConv: two message-passing layers side by side, one layer of the model
# ---------------------------------------------------------------------------


def dirgnn_reference(layer, xs, rule, relevance, edge_index):
    return T.single_map(M.DirGNNTwin(layer, edge_index, N), tuple(xs), rule, relevance)


def dirgnn_setup():
    return build(lambda c: c(pyg_nn.GCNConv(F_IN, F_OUT), alpha=0.3), "DirGNNConv", dirgnn_reference, 0)


@pytest.mark.parametrize("rule", list(RULES), ids=list(RULES))
def test_dirgnn_node_relevance_matches_twin(rule):
    setup, rule = dirgnn_setup(), RULES[rule]
    inputs = setup.inputs_for(rule)
    relevance = seed_relevance(setup.call_with(setup.stock, inputs), 5)
    twin = setup.reference(setup.stock, inputs, rule, relevance, setup.edge_index)
    out, (rel,), _, _ = run_lrp(setup, rule, inputs, relevance)
    assert_relevance(out, twin.out, "forward in the pass")
    assert_relevance(rel, twin.inputs[0], "node relevance")


def test_the_default_composite_gives_all_of_a_dirgnn_layer_one_rule():
    """A lone ``DirGNNConv`` is the model's input layer. Under the default
    composite all of it (``conv_in``, ``conv_out``, the root ``Linear`` and
    their weighted sum) gets the input rule, so the pass is its twin under
    ``ZPlus``: one map, one rule. (Counted as two message-passing layers,
    ``conv_out`` got another rule than ``conv_in`` and the sum a third.)"""
    from torch_geometric_lrp.convert import DEFAULT_INPUT

    setup = dirgnn_setup()
    relevance = seed_relevance(setup.call_with(setup.stock, setup.inputs), 5)
    rule = T.AlphaBeta(1.0, 0.0, DEFAULT_INPUT.epsilon)
    assert lrp_rule(rule) == DEFAULT_INPUT
    twin = setup.reference(setup.stock, setup.inputs, rule, relevance, setup.edge_index)
    _, (rel,), edge, _ = run_lrp(setup, None, setup.inputs, relevance)
    assert_relevance(rel, twin.inputs[0], "node relevance")
    assert_relevance(edge, twin.edge, "edge relevance")


def test_dirgnn_edge_relevance_matches_twin():
    """``conv_out`` propagates over the flipped edges: message k is still input edge k."""
    setup, rule = dirgnn_setup(), RULES["epsilon"]
    relevance = seed_relevance(setup.call_with(setup.stock, setup.inputs), 5)
    twin = setup.reference(setup.stock, setup.inputs, rule, relevance, setup.edge_index)
    _, _, edge, _ = run_lrp(setup, rule, setup.inputs, relevance)
    assert_relevance(edge, twin.edge, "edge relevance")


# ---------------------------------------------------------------------------
# lrp.convert and PyG's Explainer on a model around each layer
# ---------------------------------------------------------------------------

HIDDEN, CLASSES = 6, 3
NODES = torch.tensor([2, 3, 6])  # nodes with incoming edges


class Net(nn.Module):
    """``conv -> ReLU -> Linear``: a node classifier around one layer."""

    def __init__(self, conv: nn.Module, width: int):
        super().__init__()
        self.conv, self.head = conv, nn.Linear(width, CLASSES)

    def forward(self, x, edge_index, **kwargs):
        return self.head(self.conv(x, edge_index, **kwargs).relu())


class WithInitial(nn.Module):
    """A layer that also takes the initial features ``x_0`` (``GCN2Conv``), given ``x`` there."""

    def __init__(self, conv: nn.Module):
        super().__init__()
        self.conv = conv

    def forward(self, x, edge_index):
        return self.conv(x, x, edge_index)


ATTR = dict(edge_attr=EDGE_ATTR.float())
TYPES = dict(edge_type=EDGE_TYPE)
REGISTERED = {  # name -> (conv, output width, extra forward arguments)
    "TAGConv": (lambda: pyg_nn.TAGConv(F_IN, HIDDEN, K=2), HIDDEN, {}),
    "SSGConv": (lambda: pyg_nn.SSGConv(F_IN, HIDDEN, alpha=0.3, K=2), HIDDEN, {}),
    "MixHopConv": (lambda: pyg_nn.MixHopConv(F_IN, HIDDEN), 3 * HIDDEN, {}),
    "ClusterGCNConv": (lambda: pyg_nn.ClusterGCNConv(F_IN, HIDDEN, diag_lambda=0.5), HIDDEN, {}),
    "LEConv": (lambda: pyg_nn.LEConv(F_IN, HIDDEN), HIDDEN, {}),
    "AGNNConv": (lambda: pyg_nn.AGNNConv(), F_IN, {}),
    "GATEConv": (lambda: GATEConv(F_IN, F_IN, F_EDGE), F_IN, ATTR),
    "RGCNConv": (lambda: pyg_nn.RGCNConv(F_IN, HIDDEN, RELATIONS, num_bases=2), HIDDEN, TYPES),
    "FastRGCNConv": (lambda: pyg_nn.FastRGCNConv(F_IN, HIDDEN, RELATIONS), HIDDEN, TYPES),
    "NNConv": (lambda: pyg_nn.NNConv(F_IN, HIDDEN, nn.Linear(F_EDGE, F_IN * HIDDEN)), HIDDEN, ATTR),
    "FiLMConv": (lambda: pyg_nn.FiLMConv(F_IN, HIDDEN, num_relations=RELATIONS), HIDDEN, TYPES),
    "ResGatedGraphConv": (lambda: pyg_nn.ResGatedGraphConv(F_IN, HIDDEN), HIDDEN, {}),
    "ARMAConv": (lambda: pyg_nn.ARMAConv(F_IN, HIDDEN, num_stacks=2, num_layers=2), HIDDEN, {}),
    "SimpleConv": (lambda: pyg_nn.SimpleConv(aggr="mean", combine_root="sum"), F_IN, {}),
    "LGConv": (lambda: pyg_nn.LGConv(), F_IN, {}),
    "WLConvContinuous": (lambda: pyg_nn.WLConvContinuous(), F_IN, {}),
    "DirGNNConv": (lambda: pyg_nn.DirGNNConv(pyg_nn.GCNConv(F_IN, HIDDEN), alpha=0.3), HIDDEN, {}),
    "GCN2Conv": (lambda: WithInitial(pyg_nn.GCN2Conv(F_IN, alpha=0.2)), F_IN, {}),
}


def model_of(name: str) -> tuple[nn.Module, dict]:
    torch.manual_seed(3)
    make, width, kwargs = REGISTERED[name]
    return randomize_biases(Net(make(), width)).eval(), kwargs


def randomize_biases(model: nn.Module) -> nn.Module:
    """PyG zeroes biases: make them count."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.uniform_(-0.3, 0.3)
    return model


def graph():
    """Signed features and the twins' random directed edges."""
    return torch.randn(N, F_IN, generator=torch.Generator().manual_seed(4)), random_edges(2)


@pytest.mark.parametrize("name", list(REGISTERED))
def test_convert_accepts_and_keeps_the_forward(name):
    model, kwargs = model_of(name)
    x, edge_index = graph()
    converted = lrp.convert(model)
    torch.testing.assert_close(converted(x, edge_index, **kwargs), model(x, edge_index, **kwargs))


@pytest.mark.parametrize("name", list(REGISTERED))
def test_explainer_masks_match_explain(name):
    model, kwargs = model_of(name)
    x, edge_index = graph()
    explainer = Explainer(model, algorithm=lrp.LRP(), explanation_type="model", node_mask_type="attributes",
                          edge_mask_type="object", model_config=dict(mode="multiclass_classification",
                                                                     task_level="node", return_type="raw"))
    explanation = explainer(x, edge_index, index=NODES, **kwargs)
    reference = lrp.explain(model, x, edge_index, index=NODES, **kwargs)
    node_mask, edge_mask = explanation.node_mask, explanation.edge_mask
    assert node_mask.shape == x.shape and edge_mask.shape == (edge_index.shape[1],)
    assert bool(torch.isfinite(node_mask).all()) and bool(torch.isfinite(edge_mask).all())
    assert float(node_mask.abs().sum()) > 1e-4 and float(edge_mask.abs().sum()) > 1e-4
    assert float(node_mask.sum()) == pytest.approx(float(reference.node_mask.sum()), rel=1e-5, abs=1e-6)
    assert float(edge_mask.sum()) == pytest.approx(float(reference.edge_mask.sum()), rel=1e-5, abs=1e-6)
    scale = abs(reference.score) + abs(reference.absorbed) + abs(reference.relevance_total)
    assert abs(reference.residual) <= 1e-4 * scale, f"residual {reference.residual} of score {reference.score}"
