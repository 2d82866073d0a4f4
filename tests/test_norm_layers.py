"""PyG's normalisation layers: statistics held constant, centring and scaling linear.

Twin: under LRP-0 a bias-free ReLU model's relevance is gradient x input of
the same model with every statistic (variance, std, norm) detached; a slow
explicit version of each layer with detached statistics gives that gradient.
"""
from __future__ import annotations

import warnings

import pytest
import torch
import torch_geometric.nn
from torch_geometric.nn import GCNConv
from torch_geometric.nn.norm import GraphNorm, InstanceNorm, LayerNorm, PairNorm
from torch_geometric.utils import erdos_renyi_graph, scatter

import torch_geometric_lrp as lrp
from torch_geometric_lrp.rules import Epsilon, Gamma

N, F_IN, HID = 10, 3, 4


def frozen(norm, x, batch, batched: bool):
    """``norm(x, batch)`` written out, its statistics detached (``batched``:
    the layer was given ``batch``)."""
    size = int(batch.max()) + 1
    if isinstance(norm, GraphNorm):
        mean = scatter(x, batch, 0, size, reduce="mean")
        out = x - mean[batch] * norm.mean_scale
        std = (scatter(out.detach() ** 2, batch, 0, size, reduce="mean") + norm.eps).sqrt()[batch]
        return norm.weight * out / std + norm.bias
    if isinstance(norm, LayerNorm):  # mode 'graph'
        count = torch.bincount(batch, minlength=size).to(x.dtype)[:, None] * x.shape[1]
        mean = scatter(x, batch, 0, size, reduce="sum").sum(-1, keepdim=True) / count
        centred = x - mean[batch]
        var = scatter(centred.detach() ** 2, batch, 0, size, reduce="sum").sum(-1, keepdim=True) / count
        # without batch, PyG adds eps to the std; with it, to the variance
        scale = (var + norm.eps).sqrt() if batched else var.sqrt() + norm.eps
        return centred / scale[batch] * norm.weight + norm.bias
    if isinstance(norm, InstanceNorm):
        mean = scatter(x, batch, 0, size, reduce="mean")
        centred = x - mean[batch]
        var = scatter(centred.detach() ** 2, batch, 0, size, reduce="mean")
        return centred / (var + norm.eps).sqrt()[batch] * norm.weight + norm.bias
    if isinstance(norm, PairNorm):
        mean = scatter(x, batch, 0, size, reduce="mean")
        centred = x - mean[batch]
        scale = (norm.eps + scatter((centred.detach() ** 2).sum(-1, keepdim=True), batch, 0, size,
                                    reduce="mean")).sqrt()[batch]
        return norm.scale * centred / scale
    raise TypeError(type(norm))


class Net(torch.nn.Module):
    def __init__(self, norm, bias):
        super().__init__()
        self.a, self.b = GCNConv(F_IN, HID, bias=bias), GCNConv(HID, 3, bias=bias)
        self.norm = norm

    def forward(self, x, edge_index, batch=None, twin=False):
        h = self.a(x, edge_index)
        if twin:
            h = frozen(self.norm, h, torch.zeros(x.shape[0], dtype=torch.long) if batch is None else batch,
                       batch is not None)
        elif batch is None:
            h = self.norm(h)
        else:
            h = self.norm(h, batch)
        return self.b(h.relu(), edge_index)


NORMS = {
    "GraphNorm": lambda: GraphNorm(HID),
    "LayerNorm(graph)": lambda: LayerNorm(HID, mode="graph"),
    "InstanceNorm": lambda: InstanceNorm(HID, affine=True),
    "PairNorm": lambda: PairNorm(),
}


def setup(name, bias, seed=0):
    torch.manual_seed(seed)
    x = torch.randn(N, F_IN, dtype=torch.float64)
    edge_index = erdos_renyi_graph(N, 0.35)
    model = Net(NORMS[name](), bias).double().eval()
    with torch.no_grad():
        for p_name, p in model.norm.named_parameters():
            if p_name == "weight":
                p.uniform_(0.5, 1.5)
            else:
                p.zero_() if not bias else p.uniform_(-0.3, 0.3)
    return model, x, edge_index


@pytest.mark.parametrize("batched", [False, True])
@pytest.mark.parametrize("name", list(NORMS))
def test_lrp0_is_gradient_times_input_with_the_statistics_held(name, batched):
    model, x, edge_index = setup(name, bias=False)
    batch = torch.tensor([0] * 5 + [1] * 5) if batched else None
    kwargs = {} if batch is None else {"batch": batch}
    explanation = lrp.explain(model, x, edge_index, index=2, rules=Epsilon(0.0), subgraph=False, **kwargs)
    leaf = x.clone().requires_grad_()
    out = model(leaf, edge_index, batch, twin=True)
    torch.testing.assert_close(out, model(x, edge_index, batch))  # the twin is the layer
    c = int(out[2].argmax())
    (grad,) = torch.autograd.grad(out[2, c], leaf)
    torch.testing.assert_close(explanation.node_mask, x * grad, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("rule", [None, Gamma(0.25), Epsilon(0.1)])
@pytest.mark.parametrize("name", list(NORMS))
def test_norms_conserve_with_biases(name, rule):
    model, x, edge_index = setup(name, bias=True, seed=1)
    explanation = lrp.explain(model, x, edge_index, index=4, rules=rule)
    assert abs(explanation.residual) < 1e-9 * max(1.0, abs(explanation.score))
    assert bool(torch.isfinite(explanation.node_mask).all())


def test_a_cube_outside_a_norm_layer_still_has_no_rule():
    class Square(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = GCNConv(F_IN, 3)

        def forward(self, x, edge_index):
            return self.conv(x, edge_index).pow(3)  # (pow(2) is x * x: the product rule)

    x = torch.randn(N, F_IN)
    with pytest.raises(lrp.UnsupportedOpError, match="pow"):
        lrp.explain(Square(), x, erdos_renyi_graph(N, 0.3), index=0, subgraph=False)


@pytest.mark.parametrize("name", list(NORMS))
def test_convert_accepts_the_norm_layers_and_explains_alike(name):
    model, x, edge_index = setup(name, bias=True, seed=2)
    converted = lrp.convert(model)
    with lrp.relevance_pass(converted, rules=Epsilon(1e-6)) as mode:
        leaf = mode.watch(x)
        out = converted(leaf, edge_index)
        seed = torch.zeros_like(out)
        seed[3, int(out[3].argmax())] = out[3].max().detach()
        (relevance,) = mode.backward(out, seed, [leaf])
    explanation = lrp.explain(model, x, edge_index, index=3, rules=Epsilon(1e-6), subgraph=False)
    torch.testing.assert_close(relevance, explanation.node_mask, rtol=1e-9, atol=1e-12)


class WithDiffGroupNorm(torch.nn.Module):
    """``DiffGroupNorm`` (eval mode), ReLU, sum pooling, a Linear head;
    ``frozen=True``: the same with the soft group assignment detached."""

    def __init__(self, features=4, groups=3):
        super().__init__()
        self.norm = torch_geometric.nn.DiffGroupNorm(features, groups, lamda=0.5)
        self.out = torch.nn.Linear(features, 2, bias=False)

    def forward(self, x, edge_index, frozen=False):
        if frozen:
            n = self.norm
            groups = n.lin(x).softmax(-1).detach()
            grouped = n.norm((groups.unsqueeze(-1) * x.unsqueeze(-2)).view(x.shape[0], -1))
            h = x + n.lamda * grouped.view(x.shape[0], n.groups, -1).sum(-2)
        else:
            h = self.norm(x)
        return self.out(torch_geometric.nn.global_add_pool(torch.relu(h), None))


def test_a_softmax_gate_inside_a_norm_layer_is_a_gate():
    """``DiffGroupNorm`` multiplies the signal by a softmax of it: a gate,
    held constant as in any product, so LRP-0 is gradient x input with the
    assignment detached. Before, a product of two signals inside a norm layer
    counted as a statistic: the whole normalised branch was held constant
    and its relevance absorbed (node relevance 5.3 against 2.9, no warning)."""
    torch.manual_seed(0)
    x = torch.randn(8, 4, dtype=torch.float64)
    edge_index = torch.tensor([[i, (i + 1) % 8] for i in range(8)]).t()
    model = WithDiffGroupNorm().double()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p))
        model.norm.norm.running_mean.normal_()
        model.norm.norm.running_var.uniform_(0.5, 2.0)
    model.eval()
    torch.testing.assert_close(model(x, edge_index), model(x, edge_index, frozen=True))
    explanation = lrp.explain(model, x, edge_index, rules=lrp.rules.Epsilon(0.0), target=torch.tensor([0]))
    inputs = x.clone().requires_grad_()
    model(inputs, edge_index, frozen=True)[0, 0].backward()
    torch.testing.assert_close(explanation.node_mask, inputs * inputs.grad, rtol=1e-9, atol=1e-12)


def test_an_op_without_a_rule_that_the_output_does_not_use_is_not_refused():
    """``dense_diff_pool`` computes an auxiliary entropy loss with ``log`` (no
    rule) that a classifier's output does not use. It was refused when the
    op ran; it is refused only where relevance reaches it, so the model is
    explained with ``strict=True``, exactly as with ``strict=False``."""
    from torch_geometric.nn import dense_diff_pool
    from torch_geometric.utils import to_dense_adj, to_dense_batch

    class DiffPool(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.assign, self.head = GCNConv(F_IN, 8), torch.nn.Linear(8, 3), torch.nn.Linear(8, 2)

        def forward(self, x, edge_index, uses_loss=False):
            h = self.conv(x, edge_index).relu()
            dense, mask = to_dense_batch(h)
            out, _, link_loss, entropy_loss = dense_diff_pool(dense, to_dense_adj(edge_index, max_num_nodes=len(h)),
                                                              self.assign(dense), mask)
            y = self.head(out.mean(1))
            return y + entropy_loss if uses_loss else y

    torch.manual_seed(0)
    x, edge_index = torch.randn(N, F_IN), erdos_renyi_graph(N, 0.3)
    model = DiffPool().eval()  # (to_dense_adj is float32)
    found = lrp.explain(model, x, edge_index, index=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        lenient = lrp.explain(model, x, edge_index, index=0, strict=False)
    torch.testing.assert_close(found.node_mask, lenient.node_mask, rtol=0, atol=0)
    assert abs(found.residual) < 1e-5 * abs(found.score)
    with pytest.raises(lrp.UnsupportedOpError, match="'log'"):  # where the output uses it, refused as before
        lrp.explain(model, x, edge_index, index=0, uses_loss=True)
