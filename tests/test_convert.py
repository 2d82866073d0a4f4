"""lrp.convert and the relevance pass on models written as a PyG user writes them.

Every model here is built from stock PyG classes with functional ops in its
own forward. Each must: convert; give the same output; conserve relevance
(bias-free: input relevance = seed; with biases: input + absorbed + lost =
seed); and leave the original model exactly as it was.
"""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
import torch.nn.functional as F
from torch_geometric.explain import Explainer
from torch_geometric.nn import (
    GATConv, GCNConv, GINConv, MLP, SAGEConv, global_max_pool, global_mean_pool,
)

import torch_geometric_lrp as lrp
from torch_geometric_lrp import rules as R
from torch_geometric_lrp.convert import DEFAULT_INPUT, DEFAULT_LOWER, DEFAULT_UPPER, resolve_rules

LRP0 = {torch.nn.Module: R.Epsilon(0.0)}


class GCN3(torch.nn.Module):
    def __init__(self, bias=True):
        super().__init__()
        self.conv1 = GCNConv(5, 16, bias=bias)
        self.conv2 = GCNConv(16, 16, bias=bias)
        self.conv3 = GCNConv(16, 3, bias=bias)

    def forward(self, x, edge_index):
        x = F.relu(self.conv1(x, edge_index))
        x = F.dropout(x, p=0.5, training=self.training)
        x = F.relu(self.conv2(x, edge_index))
        return self.conv3(x, edge_index)


class GIN(torch.nn.Module):
    def __init__(self, bias=True):
        super().__init__()
        self.conv1 = GINConv(MLP([5, 16, 16], norm="batch_norm", bias=bias))
        self.conv2 = GINConv(MLP([16, 16, 16], norm="batch_norm", bias=bias), train_eps=True)
        self.head = torch.nn.Linear(16, 3, bias=bias)

    def forward(self, x, edge_index):
        x = self.conv1(x, edge_index).relu()
        x = self.conv2(x, edge_index).relu()
        return self.head(x)


class SAGE(torch.nn.Module):
    def __init__(self, bias=True):
        super().__init__()
        self.convs = torch.nn.ModuleList([SAGEConv(5, 16, bias=bias), SAGEConv(16, 16, aggr="max", bias=bias),
                                          SAGEConv(16, 3, bias=bias)])

    def forward(self, x, edge_index):
        for conv in self.convs[:-1]:
            x = F.elu(conv(x, edge_index))
        return self.convs[-1](x, edge_index)


class GAT(torch.nn.Module):
    def __init__(self, bias=True):
        super().__init__()
        self.conv1 = GATConv(5, 8, heads=2, bias=bias)
        self.conv2 = GATConv(16, 3, heads=1, concat=False, bias=bias)

    def forward(self, x, edge_index):
        x = F.elu(self.conv1(x, edge_index))
        return F.log_softmax(self.conv2(x, edge_index), dim=-1)


class GraphClassifier(torch.nn.Module):
    """Residual GCN, mean and max readouts concatenated, MLP head plus a mean skip."""

    def __init__(self, bias=True):
        super().__init__()
        self.conv1 = GCNConv(5, 16, bias=bias)
        self.conv2 = GCNConv(16, 16, bias=bias)
        self.head = torch.nn.Sequential(torch.nn.Linear(32, 16, bias=bias), torch.nn.ReLU(),
                                        torch.nn.Linear(16, 2, bias=bias))

    def forward(self, x, edge_index, batch):
        h = F.relu(self.conv1(x, edge_index))
        h = h + F.relu(self.conv2(h, edge_index))         # residual
        pooled = torch.cat([global_mean_pool(h, batch), global_max_pool(h, batch)], dim=-1)
        return self.head(pooled) + pooled.mean(dim=-1, keepdim=True)  # a mean skip to every logit


def graph(seed=0, n=12, graphs=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 5, generator=g, dtype=torch.float64)
    edge_index = torch.randint(0, n, (2, 3 * n), generator=g)
    batch = torch.arange(graphs).repeat_interleave(n // graphs)
    return x, edge_index, batch


def node_model(cls, bias):
    torch.manual_seed(0)
    model = cls(bias=bias).double()
    x, edge_index, _ = graph()
    model.train()
    model(x, edge_index)          # fill batch-norm running statistics with something non-trivial
    model.eval()
    if not bias:                  # batch norm's shift acts as a bias: remove it too
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm1d):
                m.running_mean.zero_()
                m.bias.data.zero_()
    return model, (x, edge_index)


def graph_model(bias):
    torch.manual_seed(0)
    model = GraphClassifier(bias=bias).double().eval()
    x, edge_index, batch = graph(n=12, graphs=3)
    return model, (x, edge_index, batch)


MODELS = {
    "gcn3": lambda bias: node_model(GCN3, bias),
    "gin_mlp_batchnorm": lambda bias: node_model(GIN, bias),
    "graphsage": lambda bias: node_model(SAGE, bias),
    "gat": lambda bias: node_model(GAT, bias),
    "graph_classifier": graph_model,
}


def snapshot(model):
    return {
        "state": {k: v.clone() for k, v in model.state_dict().items()},
        "types": [type(m) for m in model.modules()],
        "training": [m.training for m in model.modules()],
        "requires_grad": [p.requires_grad for p in model.parameters()],
        "hooks": [(len(m._forward_hooks), len(m._forward_pre_hooks), len(m._backward_hooks)) for m in model.modules()],
        "flags": [(getattr(m, "_explain", None), getattr(m, "fuse", None)) for m in model.modules()],
        "dicts": [sorted(m.__dict__) for m in model.modules()],
    }


def assert_same(before, after):
    assert before["state"].keys() == after["state"].keys()
    for key in before["state"]:
        torch.testing.assert_close(before["state"][key], after["state"][key], rtol=0, atol=0)
    for key in ("types", "training", "requires_grad", "hooks", "flags", "dicts"):
        assert before[key] == after[key], key


@pytest.mark.parametrize("name", list(MODELS))
def test_converted_model_keeps_output_and_leaves_original_untouched(name):
    model, inputs = MODELS[name](True)
    expected = model(*inputs)
    before = snapshot(model)
    converted = lrp.convert(model)
    torch.testing.assert_close(converted(*inputs), expected, rtol=1e-6, atol=1e-6)
    report = lrp.check_conservation(converted, *inputs)
    assert report.unsupported == {}
    assert report.conserved(1e-5), str(report)
    assert_same(before, snapshot(model))
    torch.testing.assert_close(model(*inputs), expected, rtol=0, atol=0)
    # shared, not copied: the converted model follows the original's parameters
    assert {id(p) for p in converted.parameters()} == {id(p) for p in model.parameters()}


@pytest.mark.parametrize("name", list(MODELS))
def test_bias_free_models_conserve_exactly(name):
    model, inputs = MODELS[name](False)
    report = lrp.check_conservation(model, *inputs, rules=LRP0)
    assert report.unsupported == {}
    assert report.total_input + report.lost == pytest.approx(report.seed, rel=1e-5), str(report)
    assert abs(report.absorbed) <= 1e-6 * abs(report.seed) + 1e-9, str(report)


def test_lrp0_on_bias_free_relu_gcn_is_gradient_times_input():
    model, (x, edge_index) = node_model(GCN3, False)
    xg = x.clone().requires_grad_()
    out = model(xg, edge_index)
    out[4, 1].backward()
    expected = (xg.grad * x)

    converted = lrp.convert(model, rules=LRP0)
    xr = x.clone().requires_grad_()
    with lrp.relevance_pass(converted):
        out = converted(xr, edge_index)
        seed = torch.zeros_like(out)
        seed[4, 1] = out[4, 1].detach()
        out.backward(seed)
    torch.testing.assert_close(xr.grad, expected, rtol=1e-7, atol=1e-10)


def test_relevance_pass_restores_model_state_even_on_error():
    model, (x, edge_index) = node_model(GCN3, True)
    model.train()
    before = snapshot(model)
    with pytest.raises(RuntimeError, match="boom"):
        with lrp.relevance_pass(model):
            assert not model.training
            assert not any(p.requires_grad for p in model.parameters())
            raise RuntimeError("boom")
    assert_same(before, snapshot(model))


def test_original_state_left_by_another_explainer_does_not_reach_the_copy():
    model, (x, edge_index) = node_model(GCN3, True)
    conv = model.conv2
    conv.explain = True
    conv._edge_mask = torch.nn.Parameter(torch.ones(edge_index.size(1)))
    conv.explain = False
    conv._edge_mask = None            # what GNNExplainer leaves: an empty parameter slot
    converted = lrp.convert(model)
    assert converted.conv2._parameters is model.conv2._parameters  # shared, as for every layer
    assert converted.conv2._edge_mask is None and not converted.conv2.explain
    assert lrp.check_conservation(converted, x, edge_index).conserved()


def test_a_mask_left_on_the_original_keeps_the_parameters_shared():
    """A layer with PyG's edge mask set got a dict of parameters of its own
    on the copy: replacing a parameter (``load_state_dict(assign=True)``,
    ``.double()``) then reached one model only, and the two gave different
    outputs without a word. The copy reads no mask either way."""
    from torch_geometric.explain.algorithm.utils import clear_masks, set_masks

    model, (x, edge_index) = node_model(GCN3, True)
    set_masks(model, torch.nn.Parameter(torch.full((edge_index.size(1),), 0.5)), edge_index, apply_sigmoid=False)
    converted = lrp.convert(model)
    clear_masks(model)
    model.load_state_dict({k: v + 1.0 for k, v in model.state_dict().items()}, assign=True)  # new objects
    assert converted.conv2.bias is model.conv2.bias
    torch.testing.assert_close(converted(x, edge_index), model(x, edge_index))


def test_a_model_with_lazy_parameters_is_refused_until_it_ran():
    """Its copy kept the original's lazy-initialisation hook, which failed
    after the first forward ("'Linear' object has no attribute '_hook'")."""
    from torch_geometric.nn import GCN

    model = GCN(-1, 6, 2, 3)
    x, edge_index = torch.randn(5, 4), torch.tensor([[0, 1, 2], [1, 2, 3]])
    with pytest.raises(ValueError, match=r"in_channels=-1.*Run the model once"):
        lrp.convert(model)
    model(x, edge_index)
    converted = lrp.convert(model)
    torch.testing.assert_close(converted(x, edge_index), model(x, edge_index))


def test_unsupported_modules_are_listed_by_name_and_type():
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = GCNConv(4, 4)
            self.rnn = torch.nn.RNN(4, 4)
            self.block = torch.nn.Sequential(torch.nn.Conv1d(4, 4, 1))

    with pytest.raises(lrp.UnsupportedModuleError) as info:
        lrp.convert(Net())
    message = str(info.value)
    assert "rnn (torch.nn.modules.rnn.RNN)" in message
    assert "block.0 (torch.nn.modules.conv.Conv1d)" in message
    assert "GCNConv" not in message
    assert "lrp.register(RNN)" in message


def test_parametrized_modules_are_refused_with_what_works():
    """torch makes a class per parametrized module (``weight_norm``), so the
    generic advice, ``lrp.register(ParametrizedLinear)``, did not help."""
    model = torch.nn.Sequential(torch.nn.utils.parametrizations.weight_norm(torch.nn.Linear(3, 3)), torch.nn.ReLU())
    with pytest.raises(lrp.UnsupportedModuleError, match=r"(?s)parametrized modules.*lrp\.explain.*"
                                                         r"remove_parametrizations") as info:
        lrp.convert(model)
    assert "lrp.register" not in str(info.value)
    torch.nn.utils.parametrize.remove_parametrizations(model[0], "weight")
    lrp.convert(model)


def test_a_rule_for_a_type_declares_it_supported():
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Tanhshrink())
    with pytest.raises(lrp.UnsupportedModuleError):
        lrp.convert(model)
    lrp.convert(model, rules={torch.nn.Tanhshrink: R.Epsilon()})


def test_op_without_rule_is_reported_by_name():
    class Sine(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 2)

        def forward(self, x):
            return torch.sin(self.lin(x))

    x, model = torch.randn(4, 3), Sine()
    converted = lrp.convert(model)
    # refused where relevance reaches it: the backward of the pass, or a plain one
    with pytest.raises(lrp.UnsupportedOpError, match=r"'sin' in the model \(Sine\)"):
        with lrp.relevance_pass(converted) as mode:
            watched = mode.watch(x)
            out = converted(watched)
            mode.backward(out, out.detach(), [watched])
    with pytest.raises(lrp.UnsupportedOpError, match=r"'sin' in the model \(Sine\)"):
        with lrp.relevance_pass(converted):
            x_ = x.clone().requires_grad_()
            converted(x_).sum().backward()
    report = lrp.check_conservation(model, x)
    assert list(report.unsupported) == ["sin in the model (Sine)"]
    assert not report.conserved()


def test_default_composite_and_overrides():
    model, _ = node_model(GCN3, True)
    resolved = resolve_rules(model)
    # the input layer: positive contributions; a hidden layer: Gamma(1); conv3 outputs the
    # scores (no head after it) and, like the rest (here the model itself), gets Epsilon
    assert resolved["conv1"] == DEFAULT_INPUT == R.ZPlus() and resolved["conv1.lin"] == DEFAULT_INPUT
    assert resolved["conv2"] == DEFAULT_LOWER == R.Gamma(1.0) and resolved["conv2.lin"] == DEFAULT_LOWER
    assert resolved["conv3"] == DEFAULT_UPPER == R.Epsilon(1e-6) and resolved["conv3.lin"] == DEFAULT_UPPER
    assert resolved[""] == DEFAULT_UPPER
    custom = resolve_rules(model, {GCNConv: R.ZPlus(), "conv3*": R.Epsilon(0.5)})
    assert custom["conv1.lin"] == R.ZPlus()
    assert custom["conv3.lin"] == R.Epsilon(0.5)


@pytest.mark.parametrize("order", ["layer first", "catch-all first"])
def test_a_catch_all_key_does_not_override_a_more_specific_one(order):
    """``{GCNConv: Gamma(5), torch.nn.Module: Epsilon(0)}``: Gamma on the GCN
    layers, all of each (its own ``lin`` included), Epsilon elsewhere, in
    either order. Before, the layer's ``lin`` matched the catch-all and got
    Epsilon, so Gamma (which modifies the weights, all in ``lin``) changed
    nothing, without a word."""
    model, (x, edge_index) = node_model(GCN3, True)
    keys = [(GCNConv, R.Gamma(5.0)), (torch.nn.Module, R.Epsilon(0.0))]
    rules = dict(keys if order == "layer first" else keys[::-1])
    resolved = resolve_rules(model, rules)
    for layer in ("conv1", "conv2", "conv3"):
        assert resolved[layer] == resolved[f"{layer}.lin"] == R.Gamma(5.0)
    assert resolved[""] == R.Epsilon(0.0)
    by_name = {f"conv{i}": R.Gamma(5.0) for i in (1, 2, 3)} | {"": R.Epsilon(0.0)}
    got = lrp.explain(model, x, edge_index, index=3, rules=rules)
    want = lrp.explain(model, x, edge_index, index=3, rules=by_name)
    torch.testing.assert_close(got.node_mask, want.node_mask)
    torch.testing.assert_close(got.edge_mask, want.edge_mask)
    everywhere = lrp.explain(model, x, edge_index, index=3, rules=R.Epsilon(0.0))
    assert (got.node_mask - everywhere.node_mask).abs().max() > 1e-3  # Gamma is applied


def test_the_most_specific_type_and_glob_win_whatever_their_order():
    """A subclass's key beats its base's (``GCNConv`` before
    ``MessagePassing``), the glob with more literal characters beats a
    shorter one; before, the first key in the dict won."""
    from torch_geometric.nn import MessagePassing
    model, _ = node_model(GCN3, True)
    resolved = resolve_rules(model, {MessagePassing: R.Epsilon(0.5), GCNConv: R.Gamma(2.0)})
    assert resolved["conv2"] == resolved["conv2.lin"] == R.Gamma(2.0)
    resolved = resolve_rules(model, {"conv*": R.Epsilon(0.5), "conv2*": R.Gamma(2.0)})
    assert resolved["conv2"] == resolved["conv2.lin"] == R.Gamma(2.0)
    assert resolved["conv1"] == R.Epsilon(0.5)
    # a type key that the parent is not an instance of still applies inside it
    from torch_geometric.nn.dense.linear import Linear
    resolved = resolve_rules(model, {GCNConv: R.Gamma(2.0), Linear: R.Epsilon(0.5)})
    assert resolved["conv2"] == R.Gamma(2.0) and resolved["conv2.lin"] == R.Epsilon(0.5)


def test_a_glob_keys_the_outermost_modules_it_matches():
    """``"convs.*"`` keys each layer; a layer named by its own key keeps that
    rule on all of it (before, ``convs.0.lin`` matched the glob again and
    ran under ``Gamma`` while the rest of ``convs.0`` ran under
    ``Epsilon(10)``: one map split between two rules). The explanation equals
    the one with every layer named."""
    from torch_geometric.nn import GCN
    torch.manual_seed(0)
    model = GCN(4, 8, 3, 2).double().eval()
    resolved = resolve_rules(model, {"convs.*": R.Gamma(0.5), "convs.0": R.Epsilon(10.0)})
    assert resolved["convs.0"] == resolved["convs.0.lin"] == R.Epsilon(10.0)
    assert resolved["convs.1"] == resolved["convs.1.lin"] == R.Gamma(0.5)
    x, edge_index = torch.randn(10, 4, dtype=torch.float64), torch.randint(0, 10, (2, 30))
    globbed = lrp.explain(model, x, edge_index, index=3, rules={"convs.*": R.Gamma(0.5), "convs.0": R.Epsilon(10.0)})
    named = lrp.explain(model, x, edge_index, index=3, rules={"convs.0": R.Epsilon(10.0), "convs.1": R.Gamma(0.5),
                                                              "convs.2": R.Gamma(0.5)})
    torch.testing.assert_close(globbed.node_mask, named.node_mask, rtol=1e-12, atol=1e-15)
    # a catch-all glob keys the root: a type key still reaches the layers inside it
    resolved = resolve_rules(model, {"*": R.Epsilon(0.5), GCNConv: R.Gamma(2.0)})
    assert resolved[""] == resolved["convs"] == R.Epsilon(0.5)
    assert resolved["convs.1"] == resolved["convs.1.lin"] == R.Gamma(2.0)


def test_the_last_layer_is_hidden_where_a_head_follows_it():
    """The last message-passing layer gets Gamma(1) where a module with
    weights is registered after it (it is then a hidden layer) and Epsilon
    where it outputs the scores; normalisation layers do not count as a head."""
    from torch_geometric.nn import GCN, MLP

    def last(model, name):
        return resolve_rules(model)[name]

    assert last(GCN(4, 8, 3, 2), "convs.2") == R.Epsilon(1e-6)  # BasicGNN: the last conv outputs the scores
    assert last(GCN(4, 8, 3, 2, norm="batch_norm"), "convs.2") == R.Epsilon(1e-6)
    assert last(GCN(4, 8, 3, 2, jk="cat"), "convs.2") == R.Gamma(1.0)  # then `lin`
    with_head = torch.nn.Module()
    with_head.gnn, with_head.head = GCN(4, 8, 3), MLP([8, 8, 2])
    assert last(with_head, "gnn.convs.2") == R.Gamma(1.0)
    assert last(with_head, "gnn.convs.0") == R.ZPlus() and last(with_head, "head.lins.0") == R.Epsilon(1e-6)
    single = GCN(4, 8, 1, 2)  # one layer, input and output: the input rule
    assert last(single, "convs.0") == R.ZPlus()


def test_every_edge_type_of_the_input_layer_gets_the_input_rule():
    """In a heterogeneous model the input layer is one layer per edge type
    (``to_hetero``'s and ``HeteroConv``'s ``ModuleDict``): all of them read
    the input features, so all get the input rule, not only the first."""
    from torch_geometric.nn import HeteroConv, SAGEConv, to_hetero

    class Two(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = SAGEConv((-1, -1), 8)
            self.conv2 = SAGEConv((-1, -1), 4)

        def forward(self, x, edge_index):
            return self.conv2(self.conv1(x, edge_index).relu(), edge_index)

    types = [("author", "writes", "paper"), ("paper", "rev_writes", "author"), ("paper", "cites", "paper")]
    hetero = resolve_rules(to_hetero(Two(), (["author", "paper"], types), aggr="sum"))
    for t in types:
        key = "__".join(t)
        assert hetero[f"conv1.{key}"] == R.ZPlus() and hetero[f"conv1.{key}.lin_l"] == R.ZPlus()
        assert hetero[f"conv2.{key}"] == R.Epsilon(1e-6)  # it outputs the scores

    stacked = torch.nn.ModuleList([HeteroConv({t: SAGEConv((-1, -1), 8) for t in types}) for _ in range(2)])
    found = resolve_rules(stacked)
    first = [n for n in found if n.startswith("0.convs.") and n.count(".") == 2]
    later = [n for n in found if n.startswith("1.convs.") and n.count(".") == 2]
    assert len(first) == len(later) == 3
    assert all(found[n] == R.ZPlus() for n in first) and all(found[n] == R.Epsilon(1e-6) for n in later)
    stacked.append(torch.nn.Linear(8, 2))  # a head: the second layer is hidden now
    found = resolve_rules(stacked)
    assert all(found[n] == R.Gamma(1.0) for n in later)


def test_a_conv_layer_wrapping_message_passing_is_one_layer():
    """PyG conv layers that run message-passing layers inside (``DirGNNConv``:
    ``conv_in`` and ``conv_out`` side by side, plus a root ``Linear``;
    ``GPSConv``: a conv, attention and an MLP) are one layer each: all of
    a layer gets the rule of its position."""
    from torch_geometric.nn import DirGNNConv, GPSConv

    stack = torch.nn.ModuleList([DirGNNConv(GCNConv(8, 8)) for _ in range(3)])
    found = resolve_rules(stack)
    for i, rule in enumerate([R.ZPlus(), R.Gamma(1.0), R.Epsilon(1e-6)]):
        parts = [n for n in found if n == str(i) or n.startswith(f"{i}.")]
        assert {"conv_in.lin", "conv_out.lin", "lin"} <= {n.partition(".")[2] for n in parts}
        assert all(found[n] == rule for n in parts), (i, {n: found[n] for n in parts})
    stack.append(torch.nn.Linear(8, 2))  # a head: the third layer is hidden
    assert resolve_rules(stack)["2.conv_out.lin"] == R.Gamma(1.0)

    gps = torch.nn.ModuleList([GPSConv(8, GINConv(torch.nn.Linear(8, 8)), heads=2) for _ in range(2)])
    found = resolve_rules(gps)
    assert found["0.conv.nn"] == found["0.mlp.0"] == found["0.attn.out_proj"] == R.ZPlus()
    assert found["1.conv.nn"] == found["1.mlp.0"] == found["1.attn.out_proj"] == R.Epsilon(1e-6)


def _layer(kind: str) -> torch.nn.Module:
    from torch_geometric.nn import DirGNNConv, GPSConv
    if kind == "gcn":
        return GCNConv(8, 8)
    if kind == "dir":
        return DirGNNConv(GCNConv(8, 8))
    return GPSConv(8, GINConv(torch.nn.Linear(8, 8)), heads=2)


@settings(max_examples=30, deadline=None)
@given(kinds=st.lists(st.sampled_from(["gcn", "dir", "gps"]), min_size=1, max_size=4), head=st.booleans())
def test_default_composite_by_position_for_any_stack(kinds, head):
    """For any stack of graph layers (plain, DirGNNConv, GPSConv), with or
    without a head: the first layer gets the input rule, the last the output
    rule where no head follows (else the hidden one), the others the hidden
    rule, and every module inside a layer its layer's rule."""
    model = torch.nn.Module()
    model.layers = torch.nn.ModuleList([_layer(k) for k in kinds])
    if head:
        model.head = torch.nn.Linear(8, 2)
    found = resolve_rules(model)
    last = len(kinds) - 1
    for i in range(len(kinds)):
        expected = DEFAULT_INPUT if i == 0 else DEFAULT_UPPER if i == last and not head else DEFAULT_LOWER
        inside = {n: r for n, r in found.items() if n == f"layers.{i}" or n.startswith(f"layers.{i}.")}
        assert len(inside) > 1 and all(r == expected for r in inside.values()), (i, inside)
    if head:
        assert found["head"] == DEFAULT_UPPER


def test_a_rule_for_a_name_that_matches_no_module_is_refused():
    """A misspelt module name in ``rules`` would leave that module on the
    default rule without a word: refused, naming the key and the model's names."""
    model, (x, edge_index) = node_model(GCN3, True)
    with pytest.raises(ValueError, match=r"rules: no module of GCN3 is named 'conv_1'.*'conv1'"):
        resolve_rules(model, {"conv_1": R.Gamma(0.25)})
    with pytest.raises(ValueError, match=r"'layers\.\*'"):
        lrp.explain(model, x, edge_index, index=1, rules={"conv1": R.Gamma(0.25), "layers.*": R.ZPlus()})
    assert resolve_rules(model, {"conv*": R.ZPlus()})["conv2.lin"] == R.ZPlus()  # a glob that matches


def test_rules_whose_types_match_no_module_are_refused():
    """A composite keyed only by types none of which the model has changes
    nothing: before, the default rules were applied without a word. Refused
    by ``explain``, ``LRP`` and ``convert``, naming the types and the
    model's. A composite with some types the model lacks is fine (one
    composite may serve several models)."""
    model, (x, edge_index) = node_model(GCN3, True)
    message = (r"rules: no module of GCN3 is an instance of torch_geometric.nn.conv.sage_conv.SAGEConv, "
               r"torch_geometric.nn.conv.gat_conv.GATConv, so these rules change nothing.*gcn_conv.GCNConv")
    unused = {SAGEConv: R.Gamma(0.25), GATConv: R.ZPlus()}
    with pytest.raises(ValueError, match=message):
        lrp.explain(model, x, edge_index, index=1, rules=unused)
    explainer = Explainer(model, algorithm=lrp.LRP(rules=unused), explanation_type="model",
                          node_mask_type="attributes", edge_mask_type="object",
                          model_config=dict(mode="multiclass_classification", task_level="node", return_type="raw"))
    with pytest.raises(ValueError, match=message):
        explainer(x, edge_index, index=1)
    with pytest.raises(ValueError, match=message):
        lrp.convert(model, rules=unused)
    some = lrp.explain(model, x, edge_index, index=1, rules={**unused, GCNConv: R.Gamma(0.25)})
    only = lrp.explain(model, x, edge_index, index=1, rules={GCNConv: R.Gamma(0.25)})
    torch.testing.assert_close(some.node_mask, only.node_mask, rtol=0, atol=0)


def test_torch_blocks_explained_op_by_op_are_accepted():
    """``RMSNorm``, ``GLU`` and ``LogSigmoid`` go through ``convert``, and the
    converted model conserves relevance."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.RMSNorm(6), torch.nn.GLU(), torch.nn.Linear(3, 3),
                                torch.nn.LogSigmoid(), torch.nn.Linear(3, 2, bias=False)).double()
    converted = lrp.convert(model)
    x = torch.randn(5, 4, dtype=torch.float64)
    torch.testing.assert_close(converted(x), model(x))
    report = lrp.check_conservation(converted, x)
    assert report.conserved(), report


def test_composite_rule_is_the_one_used():
    # a single linear layer: Flat gives every input feature the same share
    model = torch.nn.Sequential(torch.nn.Linear(4, 1, bias=False))
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    report = lrp.check_conservation(model, x, rules={"0": R.Flat()})
    assert report.total_input == pytest.approx(report.seed)
    converted = lrp.convert(model, rules={"0": R.Flat()})
    xr = x.clone().requires_grad_()
    with lrp.relevance_pass(converted):
        out = converted(xr)
        out.backward(torch.ones_like(out))
    torch.testing.assert_close(xr.grad, torch.full((1, 4), 0.25))


def test_rules_are_validated():
    with pytest.raises(TypeError, match="values must be rules"):
        lrp.convert(torch.nn.Linear(2, 2), rules={torch.nn.Linear: 0.5})
    with pytest.raises(TypeError, match="keys must be module types"):
        lrp.convert(torch.nn.Linear(2, 2), rules={3: R.Epsilon()})
    # a type that is not a module would match no layer: refused, also next to a valid key
    with pytest.raises(TypeError, match="a type key must be a subclass of torch.nn.Module"):
        lrp.convert(torch.nn.Linear(2, 2), rules={torch.nn.Linear: R.Epsilon(), int: R.Gamma()})
    with pytest.raises(TypeError, match="got <class 'torch.Tensor'>"):
        lrp.LRP(rules={torch.Tensor: R.Epsilon()})


class LinearOnly(R.Rule):
    """A rule that defines ``linear`` only (LRP-0 on one Linear)."""

    def linear(self, x, weight, bias, out, relevance):
        s, dropped = R.divide(relevance, out)
        return x * (s @ weight), dropped


def test_a_rule_with_linear_only_serves_functional_linear_and_is_refused_by_the_pass():
    """Such a rule works with ``functional.linear``; the pass applies rules
    to whole maps through ``streams`` and ``gradients``. Before, every
    explanation failed with an empty ``NotImplementedError`` from inside the
    backward."""
    from torch_geometric_lrp import functional as LF

    x = torch.rand(4, 3, dtype=torch.float64, requires_grad=True)
    w, b = torch.rand(2, 3, dtype=torch.float64), torch.zeros(2, dtype=torch.float64)
    out = LF.linear(x, w, b, LinearOnly())
    out.backward(out.detach())
    torch.testing.assert_close(x.grad, x.detach() * (torch.ones_like(out) @ w))  # LRP-0, no bias: R = x * (1 @ W)
    model = torch.nn.Sequential(torch.nn.Linear(3, 2))
    for rules in (LinearOnly(), {torch.nn.Linear: LinearOnly()}):
        for call in (lambda: lrp.convert(model, rules), lambda: lrp.LRP(rules=rules),
                     lambda: lrp.relevance_pass(model, rules=rules).__enter__(),
                     lambda: lrp.explain(GCNConv(3, 2).double(), x.detach(), torch.tensor([[0, 1], [1, 2]]),
                                         rules=rules, mode="regression")):
            with pytest.raises(TypeError, match="rules: LinearOnly does not define gradients"):
                call()


def test_module_rows_count_what_enters_from_outside():
    """A block returns ``(b(h), h)`` with ``h = a(x)`` and only its first
    output is used: the relevance entering the block is the seed, not the
    seed plus what ``b`` handed back to ``h`` inside the block."""
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(3, 4, bias=False)
            self.b = torch.nn.Linear(4, 2, bias=False)

        def forward(self, x):
            h = self.a(x)
            return self.b(h), h

    class Outer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.block = Block()

        def forward(self, x):
            out, _ = self.block(x)
            return out

    torch.manual_seed(0)
    model = Outer()
    x = torch.rand(5, 3)
    report = lrp.check_conservation(model, x, rules={torch.nn.Module: R.Epsilon(0.0)})
    rows = {layer.name: layer for layer in report.layers}
    assert rows["block"].entering == pytest.approx(report.seed, rel=1e-6)
    assert rows["block"].leaving == pytest.approx(report.seed, rel=1e-5)  # LRP-0, no bias: all of it
    assert rows["block.b"].entering == pytest.approx(report.seed, rel=1e-6)
    assert rows["block.a"].entering == pytest.approx(report.seed, rel=1e-5)
    assert report.conserved(1e-5), str(report)


@pytest.mark.parametrize("rule", [R.Epsilon(0.0), R.Epsilon(0.5)], ids=["lrp0", "epsilon"])
def test_a_module_that_loses_or_keeps_relevance_shows_it_in_its_gap(rule):
    """Relevance at an output with ``z = 0`` (no contribution) is lost, and a
    stabiliser keeps some: both happen at the end of the module's own map,
    so they entered the module, and its gap is what it lost and kept. Before,
    ``entering`` was measured after them: a ``Linear`` that lost 15 of a
    seed of 36 showed entering 21, gap 0."""
    layer = torch.nn.Linear(3, 2, bias=False).double()
    x = torch.rand(4, 3, dtype=torch.float64)
    x[3] = 0.0  # its outputs are exactly 0: their relevance is lost
    seed = torch.arange(1.0, 9.0, dtype=torch.float64).view(4, 2)
    report = lrp.check_conservation(torch.nn.Sequential(layer), x, seed=seed, rules={torch.nn.Module: rule})
    (row,) = [r for r in report.layers if r.name == "0"]
    assert row.entering == pytest.approx(float(seed.sum()), rel=1e-9)
    assert row.gap == pytest.approx(report.lost + report.absorbed, rel=1e-9)
    assert report.lost == pytest.approx(float(seed[3].sum()), rel=1e-9)


def test_module_rows_of_nested_modules_and_of_a_relu_between_maps():
    """``head = Sequential(Linear, ReLU, Linear)`` inside a model, under
    ``Epsilon(0.5)``: each row equals a dense reference (``R`` at each
    module's output and input), the ReLU's gap is 0 and each Linear's gap is
    what its bias and stabiliser kept. Before, the stabiliser's share at the
    end of ``head.0`` showed as the ReLU's gap (-0.013), and ``head.2``,
    whose output is also ``head``'s, showed entering 1.17 for a seed of
    3.62 (the backward reaches the outer module's end of the map, not the
    inner one's)."""
    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.head = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.ReLU(), torch.nn.Linear(6, 3)).double()

        def forward(self, x):
            return self.head(x)

    model, eps = Net(), 0.5
    x = torch.randn(5, 4, dtype=torch.float64)
    report = lrp.check_conservation(model, x, rules={torch.nn.Module: R.Epsilon(eps)})
    rows = {layer.name: layer for layer in report.layers}
    lin0, lin2 = model.head[0], model.head[2]

    def stab(z):
        return z + eps * torch.where(z >= 0, 1.0, -1.0)

    with torch.no_grad():  # the dense reference, one Linear at a time
        z0 = x @ lin0.weight.T + lin0.bias
        h = z0.relu()
        z2 = h @ lin2.weight.T + lin2.bias
        r_h = h * ((z2 / stab(z2)) @ lin2.weight)  # seed R = z2
        r_x = x * ((r_h / stab(z0)) @ lin0.weight)
    expected = {"head": (z2.sum(), r_x.sum()), "head.2": (z2.sum(), r_h.sum()),
                "head.1": (r_h.sum(), r_h.sum()), "head.0": (r_h.sum(), r_x.sum())}
    for name, (entering, leaving) in expected.items():
        assert rows[name].entering == pytest.approx(float(entering), rel=1e-9, abs=1e-12), name
        assert rows[name].leaving == pytest.approx(float(leaving), rel=1e-9, abs=1e-12), name
    assert rows["head.1"].gap == 0.0
    assert rows["head.0"].gap + rows["head.2"].gap == pytest.approx(report.absorbed, rel=1e-9)


class Wrapped(torch.nn.Module):
    """``Linear -> ReLU -> Linear`` as ``lin0``, ``act``, ``lin1`` in one of
    three layouts: flat, the ReLU and second Linear in a ``Sequential``
    (nested inputs), an ``Identity`` between the first Linear and the ReLU."""

    def __init__(self, layout: str):
        super().__init__()
        torch.manual_seed(0)
        self.lin0, self.lin1 = torch.nn.Linear(4, 6).double(), torch.nn.Linear(6, 3).double()
        self.layout = layout
        if layout == "nested":
            self.rest = torch.nn.Sequential(torch.nn.ReLU(), self.lin1)
        if layout == "identity":
            self.keep = torch.nn.Identity()

    def forward(self, x):
        h = self.lin0(x)
        if self.layout == "nested":
            return self.rest(h)
        if self.layout == "identity":
            h = self.keep(h)
        return self.lin1(h.relu())


@pytest.mark.parametrize("layout", ["nested", "identity"])
def test_module_rows_do_not_depend_on_wrapping_or_pass_through_modules(layout):
    """The first Linear's row is the same in every layout (``R`` at its
    output taken before its stabiliser), and the modules around it add no
    gap of their own. Before, under ``Epsilon(0.5)``, the stabiliser's share
    at the end of ``lin0`` was counted on the innermost module that read it
    (the ``Sequential`` showed leaving 0.03227 where its ``ReLU`` showed
    0.03177) or on the ``Identity`` (gap -0.0005, ``lin0`` gap 0)."""
    x = torch.randn(5, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    rules = {torch.nn.Module: R.Epsilon(0.5)}
    flat = {r.name: r for r in lrp.check_conservation(Wrapped("flat"), x, rules=rules).layers}
    report = lrp.check_conservation(Wrapped(layout), x, rules=rules)
    rows = {r.name: r for r in report.layers}
    for name in ("lin0", "lin1"):
        assert rows[name].entering == pytest.approx(flat[name].entering, rel=1e-12), name
        assert rows[name].leaving == pytest.approx(flat[name].leaving, rel=1e-12), name
    assert flat["lin0"].gap != 0.0  # the stabiliser keeps a share at lin0's end
    if layout == "nested":
        assert rows["rest"].leaving == pytest.approx(rows["rest.0"].leaving, rel=1e-12)
        assert rows["rest.0"].gap == 0.0
    else:
        assert rows["keep"].gap == 0.0
    assert rows["lin0"].gap + rows["lin1"].gap == pytest.approx(report.absorbed, rel=1e-9)


# ---------------------------------------------------------------------------
# One module under several names; parameters and buffers replaced by .to()
# ---------------------------------------------------------------------------

import torch_geometric.nn as pyg_nn  # noqa: E402


class Tied(torch.nn.Module):
    """One GraphConv applied three times, registered under three names."""

    def __init__(self):
        super().__init__()
        conv = pyg_nn.GraphConv(6, 6)
        self.convs = torch.nn.ModuleList([conv] * 3)

    def forward(self, x, edge_index):
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index)
            x = x.relu() if i < 2 else x
        return x


def test_a_module_under_several_names_is_copied_once_and_explained_alike():
    """The original's named_modules() lists the tied layer once, so it has one
    rule; the converted model must hold one copy of it too, with that rule.
    Before, each name got its own copy and its own default rule, and the two
    models' relevance differed (relevance_total 1.2855 against 1.3536)."""
    torch.manual_seed(0)
    model = Tied().double().eval()
    x, edge_index = torch.randn(10, 6, dtype=torch.float64), torch.randint(0, 10, (2, 30))
    converted = lrp.convert(model)
    assert len({id(m) for m in converted.convs}) == 1
    assert converted._lrp_rules == resolve_rules(model)
    original = lrp.explain(model, x, edge_index, index=2)
    explained = lrp.explain(converted, x, edge_index, index=2)
    torch.testing.assert_close(explained.node_mask, original.node_mask, rtol=0, atol=0)
    torch.testing.assert_close(explained.edge_mask, original.edge_mask, rtol=0, atol=0)


def test_a_rule_keyed_by_a_second_name_of_a_module_names_the_first():
    model = Tied()
    with pytest.raises(ValueError, match=r"rules: 'convs\.1' is the module 'convs\.0' registered under a second name"):
        lrp.convert(model, rules={"convs.1": lrp.rules.Epsilon()})


class FirstAndList(torch.nn.Module):
    """A GraphConv registered as ``first`` and again as ``convs.0``."""

    def __init__(self):
        super().__init__()
        self.first = pyg_nn.GraphConv(6, 6)
        self.convs = torch.nn.ModuleList([self.first, pyg_nn.GraphConv(6, 6), pyg_nn.GraphConv(6, 6)])

    def forward(self, x, edge_index):
        for conv in self.convs:
            x = conv(x, edge_index).relu()
        return x


def test_a_glob_that_reaches_a_module_only_at_its_second_name_is_refused():
    """``"convs.*"`` matches ``convs.0``, the module resolved at its first
    name ``first``: before, the glob's rule silently skipped it (it kept the
    default rule, a node mask 0.8 off that of keying all three layers)."""
    torch.manual_seed(0)
    model = FirstAndList().double().eval()
    eps = lrp.rules.Epsilon(0.0)
    with pytest.raises(ValueError, match=r"rules: 'convs\.\*' matches 'convs\.0', which is the module 'first'"):
        resolve_rules(model, {"convs.*": eps})
    x, edge_index = torch.randn(10, 6, dtype=torch.float64), torch.randint(0, 10, (2, 30))
    with pytest.raises(ValueError, match="Key it by 'first' as well"):
        lrp.explain(model, x, edge_index, index=2, rules={"convs.*": eps})
    # keyed at its first name as well, the glob covers the others
    given = lrp.explain(model, x, edge_index, index=2, rules={"first": eps, "convs.*": eps})
    every = lrp.explain(model, x, edge_index, index=2, rules={"first": eps, "convs.1": eps, "convs.2": eps})
    torch.testing.assert_close(given.node_mask, every.node_mask, rtol=0, atol=0)
    assert resolve_rules(model, {"first": eps, "convs.*": eps})["first"] is eps


def test_an_lrp_layer_and_its_pyg_layer_are_one_key_given_one_rule():
    """Before, both keys with different rules were merged silently, the one
    later in the dict winning."""
    model = torch.nn.Sequential()
    model.conv = pyg_nn.GCNConv(4, 5)
    eps, gamma = lrp.rules.Epsilon(0.0), lrp.rules.Gamma(0.5)
    for rules in ({lrp.nn.GCNConv: eps, pyg_nn.GCNConv: gamma}, {pyg_nn.GCNConv: gamma, lrp.nn.GCNConv: eps}):
        with pytest.raises(ValueError, match=r"rules: torch_geometric.*GCNConv and torch_geometric.*GCNConv are one "
                                             r"key .* given two rules"):
            resolve_rules(model, rules)
    same = resolve_rules(model, {lrp.nn.GCNConv: eps, pyg_nn.GCNConv: lrp.rules.Epsilon(0.0)})
    assert same["conv"] == eps


def test_casting_after_convert_keeps_buffers_shared():
    """.double() replaces buffers (running statistics): the converted model
    shares the original's buffer dicts, so both see the new ones. Before,
    each kept its own, and after training the original the two models'
    outputs differed by 1.5."""
    torch.manual_seed(0)
    model = pyg_nn.GCN(5, 8, num_layers=2, out_channels=3, norm="batch")
    converted = lrp.convert(model)
    model.double()
    converted.double()
    assert converted.norms[0].module.running_mean is model.norms[0].module.running_mean
    x, edge_index = torch.randn(10, 5, dtype=torch.float64), torch.randint(0, 10, (2, 30))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model.train()
    for _ in range(3):
        optimizer.zero_grad()
        model(x, edge_index).pow(2).sum().backward()
        optimizer.step()
    model.eval(), converted.eval()
    torch.testing.assert_close(converted(x, edge_index), model(x, edge_index), rtol=0, atol=0)


def test_an_explainer_edge_mask_left_on_the_original_stays_there():
    """PyG's set_masks registers an ``_edge_mask`` parameter on each layer;
    the original keeps it (in the parameters both share), and the copy
    reads no mask."""
    from torch_geometric.explain.algorithm.utils import clear_masks, set_masks

    model = pyg_nn.GCN(5, 8, num_layers=2, out_channels=3)
    x, edge_index = torch.randn(10, 5), torch.randint(0, 10, (2, 30))
    set_masks(model, torch.nn.Parameter(torch.full((30,), -1.0)), edge_index)
    converted = lrp.convert(model)
    assert "_edge_mask" in model.convs[0]._parameters and model.convs[0].explain
    assert converted.convs[0]._edge_mask is None and not converted.convs[0].explain
    assert converted.convs[0].lin.weight is model.convs[0].lin.weight
    masked = model(x, edge_index)
    clear_masks(model)
    torch.testing.assert_close(converted(x, edge_index), model(x, edge_index))
    assert not torch.allclose(masked, model(x, edge_index))


def test_a_composite_keyed_by_an_lrp_layer_applies_to_the_pyg_layer_of_its_name():
    """``{lrp.nn.GATConv: rule}`` on a model of PyG's GATConv: lrp.explain,
    LRP and lrp.convert all give the layer that rule (before, lrp.explain
    left it on the default, with no warning, and convert applied it)."""
    from torch_geometric_lrp import nn as lrp_nn

    torch.manual_seed(0)

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.lin = GATConv(3, 2, heads=2), torch.nn.Linear(4, 3)

        def forward(self, x, edge_index):
            return self.lin(self.conv(x, edge_index).relu())

    model = Model().double()
    x, edge_index = torch.randn(5, 3, dtype=torch.float64), torch.tensor([[0, 1, 2, 3, 4, 0], [1, 2, 3, 4, 0, 2]])
    keyed = {lrp_nn.GATConv: R.Gamma(0.25), torch.nn.Linear: R.Epsilon(0.1)}
    by_pyg = {GATConv: R.Gamma(0.25), torch.nn.Linear: R.Epsilon(0.1)}
    ours = lrp.explain(model, x, edge_index, index=1, target=torch.tensor([2]), rules=keyed, subgraph=False)
    theirs = lrp.explain(model, x, edge_index, index=1, target=torch.tensor([2]), rules=by_pyg, subgraph=False)
    converted = lrp.explain(lrp.convert(model, keyed), x, edge_index, index=1, target=torch.tensor([2]),
                            subgraph=False)
    default = lrp.explain(model, x, edge_index, index=1, target=torch.tensor([2]), subgraph=False)
    for other in (theirs, converted):
        torch.testing.assert_close(ours.node_mask, other.node_mask, rtol=0, atol=0)
        torch.testing.assert_close(ours.edge_mask, other.edge_mask, rtol=0, atol=0)
    assert not torch.allclose(ours.node_mask, default.node_mask)


def test_default_rule_fills_what_a_composite_does_not_key_and_beats_a_stored_one():
    """``relevance_pass(default_rule=r)``: alone, ``r`` everywhere, also on a
    converted model (before: its stored composite); next to a composite, the
    modules it does not key take ``r`` (before: the default composite),
    as if every other layer were named with ``r``."""
    from torch_geometric.nn import GCN
    torch.manual_seed(0)
    model = GCN(4, 8, 3, 2).double().eval()
    x, edge_index = torch.randn(10, 4, dtype=torch.float64), torch.randint(0, 10, (2, 30))

    def relevance(m, **options):
        with lrp.relevance_pass(m, **options) as mode:
            watched = mode.watch(x)
            out = m(watched, edge_index)
            seed = torch.zeros_like(out)
            seed[3, 1] = out[3, 1].detach()
            (found,) = mode.backward(out, seed, [watched])
        return found

    filled = relevance(model, rules={"convs.0": R.Epsilon(10.0)}, default_rule=R.Gamma(0.5))
    spelled = relevance(model, rules={"convs.0": R.Epsilon(10.0), "convs.1": R.Gamma(0.5), "convs.2": R.Gamma(0.5),
                                      "": R.Gamma(0.5)})
    torch.testing.assert_close(filled, spelled, rtol=1e-12, atol=1e-15)
    everywhere = relevance(model, rules=R.Gamma(0.5))
    torch.testing.assert_close(relevance(lrp.convert(model), default_rule=R.Gamma(0.5)), everywhere,
                               rtol=1e-12, atol=1e-15)


def test_an_unused_type_is_named_with_its_module():
    """``torch.nn.Linear`` on a PyG ``GCN`` (whose linears are PyG's own
    ``Linear``): the message tells the two classes of one name apart."""
    from torch_geometric.nn import GCN
    with pytest.raises(ValueError, match=r"instance of torch\.nn\.Linear, .*torch_geometric\.nn\.dense\.linear"):
        lrp.convert(GCN(4, 8, 2), {torch.nn.Linear: R.Epsilon()})


def test_resolve_rules_of_a_converted_model_are_its_own():
    """resolve_rules(converted) shows the rules the pass gives it: those it
    was converted with (before: the default composite's)."""
    from torch_geometric.nn import GCN
    converted = lrp.convert(GCN(4, 8, 3, 2), {GCNConv: R.Gamma(0.5)})
    assert resolve_rules(converted) == converted._lrp_rules
    assert resolve_rules(converted)["convs.0"] == R.Gamma(0.5)
    assert resolve_rules(converted, R.Epsilon(0.1))["convs.0"] == R.Epsilon(0.1)


def test_converting_a_converted_model_keeps_its_rules():
    """``convert(convert(m, rules))`` keeps ``rules`` (before: the default
    composite, without a word); new rules replace them."""
    from torch_geometric.nn import GCN
    torch.manual_seed(0)
    model = GCN(4, 8, 3, 2).double().eval()
    once = lrp.convert(model, {GCNConv: R.Gamma(0.5)})
    assert lrp.convert(once)._lrp_rules == once._lrp_rules
    assert lrp.convert(once, {GCNConv: R.Epsilon(0.1)})._lrp_rules["convs.0"] == R.Epsilon(0.1)
    x, edge_index = torch.randn(10, 4, dtype=torch.float64), torch.randint(0, 10, (2, 30))
    twice = lrp.explain(lrp.convert(once), x, edge_index, index=3)
    direct = lrp.explain(model, x, edge_index, index=3, rules={GCNConv: R.Gamma(0.5)})
    torch.testing.assert_close(twice.node_mask, direct.node_mask, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("kind", ["jk_cat", "jk_max", "lstm", "attention"])
def test_jumping_knowledge_and_recurrent_modules_convert_and_conserve(kind):
    """``BasicGNN(jk='cat' / 'max')`` and ``torch.nn.LSTM`` convert (before:
    ``UnsupportedModuleError``, while ``lrp.explain`` explained them), and
    ``check_conservation`` balances: seed = inputs + absorbed + lost, each
    measured."""
    from torch_geometric.nn import GCN
    torch.manual_seed(0)
    x, edge_index = torch.randn(10, 4, dtype=torch.float64), torch.randint(0, 10, (2, 30))
    if kind == "attention":
        class Attending(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.att, self.lin = torch.nn.MultiheadAttention(4, 2), torch.nn.Linear(4, 2)

            def forward(self, x, edge_index):
                return self.lin(self.att(x, x, x, need_weights=False)[0])
        model = Attending().double().eval()
    elif kind == "lstm":
        class Recurrent(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lstm, self.lin = torch.nn.LSTM(4, 5), torch.nn.Linear(5, 2)

            def forward(self, x, edge_index):
                return self.lin(self.lstm(x)[0])
        model = Recurrent().double().eval()
    else:
        model = GCN(4, 8, 3, 2, jk=kind[3:]).double().eval()
    converted = lrp.convert(model)
    torch.testing.assert_close(converted(x, edge_index), model(x, edge_index))
    report = lrp.check_conservation(model, x, edge_index, rules={torch.nn.Module: R.Epsilon(0.0)})
    total = sum(report.input_relevance.values()) + report.absorbed + report.lost
    assert report.seed == pytest.approx(total, rel=1e-9, abs=1e-12)
    assert abs(sum(report.input_relevance.values())) > 1e-3


def test_rules_of_a_converted_model_inside_another_are_kept():
    """``lrp.explain(Wrapper(converted))`` and ``lrp.convert(Wrapper(converted))``
    used the default composite for the converted model's layers."""
    model, (x, edge_index) = node_model(GCN3, True)
    converted = lrp.convert(model, rules=R.Epsilon(0.0))

    class Wrapper(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x, edge_index):
            return self.inner(x, edge_index)

    expected = lrp.explain(converted, x, edge_index, index=3)
    found = lrp.explain(Wrapper(converted), x, edge_index, index=3)
    torch.testing.assert_close(found.node_mask, expected.node_mask)
    assert not torch.allclose(lrp.explain(model, x, edge_index, index=3).node_mask, expected.node_mask)
    rules = lrp.convert(Wrapper(converted))._lrp_rules
    assert all(rules[f"inner.{k}" if k else "inner"] == v for k, v in converted._lrp_rules.items())


@pytest.mark.parametrize("given", [torch.nn.Softmin(dim=-1), "Softmin", 3])
def test_register_takes_module_classes_only(given):
    with pytest.raises(TypeError, match=r"register: expected a torch.nn.Module subclass"):
        lrp.register(given)


def test_a_model_converted_without_rules_takes_the_outer_default_inside_a_wrapper():
    """Stored defaults are the inner model's own (its last layer as the
    output layer); inside a wrapper with a head that layer is a hidden one,
    so the wrapper's default composite holds there."""
    from torch_geometric_lrp.convert import DEFAULT_LOWER, resolve_rules

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.c2 = pyg_nn.GCNConv(5, 8), pyg_nn.GCNConv(8, 8)

        def forward(self, x, edge_index):
            return self.c2(self.c1(x, edge_index).relu(), edge_index)

    class Classifier(torch.nn.Module):
        def __init__(self, encoder):
            super().__init__()
            self.enc, self.head = encoder, torch.nn.Linear(8, 3)

        def forward(self, x, edge_index):
            return self.head(self.enc(x, edge_index).relu())

    assert resolve_rules(Classifier(lrp.convert(Encoder())))["enc.c2"] == DEFAULT_LOWER


class ListedLayers(torch.nn.Module):
    """Registered layers that the forward reaches through a plain list."""

    def __init__(self):
        super().__init__()
        self.c1, self.c2 = GCNConv(5, 8), GCNConv(8, 8)
        self.head = torch.nn.Linear(8, 4)
        self.order = [self.c1, self.c2]
        self.named = {"last": self.c2}

    def forward(self, x, edge_index):
        for conv in self.order:
            x = conv(x, edge_index).relu()
        return self.head(x + 0 * self.named["last"].bias)


def test_layers_listed_in_plain_containers_are_the_copies():
    """A forward that loops over ``self.order = [self.c1, self.c2]`` ran the
    original layers in the converted copy, so the rules given to
    ``convert`` never applied (node mask 0.06 off ``lrp.explain`` with the
    same rules, without a word). The original's list stays as it was."""
    torch.manual_seed(0)
    model = ListedLayers().double().eval()
    g = torch.Generator().manual_seed(0)
    x = torch.randn(10, 5, generator=g, dtype=torch.float64)
    edge_index = torch.randint(0, 10, (2, 30), generator=g)
    rules = {"c1": R.Epsilon(0.5), "c2": R.Gamma(0.5)}
    converted = lrp.convert(model, rules=rules)
    assert converted.order[0] is converted.c1 and converted.order[1] is converted.c2
    assert converted.named["last"] is converted.c2
    assert model.order[0] is model.c1 and model.named["last"] is model.c2  # the original untouched
    torch.testing.assert_close(converted(x, edge_index), model(x, edge_index))
    expected = lrp.explain(model, x, edge_index, index=2, rules=rules)
    got = lrp.explain(converted, x, edge_index, index=2)
    torch.testing.assert_close(got.node_mask, expected.node_mask)
    torch.testing.assert_close(got.edge_mask, expected.edge_mask)


class SkipSet(ListedLayers):
    def __init__(self, container: str):
        super().__init__()
        if container == "set":
            self.skip = {self.c2}
        elif container == "keys":
            self.skip = {self.c2: 0.5}
        else:
            import collections
            self.skip = collections.deque([self.c2])


@pytest.mark.parametrize("container", ["set", "keys", "deque"])
def test_layers_held_where_convert_cannot_follow_are_refused_by_name(container):
    """Followed in part, a copy would mix copies and originals (``c in
    self.skip`` false for the copy of ``c2``: another function, without a
    word); such containers are refused naming the attribute."""
    model = SkipSet(container)
    with pytest.raises(lrp.UnsupportedModuleError, match=r"SkipSet\.skip holds modules of the model"):
        lrp.convert(model)
    assert model.order[1] is model.c2


def test_layers_in_an_ordered_dict_are_the_copies():
    import collections
    model = ListedLayers()
    model.named = collections.OrderedDict(last=model.c2)
    converted = lrp.convert(model)
    assert type(converted.named) is collections.OrderedDict and converted.named["last"] is converted.c2
    assert model.named["last"] is model.c2
