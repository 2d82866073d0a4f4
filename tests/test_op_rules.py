"""Op rules of the relevance pass against hand-written references, in float64.

Each reference is the same computation written in plain torch with the gates
of the rule detached (a denominator, an ``exp`` factor, batch statistics,
attention weights). Bias-free and linear once the gates are frozen, LRP-0
(``Epsilon(0)``) of the pass must then equal gradient x input of the
reference: seeding the output with its own value gives each input
``x * d(sum out)/dx``. A rule that let relevance into a gate, or that split a
product differently, changes the numbers.

Then the PyG layers these ops come from are explained end to end with the
conservation audit (``residual``: what no op booked), and a forward that
drops the result of an in-place op is refused.
"""
from __future__ import annotations

import contextlib
import math
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import torch_geometric.nn as pyg_nn
from torch import Tensor

import torch_geometric_lrp as lrp
from torch_geometric_lrp.mode import UnsupportedOpError, relevance_pass
from torch_geometric_lrp.rules import Epsilon, Gamma

DTYPE = torch.float64
N, F_IN, HID = 7, 5, 4


def weights(*shape, seed=0) -> Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=DTYPE)


X = weights(N, F_IN, seed=1)


def lrp0(fn, x: Tensor = X, rule=None) -> Tensor:
    """Input relevance of ``fn(x)`` seeded with its own value."""
    with relevance_pass(rules=rule or Epsilon(0.0)) as mode:
        watched = mode.watch(x)
        out = fn(watched)
        (relevance,) = mode.backward(out, out.detach(), [watched])
    return relevance


def lrp0_audited(fn, rule) -> tuple[Tensor, Tensor, float]:
    """``(fn(x), input relevance, absorbed)`` of ``fn(x)`` seeded with its own
    value, the absorbed relevance measured by a ``RelevanceAudit``."""
    with relevance_pass(rules=rule) as mode:
        watched = mode.watch(X)
        out = fn(watched)
        with lrp.RelevanceAudit() as audit:
            (relevance,) = mode.backward(out, out.detach(), [watched])
    return out.detach(), relevance, audit.absorbed


def audited_alike(fn, reference, rule) -> tuple[Tensor, Tensor, float]:
    """``lrp0_audited`` of ``fn``, checked to give the output, the input
    relevance and the absorbed relevance of ``reference`` under ``rule``."""
    out, relevance, absorbed = lrp0_audited(fn, rule)
    want_out, want, want_absorbed = lrp0_audited(reference, rule)
    torch.testing.assert_close(out, want_out)
    torch.testing.assert_close(relevance, want)
    assert absorbed == pytest.approx(want_absorbed, rel=1e-9, abs=1e-12)
    return out, relevance, absorbed


def grad_x_input(reference, x: Tensor = X) -> Tensor:
    x = x.clone().requires_grad_()
    reference(x).sum().backward()
    return x.grad * x.detach()


A, B, W = weights(F_IN, HID, seed=2), weights(F_IN, HID, seed=3), weights(HID, HID, seed=4)
MASK = (torch.arange(N) % 3 == 0).unsqueeze(-1).expand(N, HID)


def check(fn, reference):
    got, want = lrp0(fn), grad_x_input(reference)
    torch.testing.assert_close(got, want, rtol=1e-8, atol=1e-10)
    return got


def test_a_signal_in_the_denominator_is_held_constant():
    def fn(x, detach=False):
        d = (x @ B).pow(2).sum(-1, keepdim=True)
        return (x @ A) / (d.detach() if detach else d)
    relevance = check(fn, lambda x: fn(x, detach=True))
    assert torch.isclose(relevance.sum(), fn(X).sum())  # nothing went into the denominator


def test_one_over_a_signal_is_refused():
    with pytest.raises(UnsupportedOpError, match="reciprocal|div"):
        lrp0(lambda x: 1.0 / (x @ A))


def test_square_is_the_product_of_the_signal_with_itself():
    torch.testing.assert_close(lrp0(lambda x: (x @ A).pow(2) @ W), lrp0(lambda x: ((x @ A) * (x @ A)) @ W))
    torch.testing.assert_close(lrp0(lambda x: torch.square(x @ A)), lrp0(lambda x: (x @ A) * (x @ A)))
    # the product rule halves: the two halves land on the same input, so the total is kept
    out = (X @ A).pow(2) @ W
    assert torch.isclose(lrp0(lambda x: (x @ A).pow(2) @ W).sum(), out.sum())


def test_other_powers_are_refused():
    with pytest.raises(UnsupportedOpError, match="pow"):
        lrp0(lambda x: (x @ A).pow(3))


def test_an_exp_factor_is_a_gate():
    check(lambda x: torch.exp(x @ A) * (x @ B), lambda x: torch.exp(x @ A).detach() * (x @ B))


def test_abs_and_sqrt_pass_relevance():
    # |z| is piecewise linear through 0: the pass rule is gradient x input
    check(lambda x: (x @ A).abs() @ W, lambda x: (x @ A).abs() @ W)
    # sqrt: monotone, relevance passes unchanged, so the total is kept
    relevance = lrp0(lambda x: torch.sqrt((x @ A).abs()) @ W)
    assert torch.isclose(relevance.sum(), (torch.sqrt((X @ A).abs()) @ W).sum())


@pytest.mark.parametrize("op", [torch.maximum, torch.minimum, torch.max, torch.min, torch.fmax, torch.fmin,
                                Tensor.maximum])
def test_an_element_wise_max_or_min_gives_each_element_to_its_winner(op):
    """``torch.maximum(a, b)`` and its kin run as a max (min) over the stack
    of ``a`` and ``b``: piecewise linear, so LRP-0 is gradient x input, and
    broadcasting spreads nothing. Before, they were refused."""
    check(lambda x: op(x @ A, x @ B) @ W, lambda x: op(x @ A, x @ B) @ W)
    check(lambda x: op(x @ A, (x @ B)[:1]) @ W, lambda x: op(x @ A, (x @ B)[:1]) @ W)


def test_a_constant_that_wins_a_max_absorbs_that_relevance():
    """``maximum(signal, c)``: where ``c`` wins, its relevance is booked as
    absorbed; where the signal wins, the signal keeps it."""
    c = torch.full((HID,), 0.3, dtype=DTYPE)
    with relevance_pass(rules=Epsilon(0.0)) as mode:
        watched = mode.watch(X)
        out = torch.maximum(watched @ A, c)
        with lrp.RelevanceAudit() as audit:
            (relevance,) = mode.backward(out, out.detach(), [watched])
    wins = (X @ A) > c
    torch.testing.assert_close(relevance.sum(), out.detach()[wins].sum())
    assert audit.absorbed == pytest.approx(float(out.detach()[~wins].sum()), rel=1e-9)
    assert 0 < int(wins.sum()) < wins.numel()


HOMOGENEOUS = [
    ("norm", lambda h: h.norm(dim=-1, keepdim=True), 1),
    ("norm p=1, all", lambda h: torch.norm(h, p=1), 1),
    ("vector_norm 3", lambda h: torch.linalg.vector_norm(h, 3, dim=0), 1),
    ("vector_norm inf", lambda h: torch.linalg.vector_norm(h, float("inf"), dim=1), 1),
    ("linalg.norm", lambda h: torch.linalg.norm(h, dim=1), 1),
    ("std", lambda h: h.std(0), 1),
    ("std, no correction", lambda h: torch.std(h, dim=1, correction=0, keepdim=True), 1),
    ("var", lambda h: h.var(-1), 2),
]


def euler_reference(fn, h: Tensor, relevance: Tensor, degree: int) -> Tensor:
    """Slow twin of the homogeneous rule: the dense Jacobian, then each input
    gets ``h_i * dy_j/dh_i * R_j / (d * y_j)`` from every output ``j``."""
    y = fn(h).reshape(-1)
    jacobian = torch.autograd.functional.jacobian(lambda t: fn(t).reshape(-1), h).reshape(y.numel(), -1)
    out = torch.zeros(h.numel(), dtype=h.dtype)
    for j in range(y.numel()):
        for i in range(h.numel()):
            out[i] += h.reshape(-1)[i] * jacobian[j, i] * relevance.reshape(-1)[j] / (degree * y[j])
    return out.view_as(h)


@pytest.mark.parametrize("name,fn,degree", HOMOGENEOUS, ids=[h[0] for h in HOMOGENEOUS])
def test_norms_std_and_var_split_by_euler(name, fn, degree):
    """A norm, ``std`` or ``var`` of a signal is homogeneous of degree 1 or 2:
    its relevance splits as gradient x input over the degree, which the
    slow twin computes from the dense Jacobian. Before, these were refused
    outside normalisation layers."""
    h = X @ A
    y = fn(h)
    seed = weights(*(y.shape or (1,)), seed=9).abs().view_as(y) + 0.1
    with relevance_pass(rules=Epsilon(0.0)) as mode:
        watched = mode.watch(h)
        out = fn(watched)
        (relevance,) = mode.backward(out, seed, [watched])
    torch.testing.assert_close(out.detach(), y)
    torch.testing.assert_close(relevance, euler_reference(fn, h, seed, degree), rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(relevance.sum(), seed.sum())
    if degree == 1:  # composed with a linear map, LRP-0 stays gradient x input
        check(lambda x: fn(x @ A), lambda x: fn(x @ A))


@pytest.mark.parametrize("fused,separate", [
    (lambda h: torch.std_mean(h, 0), lambda h: (torch.std(h, 0), torch.mean(h, 0))),
    (lambda h: torch.var_mean(h, dim=1, keepdim=True, correction=0),
     lambda h: (torch.var(h, dim=1, keepdim=True, correction=0), torch.mean(h, dim=1, keepdim=True))),
    (lambda h: torch.std_mean(h), lambda h: (torch.std(h), torch.mean(h))),
], ids=["std_mean", "var_mean", "std_mean-all"])
def test_fused_statistics_are_their_parts(fused, separate):
    """``std_mean`` and ``var_mean`` are the statistic and the mean, each with
    its own rule. Before, refused."""
    def combine(pair):
        statistic, mean = pair
        return statistic.sum() * 0.5 + mean.sum()
    torch.testing.assert_close(lrp0(lambda x: combine(fused(x @ A)).reshape(1)),
                               lrp0(lambda x: combine(separate(x @ A)).reshape(1)))


@pytest.mark.parametrize("fn,written_out", [
    (lambda x: torch.baddbmm((x @ A).unsqueeze(0), (x @ B).unsqueeze(0), W.unsqueeze(0), beta=0.5, alpha=2.0),
     lambda x: 0.5 * (x @ A).unsqueeze(0) + 2.0 * ((x @ B).unsqueeze(0) @ W.unsqueeze(0))),
    (lambda x: torch.addmv((x @ A)[0], W, (x @ B)[1]), lambda x: (x @ A)[0] + torch.mv(W, (x @ B)[1])),
], ids=["baddbmm", "addmv"])
def test_batched_and_vector_addmm_are_their_linear_ops(fn, written_out):
    torch.testing.assert_close(lrp0(fn), lrp0(written_out))
    torch.testing.assert_close(lrp0(fn, rule=Gamma(0.25)), lrp0(written_out, rule=Gamma(0.25)))
    check(fn, fn)


@pytest.mark.parametrize("fn,written_out", [
    (lambda x: torch.einsum("nd,de,ne->n", x @ A, W, x @ B), lambda x: ((x @ A) @ W * (x @ B)).sum(-1)),
    (lambda x: torch.einsum("ni,ni->n", x @ A, x @ B), lambda x: ((x @ A) * (x @ B)).sum(-1)),
    (lambda x: torch.einsum("ni,nj->nij", x @ A, x @ B).sum((-1, -2)),
     lambda x: ((x @ A).sum(-1) * (x @ B).sum(-1))),
], ids=["bilinear", "dot", "outer"])
def test_einsum_of_several_signals_is_the_product_rule(fn, written_out):
    """An ``einsum`` of two signals (a bilinear link score) is multilinear:
    Euler's split of degree 2, the product rule per term, the same as the
    products and sums written out. Before, refused."""
    out, relevance, absorbed = lrp0_audited(fn, Epsilon(0.0))
    _, want, _ = lrp0_audited(written_out, Epsilon(0.0))
    torch.testing.assert_close(relevance, want)
    torch.testing.assert_close(relevance.sum() + absorbed, out.sum())


def test_a_product_aggregation_gives_each_member_an_equal_share():
    """``scatter_reduce(..., 'prod')`` (PyG's ``MulAggregation``): an output
    that multiplies ``n`` members is homogeneous of degree ``n`` in them, so
    each member gets ``1 / n`` of its relevance; an empty group's relevance
    stays with the constant ``1``, booked as absorbed. Before, refused."""
    src = X.abs() + 0.5
    index = torch.tensor([0, 0, 1, 1, 1, 3, 3]).unsqueeze(-1).expand_as(src)  # group 2 is empty
    seed = weights(4, F_IN, seed=12)
    with relevance_pass(rules=Epsilon(0.0)) as mode:
        watched = mode.watch(src)
        out = torch.ones(4, F_IN, dtype=DTYPE).scatter_reduce(0, index, watched, "prod", include_self=True)
        with lrp.RelevanceAudit() as audit:
            (relevance,) = mode.backward(out, seed, [watched])
    torch.testing.assert_close(out.detach(), torch.ones(4, F_IN, dtype=DTYPE).scatter_reduce(0, index, src, "prod"))
    members = torch.tensor([2, 2, 3, 3, 3, 2, 2], dtype=DTYPE).unsqueeze(-1)
    torch.testing.assert_close(relevance, seed.gather(0, index) / members)
    assert audit.absorbed == pytest.approx(float(seed[2].sum()))


def test_a_signal_divided_by_its_norm_gives_the_norm_nothing():
    """``h / h.norm(...)`` (and the standardised ``(h - mean) / std``): the
    norm is a denominator, held constant like every signal there."""
    check(lambda x: (x @ A) / (x @ A).norm(dim=-1, keepdim=True) @ W,
          lambda x: (x @ A) / (x @ A).norm(dim=-1, keepdim=True).detach() @ W)

    def standardised(x, detach=False):
        h = x @ A
        std = h.std(0, keepdim=True)
        return (h - h.mean(0, keepdim=True)) / (std.detach() if detach else std) @ W
    check(standardised, lambda x: standardised(x, detach=True))


def test_cosine_similarity_is_its_unit_vectors_dot_product():
    """``F.cosine_similarity``: each operand over its norm (gates), then the
    product (of two signals: halves) summed. Forward equal to torch's."""
    p = weights(HID, seed=8)
    fn = lambda x: F.cosine_similarity(x @ A, x @ B, dim=-1)  # noqa: E731
    out = lrp0(lambda x: fn(x).unsqueeze(-1))  # relevance of the seed out = cos itself
    torch.testing.assert_close(out.sum(), fn(X).sum())
    # against a prototype (a constant): the unit vector of x @ A times a gate
    check(lambda x: F.cosine_similarity(x @ A, p, dim=-1),
          lambda x: ((x @ A) / (x @ A).norm(dim=-1, keepdim=True).detach() * (p / p.norm())).sum(-1))
    with relevance_pass(rules=Epsilon(0.0)) as mode:
        torch.testing.assert_close(fn(mode.watch(X)).detach(), fn(X), rtol=0, atol=0)


@pytest.mark.parametrize("fn,written_out", [
    (lambda x: torch.addcmul(x @ A, (x @ B).detach(), x @ A, value=0.5),
     lambda x: x @ A + 0.5 * ((x @ B).detach() * (x @ A))),
    (lambda x: torch.lerp(x @ A, x @ B, 0.3), lambda x: x @ A + 0.3 * (x @ B - x @ A)),
    (lambda x: F.glu(torch.cat([x @ A, x @ B], -1)), lambda x: (x @ A) * torch.sigmoid(x @ B)),
], ids=["addcmul", "lerp", "glu"])
def test_ops_that_are_a_few_simpler_ones(fn, written_out):
    """``addcmul``, ``lerp`` and ``glu`` are explained as their ops written
    out (before: refused), under LRP-0 and under a rule that modifies."""
    torch.testing.assert_close(lrp0(fn), lrp0(written_out))
    torch.testing.assert_close(lrp0(fn, rule=Gamma(0.25)), lrp0(written_out, rule=Gamma(0.25)))


@pytest.mark.parametrize("fn", [
    lambda x: torch.cumsum(x @ A, dim=0) @ W,
    lambda x: torch.diff(x @ A, dim=-1),
    lambda x: (x @ A).tril(),
    lambda x: torch.diagonal(x @ A),
    lambda x: F.pairwise_distance(x @ A, x @ B),
    lambda x: torch.cdist(x @ A, x @ B),
    lambda x: torch.cdist(x @ A, W, p=1.0),
    lambda x: torch.full((N, HID), 0.7, dtype=DTYPE).scatter(0, torch.arange(3).unsqueeze(-1).expand(3, HID),
                                                             (x @ A)[:3]) @ W,
    lambda x: torch.full((N, HID), 0.7, dtype=DTYPE).masked_scatter(MASK, x @ A) @ W,
], ids=["cumsum", "diff", "tril", "diagonal", "pairwise_distance", "cdist", "cdist-p1", "scatter", "masked_scatter"])
def test_linear_ops_and_distances(fn):
    """Sums and differences along a dimension (``cumsum``, ``diff``), masks
    and diagonals are linear; distances are norms of differences (Euler,
    degree 1). All piecewise linear or homogeneous of degree 1, so LRP-0 is
    gradient x input. Before, they were refused."""
    check(fn, fn)


def test_scatter_with_reduce_add_is_a_scatter_sum():
    """``scatter(..., reduce='add')`` (which torch itself cannot
    differentiate) is explained as ``scatter_add``; other reductions are
    refused."""
    index = torch.arange(3).unsqueeze(-1).expand(3, HID)
    base = torch.full((N, HID), 0.7, dtype=DTYPE)
    with warnings.catch_warnings():  # torch's deprecation of reduce= (once per process)
        warnings.simplefilter("ignore", UserWarning)
        got = lrp0(lambda x: base.scatter(0, index, (x @ A)[:3], reduce="add") @ W)
    torch.testing.assert_close(got, lrp0(lambda x: base.scatter_add(0, index, (x @ A)[:3]) @ W))
    with pytest.raises(UnsupportedOpError, match="reduce='multiply'"), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        lrp0(lambda x: base.scatter(0, index, (x @ A)[:3], reduce="multiply") @ W)


def test_piecewise_constant_ops_are_constants():
    """``sign``, ``floor``, ... have gradient 0: their outputs are constants of
    the pass. ``sign(h) * h`` is ``|h|``; ``h + floor(h)`` books what the
    floor term takes as absorbed."""
    check(lambda x: torch.sign(x @ A) * (x @ A) @ W, lambda x: (x @ A).abs() @ W)
    with relevance_pass(rules=Epsilon(0.0)) as mode:
        watched = mode.watch(X)
        out = (watched @ A) + torch.floor(watched @ A)
        with lrp.RelevanceAudit() as audit:
            (relevance,) = mode.backward(out, out.detach(), [watched])
    assert abs(audit.absorbed) > 1e-3
    torch.testing.assert_close(relevance.sum() + audit.absorbed, out.detach().sum())


@pytest.mark.parametrize("op", [F.logsigmoid, torch.nan_to_num, lambda h: h.clamp_max(0.2),
                                lambda h: h.clamp(min=-0.9).log1p(), torch.expm1, lambda h: h.clone().expm1_()],
                         ids=["logsigmoid", "nan_to_num", "clamp_max", "log1p", "expm1", "expm1_"])
def test_more_element_wise_ops_pass_relevance(op):
    r"""Each output element's relevance goes, unchanged, to its input element:
    the input relevance is LRP-0 of ``x @ A`` seeded with the op's output
    (written out: :math:`R_{if} = x_{if} \sum_j A_{fj} s_{ij} / z_{ij}`)."""
    z = X @ A
    seed = op(z)
    want = X * ((seed / z) @ A.T)
    torch.testing.assert_close(lrp0(lambda x: op(x @ A)), want)


def test_rms_norm_scales_by_a_constant():
    """``torch.nn.RMSNorm``: the root mean square is a gate, as LayerNorm's
    standard deviation is. Before, refused."""
    rms = torch.nn.RMSNorm(HID, eps=1e-6).double()
    with torch.no_grad():
        rms.weight.copy_(weights(HID, seed=11))

    def reference(x):
        h = x @ A
        return h * torch.rsqrt(h.detach().pow(2).mean(-1, keepdim=True) + 1e-6) * rms.weight.detach()
    check(lambda x: rms(x @ A), reference)


@pytest.mark.parametrize("as_factor,as_divisor", [
    (lambda h: h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6),
     lambda h: h / torch.sqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)),
    (lambda h: h * (1 + h.abs()).reciprocal(), lambda h: h / (1 + h.abs())),
], ids=["rsqrt", "reciprocal"])
def test_one_over_a_signal_times_a_signal_is_the_division(as_factor, as_divisor):
    """``h * rsqrt(y)`` and ``h * reciprocal(y)`` are ``h / sqrt(y)`` and
    ``h / y``: the factor is a gate, as the denominator is."""
    for rule in (Epsilon(0.0), Gamma(0.25)):
        torch.testing.assert_close(lrp0(lambda x: as_factor(x @ A) @ W, rule=rule),
                                   lrp0(lambda x: as_divisor(x @ A) @ W, rule=rule))


def test_batch_statistics_are_gates():
    bn = torch.nn.BatchNorm1d(HID, affine=False, track_running_stats=False).double()

    def reference(x):
        h = x @ A
        var = h.detach().var(0, unbiased=False, keepdim=True)
        return (h - h.mean(0, keepdim=True)) * torch.rsqrt(var + bn.eps)
    check(lambda x: bn(x @ A), reference)


def test_addmm_is_its_linear_ops():
    def fn(x):
        h = x @ A
        return torch.addmm(h, h, W, beta=0.3, alpha=0.7)

    def written_out(x):
        h = x @ A
        return 0.3 * h + 0.7 * (h @ W)
    check(fn, fn)
    # under a rule that modifies weights, the same as the ops written out
    torch.testing.assert_close(lrp0(fn, rule=Gamma(0.25)), lrp0(written_out, rule=Gamma(0.25)))


def test_einsum_with_one_signal_is_linear():
    blocks = torch.nn.Parameter(weights(2, 2, 3, seed=5))

    def fn(x):
        return torch.einsum("abc,bcd->abd", (x @ A).view(-1, 2, 2), blocks)

    def written_out(x):
        h = (x @ A).view(-1, 2, 2)
        return torch.stack([h[:, b] @ blocks[b] for b in range(2)], dim=1)
    check(fn, fn)
    torch.testing.assert_close(lrp0(fn, rule=Gamma(0.25)), lrp0(written_out, rule=Gamma(0.25)))


# --- multi-head attention ---------------------------------------------------------------------
@pytest.mark.parametrize("batch_first", [False, True])
def test_multihead_attention_freezes_the_attention(batch_first):
    mha = torch.nn.MultiheadAttention(8, 2, bias=False, batch_first=batch_first).double().eval()
    x0 = weights(3, 5, 8, seed=6)

    def reference(x):  # weights from the values, then the value path written out
        with torch.no_grad():
            _, attention = mha(x0, x0, x0, average_attn_weights=False)
        q = x.transpose(0, 1) if batch_first else x  # [L, N, E]
        length, batch = q.shape[:2]
        v = (q @ mha.in_proj_weight[16:].t()).reshape(length, batch * 2, 4).transpose(0, 1)
        out = torch.bmm(attention.reshape(batch * 2, length, length), v).transpose(0, 1).reshape(length, batch, 8)
        out = out @ mha.out_proj.weight.t()
        return out.transpose(0, 1) if batch_first else out

    with relevance_pass(mha, rules=Epsilon(0.0)) as mode:
        x = mode.watch(x0)
        out, _ = mha(x, x, x, need_weights=False)
        (relevance,) = mode.backward(out, out.detach(), [x])
    torch.testing.assert_close(out.detach(), reference(x0).detach())
    torch.testing.assert_close(relevance, grad_x_input(reference, x0), rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("kdim, vdim", [(8, 6), (5, 6), (8, 9)])
def test_multihead_attention_with_values_of_another_width(kdim, vdim):
    """``vdim != embed_dim`` (before: a reshape error in the pass): the value
    path ``A (v W_v) W_o`` with the attention from query and key, written
    out, gives the same relevance."""
    mha = torch.nn.MultiheadAttention(8, 2, kdim=kdim, vdim=vdim, bias=False).double().eval()
    q0, k0, v0 = weights(4, 3, 8, seed=1), weights(5, 3, kdim, seed=2), weights(5, 3, vdim, seed=3)

    def reference(v):
        with torch.no_grad():
            _, attention = mha(q0, k0, v0, average_attn_weights=False)  # [N, H, L, S]
        h = (v @ mha.v_proj_weight.t()).reshape(5, 3 * 2, 4).transpose(0, 1)
        out = torch.bmm(attention.reshape(3 * 2, 4, 5), h).transpose(0, 1).reshape(4, 3, 8)
        return out @ mha.out_proj.weight.t()

    with relevance_pass(mha, rules=Epsilon(0.0)) as mode:
        v = mode.watch(v0)
        out, _ = mha(q0, k0, v, need_weights=False)
        (relevance,) = mode.backward(out, out.detach(), [v])
    torch.testing.assert_close(out.detach(), reference(v0).detach())
    torch.testing.assert_close(relevance, grad_x_input(reference, v0), rtol=1e-8, atol=1e-10)


# --- PyG layers end to end -------------------------------------------------------------------
def graph(edge_dim=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(20, 8, generator=g, dtype=DTYPE)
    edge_index = torch.randint(0, 20, (2, 60), generator=g)
    kwargs = {} if edge_dim is None else {"edge_attr": torch.randn(60, edge_dim, generator=g, dtype=DTYPE)}
    return x, edge_index, kwargs


class Head(torch.nn.Module):
    def __init__(self, conv, width, call=None):
        super().__init__()
        self.conv, self.lin, self.call = conv, torch.nn.Linear(width, 3), call

    def forward(self, x, edge_index, **kwargs):
        h = self.call(self.conv, x, edge_index, **kwargs) if self.call else self.conv(x, edge_index, **kwargs)
        return self.lin(h.relu())


LAYERS = {
    "GMMConv": (lambda: pyg_nn.GMMConv(8, 6, dim=3, kernel_size=2), 6, 3, None),
    "PDNConv": (lambda: pyg_nn.PDNConv(8, 6, edge_dim=4, hidden_channels=8), 6, 4, None),
    "DNAConv": (lambda: pyg_nn.DNAConv(8, heads=2, groups=1), 8, None,
                lambda conv, x, ei: conv(torch.stack([x, x.relu()], dim=1), ei)),
    "RGCNConv(num_blocks)": (lambda: pyg_nn.RGCNConv(8, 6, num_relations=3, num_blocks=2), 6, None,
                             lambda conv, x, ei: conv(x, ei, torch.arange(ei.shape[1]) % 3)),
    "GPSConv": (lambda: pyg_nn.GPSConv(8, pyg_nn.GINConv(torch.nn.Linear(8, 8)), heads=2), 8, None, None),
    # a conv layer around a message-passing layer: one layer of the default composite
    "AntiSymmetricConv": (lambda: pyg_nn.AntiSymmetricConv(8, num_iters=2), 8, None, None),
    "DirGNNConv(GCNConv)": (lambda: pyg_nn.DirGNNConv(pyg_nn.GCNConv(8, 6), alpha=0.3), 6, None, None),
    "PMLP": (lambda: pyg_nn.models.PMLP(8, 6, 6, num_layers=2), 6, None, None),
    # std = sqrt(E[x^2] - E[x]^2): the square root passes, the squares are products
    "PNAConv(std)": (lambda: pyg_nn.PNAConv(8, 6, aggregators=["mean", "std"], scalers=["identity"],
                                             deg=torch.tensor([1, 4, 6, 5, 3, 1])), 6, None, None),
}


@pytest.mark.parametrize("name", list(LAYERS))
def test_layer_is_explained_and_conserves(name):
    build, width, edge_dim, call = LAYERS[name]
    torch.manual_seed(0)
    model = Head(build(), width, call).double().eval()
    x, edge_index, kwargs = graph(edge_dim)
    explanation = lrp.explain(model, x, edge_index, index=torch.arange(4), **kwargs)
    assert torch.isfinite(explanation.node_mask).all()
    assert abs(float(explanation.residual)) <= 1e-9 * max(1.0, abs(float(explanation.score)))


def test_learned_edge_weights_with_added_self_loops_book_the_loop_constants():
    """PDNConv normalises learned edge weights with self-loops of weight 1
    written into a constant (``add_remaining_self_loops``): the relevance
    that reaches those constants is booked as absorbed, not lost."""
    torch.manual_seed(0)
    conv = pyg_nn.PDNConv(8, 3, edge_dim=4, hidden_channels=8, normalize=True, add_self_loops=True).double()
    x, edge_index, kwargs = graph(4, seed=3)
    explanation = lrp.explain(conv, x, edge_index, index=torch.arange(4), **kwargs)
    assert abs(float(explanation.residual)) <= 1e-9 * abs(float(explanation.score))
    assert abs(float(explanation.absorbed)) > 1e-6  # the loop weights take a part


class FAFrozen(pyg_nn.FAConv):
    """FAConv with its tanh attention detached: the twin whose gradient x
    input is LRP-0 with the attention held constant."""

    def message(self, x_j, alpha_j, alpha_i, edge_weight):
        alpha = (alpha_j + alpha_i).tanh().squeeze(-1).detach()
        return x_j * (alpha * edge_weight).view(-1, 1)


class OnTwo(torch.nn.Module):
    def __init__(self, conv):
        super().__init__()
        self.conv = conv

    def forward(self, x, edge_index):
        return self.conv(x, x, edge_index)


def test_a_gate_times_a_constant_is_a_gate():
    """FAConv's message is ``x_j * (dropout(tanh(.)) * w)``: the tanh gate is
    multiplied by the GCN weight (and dropped out) before it meets ``x_j``,
    and stays a gate; before, the product split relevance half and half onto
    the attention logits (0.47 off on a 5-node graph)."""
    torch.manual_seed(0)
    conv = pyg_nn.FAConv(8, eps=0.3, add_self_loops=True).double().eval()
    with torch.no_grad():
        for parameter in conv.parameters():
            parameter.copy_(torch.randn(parameter.shape))
    x, edge_index, _ = graph(seed=1)
    x = x.abs()
    explanation = lrp.explain(OnTwo(conv), x, edge_index, index=torch.arange(3), target=torch.tensor([1, 0, 2]),
                              rules=lrp.rules.Epsilon(0.0), subgraph=False)
    frozen = FAFrozen(8, eps=0.3, add_self_loops=True).double().eval()
    frozen.load_state_dict(conv.state_dict())
    xx = x.clone().requires_grad_(True)
    out = OnTwo(frozen)(xx, edge_index)
    score = out[0, 1] + out[1, 0] + out[2, 2]
    reference = xx * torch.autograd.grad(score, xx)[0]
    torch.testing.assert_close(explanation.node_mask, reference.detach(), rtol=1e-9, atol=1e-12)


def test_a_sum_of_gates_times_weights_is_a_gate():
    """GMMConv(separate_gaussians=True) sums its exp kernels times weights
    ``g`` over the kernels before they meet ``x_j``: the kernel is a gate of
    ``edge_attr`` alone, so ``x`` takes all of a bias-free layer's score and
    ``edge_attr`` none; before, ``x`` got half."""
    torch.manual_seed(0)
    conv = pyg_nn.GMMConv(8, 6, dim=3, kernel_size=2, separate_gaussians=True, bias=False)
    conv = conv.double().eval()
    x, edge_index, kwargs = graph(3, seed=2)
    explanation = lrp.explain(conv, x, edge_index, index=torch.arange(4), target=torch.tensor([0, 1, 2, 3]),
                              rules=lrp.rules.Epsilon(0.0), subgraph=False, **kwargs)
    xx = x.clone().requires_grad_(True)
    out = conv(xx, edge_index, **kwargs)
    score = sum(out[i, i] for i in range(4))
    reference = xx * torch.autograd.grad(score, xx)[0]
    torch.testing.assert_close(explanation.node_mask, reference.detach(), rtol=1e-9, atol=1e-12)
    assert float(explanation.edge_attr_mask.abs().max()) < 1e-12


class ScalesInPlace(pyg_nn.GCNConv):
    """A GCN layer that scales its output in place and drops the result, as
    PyG's ``GCN2Conv`` does."""

    def forward(self, x, edge_index):
        out = super().forward(x, edge_index)
        out.mul_(0.5)
        return out


WRITES = {  # name: (in place, the same out of place)
    "masked_fill_": (lambda h, m: h.masked_fill_(m, 0.0), lambda h, m: h.masked_fill(m, 0.0)),
    "masked_fill_ 0.5": (lambda h, m: h.masked_fill_(m, 0.5), lambda h, m: torch.where(m, 0.5, h)),
    "setitem": (lambda h, m: h.__setitem__(m, 0.0), lambda h, m: torch.where(m, 0.0, h)),
    "setitem rows": (lambda h, m: h.__setitem__(slice(1, 3), 0.5),
                     lambda h, m: torch.cat([h[:1], torch.full_like(h[1:3], 0.5), h[3:]])),
    "index_fill_": (lambda h, m: h.index_fill_(1, torch.tensor([2]), 0.5),
                    lambda h, m: h.index_fill(1, torch.tensor([2]), 0.5)),
    "unsqueeze_": (lambda h, m: h.unsqueeze_(0).squeeze_(0), lambda h, m: h),
    "copy_": (lambda h, m: h.copy_(h * 2), lambda h, m: h * 2),
}


@pytest.mark.parametrize("write", list(WRITES))
@pytest.mark.parametrize("rule", [Epsilon(0.0), Gamma(0.25), lrp.rules.Flat()], ids=["eps0", "gamma", "flat"])
def test_an_in_place_write_into_a_map_end_continues_the_map(write, rule):
    """``h = x @ A`` ends a linear map; ``h.masked_fill_(...)`` or ``h[m] = 0``
    then changes ``h``. The write is replayed on each stream of the map, so
    the explanation equals that of the same write out of place, under every
    rule, with a number written in absorbing its share. Before, the next
    linear op continued from stream copies that did not see the write: a
    wrong explanation without a word under ``Gamma``, a residual (or a
    version error) under one-stream rules."""
    in_place, out_of_place = WRITES[write]

    def fn(x, write):
        h = x @ A
        written = write(h, h.detach() > 0.3)
        if written is not None and written is not h:
            h = written  # the out-of-place form returns a new tensor
        return h @ W

    out, relevance, absorbed = audited_alike(lambda x: fn(x, in_place), lambda x: fn(x, out_of_place), rule)
    torch.testing.assert_close(relevance.sum() + absorbed, out.sum())


@pytest.mark.parametrize("write", [w for w in WRITES if w not in ("unsqueeze_", "copy_")])
@pytest.mark.parametrize("rule", [Epsilon(0.0), Gamma(0.25)], ids=["eps0", "gamma"])
def test_a_number_written_in_place_into_an_activation_is_absorbed(write, rule):
    """``h = leaky_relu(x @ A)`` is no map's end; a number written into it in
    place (``h[m] = 0.5``, ``h.masked_fill_(m, 0.5)``) is a constant of the
    next map, as the same write out of place is, and absorbs its share:
    the input relevance and the absorbed relevance add up to the output.
    Before, the in-place forms ran as autograd runs them: the relevance of
    the written entries vanished unmeasured (absorbed 0, a residual of up to
    the whole score)."""
    in_place, out_of_place = WRITES[write]

    def fn(x, write):
        h = F.leaky_relu(x @ A, 0.0)  # saves its input: autograd allows the write into its output
        written = write(h, h.detach() > 0.3)
        if written is not None and written is not h:
            h = written
        return h @ W

    out, relevance, absorbed = audited_alike(lambda x: fn(x, in_place), lambda x: fn(x, out_of_place), rule)
    torch.testing.assert_close(relevance.sum() + absorbed, out.sum())


class WritesBetweenLayers(torch.nn.Module):
    """``l1``, a write into its output in the model's own forward (whose rule
    differs from ``l1``'s), then ``l2``."""

    def __init__(self, in_place: bool):
        super().__init__()
        torch.manual_seed(4)
        self.l1, self.l2 = torch.nn.Linear(F_IN, HID).double(), torch.nn.Linear(HID, 3).double()
        self.in_place = in_place

    def forward(self, x):
        h = self.l1(x)
        mask = h.detach() > 0.3
        if self.in_place:
            h[mask] = 0.5
        else:
            h = torch.where(mask, 0.5, h)
        return self.l2(h.relu() + h)


@pytest.mark.parametrize("l1_rule", [Epsilon(0.0), Epsilon(1e-3), Gamma(0.25)], ids=["eps0", "eps", "gamma"])
def test_an_in_place_write_under_another_rule_starts_a_map(l1_rule):
    """Written under another rule than the map it writes into, the write
    starts a map of its own, as an out-of-place op there does: the two forms
    agree (the one-stream map's memory, shared with the written tensor, is
    copied first: no version error)."""
    torch.testing.assert_close(between_layers(WritesBetweenLayers(True), l1_rule)[1],
                               between_layers(WritesBetweenLayers(False), l1_rule)[1])


def between_layers(model, l1_rule):
    """Output and relevance of ``X`` under ``l1_rule`` on ``l1``, ``Gamma(0.5)``
    on ``l2`` and ``Epsilon`` elsewhere (the model's own forward)."""
    rules = {"l1": l1_rule, "l2": Gamma(0.5)}
    with relevance_pass(model, rules=rules, default_rule=Epsilon(1e-6)) as mode:
        watched = mode.watch(X)
        out = model(watched)
        (r,) = mode.backward(out, out.detach(), [watched])
    return out.detach(), r


class ScalesBetweenLayers(torch.nn.Module):
    """``l1``, arithmetic on its output in the model's own forward (whose rule
    differs from ``l1``'s), in place (result dropped) or out of place, then ``l2``."""

    def __init__(self, op: str, in_place: bool):
        super().__init__()
        torch.manual_seed(4)
        self.l1, self.l2 = torch.nn.Linear(F_IN, HID).double(), torch.nn.Linear(HID, 3).double()
        self.op, self.in_place = op, in_place

    def forward(self, x):
        h = self.l1(x)
        in_place, out_of_place = ARITHMETIC[self.op]
        other = h.detach().relu()
        if self.in_place:
            in_place(h, other)
        else:
            h = out_of_place(h, other)
        return self.l2(h.relu())


@pytest.mark.parametrize("op", ["mul_", "add_ constant", "div_", "index_add_"])
@pytest.mark.parametrize("l1_rule", [Epsilon(0.0), Epsilon(1e-3), Gamma(0.25)], ids=["eps0", "eps", "gamma"])
def test_arithmetic_in_place_under_another_rule_starts_a_map(op, l1_rule):
    """``h = l1(x); h.mul_(a)`` in a forward whose rule differs from
    ``l1``'s (the default composite: ``Gamma`` on the layer, ``Epsilon`` on
    the model): the op starts a map of its own, as out of place. Before,
    the backward failed with autograd's in-place version error (the new
    map was opened from ``h`` itself, which the write then changed)."""
    got, want = between_layers(ScalesBetweenLayers(op, True), l1_rule), \
        between_layers(ScalesBetweenLayers(op, False), l1_rule)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_arithmetic_in_place_on_a_layer_output_under_the_default_composite():
    """The shape users write: ``h = conv1(x, e); h.mul_(a)`` under
    ``lrp.explain``'s default rules (the layer's differ from the model's).
    Node and edge masks equal those of ``h = h * a``."""
    from torch_geometric.nn import GCNConv

    class Net(torch.nn.Module):
        def __init__(self, in_place):
            super().__init__()
            torch.manual_seed(1)
            self.c1, self.c2, self.in_place = GCNConv(5, 8).double(), GCNConv(8, 3).double(), in_place

        def forward(self, x, edge_index):
            h = self.c1(x, edge_index)
            if self.in_place:
                h.mul_(SCALE)
            else:
                h = h * SCALE
            return self.c2(h.relu(), edge_index)

    g = torch.Generator().manual_seed(0)
    x, edge_index = torch.randn(12, 5, dtype=torch.float64, generator=g), torch.randint(0, 12, (2, 40), generator=g)
    got, want = (lrp.explain(Net(p), x, edge_index, index=3) for p in (True, False))
    torch.testing.assert_close(got.node_mask, want.node_mask, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got.edge_mask, want.edge_mask, rtol=1e-12, atol=1e-12)


SCALE = torch.rand(8, dtype=torch.float64, generator=torch.Generator().manual_seed(2)) + 0.2


def test_a_write_through_a_view_of_a_map_end_is_refused():
    """``v = h[:, :2]; v.zero_()`` changes ``h`` too, which no replay on
    ``v``'s streams reaches. Before, explained wrongly (under ``Gamma``
    without a word). Refused, naming the op; ``strict=False`` counts it."""
    def fn(x):
        h = x @ A
        v = h[:, :2]
        v.zero_()
        return h @ W
    with pytest.raises(UnsupportedOpError, match="'zero_' .* writes in place into memory that a tensor computed by "
                                                 "a linear op of the pass shares"):
        lrp0(fn, rule=Gamma(0.25))
    with relevance_pass(rules=Gamma(0.25), strict=False) as mode:
        fn(mode.watch(X))
    assert any("in place into a view of a map end" in key for key in mode.unsupported)


@pytest.mark.parametrize("rule", [Epsilon(0.0), Gamma(0.25), lrp.rules.Flat()], ids=["eps0", "gamma", "flat"])
def test_a_tensor_written_in_place_several_times(rule):
    """Three writes into the same map end, the last one's result used and the
    tensor returned: the output values and the relevance equal those of the
    writes out of place (each write continues from the newest end, and the
    user's tensor holds every write)."""
    def in_place(x):
        h = x @ A
        h[h.detach() > 0.3] = 0.0
        h[:, 1] = 0.5
        same = h.masked_fill_(h.detach() < -1.0, -1.0)
        assert same is h
        return h

    def out_of_place(x):
        h = x @ A
        h = torch.where(h.detach() > 0.3, 0.0, h)
        h = torch.cat([h[:, :1], torch.full_like(h[:, 1:2], 0.5), h[:, 2:]], 1)
        return torch.where(h.detach() < -1.0, -1.0, h)
    audited_alike(in_place, out_of_place, rule)


def test_a_model_that_returns_a_tensor_written_in_place():
    """The written tensor itself as the model's output: the pass seeds the
    map's new end (``RelevanceMode.resolved``)."""
    def fn(x):
        h = x @ A
        h[h.detach() > 0.3] = 0.0
        return h
    torch.testing.assert_close(lrp0(fn, rule=Gamma(0.25)),
                               lrp0(lambda x: torch.where((x @ A).detach() > 0.3, 0.0, x @ A), rule=Gamma(0.25)))


def test_the_out_of_place_write_and_a_write_after_an_activation_are_explained():
    """The out-of-place forms continue the map (the same as multiplying by the
    mask); an in-place write into an activation's output (not a map end)
    equals its out-of-place form."""
    def mask_of(h):
        return h.detach() > 0.3

    def out_of_place(x):
        h = x @ A
        return h.masked_fill(mask_of(h), 0.0) @ W

    def multiplied(x):
        h = x @ A
        return (h * ~mask_of(h)) @ W

    def after_relu(x, in_place):
        h = (x @ A).relu()
        if in_place:
            h[mask_of(h)] = 0.0
        else:
            h = torch.where(mask_of(h), 0.0, h)
        return h @ W
    for rule in (Epsilon(0.0), Gamma(0.25)):
        torch.testing.assert_close(lrp0(out_of_place, rule=rule), lrp0(multiplied, rule=rule))
        torch.testing.assert_close(lrp0(lambda x: after_relu(x, True), rule=rule),
                                   lrp0(lambda x: after_relu(x, False), rule=rule))


NUMBER_WRITES = {
    "masked_fill": lambda h: h.masked_fill(MASK, 0.5),
    "masked_fill, 0-dim tensor": lambda h: h.masked_fill(MASK, torch.tensor(0.5, dtype=DTYPE)),
    "index_fill": lambda h: h.index_fill(0, torch.tensor([1, 4]), 0.5),
    "scatter": lambda h: h.scatter(0, torch.arange(3).unsqueeze(-1).expand(3, HID), 0.5),
    "where, number first": lambda h: torch.where(MASK, 0.5, h),
    "where, number second": lambda h: torch.where(MASK, h, 0.5),
}


@pytest.mark.parametrize("write", list(NUMBER_WRITES))
@pytest.mark.parametrize("rule", [Epsilon(0.0), Gamma(0.25), lrp.rules.Flat()], ids=["eps0", "gamma", "flat"])
def test_a_number_written_into_a_signal_absorbs_what_reaches_it(write, rule):
    """A number put into a signal (``masked_fill(h, m, 0.5)``, ``where(m,
    0.5, h)``, ...) is a constant of the map: the relevance reaching its
    entries is booked as absorbed, as for the same write with a constant
    tensor. Before, it vanished unmeasured: a residual of up to 0.9 of the
    score."""
    def fn(x):
        return NUMBER_WRITES[write]((x @ A).relu() @ W + (x @ B))

    def with_a_tensor(x):
        h = (x @ A).relu() @ W + (x @ B)
        written = NUMBER_WRITES[write](torch.zeros_like(h.detach()))  # where the number lands
        return torch.where(written == 0.5, torch.full_like(h.detach(), 0.5), h)

    out, relevance, absorbed = lrp0_audited(fn, rule)
    torch.testing.assert_close(relevance.sum() + absorbed, out.sum())
    assert abs(absorbed) > 1e-6
    _, reference, reference_absorbed = lrp0_audited(with_a_tensor, rule)
    torch.testing.assert_close(relevance, reference)
    assert absorbed == pytest.approx(reference_absorbed, rel=1e-9)


@pytest.mark.parametrize("rule", [Epsilon(0.0), Gamma(0.25), lrp.rules.AlphaBeta(2.0, 1.0)],
                         ids=["eps0", "gamma", "alphabeta"])
def test_an_infinite_mask_before_a_softmax_keeps_the_accounting_finite(rule):
    """``h.masked_fill(mask, -inf).softmax(-1)`` (attention masking): the
    ``-inf`` entries pass no relevance. Before, the stabiliser booked
    ``-inf * 0 = NaN`` as absorbed, so ``absorbed`` and ``residual`` were
    NaN, with a warning."""
    mask = torch.zeros(N, HID, dtype=torch.bool)
    mask[0, 1:] = True
    mask[3, :2] = True
    with relevance_pass(rules=rule) as mode:
        watched = mode.watch(X)
        out = (watched @ A).masked_fill(mask, float("-inf")).softmax(-1) @ W
        with lrp.RelevanceAudit() as audit:
            (relevance,) = mode.backward(out, out.detach(), [watched])
    assert math.isfinite(audit.absorbed)
    torch.testing.assert_close(relevance.sum() + audit.absorbed, out.detach().sum())


class ScalesOutOfPlace(pyg_nn.GCNConv):
    def forward(self, x, edge_index):
        return super().forward(x, edge_index).mul(0.5)


@pytest.mark.parametrize("rule", [None, Epsilon(0.0), Gamma(0.25)], ids=["default", "eps0", "gamma"])
def test_a_dropped_in_place_scaling_of_a_layer_output_is_explained(rule):
    """A layer that scales its output in place and drops the result, as
    PyG's ``GCN2Conv`` does: the scaling is replayed on the map, so the
    explanation equals that of the layer written out of place. Before,
    refused."""
    def explain(cls):
        torch.manual_seed(0)
        model = Head(cls(8, 8), 8, lambda conv, x, ei: conv(x, ei)).double()
        return lrp.explain(model, *graph()[:2], index=torch.arange(4), rules=rule)
    got, want = explain(ScalesInPlace), explain(ScalesOutOfPlace)
    torch.testing.assert_close(got.node_mask, want.node_mask)
    torch.testing.assert_close(got.edge_mask, want.edge_mask)
    assert abs(float(got.residual)) <= 1e-9 * abs(float(got.score))


C = weights(N, HID, seed=5)  # a constant term
ARITHMETIC = {  # name: (in place, result dropped; the same out of place), on h and another signal
    "mul_": (lambda h, s: h.mul_(0.5), lambda h, s: h * 0.5),
    "*= tensor": (lambda h, s: h.__imul__(C), lambda h, s: h * C),
    "add_ constant": (lambda h, s: h.add_(C), lambda h, s: h + C),
    "add_ signal, alpha": (lambda h, s: h.add_(s, alpha=2.0), lambda h, s: h + 2.0 * s),
    "+= signal": (lambda h, s: h.__iadd__(s), lambda h, s: h + s),
    "sub_": (lambda h, s: h.sub_(s), lambda h, s: h - s),
    "div_": (lambda h, s: h.div_(4.0), lambda h, s: h / 4.0),
    "index_add_": (lambda h, s: h.index_add_(0, torch.tensor([0, 0, 3]), s[1:4]),
                   lambda h, s: h.index_add(0, torch.tensor([0, 0, 3]), s[1:4])),
    "mul_ then add_": (lambda h, s: h.mul_(0.5).add_(s), lambda h, s: h * 0.5 + s),
}


@pytest.mark.parametrize("op", list(ARITHMETIC))
@pytest.mark.parametrize("rule", [Epsilon(0.0), Gamma(0.25), lrp.rules.Flat()], ids=["eps0", "gamma", "flat"])
def test_arithmetic_in_place_on_a_map_end_continues_the_map(op, rule):
    """``h = x @ A`` ends a linear map; ``h.mul_(0.5)`` (result dropped),
    ``h += s`` or ``h.index_add_(...)`` then changes ``h``. The op runs out
    of place on the map and its result stands for ``h``: output, relevance
    and absorbed relevance equal those of the op written out of place.
    Before, refused (the pass ran it out of place and lost the write)."""
    in_place, out_of_place = ARITHMETIC[op]

    def fn(x, write):
        h, other = x @ A, (x @ B).relu()
        written = write(h, other)
        if written is not h:
            h = written  # the out-of-place form returns a new tensor
        return h @ W

    audited_alike(lambda x: fn(x, in_place), lambda x: fn(x, out_of_place), rule)


@pytest.mark.parametrize("write", ["masked_fill_", "mul_"])
@pytest.mark.parametrize("rule", [Epsilon(0.0), Epsilon(1e-3), Gamma(0.25)], ids=["eps0", "eps", "gamma"])
def test_a_map_end_read_before_it_is_written_in_place(write, rule):
    """``early = h.relu()`` reads ``h`` before ``h`` is written in place, as
    plain autograd allows. Before, under a rule with one unmodified stream
    (``Epsilon``), whose map end shares memory with its stream, the backward
    failed with autograd's in-place version error."""
    def fn(x, in_place):
        h = x @ A
        early = h.relu()
        mask = h.detach() > 0.3
        if in_place:
            h.masked_fill_(mask, 0.0) if write == "masked_fill_" else h.mul_(0.5)
        else:
            h = h.masked_fill(mask, 0.0) if write == "masked_fill_" else h * 0.5
        return (h.relu() + early) @ W

    audited_alike(lambda x: fn(x, True), lambda x: fn(x, False), rule)


@pytest.mark.parametrize("write", ["masked_fill_", "mul_", "setitem 0.5"])
@pytest.mark.parametrize("rule", [Epsilon(0.0), Gamma(0.25)], ids=["eps0", "gamma"])
@pytest.mark.parametrize("read_first", [False, True], ids=["", "read first"])
def test_a_write_under_no_grad_into_a_map_end_is_replayed(write, rule, read_first):
    """``with torch.no_grad(): h.masked_fill_(m, 0)`` changes what the model
    computes as much as the write with grad: the explanation is the same.
    Before, the write left the map's streams behind: under ``Gamma`` the
    masked entries still passed relevance (off by 8.7 on a score of 62,
    conserving, without a word); under ``Epsilon`` a residual, or
    autograd's version error where ``h`` was read before."""
    def fn(x, no_grad):
        h = x @ A
        early = h.relu() if read_first else 0.0
        mask = h.detach() > 0.3
        with torch.no_grad() if no_grad else contextlib.nullcontext():
            if write == "masked_fill_":
                h.masked_fill_(mask, 0.0)
            elif write == "mul_":
                h.mul_(0.5)
            else:
                h[mask] = 0.5
        return (h + early) @ W

    audited_alike(lambda x: fn(x, True), lambda x: fn(x, False), rule)


class ScalesItsInput(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.head = pyg_nn.GCNConv(8, 6), torch.nn.Linear(6, 3)

    def forward(self, x, edge_index):
        x.mul_(2.0)  # on the explained input itself, the result dropped
        return self.head(self.conv(x, edge_index).relu())


@pytest.mark.parametrize("subgraph", [True, False])
def test_a_dropped_in_place_result_on_the_input_is_refused(subgraph):
    """The explained input is a leaf of the pass: an in-place op on it runs
    out of place like any other. Its dropped result was not checked before,
    so the pass explained the model without the doubling, silently (on the
    full graph; on a subgraph the check forward happened to double x)."""
    torch.manual_seed(0)
    x, edge_index, _ = graph()
    with pytest.raises(UnsupportedOpError, match=r"in-place ops .*'mul_' in the model \(ScalesItsInput\)"):
        lrp.explain(ScalesItsInput().double(), x, edge_index, index=torch.arange(4), subgraph=subgraph)


class InPlaceUsed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(8, 6), torch.nn.Linear(6, 3)

    def forward(self, x, edge_index):
        h = self.a(x)
        h = h.relu_()  # the returned tensor is used: the forward is the model's
        h.mul_(1.0)  # dropped, but changes nothing
        return self.b(h)


def test_in_place_ops_whose_result_is_used_are_explained():
    x, edge_index, _ = graph()
    explanation = lrp.explain(InPlaceUsed().double(), x, edge_index, index=torch.arange(4))
    assert abs(float(explanation.residual)) <= 1e-9 * max(1.0, abs(float(explanation.score)))


# --- pooling scores ------------------------------------------------------------------------------
class Pooled(torch.nn.Module):
    def __init__(self, pool):
        super().__init__()
        self.conv = pyg_nn.GCNConv(8, 6, bias=False)
        self.pool, self.lin = pool, torch.nn.Linear(6, 3, bias=False)

    def forward(self, x, edge_index, batch):
        h = self.conv(x, edge_index).relu()
        h, edge_index, _, batch, _, _ = self.pool(h, edge_index, batch=batch)
        return self.lin(pyg_nn.global_mean_pool(h, batch))


def _detach_score(module, args, out):
    out.weight = out.weight.detach()
    return out


@pytest.mark.parametrize("pool", ["TopKPooling", "SAGPooling"])
def test_pooling_scores_are_gates(pool):
    """``x[perm] * tanh(score)``: the score is held constant, so LRP-0 of a
    bias-free ReLU model equals gradient x input of the model with the score
    detached (under the product rule half would go into the score)."""
    torch.manual_seed(0)
    layer = pyg_nn.TopKPooling(6, ratio=0.5) if pool == "TopKPooling" else \
        pyg_nn.SAGPooling(6, ratio=0.5, GNN=pyg_nn.GraphConv)
    model = Pooled(layer).double().eval()
    x, edge_index, _ = graph(seed=2)
    batch = torch.arange(20) // 10
    explanation = lrp.explain(model, x, edge_index, index=0, batch=batch, rules=Epsilon(0.0))
    target = int(explanation.target)
    handle = layer.select.register_forward_hook(_detach_score)
    try:
        reference = x.clone().requires_grad_()
        model(reference, edge_index, batch)[0, target].backward()
    finally:
        handle.remove()
    torch.testing.assert_close(explanation.node_mask, reference.grad * x, rtol=1e-8, atol=1e-10)


# ---------------------------------------------------------------------------
# DynamicEdgeConv: the kNN graph is built from the signal as integer indices
# ---------------------------------------------------------------------------
def _knn_stand_in():
    """PyG's DynamicEdgeConv calls pyg-lib's ``torch.ops.pyg.knn`` (integer
    edge indices). Without pyg-lib, a stand-in op of the same signature."""
    import torch_geometric.typing

    if torch_geometric.typing.WITH_KNN or hasattr(torch.ops.pyg, "knn"):
        return

    @torch.library.custom_op("pyg::knn", mutates_args=())
    def knn(x: Tensor, y: Tensor, ptr_x: Tensor | None, ptr_y: Tensor | None, k: int, cosine: bool,
            num_workers: int) -> Tensor:
        col = torch.cdist(y, x).topk(k, dim=1, largest=False).indices
        row = torch.arange(y.shape[0]).view(-1, 1).expand_as(col)
        return torch.stack([row.reshape(-1), col.reshape(-1)])


def test_dynamic_edge_conv_holds_its_knn_graph_constant(monkeypatch):
    """The kNN graph DynamicEdgeConv builds from ``x`` is integer indices:
    no relevance reaches it, and the explanation is EdgeConv's on that graph
    as a fixed input."""
    import torch_geometric.typing

    _knn_stand_in()
    monkeypatch.setattr(torch_geometric.typing, "WITH_KNN", True)
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(2 * F_IN, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3)).double()
    dynamic = pyg_nn.DynamicEdgeConv(mlp, k=3).eval()
    static = pyg_nn.EdgeConv(mlp).eval()
    knn_graph = torch.ops.pyg.knn(X, X, None, None, 3, False, 1).flip([0])

    class Dynamic(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = dynamic

        def forward(self, x, edge_index):
            return self.conv(x)

    class Static(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = static

        def forward(self, x, edge_index):
            return self.conv(x, edge_index)

    rows = torch.arange(3)
    got = lrp.explain(Dynamic(), X, torch.empty(2, 0, dtype=torch.long), index=rows, subgraph=False,
                      mode="multiclass_classification")
    want = lrp.explain(Static(), X, knn_graph, index=rows, subgraph=False, mode="multiclass_classification")
    assert got.node_mask.abs().sum() > 0
    torch.testing.assert_close(got.node_mask, want.node_mask)
    assert got.score == pytest.approx(want.score, rel=1e-12)
    assert abs(got.residual) < 1e-9 * abs(got.score)


def test_the_backward_runs_unrouted(routed):
    """The relevance Functions' backward and the accounting use plain torch ops
    on tensors that carry no relevance: ``mode.backward`` runs them past the
    mode (every routed call costs Python time), while every op of the forward
    is routed."""
    calls = routed
    conv = pyg_nn.GCNConv(F_IN, HID).double()
    edge_index = torch.tensor([[0, 1, 2, 3, 4, 5], [1, 2, 3, 4, 5, 6]])
    with relevance_pass(conv) as mode:
        x = mode.watch(X)
        out = conv(x, edge_index)
        seed = out.detach()
        routed = len(calls)
        (relevance,) = mode.backward(out, seed, [x])
    assert routed > 0
    assert len(calls) == routed
    assert bool(torch.isfinite(relevance).all()) and float(relevance.abs().sum()) > 0


@pytest.mark.parametrize("subgraph", [False, True])
def test_nothing_after_the_forward_is_routed(routed, subgraph):
    """After the model's forward, an explanation's torch calls are its own
    bookkeeping (checks, seeds, the backward, the accounting): none of them
    goes through the relevance mode."""
    calls = routed

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = pyg_nn.GCNConv(F_IN, HID), pyg_nn.GCNConv(HID, 3)

        def forward(self, x, edge_index):
            out = self.b(self.a(x, edge_index).relu(), edge_index)
            calls.append("returned")
            return out

    torch.manual_seed(0)
    model = Net().double().eval()
    x = weights(20, F_IN, seed=2)
    edge_index = torch.randint(0, 20, (2, 30), generator=torch.Generator().manual_seed(3))
    explanation = lrp.explain(model, x, edge_index, index=0, subgraph=subgraph)
    assert any(c != "returned" for c in calls)  # the relevance forward is routed
    assert calls[-1] == "returned"  # and nothing after it
    assert abs(explanation.residual) < 1e-9 * max(1.0, abs(explanation.score))


def test_the_pass_keeps_its_own_hooks_under_a_wrapped_mode(monkeypatch):
    """The pass's own gradient hooks (edge relevance) are told from the
    model's by a flag, not by who called: with ``__torch_function__``
    wrapped (as profilers and the ``routed`` fixture do), the explanation is
    unchanged. Before, the wrapper's frame made the mode drop them with a
    warning, and the edge mask came out empty."""
    from torch_geometric_lrp.mode import RelevanceMode

    torch.manual_seed(0)
    model = pyg_nn.GCNConv(F_IN, 3).double().eval()
    x = weights(20, F_IN, seed=2)
    edge_index = torch.randint(0, 20, (2, 30), generator=torch.Generator().manual_seed(3))
    plain = lrp.explain(model, x, edge_index, index=0, mode="multiclass_classification")
    route = RelevanceMode.__torch_function__

    def wrapped(self, func, types, args=(), kwargs=None):
        return route(self, func, types, args, kwargs)

    monkeypatch.setattr(RelevanceMode, "__torch_function__", wrapped)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        through = lrp.explain(model, x, edge_index, index=0, mode="multiclass_classification")
    assert float(plain.edge_mask.abs().sum()) > 0
    torch.testing.assert_close(through.edge_mask, plain.edge_mask, rtol=0, atol=0)
    torch.testing.assert_close(through.node_mask, plain.node_mask, rtol=0, atol=0)


def test_the_pass_forgets_a_tensor_when_it_dies():
    """The pass keeps per-tensor facts (the map a tensor ends, weights made of
    parameters) by identity: an entry goes with its tensor, and a new tensor
    that gets the old one's id (CPython reuses them) sees nothing."""
    import gc
    import weakref
    from torch_geometric_lrp.mode import _ByIdentity

    facts = _ByIdentity()
    t, other = torch.zeros(2), torch.ones(2)
    facts[t] = "map of t"
    assert facts.get(t) == "map of t" and t in facts and other not in facts and facts
    facts._data[id(other)] = (weakref.ref(t), "stale")  # as if `other` reused a dead tensor's id
    assert facts.get(other) is None and other not in facts
    del facts._data[id(other)]
    del t
    gc.collect()
    assert not facts and facts._data == {}


def test_relevance_hooks_of_the_pass_run_when_the_forward_sets_them():
    """Gradient hooks that a forward registers are left out of the pass; the
    pass's own relevance hooks are not, also where the model's forward asks
    for one (``current_mode().relevance_hook``): with LRP-0 and no biases,
    the relevance through the hidden layer is the whole seed."""
    from torch_geometric_lrp.mode import current_mode
    collected = []

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(8, 6, bias=False), torch.nn.Linear(6, 3, bias=False)

        def forward(self, x):
            h = self.a(x).relu()
            current_mode().relevance_hook(h, lambda r: collected.append(float(r.sum())))
            return self.b(h)

    torch.manual_seed(0)
    model, x = Net().double(), torch.rand(5, 8, dtype=torch.float64)
    with relevance_pass(model, rules=Epsilon(0.0)) as mode:
        watched = mode.watch(x)
        out = model(watched)
        (relevance,) = mode.backward(out, out.detach(), [watched])
    score = float(out.detach().sum())
    assert collected and sum(collected) == pytest.approx(score, rel=1e-9)
    assert float(relevance.sum()) == pytest.approx(score, rel=1e-9)


def zplus_reference(x: Tensor, weight: Tensor, bias: Tensor, relevance: Tensor) -> Tensor:
    r"""``ZPlus`` on ``z = x W + b`` (one weight), written out:
    :math:`R_i = \sum_j (x_i w_{ij})^+ R_j / z_j^+` (0 where :math:`z_j^+ = 0`)."""
    c = x.unsqueeze(-1) * weight  # [N, in, out]
    zp = c.clamp(min=0).sum(1) + bias.clamp(min=0)
    share = torch.where(zp == 0, 0.0, relevance / zp)  # no positive contribution: the relevance is lost
    return (c.clamp(min=0) * share.unsqueeze(1)).sum(-1)


SIGN_FLIPS = {  # a map with a negative coefficient, and the same map with it folded into the weight and bias
    "neg": (lambda x: -(x @ A + C[0]), lambda: (-A, -C[0])),
    "sub from a constant": (lambda x: C[1] - x @ A, lambda: (-A, C[1])),
    "negative number": (lambda x: (x @ A + C[0]) * -0.5, lambda: (-0.5 * A, -0.5 * C[0])),
    "signed gate": (lambda x: (x @ A) * torch.tensor([1.0, -2.0, 0.5, -1.0], dtype=DTYPE),
                    lambda: (A * torch.tensor([1.0, -2.0, 0.5, -1.0], dtype=DTYPE), torch.zeros(HID, dtype=DTYPE))),
    "batch norm, negative scale": (None, None),
}


def folded_case(case: str):
    """``(fn, weight, bias)``: the map of a ``SIGN_FLIPS`` case, or ``x @ A``
    followed by a BatchNorm with negative scales, and the one-weight map it
    folds to, ``x @ weight + bias``."""
    if case != "batch norm, negative scale":
        fn, folded = SIGN_FLIPS[case]
        return (fn, *folded())
    norm = torch.nn.BatchNorm1d(HID).double().eval()
    with torch.no_grad():
        norm.weight.copy_(torch.tensor([-1.5, 0.7, -0.3, 1.2]))
        norm.bias.copy_(torch.tensor([0.2, -0.1, 0.4, 0.0]))
        norm.running_mean.copy_(torch.tensor([0.3, -0.2, 0.1, 0.5]))
        norm.running_var.copy_(torch.tensor([2.0, 0.5, 1.0, 1.5]))
    scale = norm.weight.detach() / torch.sqrt(norm.running_var + norm.eps)
    return (lambda x: norm(x @ A)), A * scale, norm.bias.detach() - norm.running_mean * scale


@pytest.mark.parametrize("case", list(SIGN_FLIPS))
def test_zplus_counts_negative_coefficients_with_their_sign(case):
    """``ZPlus`` on a map with a negation, a subtraction, a negative number,
    a signed gate or a BatchNorm with negative scales equals ``ZPlus`` on the
    same map with the coefficient folded into the weight: no input gets
    negative relevance for a positive seed. Before, the positive stream took
    the negative contributions (``-lin(x)``: all relevance on the features
    against the output)."""
    fn, weight, bias = folded_case(case)
    out = fn(X).detach()
    seed = out.abs()
    with relevance_pass(rules=lrp.rules.ZPlus(epsilon=0.0)) as mode:
        watched = mode.watch(X)
        (got,) = mode.backward(fn(watched), seed, [watched])
    torch.testing.assert_close(got, zplus_reference(X, weight, bias, seed))
    assert float(got.min()) >= -1e-12


@pytest.mark.parametrize("rule", [lrp.rules.ZPlus(), lrp.rules.AlphaBeta(), lrp.rules.Gamma(0.5)],
                         ids=["zplus", "alphabeta", "gamma"])
def test_diff_is_refused_under_a_sign_splitting_rule(rule):
    """``diff`` mixes signs inside one operand, which ``ZPlus``,
    ``AlphaBeta`` and ``Gamma`` cannot keep apart: refused, naming what to
    write instead; under ``Epsilon`` it is a linear op of the map."""
    with pytest.raises(UnsupportedOpError, match=r"'diff' .*h\[1:\] - h\[:-1\]"):
        lrp0(lambda x: torch.diff(x @ A, dim=0), rule=rule)
    torch.testing.assert_close(lrp0(lambda x: torch.diff(x @ A, dim=0)),
                               lrp0(lambda x: (x @ A)[1:] - (x @ A)[:-1]))


G = torch.tensor([1.5, -2.0, 0.5, -1.0], dtype=DTYPE)  # a signed gate
INT_G = torch.tensor([1, -2, 3, -1])
SPELLINGS = {  # name: (a spelling, the same op spelled as the tests above check it), on h = x @ A
    "mul, other=": (lambda h: torch.mul(h, other=-0.5), lambda h: h * -0.5),
    "div, other=": (lambda h: torch.div(h, other=-2.0), lambda h: h / -2.0),
    "neg, input=": (lambda h: torch.neg(input=h), lambda h: -h),
    "rsub, input= other=": (lambda h: torch.rsub(input=h, other=C[0]), lambda h: C[0] - h),
    "numpy number": (lambda h: h * np.float32(-0.5), lambda h: h * -0.5),
    "integer gate": (lambda h: h * INT_G, lambda h: h * INT_G.to(DTYPE)),
    "integer 0-dim divisor": (lambda h: h / torch.tensor(-2), lambda h: h / -2.0),
    "neg_": (lambda h: h.neg_(), lambda h: -h),
    "negative_": (lambda h: h.negative_(), lambda h: -h),
    "multiply_ gate": (lambda h: h.multiply_(G), lambda h: h * G),
    "true_divide_": (lambda h: h.true_divide_(-2.0), lambda h: h / -2.0),
    "divide_ gate": (lambda h: h.divide_(G), lambda h: h / G),
    "subtract_": (lambda h: h.subtract_(C[0]), lambda h: h - C[0]),
    "addcmul_": (lambda h: h.addcmul_(C[0].expand(N, HID), G, value=-1.0), lambda h: h - C[0] * G),
    "cumsum_": (lambda h: h.cumsum_(0), lambda h: h.cumsum(0)),
}


@pytest.mark.parametrize("spelling", list(SPELLINGS))
@pytest.mark.parametrize("rule", [lrp.rules.ZPlus(), lrp.rules.AlphaBeta(2.0, 1.0), Epsilon(0.0)],
                         ids=["zplus", "alphabeta", "eps0"])
def test_the_same_op_spelled_otherwise_is_explained_alike(spelling, rule):
    """Keyword operands, NumPy numbers, integer factors and in-place forms
    (their result dropped or not) carry their sign into ``ZPlus`` and
    ``AlphaBeta`` as the plain spelling does, and book nothing more as
    absorbed. Before, a keyword or an integer factor lost its sign (``ZPlus``
    relevance down to -23 for a seed of 8), and in-place forms outside the
    out-of-place list were replayed as copies (a negation ignored; a gate
    booked as absorbing, a residual of half the seed, also under LRP-0)."""
    written, plain = SPELLINGS[spelling]

    def fn(x, form):
        h = x @ A
        out = form(h)
        return (h if out is None else out) @ W
    audited_alike(lambda x: fn(x, written), lambda x: fn(x, plain), rule)


def test_an_in_place_op_without_a_replay_into_a_map_end_is_refused():
    """``h.cumprod_(0)`` into the end of a linear map is neither a copy nor
    arithmetic run out of place: refused, naming the op. Before, replayed on
    each stream as if it copied values, without a word."""
    def fn(x):
        h = x @ A
        h.cumprod_(0)
        return h @ W
    with pytest.raises(UnsupportedOpError, match="'cumprod_' .* writes in place into a tensor that a linear op"):
        lrp0(fn, rule=Gamma(0.25))


@pytest.mark.parametrize("case", list(SIGN_FLIPS))
def test_gamma_boosts_the_positive_coefficients_of_the_whole_map(case):
    """``Gamma`` on a map with a negation, a subtraction, a negative number,
    a signed gate or a BatchNorm with negative scales equals ``Gamma`` on the
    same map with the coefficient folded into the weight,
    :math:`\\tilde W = W + \\gamma W^+`, :math:`\\tilde b = b + \\gamma b^+`:
    it favours the contributions of positive coefficients. Before, the gate's
    sign came after ``W + gamma W+`` and turned the boost onto the negative
    ones."""
    fn, weight, bias = folded_case(case)
    gamma = 0.5
    w, b = weight + gamma * weight.clamp(min=0), bias + gamma * bias.clamp(min=0)
    seed = fn(X).detach()
    want = X * ((seed / (X @ w + b)) @ w.T)
    torch.testing.assert_close(lrp0(fn, rule=Gamma(gamma, epsilon=0.0)), want)


@pytest.mark.parametrize("rule", [Epsilon(0.5), lrp.rules.AlphaBeta(2.0, 1.0, epsilon=0.1), Gamma(0.5, 0.1)],
                         ids=["epsilon", "alphabeta", "gamma"])
@pytest.mark.parametrize("p,dim", [(2.0, 1), (1.0, 0)], ids=["l2-rows", "l1-columns"])
def test_normalize_is_explained_as_the_division_written_out(rule, p, dim):
    """``F.normalize(h)`` and ``h / h.norm(...).clamp_min(eps)`` are one
    function: the norm is held constant and the division continues the map of
    ``h``, so a rule's stabiliser sits on the normalised output in both.
    Before, ``F.normalize`` ended the map (a pass rule), so with a stabiliser
    (``SAGEConv(normalize=True)`` under ``Epsilon(0.5)``) its relevance was
    off by 1.3x that of the same model written out."""
    bias = weights(HID, seed=9)

    def written_out(x):
        h = x @ A + bias
        return h / h.norm(p, dim, keepdim=True).clamp_min(1e-12)

    audited_alike(lambda x: F.normalize(x @ A + bias, p=p, dim=dim), written_out, rule)


GROUPS = torch.tensor([0, 1, 2, 0, 1, 2, 0])  # a group per row of X (sum pooling)
RULES_OF_A_MAP = [Epsilon(0.0), Epsilon(0.5), lrp.rules.ZPlus(), Gamma(0.5, 0.1)]
RULE_IDS = ["lrp0", "epsilon", "zplus", "gamma"]


def pooled(fill, in_place: bool = True):
    """``relu(x @ A)`` summed per group into a constant of zeros by
    ``fill`` (its result dropped where ``in_place``), then a weight."""
    def fn(x):
        h = torch.relu(x @ A)
        z = torch.zeros(3, HID, dtype=DTYPE)
        if in_place:
            fill(z, h)
        else:
            z = fill(z, h)
        return z @ W
    return fn


IN_PLACE_SUMS = {
    "index_put_ accumulate": lambda z, h: z.index_put_((GROUPS,), h, accumulate=True),
    "index_add_": lambda z, h: z.index_add_(0, GROUPS, h),
    "scatter_add_": lambda z, h: z.scatter_add_(0, GROUPS.view(-1, 1).expand_as(h), h),
}


@pytest.mark.parametrize("rule", RULES_OF_A_MAP, ids=RULE_IDS)
@pytest.mark.parametrize("spelling", list(IN_PLACE_SUMS))
def test_a_sum_written_in_place_into_a_constant_is_explained_as_the_sum(spelling, rule):
    """``z = zeros(...); z.index_add_(0, groups, h)`` with the result dropped
    is the sum written out of place. Before, ``index_add_`` and
    ``scatter_add_`` left ``z`` at zeros inside the pass (score 0 for a
    model output of -0.83, with a warning that the output does not depend
    on the inputs), and ``index_put_(..., accumulate=True)`` handed each
    term the relevance of the whole sum (3x the score)."""
    audited_alike(pooled(IN_PLACE_SUMS[spelling]), pooled(lambda z, h: z.index_add(0, GROUPS, h), False), rule)


ADJACENCY = (weights(N, N, seed=11).abs() > 0.8).to(DTYPE) * weights(N, N, seed=12).abs()


@pytest.mark.parametrize("rule", RULES_OF_A_MAP, ids=RULE_IDS)
@pytest.mark.parametrize("signed", [False, True], ids=["adjacency", "signed"])
def test_a_sparse_product_with_a_constant_is_part_of_the_map(rule, signed):
    """``torch.sparse.mm(adj, h)`` with a constant adjacency is the dense
    ``adj @ h``: a gate of the map. Before, it ended the map and split the
    product with LRP-0, so the rule's stabiliser and signs never saw it
    (Epsilon(0.5): 0.24 off; ZPlus: 0.58)."""
    adjacency = ADJACENCY * (weights(N, N, seed=13).sign() if signed else 1)
    audited_alike(lambda x: torch.sparse.mm(adjacency.to_sparse(), x @ A) + 0.1,
                  lambda x: adjacency @ (x @ A) + 0.1, rule)


@pytest.mark.parametrize("rule", RULES_OF_A_MAP, ids=RULE_IDS)
def test_a_softmax_factor_of_einsum_is_a_gate(rule):
    """``einsum('n,nf->f', softmax(s), h)`` is ``(softmax(s)[:, None] * h).sum(0)``:
    the attention is a gate, ``h`` takes the relevance. Before, einsum split
    it between both factors (2.4e-2 off under LRP-0, no residual)."""
    def attention(x):
        return torch.softmax(x[:, 0], dim=0), x @ A

    def spelled(x):
        a, h = attention(x)
        return torch.einsum("n,nf->f", a, h)

    def written(x):
        a, h = attention(x)
        return (a[:, None] * h).sum(0)

    audited_alike(spelled, written, rule)


class PoolsIntoABuffer(torch.nn.Module):
    """Sums ``relu(x @ A)`` per group in place into a buffer of the model."""

    def __init__(self):
        super().__init__()
        self.register_buffer("pooled", torch.zeros(3, HID, dtype=DTYPE))

    def forward(self, x, edge_index):
        self.pooled.zero_()
        self.pooled.index_add_(0, GROUPS, torch.relu(x @ A))
        return self.pooled @ W


def test_a_sum_in_place_into_a_buffer_leaves_the_buffer_without_history():
    """A buffer of the model summed into in place gets the values, as the
    model writes them, and no autograd history of the pass (a later plain
    forward of the model would run into it); the explanation is the sum's."""
    model = PoolsIntoABuffer()
    edge_index = torch.empty(2, 0, dtype=torch.long)
    explanation = lrp.explain(model, X, edge_index, index=0, rules=Epsilon(0.0), task_level="graph")
    assert not model.pooled.requires_grad and model.pooled.grad_fn is None
    inputs = X.clone().requires_grad_()
    out = PoolsIntoABuffer()(inputs, edge_index)
    out[0, out[0].argmax()].backward()
    torch.testing.assert_close(explanation.node_mask, inputs * inputs.grad)


def test_nan_from_an_empty_attention_stays_out_of_the_accounting():
    """SetTransformerAggregation over a node without incoming edges: its
    attention over an empty set is NaN, which PyG replaces by 0. The masks and
    the accounting are those of the same graph with an edge into that node
    (the explained node does not read it): the NaN gate entries are read as 0
    by the map's streams. (Before, the accounting held NaN, with a warning.)"""
    from torch_geometric.nn import aggr

    torch.manual_seed(0)
    conv = pyg_nn.SAGEConv(4, 3, aggr=aggr.SetTransformerAggregation(4, num_seed_points=1, heads=1,
                                                                      layer_norm=False)).double().eval()
    x = torch.randn(4, 4, dtype=DTYPE)
    empty = torch.tensor([[1, 2, 0, 3], [0, 0, 1, 2]])  # node 3 receives nothing
    full = torch.tensor([[1, 2, 0, 3, 0], [0, 0, 1, 2, 3]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with_empty = lrp.explain(conv, x, empty, index=0, rules=lrp.rules.Epsilon(0.0), subgraph=False)
    reference = lrp.explain(conv, x, full, index=0, rules=lrp.rules.Epsilon(0.0), subgraph=False)
    torch.testing.assert_close(with_empty.node_mask, reference.node_mask, rtol=1e-12, atol=1e-14)
    assert with_empty.absorbed == pytest.approx(reference.absorbed, rel=1e-12)
    assert abs(float(reference.residual)) < 1e-9 and abs(float(with_empty.residual)) < 1e-9


class ScalesAGateInPlace(torch.nn.Module):
    """``a = sigmoid(t); a.mul_(2)``, then ``a`` used again (``rebind``: ``a = a.mul_(2)``)."""

    def __init__(self, rebind):
        super().__init__()
        self.l1, self.l2 = torch.nn.Linear(4, 6, bias=False), torch.nn.Linear(4, 6, bias=False)
        self.head, self.rebind = torch.nn.Linear(6, 3, bias=False), rebind

    def forward(self, x):
        a = torch.sigmoid(self.l1(x))
        if self.rebind:
            a = a.mul_(2.0)
        else:
            a.mul_(2.0)
        return self.head(a * self.l2(x))


def test_a_tensor_an_in_place_op_left_behind_is_told_in_the_pass_and_refused_by_check_conservation():
    """In the pass the in-place op runs out of place; a forward that goes on
    with the old tensor computes something else (0.14 for an output of 0.28).
    lrp.relevance_pass warns where the forward read it again, and
    check_conservation raises, as lrp.explain does; rebinding the result
    (``a = a.mul_(2)``) is fine and silent."""
    import warnings

    torch.manual_seed(0)
    x = torch.randn(5, 4, dtype=DTYPE)
    for rebind in (False, True):
        model = ScalesAGateInPlace(rebind).double()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with lrp.relevance_pass(model, rules=lrp.rules.Epsilon(0.0)) as mode:
                watched = mode.watch(x)
                out = model(watched)
                mode.backward(out, out.detach(), [watched])
        told = [w for w in caught if "went on with the tensor" in str(w.message)]
        assert len(told) == (0 if rebind else 1)
        if rebind:
            lrp.check_conservation(model, x)
        else:
            with pytest.raises(lrp.UnsupportedOpError, match="'mul_'"):
                lrp.check_conservation(model, x)


@pytest.mark.parametrize("module, refused", [
    (lambda: torch.nn.MultiheadAttention(8, 2, add_bias_kv=True), "add_bias_kv=True"),
    (lambda: torch.nn.MultiheadAttention(8, 2, add_zero_attn=True), "add_zero_attn=True"),
    (lambda: torch.nn.LSTM(8, 4, proj_size=2), "proj_size"),
])
def test_an_option_without_a_rule_is_named(module, refused):
    """Options the attention and recurrent rules do not cover are refused
    naming the option (before: 'has no relevance rule ... rewrite it with
    functional ops', about an op that has one)."""
    layer = module().double().eval()
    x0 = weights(5, 3, 8, seed=4)
    with pytest.raises(UnsupportedOpError, match=f"has a relevance rule, but not with {refused}"):
        with relevance_pass(layer, rules=Epsilon(0.0)) as mode:
            x = mode.watch(x0)
            out = layer(x, x, x)[0] if isinstance(layer, torch.nn.MultiheadAttention) else layer(x)[0]
            mode.backward(out, out.detach(), [x])


@pytest.mark.parametrize("op", ["torch.mm", "torch.split", "tril", "triu", "diagonal"])
def test_an_op_named_by_an_alias_or_on_an_activation_keeps_its_rule(op):
    """``torch.mm`` (which torch names ``torch.spmm``), ``torch.split``
    (``torch.functional.split``) and ``tril`` / ``triu`` / ``diagonal`` after
    an activation: LRP-0 equals gradient x input, as for the method forms.
    Before, the first two were refused as ops without a rule, the others as
    ops the pass did not see run."""
    def fn(x):
        h = (x @ A).relu()
        if op == "torch.mm":
            return torch.mm(h, W)
        if op == "torch.split":
            return torch.cat(torch.split(h, 2, 1)[::-1], 1) @ W
        h = h[:HID]  # square: an activation's output, then the copy, then a map
        return (getattr(torch, op)(h) if op != "diagonal" else torch.diagonal(h).unsqueeze(0)) @ W

    check(fn, fn)


def test_a_data_swap_on_a_signal_is_refused():
    """``h.data = v`` on a tensor that carries relevance changes what the
    model computes behind autograd: refused by name. Before, the pass
    computed the next map from its start, without the swap: the score of
    another function, with no word."""
    def fn(x):
        h = (x @ A).relu() * 1.0
        h.data = h.data * 3
        return h @ W

    with pytest.raises(UnsupportedOpError, match="'data.__set__'.*Write `t = value` instead"):
        lrp0(fn)


def test_a_detached_copy_made_to_require_gradients_is_told():
    """``h.clone().detach().requires_grad_()`` (and ``h.data`` with
    ``requires_grad = True``) makes a new leaf that the relevance reaching it
    vanishes into: a warning says so. Before, the masks were 0 and the whole
    score a residual, without a word (``h.detach()`` alone was told)."""
    for name in ("requires_grad_", "requires_grad.__set__"):
        def fn(x):
            h = (x @ A).relu()
            if name == "requires_grad_":
                leaf = h.clone().detach().float().double().requires_grad_()
            else:
                leaf = h.data.clone()
                leaf.requires_grad = True
            return leaf @ W

        with pytest.warns(RuntimeWarning, match=f"'{name}' in .* makes a detached copy of a signal"):
            relevance = lrp0(fn)
        assert float(relevance.abs().sum()) == 0
    # a detached copy used as a constant is no such leaf, and one for work the output does not use (a
    # gradient penalty the forward computes aside) takes no relevance: no warning for either
    def aside(x):
        h = (x @ A).relu()
        leaf = h.detach().requires_grad_()
        torch.autograd.grad((leaf ** 2).sum(), leaf)
        return h @ W

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lrp0(lambda x: ((x @ A).relu() + (x @ A).relu().detach().clone()) @ W)
        lrp0(aside)


def test_a_write_into_a_tensor_the_pass_keeps_is_refused_saying_how_to_write_it():
    """``torch.maximum``'s relevance Function keeps its output for the
    backward, which a write in place then changes: refused, saying to write
    on a clone (before: torch's version error from inside the backward).
    The advice gives gradient x input under LRP-0."""
    def fn(x, clone=False):
        h = x @ A
        h = torch.maximum(h, -h)
        if clone:
            h = h.clone()
        h[MASK[:, :1].expand(N, HID)] = 0.0
        return h @ W

    with pytest.raises(UnsupportedOpError, match=r"writes in place into a tensor that the relevance pass keeps.*"
                                                 r"h = h.clone\(\)"):
        lrp0(fn)
    check(lambda x: fn(x, clone=True), lambda x: fn(x, clone=True))


@pytest.mark.parametrize("op", ["neg_", "cumsum_", "lerp_", "addcmul_"])
def test_in_place_arithmetic_on_an_activation_runs_out_of_place(op):
    """As ``add_`` and ``mul_`` do, these run out of place on an activation's
    output (the forward goes on with the returned tensor): LRP-0 equals
    gradient x input. Before, they were refused as ops without a rule."""
    c = weights(N, HID, seed=7)

    def fn(x):
        h = F.leaky_relu(x @ A, 0.1)
        if op == "neg_":
            h = h.neg_()
        elif op == "cumsum_":
            h = h.cumsum_(0)
        elif op == "lerp_":
            h = h.lerp_(torch.zeros_like(c), 0.25)
        else:
            h = h.addcmul_(h.detach(), c, value=0.5)
        return h @ W

    check(fn, fn)


def test_a_number_written_through_a_view_is_not_credited_to_the_input():
    """``v = h[:, 1:3]; v[0] = 2.0`` on an activation's output writes into
    ``h`` through a view: the input relevance is that of the same write out
    of place (the constant's share is not the input's). A version of the
    in-place write rule credited it to the input, conserving, without a word."""
    mask = torch.zeros(N, HID, dtype=torch.bool)
    mask[0, 1:3] = True

    def fn(x, in_place):
        h = F.leaky_relu(x @ A, 0.0)
        if in_place:
            v = h[:, 1:3]
            v[0] = 2.0
        else:
            h = h.masked_fill(mask, 2.0)
        return h @ W

    torch.testing.assert_close(lrp0(lambda x: fn(x, True)), lrp0(lambda x: fn(x, False)))


class WritesRowsBack(torch.nn.Module):
    """A Linear, then a GraphConv; ``how`` puts the Linear's rows in place:
    directly, into a fresh buffer through a permutation (as PyG's
    ``HeteroLinear`` does for node types out of order), by gathering the
    permuted rows back out of place, or slice by slice into a buffer."""

    def __init__(self, how: str, perm: Tensor):
        super().__init__()
        self.how, self.perm = how, perm
        self.lin = torch.nn.Linear(4, 6, bias=False)
        self.conv = pyg_nn.GraphConv(6, 3)

    def forward(self, x, edge_index):
        perm = self.perm
        if self.how == "direct":
            h = self.lin(x)
        elif self.how == "into a buffer":
            rows = self.lin(x[perm])
            h = torch.empty_like(rows)
            h[perm] = rows
        elif self.how == "gathered":
            h = self.lin(x[perm])[torch.argsort(perm)]
        else:  # slice by slice
            h = x.new_zeros(x.shape[0], 6)
            h[:5] = self.lin(x[:5])
            h[5:] = self.lin(x[5:])
        return self.conv(h, edge_index)


@pytest.mark.parametrize("rule", [Epsilon(0.1), Gamma(0.25), lrp.rules.ZPlus(), lrp.rules.AlphaBeta(2.0, 1.0)],
                         ids=["eps", "gamma", "zplus", "alphabeta"])
def test_a_map_written_into_a_buffer_goes_on_through_the_write(rule):
    """A linear map's output copied into a constant buffer is still the map:
    the rule sees one map whichever way the rows are put in place. Before,
    the buffer was a constant and the map ended at the write, so a model
    that writes rows back in another order (HeteroLinear on a subgraph,
    whose numbering puts the node types out of order) got other relevance
    (0.66 against 0.77 under Epsilon(0.1)) than on the full graph, and
    explain_nodes disagreed with lrp.explain without a word."""
    torch.manual_seed(0)
    n = 12
    x = torch.randn(n, 4, dtype=torch.float64)
    edge_index = torch.randint(0, n, (2, 30))
    perm = torch.randperm(n)
    torch.manual_seed(1)
    reference = WritesRowsBack("direct", perm).double().eval()
    expected = lrp.explain(reference, x, edge_index, index=0, rules=rule, subgraph=False)
    for how in ("into a buffer", "gathered", "slice by slice"):
        model = WritesRowsBack(how, perm).double().eval()
        model.load_state_dict(reference.state_dict())
        got = lrp.explain(model, x, edge_index, index=0, rules=rule, subgraph=False)
        torch.testing.assert_close(got.node_mask, expected.node_mask, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(got.edge_mask, expected.edge_mask, rtol=1e-10, atol=1e-12)
        assert got.absorbed == pytest.approx(expected.absorbed, rel=1e-10, abs=1e-12)


class DenseReadout(torch.nn.Module):
    """A Linear, rows put into a dense batch, summed per graph, a head:
    ``to_dense_batch`` (padding written around the rows), the rows written
    through a flat view of the dense buffer, or ``index_add``."""

    def __init__(self, how: str):
        super().__init__()
        self.how = how
        self.lin = torch.nn.Linear(4, 5, bias=False)
        self.out = torch.nn.Linear(5, 2, bias=False)

    def forward(self, x, edge_index, batch):
        from torch_geometric.utils import to_dense_batch
        h = self.lin(x)
        if self.how == "to_dense_batch":
            pooled = to_dense_batch(h, batch)[0].sum(1)
        elif self.how == "through a view":
            counts = torch.bincount(batch)
            width = int(counts.max())
            position = torch.arange(batch.numel()) - (counts.cumsum(0) - counts)[batch]
            dense = x.new_zeros(int(batch.max()) + 1, width, 5)
            dense.view(-1, 5)[batch * width + position] = h
            pooled = dense.relu().sum(1)
        else:
            pooled = torch.zeros(int(batch.max()) + 1, 5, dtype=x.dtype).index_add(0, batch, h)
        return self.out(pooled)


@pytest.mark.parametrize("rule", [Epsilon(0.0), lrp.rules.Flat(), lrp.rules.WSquare(), lrp.rules.ZBox(0.0, 1.0)],
                         ids=["eps0", "flat", "wsquare", "zbox"])
def test_padding_written_around_a_map_takes_no_relevance(rule):
    """The entries a buffer keeps are constants of the map, taken as a bias
    is: to_dense_batch's zero padding absorbs nothing under every rule, so
    one graph's explanation does not depend on another graph's size (under
    WSquare and ZBox it did, 0.52 against 0.05, a first version of the map
    through the buffer taking the padding as an input)."""
    torch.manual_seed(0)
    dense, pooled = DenseReadout("to_dense_batch").double(), DenseReadout("index_add").double()
    pooled.load_state_dict(dense.state_dict())
    first = torch.rand(3, 4, dtype=torch.float64)
    edge_index = torch.empty(2, 0, dtype=torch.long)
    for k in (3, 8):
        x = torch.cat([first, torch.rand(k, 4, dtype=torch.float64)])
        batch = torch.tensor([0] * 3 + [1] * k)
        got = lrp.explain(dense, x, edge_index, index=0, rules=rule, batch=batch, mode="multiclass_classification")
        expected = lrp.explain(pooled, x, edge_index, index=0, rules=rule, batch=batch,
                               mode="multiclass_classification")
        torch.testing.assert_close(got.node_mask, expected.node_mask, rtol=1e-10, atol=1e-12)
        assert got.absorbed == pytest.approx(expected.absorbed, abs=1e-12)


def test_a_buffer_written_through_a_view_keeps_its_history():
    """``dense.view(-1, F)[idx] = lin(x)``, then a readout of ``dense``: the
    write goes into a view, which autograd follows to its base, so it runs
    as autograd runs it (a first version of the map through the buffer lost
    all relevance here). LRP-0 equals gradient x input."""
    torch.manual_seed(1)
    model = DenseReadout("through a view").double()
    x = torch.randn(7, 4, dtype=torch.float64)
    edge_index, batch = torch.empty(2, 0, dtype=torch.long), torch.tensor([0, 0, 0, 1, 1, 1, 1])
    explanation = lrp.explain(model, x, edge_index, index=0, rules=Epsilon(0.0), batch=batch,
                              mode="multiclass_classification")
    xg = x.clone().requires_grad_()
    out = model(xg, edge_index, batch)[0]
    (grad,) = torch.autograd.grad(out[out.argmax()], xg)
    torch.testing.assert_close(explanation.node_mask, grad * x, rtol=1e-10, atol=1e-12)


class CopiesRows(torch.nn.Module):
    """A readout that only copies its input's rows into a ``[1, n, d]``
    batch, in one of several equivalent ways."""

    def __init__(self, how: str):
        super().__init__()
        self.how = how

    def forward(self, h):
        from torch_geometric.utils import to_dense_batch
        n = h.shape[0]
        if self.how == "unsqueeze":
            return h.unsqueeze(0)
        if self.how == "into a buffer":
            out = h.new_zeros(n, h.shape[1])
            out[:] = h
            return out.unsqueeze(0)
        if self.how == "to_dense_batch":
            return to_dense_batch(h, torch.zeros(n, dtype=torch.long))[0]
        return h.new_zeros(n, h.shape[1]).index_copy(0, torch.arange(n), h).unsqueeze(0)  # out of place


class ReadoutOfItsOwn(torch.nn.Module):
    def __init__(self, how: str):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3, bias=False)
        self.readout = CopiesRows(how)
        self.out = torch.nn.Linear(5 * 3, 2, bias=False)

    def forward(self, x, edge_index):
        return self.out(self.readout(self.lin(x)).flatten(1))


@pytest.mark.parametrize("how", ["into a buffer", "to_dense_batch", "index_copy"])
@pytest.mark.parametrize("rule", [lrp.rules.ZPlus(), Gamma(0.5), Epsilon(0.5)], ids=["zplus", "gamma", "eps"])
def test_a_readout_with_a_rule_of_its_own_applies_it_to_rows_written_into_a_buffer(how, rule):
    """Rows of a map under one rule, copied into a buffer by a module under
    another: the copy starts a map of the readout's rule, as the same copy
    out of place (``unsqueeze``) does. Before, such a write (and an
    out-of-place ``index_copy``) kept autograd's plain copy, so the readout's
    rule was silently not applied, and PyG's ``SortAggregation`` with a rule
    of its own explained a graph alone otherwise than inside a batch."""
    torch.manual_seed(0)
    x = torch.randn(5, 4, dtype=torch.float64)
    edge_index = torch.empty(2, 0, dtype=torch.long)
    rules = {torch.nn.Module: Epsilon(0.0), CopiesRows: rule}
    reference = ReadoutOfItsOwn("unsqueeze").double().eval()
    model = ReadoutOfItsOwn(how).double().eval()
    model.load_state_dict(reference.state_dict())
    kw = dict(index=0, rules=rules, task_level="graph", mode="multiclass_classification")
    expected = lrp.explain(reference, x, edge_index, **kw)
    plain = lrp.explain(reference, x, edge_index, **{**kw, "rules": Epsilon(0.0)})
    assert not torch.allclose(expected.node_mask, plain.node_mask)  # the readout's rule matters here
    got = lrp.explain(model, x, edge_index, **kw)
    torch.testing.assert_close(got.node_mask, expected.node_mask, rtol=1e-10, atol=1e-12)
    assert got.lost == pytest.approx(expected.lost, abs=1e-12)


def test_sort_aggregation_with_its_own_rule_explains_a_graph_alone_as_in_a_batch():
    """``SortAggregation(k)`` writes each graph's rows into a dense batch; a
    graph alone whose size is ``k`` needs no padding. With a rule of its own
    on the readout, that graph was explained under LRP-0 alone and under
    the readout's rule inside a batch (node relevance up to 0.12 apart)."""
    from torch_geometric.nn.aggr import SortAggregation

    class Sorted(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin, self.readout = torch.nn.Linear(4, 6, bias=False), SortAggregation(k=5)
            self.out = torch.nn.Linear(5 * 6, 3, bias=False)

        def forward(self, x, edge_index, batch):
            return self.out(self.readout(self.lin(x), batch))

    torch.manual_seed(0)
    model = Sorted().double().eval()
    first, second = torch.randn(5, 4, dtype=torch.float64), torch.randn(7, 4, dtype=torch.float64)
    edge_index = torch.empty(2, 0, dtype=torch.long)
    kw = dict(index=0, rules={torch.nn.Module: Epsilon(0.0), SortAggregation: lrp.rules.ZPlus()},
              task_level="graph", mode="multiclass_classification")
    alone = lrp.explain(model, first, edge_index, batch=torch.zeros(5, dtype=torch.long), **kw)
    together = lrp.explain(model, torch.cat([first, second]), edge_index,
                           batch=torch.tensor([0] * 5 + [1] * 7), **kw)
    torch.testing.assert_close(alone.node_mask, together.node_mask[:5], rtol=1e-9, atol=1e-12)
    assert float(alone.lost) == pytest.approx(float(together.lost), abs=1e-12)
    assert float(alone.lost) != 0.0  # ZPlus drops what the copies of negative values carry


class OutputIntoABuffer(torch.nn.Module):
    """The model's output is a fresh buffer its last map is written into
    (``HeteroLinear`` as the last layer, node types out of order)."""

    def __init__(self, into_buffer: bool):
        super().__init__()
        self.into_buffer = into_buffer
        self.lin = torch.nn.Linear(3, 2)
        self.perm = torch.tensor([3, 0, 5, 1, 4, 2])

    def forward(self, x, edge_index):
        h = self.lin(x[self.perm])
        if not self.into_buffer:
            return h[torch.argsort(self.perm)]
        out = x.new_zeros(x.shape[0], 2)
        out[self.perm] = h
        return out


@pytest.mark.parametrize("rules", [Gamma(0.5), {torch.nn.Linear: Gamma(0.5), OutputIntoABuffer: Epsilon(0.1)}],
                         ids=["one rule", "two rules"])
def test_an_output_written_into_a_buffer_is_explained_without_a_false_warning(rules):
    """The buffer stands for the map the write continued: the output check
    read the user's tensor, which carries no history, and warned that no
    relevance reaches the inputs (masks and residual were right)."""
    torch.manual_seed(0)
    x = torch.randn(6, 3, dtype=torch.float64)
    edge_index = torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 5]])
    reference = OutputIntoABuffer(False).double()
    model = OutputIntoABuffer(True).double()
    model.load_state_dict(reference.state_dict())
    expected = lrp.explain(reference, x, edge_index, index=2, rules=rules, subgraph=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        got = lrp.explain(model, x, edge_index, index=2, rules=rules, subgraph=False)
    torch.testing.assert_close(got.node_mask, expected.node_mask, rtol=1e-10, atol=1e-12)
    assert abs(float(got.residual)) < 1e-9
