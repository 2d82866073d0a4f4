"""Properties of the relevance ops on random data (float64).

* conservation: with no bias and no output equal to 0, every op hands on
  exactly the relevance it receives;
* LRP-0 equals gradient x input on bias-free ReLU networks (here a small
  message-passing network made of linear maps, gathers and scatters);
* the torch and torch_scatter back-ends give the same outputs and relevance.
"""
import pytest
import torch
import torch.nn.functional as F
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import torch_geometric_lrp as lrp
from torch_geometric_lrp import functional as L
from torch_geometric_lrp import rules

SETTINGS = settings(max_examples=40, deadline=None)
seeds = st.integers(0, 2**31 - 1)
sizes = st.integers(1, 6)


def rand(g, *shape):
    return torch.randn(*shape, generator=g, dtype=torch.float64)


def far_from_zero(z, margin=1e-3):
    return bool((z.abs() > margin).all())


def relevance_of(inputs, output, relevance):
    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    out = output(*leaves)
    with lrp.RelevanceAudit() as audit:
        out.backward(relevance(out))
    return leaves, out, audit


def assert_conserved(total_in, total_out):
    assert total_in == pytest.approx(total_out, rel=1e-5, abs=1e-9)


@SETTINGS
@given(seeds, sizes, sizes, st.booleans())
def test_add_conserves(seed, n, f, broadcast):
    g = torch.Generator().manual_seed(seed)
    a, b = rand(g, n, f), rand(g, f) if broadcast else rand(g, n, f)
    assume(far_from_zero(a + b))
    R = rand(g, n, f)
    (la, lb), _, audit = relevance_of([a, b], L.add, lambda out: R)
    assert lb.grad.shape == b.shape
    assert_conserved((la.grad.sum() + lb.grad.sum()).item(), R.sum().item())
    assert audit.lost == 0.0


@SETTINGS
@given(seeds, sizes, sizes, sizes, st.sampled_from([None, 0, 1, 2, (0, 2), -1, ()]),
       st.booleans(), st.sampled_from([L.sum, L.mean]))
def test_sum_and_mean_conserve(seed, a, b, c, dim, keepdim, op):
    g = torch.Generator().manual_seed(seed)
    x = rand(g, a, b, c)
    assume(far_from_zero(x.sum(dim=dim, keepdim=keepdim)))
    (lx,), out, _ = relevance_of([x], lambda t: op(t, dim=dim, keepdim=keepdim), lambda out: torch.ones_like(out) * 3)
    reference = (x.sum if op is L.sum else x.mean)(dim=dim, keepdim=keepdim)
    torch.testing.assert_close(out.detach(), reference)
    assert_conserved(lx.grad.sum().item(), 3.0 * out.numel())


@SETTINGS
@given(seeds, st.integers(1, 30), sizes, st.integers(1, 8), st.sampled_from(["sum", "mean", "max", "min"]),
       st.booleans())
def test_scatter_conserves(seed, e, f, n, reduce, full_index):
    g = torch.Generator().manual_seed(seed)
    src = rand(g, e, f)
    index = torch.randint(0, n, (e,), generator=g)
    if full_index:
        index = index.view(-1, 1).expand(e, f).contiguous()
    R = rand(g, n, f)
    (ls,), out, audit = relevance_of([src], lambda s: L.scatter(s, index, 0, n, reduce), lambda out: R)
    nonempty = torch.zeros(n, dtype=torch.bool)
    nonempty[index.view(e, -1)[:, 0]] = True
    assume(far_from_zero(out[nonempty]))
    # relevance of empty groups (output 0) is lost; everything else arrives
    assert_conserved(ls.grad.sum().item(), R[nonempty].sum().item())
    assert audit.lost == pytest.approx(R[~nonempty].sum().item(), abs=1e-9)
    if reduce in ("max", "min"):  # winner takes all: one entry per group and feature
        assert int((ls.grad != 0).sum()) <= int(nonempty.sum()) * f


CONSERVING_RULES = [
    rules.Epsilon(0.0), rules.Gamma(0.25, epsilon=0.0), rules.AlphaBeta(2, 1, epsilon=0.0),
    rules.AlphaBeta(1.5, 0.5, epsilon=0.0), rules.ZPlus(epsilon=0.0), rules.Flat(), rules.WSquare(),
    rules.ZBox(-4.0, 4.0, epsilon=0.0),
]


@SETTINGS
@given(seeds, sizes, sizes, sizes, st.sampled_from(CONSERVING_RULES))
def test_linear_conserves_without_bias(seed, n, fin, fout, rule):
    g = torch.Generator().manual_seed(seed)
    x, w, R = rand(g, n, fin).clamp(-4, 4), rand(g, fout, fin), rand(g, n, fout)
    z = x @ w.t()
    assume(far_from_zero(z))
    if isinstance(rule, rules.AlphaBeta):
        zij = x[:, :, None] * w.t()[None]
        assume(far_from_zero(zij.clamp(min=0).sum(1)) or rule.beta > 0)
    (lx,), _, audit = relevance_of([x], lambda t: L.linear(t, w, rule=rule), lambda out: R)
    assert_conserved(lx.grad.sum().item(), R.sum().item())


@SETTINGS
@given(seeds, sizes, sizes, sizes, st.sampled_from(["dense", "coo", "csr"]))
def test_matmul_conserves(seed, n, m, f, layout):
    g = torch.Generator().manual_seed(seed)
    adj, x, R = rand(g, n, m), rand(g, m, f), rand(g, n, f)
    assume(far_from_zero(adj @ x))
    a = {"dense": adj, "coo": adj.to_sparse_coo(), "csr": adj.to_sparse_csr()}[layout]
    (lx,), out, _ = relevance_of([x], lambda t: L.matmul(a, t), lambda out: R)
    torch.testing.assert_close(out.detach(), adj @ x)
    assert_conserved(lx.grad.sum().item(), R.sum().item())


@SETTINGS
@given(seeds, sizes, sizes)
def test_copies_gates_and_activations_conserve(seed, n, f):
    g = torch.Generator().manual_seed(seed)
    x, w = rand(g, n, f), rand(g, n, 1)
    index = torch.randint(0, n, (2 * n,), generator=g)
    ops = [
        lambda t: L.index_select(t, 0, index),
        lambda t: L.cat([t, t[:1]], dim=0),
        lambda t: L.mul(t, w),
        L.relu, L.leaky_relu, L.elu, L.gelu, L.silu, L.sigmoid, L.tanh, L.softplus,
    ]
    for op in ops:
        (lx,), out, _ = relevance_of([x], op, lambda out: torch.ones_like(out))
        assert_conserved(lx.grad.sum().item(), float(out.numel()))


def test_activations_compute_the_torch_op():
    x = torch.linspace(-3, 3, 13, dtype=torch.float64)
    for ours, theirs in [(L.relu, F.relu), (L.leaky_relu, F.leaky_relu), (L.elu, F.elu), (L.gelu, F.gelu),
                         (L.silu, F.silu), (L.sigmoid, torch.sigmoid), (L.tanh, torch.tanh),
                         (L.softplus, F.softplus)]:
        torch.testing.assert_close(ours(x), theirs(x))


# --------------------------------------------------------------- LRP-0 = grad x input
def message_passing_net(x, edge_index, edge_weight, weights, reduce, ops):
    """Bias-free ReLU network: (linear -> gather -> gate -> scatter -> relu) x 2,
    residual add, sum readout. ``ops`` is torch or our functional module."""
    src, dst = edge_index
    h = x
    for w in weights:
        h = ops.linear(h, w)
        msg = ops.mul(ops.index_select(h, 0, src), edge_weight)
        h = ops.relu(ops.scatter(msg, dst, 0, x.shape[0], reduce))
    return h


class Plain:
    """The same ops with their ordinary gradients."""
    linear = staticmethod(lambda h, w: F.linear(h, w))
    index_select = staticmethod(torch.index_select)
    mul = staticmethod(torch.mul)
    relu = staticmethod(F.relu)

    @staticmethod
    def scatter(msg, index, dim, size, reduce):
        from torch_geometric.utils import scatter
        return scatter(msg, index, dim, size, reduce=reduce)


@SETTINGS
@given(seeds, st.integers(2, 8), st.integers(1, 20), st.sampled_from(["sum", "mean", "max"]))
def test_lrp0_equals_gradient_times_input(seed, n, e, reduce):
    g = torch.Generator().manual_seed(seed)
    x = rand(g, n, 3)
    edge_index = torch.randint(0, n, (2, e), generator=g)
    edge_weight = rand(g, e, 1).abs()
    weights = [rand(g, 4, 3), rand(g, 2, 4)]

    xp = x.clone().requires_grad_()
    yp = message_passing_net(xp, edge_index, edge_weight, weights, reduce, Plain)
    yp[:, 1].sum().backward()
    grad_x_input = xp.grad * x

    rule = rules.Epsilon(0.0)
    ops = type("Ops", (), {k: staticmethod(getattr(L, k)) for k in ["index_select", "mul", "relu", "scatter"]})
    ops.linear = staticmethod(lambda h, w: L.linear(h, w, rule=rule))
    xr = x.clone().requires_grad_()
    yr = message_passing_net(xr, edge_index, edge_weight, weights, reduce, ops)
    torch.testing.assert_close(yr, yp)
    seed_relevance = torch.zeros_like(yr)
    seed_relevance[:, 1] = yr[:, 1].detach()
    yr.backward(seed_relevance)
    torch.testing.assert_close(xr.grad, grad_x_input, rtol=1e-7, atol=1e-9)


# ------------------------------------------------------------------- back-ends
@SETTINGS
@given(seeds, st.integers(1, 30), sizes, st.integers(1, 8), st.sampled_from(["sum", "mean", "max", "min"]),
       st.sampled_from([0, 1]))
def test_scatter_backends_agree(seed, e, f, n, reduce, dim):
    pytest.importorskip("torch_scatter")
    g = torch.Generator().manual_seed(seed)
    src = rand(g, e, f) if dim == 0 else rand(g, f, e)
    index = torch.randint(0, n, (e,), generator=g)
    R = rand(g, n, f) if dim == 0 else rand(g, f, n)
    results = []
    for backend in ["torch", "torch_scatter"]:
        (ls,), out, _ = relevance_of([src], lambda s: L.scatter(s, index, dim, n, reduce, backend=backend),
                                     lambda out: R)
        results.append((out.detach(), ls.grad))
    torch.testing.assert_close(results[0][0], results[1][0])
    torch.testing.assert_close(results[0][1], results[1][1])


def test_scatter_reports_bad_arguments():
    src = torch.randn(5, 3)
    with pytest.raises(ValueError, match="reduce must be one of"):
        L.scatter(src, torch.zeros(5, dtype=torch.long), reduce="mul")
    with pytest.raises(ValueError, match="index must be 1-D"):
        L.scatter(src, torch.zeros(4, dtype=torch.long))
    with pytest.raises(TypeError, match="LongTensor"):
        L.scatter(src, torch.zeros(5, dtype=torch.int32))
    with pytest.raises(ValueError, match="backend"):
        L.scatter(src, torch.zeros(5, dtype=torch.long), backend="cuda")


def test_matmul_reports_bad_shape():
    with pytest.raises(ValueError, match="adj must be a 2-D"):
        L.matmul(torch.randn(3, 4), torch.randn(5, 2))
