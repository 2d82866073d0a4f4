"""Lost and absorbed relevance, collected by RelevanceAudit."""
import warnings

import pytest
import torch

import torch_geometric_lrp as lrp
from torch_geometric_lrp import audit as audit_module
from torch_geometric_lrp import functional as L
from torch_geometric_lrp.rules import nonfinite_guard
from devices import DEVICES


def network(x):
    """scatter (group 2 empty -> lost) then linear with bias (absorbs), on x's device."""
    d = x.device
    h = L.scatter(x, torch.tensor([0, 0, 1, 1], device=d), dim=0, dim_size=3)                  # [3, 2]
    return L.linear(h, torch.tensor([[1.0, 1.0]], device=d), torch.tensor([2.0], device=d))    # [3, 1]


def test_lost_and_absorbed_are_totalled_per_op():
    x = torch.tensor([[1.0, 1.0], [1.0, 1.0], [2.0, 0.0], [1.0, 1.0]], requires_grad=True)
    y = network(x)                       # h = [[2, 2], [3, 1], [0, 0]], y = [6, 6, 2]
    with lrp.RelevanceAudit() as audit:
        y.backward(torch.tensor([[6.0], [6.0], [2.0]]))
    # linear: each row's bias 2 takes 2/6 of 6, 2/6 of 6, 2/2 of 2 -> absorbed 6
    # scatter: row 2 of h gets 0 relevance, nothing lost; groups 0, 1 pass 8
    assert audit.by_op["linear"] == {"lost": 0.0, "absorbed": pytest.approx(6.0, abs=1e-4), "calls": 1}
    assert audit.by_op["scatter_sum"]["lost"] == 0.0
    assert audit.absorbed == pytest.approx(6.0, abs=1e-4)
    assert x.grad.sum().item() == pytest.approx(14.0 - 6.0, abs=1e-4)


def test_relevance_at_zero_output_is_lost_and_not_warned_about():
    x = torch.tensor([[1.0], [2.0], [-1.0], [1.0]], requires_grad=True)
    y = L.scatter(x, torch.tensor([0, 0, 1, 1]), dim=0, dim_size=3)   # [3, 0, 0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with lrp.RelevanceAudit() as audit:
            y.backward(torch.tensor([[1.0], [4.0], [5.0]]))
    assert audit.lost == pytest.approx(9.0)
    assert x.grad.sum().item() == pytest.approx(1.0)


def test_constant_operand_absorbs_its_share():
    a = torch.tensor([1.0, 3.0], requires_grad=True)
    b = torch.tensor([1.0, 1.0])            # a constant: no relevance for it
    with lrp.RelevanceAudit() as audit:
        L.add(a, b).backward(torch.tensor([2.0, 4.0]))
    torch.testing.assert_close(a.grad, torch.tensor([1.0, 3.0]))
    assert audit.absorbed == pytest.approx(2.0)


def test_nested_audits_both_see_the_pass_and_close_cleanly():
    x = torch.tensor([[0.0], [0.0]], requires_grad=True)
    with lrp.RelevanceAudit() as outer:
        with lrp.RelevanceAudit() as inner:
            L.sum(x).backward(torch.tensor(3.0))
        L.sum(x).backward(torch.tensor(1.0))
    assert inner.lost == pytest.approx(3.0)
    assert outer.lost == pytest.approx(4.0)
    assert not audit_module.is_active()


def test_no_audit_no_accounting(monkeypatch):
    calls = []
    monkeypatch.setattr(audit_module, "record", lambda *args: calls.append(args))
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    L.sum(x).backward(torch.tensor(1.0))
    assert calls == []


@pytest.mark.parametrize("device", DEVICES)
def test_audit_sees_the_backward_on_every_device(device):
    """On CUDA autograd runs a backward on its own device thread unless told
    otherwise; the audit (open in this thread) must still see every op."""
    x = torch.tensor([[1.0, 1.0], [1.0, 1.0], [2.0, 0.0], [1.0, 1.0]], device=device, requires_grad=True)
    y = network(x)
    with lrp.RelevanceAudit() as audit:
        y.backward(torch.tensor([[6.0], [6.0], [2.0]], device=device))
    assert audit.absorbed == pytest.approx(6.0, abs=1e-4)
    assert audit.by_op["linear"]["calls"] == 1 and audit.by_op["scatter_sum"]["calls"] == 1


def test_backward_runs_on_this_thread_while_an_audit_or_guard_is_open():
    enabled = torch._C._is_multithreading_enabled
    assert enabled()
    with lrp.RelevanceAudit():
        assert not enabled()
        with lrp.RelevanceAudit():
            assert not enabled()
        assert not enabled()
        with nonfinite_guard():
            assert not enabled()
        assert not enabled()
    assert enabled()
    with nonfinite_guard(False):
        assert not enabled()
    assert enabled()
