"""Normalisation, gates and products: forward equals torch, relevance equals a
slow reference built from explicit contributions."""
import pytest
import torch
import torch.nn.functional as F

import torch_geometric_lrp as lrp
from torch_geometric_lrp import functional as L


def leaf(t):
    return t.clone().requires_grad_()


def test_layer_norm_matches_torch_and_reference():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, 6, generator=g, dtype=torch.float64)
    w = torch.randn(6, generator=g, dtype=torch.float64)
    R = torch.randn(5, 6, generator=g, dtype=torch.float64)
    xl = leaf(x)
    y = L.layer_norm(xl, (6,), w, None, 1e-5)
    torch.testing.assert_close(y, F.layer_norm(x, (6,), w, None, 1e-5))
    y.backward(R)
    # reference: z_ik = x_i (delta_ik - 1/n) w_k / sigma, R_i = sum_k z_ik R_k / y_k
    sigma = (x.var(-1, unbiased=False, keepdim=True) + 1e-5).sqrt()
    centring = torch.eye(6, dtype=torch.float64) - 1.0 / 6
    z = x[:, :, None] * centring[None] * (w / sigma)[:, None, :]
    expected = (z * (R / z.sum(1))[:, None, :]).sum(2)
    torch.testing.assert_close(xl.grad, expected)
    assert xl.grad.sum().item() == pytest.approx(R.sum().item(), rel=1e-9)


def test_layer_norm_bias_absorbs():
    x = leaf(torch.tensor([[1.0, 3.0]]))
    y = L.layer_norm(x, (2,), None, torch.tensor([1.0, 1.0]), eps=0.0)   # y = [-1, 1] + 1 = [0, 2]
    with lrp.RelevanceAudit() as audit:
        y.backward(torch.tensor([[5.0, 2.0]]))
    # output 0 loses its 5; output 1: z = 1 of y = 2, half absorbed by the bias
    assert audit.lost == pytest.approx(5.0, abs=1e-4)
    assert audit.absorbed == pytest.approx(1.0, abs=1e-4)
    assert x.grad.sum().item() == pytest.approx(1.0, abs=1e-4)


def test_batch_norm_is_the_eval_affine_map():
    bn = torch.nn.BatchNorm1d(3).double().eval()
    with torch.no_grad():
        bn.running_mean.copy_(torch.tensor([0.5, -1.0, 0.0]))
        bn.running_var.copy_(torch.tensor([4.0, 1.0, 0.25]))
        bn.weight.copy_(torch.tensor([1.0, 2.0, -1.0]))
        bn.bias.zero_()
    x = torch.tensor([[1.5, 0.0, 1.0], [2.5, -2.0, -1.0]], dtype=torch.float64)
    xl = leaf(x)
    # parameters that require grad would carry relevance: pass them as constants
    y = L.batch_norm(xl, bn.running_mean, bn.running_var, bn.weight.detach(), bn.bias.detach(), bn.eps)
    torch.testing.assert_close(y, bn(x))
    with lrp.RelevanceAudit() as audit:
        y.backward(torch.ones_like(y))
    # feature 0: y = (x - .5) / 2 -> R_x = (x / 2) / y = x / (x - .5): 1.5, 1.25
    torch.testing.assert_close(xl.grad[:, 0], torch.tensor([1.5, 1.25], dtype=torch.float64), atol=1e-4, rtol=0)
    # features 1, 2: the shift is 2 resp. 0 -> feature 2 passes 1 each, feature 1: x*2 / (2x + 2)
    torch.testing.assert_close(xl.grad[:, 2], torch.ones(2, dtype=torch.float64), atol=1e-4, rtol=0)
    torch.testing.assert_close(xl.grad[:, 1], torch.tensor([0.0, 2.0], dtype=torch.float64), atol=1e-4, rtol=0)
    assert audit.lost + audit.absorbed + xl.grad.sum().item() == pytest.approx(6.0, abs=1e-4)


def test_div_by_constant_passes_and_product_splits_evenly():
    x = leaf(torch.tensor([2.0, -4.0]))
    L.div(x, torch.tensor([4.0, 2.0])).backward(torch.tensor([3.0, 5.0]))
    torch.testing.assert_close(x.grad, torch.tensor([3.0, 5.0]))
    a, b = leaf(torch.tensor([[1.0, 2.0]])), leaf(torch.tensor([[3.0], [4.0]]))
    out = L.product(a, b)                          # [2, 2], b broadcast along dim 1
    torch.testing.assert_close(out, a.detach() * b.detach())
    out.backward(torch.tensor([[2.0, 4.0], [6.0, 8.0]]))
    torch.testing.assert_close(a.grad, torch.tensor([[4.0, 6.0]]))
    torch.testing.assert_close(b.grad, torch.tensor([[3.0], [7.0]]))
