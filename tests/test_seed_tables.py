"""The worked tables of seeds 000 and 001, reproduced through the public API.

Inputs, relevance seeds and expected values are the seeds' printed numbers
(precision 1e-2), worked by hand from the proportional rule.
"""
import pytest
import torch

import torch_geometric_lrp as lrp
from torch_geometric_lrp import functional as L


def leaf(values):
    return torch.tensor(values, dtype=torch.float32, requires_grad=True)


def assert_close(actual, expected):
    torch.testing.assert_close(actual, torch.tensor(expected, dtype=actual.dtype), atol=1e-2, rtol=0)


# ------------------------------------------------------------------ seed 000
def test_index_select_sums_relevance_of_copies():
    x = leaf([0.7, 0.2, 0.0, 0.5, 0.3, 0.1])
    y = L.index_select(x, 0, torch.tensor([0, 2, 5, 5]))
    assert_close(y.detach(), [0.7, 0.0, 0.1, 0.1])
    y.backward(torch.tensor([5.0, 0.0, 2.0, 1.0]))
    assert_close(x.grad, [5, 0, 0, 0, 0, 3])


def test_sum_pooling():
    x = leaf([0.7, 0.2, 0.0, 0.5, 0.5, 0.1])
    y = L.sum(x)
    y.backward(torch.tensor(10.0))
    assert_close(x.grad, [3.5, 1.0, 0.0, 2.5, 2.5, 0.5])


def test_sum_pooling_to_zero_loses_everything():
    x = leaf([0.7, 0.2, 0.1, -0.7, -0.3, 0.0])
    y = L.sum(x)
    with lrp.RelevanceAudit() as audit:
        y.backward(torch.tensor(10.0))
    assert_close(x.grad, [0, 0, 0, 0, 0, 0])
    assert audit.lost == pytest.approx(10.0, abs=1e-5)


SEED000_SRC = [0.5, 0.2, 0.0, 0.5, 0.5, 0.1]
SEED000_IDX = torch.tensor([0, 0, 1, 1, 1, 3])


@pytest.mark.parametrize("reduce, out", [
    ("sum", [0.7, 1.0, 0.0, 0.1]),
    ("mean", [0.35, 0.33, 0.0, 0.1]),
])
@pytest.mark.parametrize("rel_out, lost", [([5.0, 3.0, 0.0, 1.0], 0.0), ([5.0, 3.0, 10.0, 1.0], 10.0)])
def test_scatter_sum_and_mean(reduce, out, rel_out, lost):
    x = leaf(SEED000_SRC)
    y = L.scatter(x, SEED000_IDX, dim=0, dim_size=4, reduce=reduce)
    assert_close(y.detach(), out)
    with lrp.RelevanceAudit() as audit:
        y.backward(torch.tensor(rel_out))
    # 5 * .5/.7, 5 * .2/.7, 3 * 0/1, 3 * .5/1, 3 * .5/1, 1 * .1/.1
    assert_close(x.grad, [3.57, 1.43, 0.0, 1.5, 1.5, 1.0])
    assert x.grad.sum().item() == pytest.approx(9.0, abs=1e-5)
    assert audit.lost == pytest.approx(lost, abs=1e-5)


@pytest.mark.parametrize("rel_out, lost", [([5.0, 3.0, 0.0, 1.0], 0.0), ([5.0, 3.0, 10.0, 1.0], 10.0)])
def test_scatter_max(rel_out, lost):
    x = leaf([0.5, 0.1, 0.0, 0.7, 0.3, 0.1])
    y = L.scatter(x, SEED000_IDX, dim=0, dim_size=4, reduce="max")
    assert_close(y.detach(), [0.5, 0.7, 0.0, 0.1])
    with lrp.RelevanceAudit() as audit:
        y.backward(torch.tensor(rel_out))
    assert_close(x.grad, [5, 0, 0, 3, 0, 1])
    assert audit.lost == pytest.approx(lost, abs=1e-5)


# ------------------------------------------------------------------ seed 001
def test_add():
    a, b = leaf([1, 2, 3, 1]), leaf([0, 1, 2, 4])
    c = L.add(a, b)
    c.backward(torch.ones(4))
    assert_close(a.grad, [1.0, 0.67, 0.60, 0.20])
    assert_close(b.grad, [0.0, 0.33, 0.40, 0.80])


A = [[1, 2, 3, 1], [-6, -2, -1, -1]]


@pytest.mark.parametrize("dim, keepdim, rel_out, expected", [
    (0, False, [1, 0, 1, 0], [[-0.2, 0.0, 1.5, 0.0], [1.2, 0.0, -0.5, 0.0]]),
    (0, True, [[1, 0, 1, 0]], [[-0.2, 0.0, 1.5, 0.0], [1.2, 0.0, -0.5, 0.0]]),
    (1, False, [1, 1], [[0.14, 0.29, 0.43, 0.14], [0.6, 0.2, 0.1, 0.1]]),
])
def test_sum_along_a_dim(dim, keepdim, rel_out, expected):
    a = leaf(A)
    b = L.sum(a, dim=dim, keepdim=keepdim)
    b.backward(torch.tensor(rel_out, dtype=torch.float32))
    assert_close(a.grad, expected)


def test_scatter_add_with_a_zero_group():
    a = leaf([1, 1, 1, 1, 2, 6, 1, 1, -2])
    y = L.scatter(a, torch.tensor([0, 0, 0, 0, 1, 1, 2, 2, 2]), dim=0)
    assert_close(y.detach(), [4, 8, 0])
    y.backward(torch.tensor([1.0, 1.0, 0.0]))
    assert_close(a.grad, [0.25, 0.25, 0.25, 0.25, 0.25, 0.75, 0, 0, 0])


def test_scatter_mean_with_a_zero_group():
    a = leaf([1, 1, 1, 1, 2, 8, 1, 1, -2])
    y = L.scatter(a, torch.tensor([0, 0, 0, 0, 1, 1, 2, 2, 2]), dim=0, reduce="mean")
    assert_close(y.detach(), [1, 5, 0])
    y.backward(torch.tensor([1.0, 1.0, 0.0]))
    assert_close(a.grad, [0.25, 0.25, 0.25, 0.25, 0.2, 0.8, 0, 0, 0])


def test_scatter_max_ties_and_empty_group():
    # group 0 ties four times: the last winner takes it; group 2 is empty
    b = leaf([1, 1, 1, 1, 2, 8, 0, 0, 0])
    y = L.scatter(b, torch.tensor([0, 0, 0, 0, 1, 1, 3, 3, 3]), dim=0, reduce="max")
    assert_close(y.detach(), [1, 8, 0, 0])
    y.backward(torch.tensor([3.0, 3.0, 0.0, 0.0]))
    assert_close(b.grad, [0, 0, 0, 3, 0, 3, 0, 0, 0])


W = [[1, 2, -1], [0, 0, 1]]


@pytest.mark.parametrize("bias, y_expected, rel_out, absorbed", [
    (None, [20, 0], [1, 0], 0.0),
    ([0, 1], [20, 1], [1, 1], 1.0),
    ([0, 100], [20, 100], [1, 1], 1.0),
])
def test_linear_epsilon(bias, y_expected, rel_out, absorbed):
    x = leaf([[4, 8, 0]])
    b = None if bias is None else torch.tensor(bias, dtype=torch.float32)
    y = L.linear(x, torch.tensor(W, dtype=torch.float32), b)
    assert_close(y.detach(), [y_expected])
    with lrp.RelevanceAudit() as audit:
        y.backward(torch.tensor([rel_out], dtype=torch.float32))
    assert_close(x.grad, [[0.2, 0.8, 0.0]])
    assert audit.absorbed == pytest.approx(absorbed, abs=1e-4)


@pytest.mark.parametrize("weight, x, expected", [
    ([[1, -1]], [[4, 0]], [[1.0, 0.0]]),           # zeros in the input
    ([[1, 0, 2]], [[4, 1, 3]], [[0.4, 0.0, 0.6]]),  # zeros in the weights
])
def test_linear_epsilon_zeros(weight, x, expected):
    x = leaf(x)
    y = L.linear(x, torch.tensor(weight, dtype=torch.float32))
    y.backward(torch.ones_like(y))
    assert_close(x.grad, expected)


def test_index_select_repeats_relevance():
    a = leaf([1, 1, 1, 1, 2, 6, 0, 1, -2])
    y = L.index_select(a, 0, torch.tensor([2, 4, 6, 8, 8]))
    y.backward(torch.tensor([3.0, 3.0, 0.0, 3.0, 3.0]))
    assert_close(a.grad, [0, 0, 3, 0, 3, 0, 0, 0, 6])


def test_cat_splits_relevance():
    a, b = leaf([1, 2, 0]), leaf([-1, -2, 0])
    c = L.cat((a, b), dim=0)
    c.backward(torch.tensor([3.0, 3.0, 0.0, 3.0, 3.0, 0.0]))
    assert_close(a.grad, [3, 3, 0])
    assert_close(b.grad, [3, 3, 0])


def test_repeat_through_index_select():
    a = leaf([7, 2, 0])
    idx = torch.repeat_interleave(torch.arange(3), torch.tensor([3, 0, 2]))
    y = L.index_select(a, 0, idx)
    y.backward(torch.tensor([1.0, 1.0, 1.0, 0.0, 0.0]))
    assert_close(a.grad, [3, 0, 0])


def test_putting_things_together():
    a = leaf([[1, 2, 3, 1, 0]])
    b = leaf([[0, 1, 2, 4, 5]])
    c = L.add(a, b)
    d = L.scatter(c, torch.tensor([0, 0, 1, 1, 2]), dim=1)
    assert_close(d.detach(), [[4, 10, 5]])
    u = L.linear(d, torch.tensor([[1.0, 0, 2], [0, 5, 1]]))
    v = L.linear(d, torch.tensor([[0.0, 1, -1], [-4, -2, -3]]))
    z = L.add(u, v)
    assert_close(z.detach(), [[19, 4]])
    z.backward(torch.ones_like(z))
    assert_close(a.grad, [[-0.95, -1.89, 2.41, 0.80, 0.0]])
    assert_close(b.grad, [[0.0, -0.95, 1.61, 3.21, -2.24]])
    assert (a.grad.sum() + b.grad.sum()).item() == pytest.approx(2.0, abs=1e-5)
