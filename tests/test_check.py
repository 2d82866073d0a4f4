"""The checking API: check_conservation's per-module table, RelevanceAudit's
state, and misuse of relevance_pass / mode.backward refused by name."""
from __future__ import annotations

import threading
import time
from collections import namedtuple

import pytest
import torch

import torch_geometric_lrp as lrp
from torch_geometric_lrp import audit as audit_module
from torch_geometric_lrp.rules import Epsilon

DTYPE = torch.float64
Pair = namedtuple("Pair", "a b")


class Two(torch.nn.Module):
    """Returns two tensors as a tuple, a namedtuple or a dict."""

    def __init__(self, kind: str):
        super().__init__()
        self.kind = kind
        self.l1, self.l2 = torch.nn.Linear(4, 3, bias=False), torch.nn.Linear(3, 3, bias=False)

    def forward(self, x):
        a = self.l1(x).relu()
        b = self.l2(a).relu()
        return {"tuple": (a, b), "namedtuple": Pair(a, b), "dict": {"a": a, "b": b}}[self.kind]


class Joined(torch.nn.Module):
    def __init__(self, kind: str):
        super().__init__()
        self.two, self.out = Two(kind), torch.nn.Linear(6, 2, bias=False)

    def forward(self, x):
        r = self.two(x)
        a, b = (r["a"], r["b"]) if isinstance(r, dict) else r
        return self.out(torch.cat([a, b], 1))


@pytest.mark.parametrize("kind", ["tuple", "namedtuple", "dict"])
def test_a_module_returning_a_container_has_its_row(kind):
    """Bias-free LRP-0: what leaves the head enters `two`, whose gap is 0.
    A namedtuple or dict output was not aliased: its row entered 0 and showed
    all it passed on as a gap."""
    torch.manual_seed(7)
    model = Joined(kind).to(DTYPE)
    report = lrp.check_conservation(model, torch.randn(5, 4, dtype=DTYPE), rules=Epsilon(0.0))
    rows = {row.name: row for row in report.layers}
    assert rows["two"].entering == pytest.approx(rows["out"].leaving, rel=1e-12)
    assert abs(rows["two"].gap) < 1e-12 and abs(rows["two"].entering) > 1e-3


def test_two_threads_checking_one_model_get_their_own_tables():
    """Each call's module hooks sit on the shared modules; a forward in the
    other thread passes them untouched (before, it fed the other table)."""
    class Slow(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.l1, self.l2 = torch.nn.Linear(3, 4), torch.nn.Linear(4, 2)

        def forward(self, x):
            time.sleep(0.02)  # both threads inside the forward at once
            return self.l2(self.l1(x).relu())

    torch.manual_seed(12)
    model = lrp.convert(Slow().to(DTYPE), {torch.nn.Module: Epsilon(0.01)})
    xs = [torch.randn(6, 3, dtype=DTYPE) for _ in range(2)]

    def rows(report):
        return {row.name: (round(row.entering, 12), round(row.leaving, 12)) for row in report.layers}

    alone = [rows(lrp.check_conservation(model, x)) for x in xs]
    found: dict = {}

    def work(k):
        for j in range(3):
            found[k, j] = rows(lrp.check_conservation(model, xs[k]))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(found) == 6 and all(table == alone[k] for (k, _), table in found.items())


def test_a_model_that_explain_explains_is_checked_without_converting():
    """GENConv has no lrp layer, so convert refused it; the pass itself runs
    it (explain does), and so does check_conservation now."""
    from torch_geometric.nn import GENConv

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.head = GENConv(3, 4), torch.nn.Linear(4, 2)

        def forward(self, x, edge_index):
            return self.head(self.conv(x, edge_index).relu())

    torch.manual_seed(0)
    model = Net().to(DTYPE).eval()
    x, edge_index = torch.randn(5, 3, dtype=DTYPE), torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4]])
    before = {k: v.clone() for k, v in model.state_dict().items()}
    report = lrp.check_conservation(model, x, edge_index)
    assert abs(report.residual) < 1e-9 and not report.unsupported
    assert {row.name for row in report.layers} >= {"conv", "head"}
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())


def test_an_open_audit_cannot_be_entered_again():
    """Entered twice, it counted every op twice while nested, and its outer
    exit failed and left it open."""
    audit = lrp.RelevanceAudit()
    with audit:
        with pytest.raises(RuntimeError, match="open already"):
            with audit:
                pass
        assert audit_module.is_active()
    assert not audit_module.is_active()
    with audit:  # closed cleanly: it opens again
        assert audit_module.is_active()


def test_audits_closed_out_of_order_are_refused():
    first, second = lrp.RelevanceAudit(), lrp.RelevanceAudit()
    first.__enter__()
    second.__enter__()
    with pytest.raises(RuntimeError, match="reverse order"):
        first.__exit__(None, None, None)
    second.__exit__(None, None, None)
    first.__exit__(None, None, None)
    assert not audit_module.is_active()


def test_a_pass_inside_a_pass_is_refused_by_name():
    inner, outer = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    with lrp.relevance_pass(outer):
        with pytest.raises(RuntimeError, match="a relevance pass is open already"):
            with lrp.relevance_pass(inner):
                pass
    with lrp.relevance_pass(inner):  # nothing left open
        pass


def test_mode_backward_refuses_what_it_would_misread():
    lin = torch.nn.Linear(3, 2).double()
    x = torch.randn(4, 3, dtype=DTYPE)
    with lrp.relevance_pass(lin) as mode:
        watched = mode.watch(x)
        out = lin(watched)
        with pytest.raises(TypeError, match=r"inputs: expected a list of tensors \(e.g. \[x\]\)"):
            mode.backward(out, out.detach(), watched)  # a tensor: read row by row, all zeros
        with pytest.raises(ValueError, match=r"seed: expected a tensor of the output's shape \(4, 2\), got float"):
            mode.backward(out, 1.0, [watched])
        seed = out.detach().clone()
        seed[0, 0] = float("nan")
        with pytest.warns(RuntimeWarning, match="the seed holds inf or NaN where the output is finite"):
            mode.backward(out, seed, [watched], retain_graph=True)


def test_check_conservation_inputs_as_one_string_are_refused():
    with pytest.raises(TypeError, match=r"inputs: expected a list of argument names, .* pass \['x'\]"):
        lrp.check_conservation(torch.nn.Linear(3, 2), x=torch.randn(4, 3), inputs="x")


def test_a_compiled_model_is_checked_as_its_module():
    from torch_geometric.nn import GCN
    torch.manual_seed(0)
    model = GCN(3, 4, 2, 2).eval()
    x, edge_index = torch.randn(5, 3), torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4]])
    plain = lrp.check_conservation(model, x, edge_index)
    compiled = lrp.check_conservation(torch.compile(model, backend="eager"), x, edge_index)
    assert compiled.seed == pytest.approx(plain.seed) and compiled.absorbed == pytest.approx(plain.absorbed)
    assert [row.name for row in compiled.layers] == [row.name for row in plain.layers]


def test_mode_backward_takes_any_iterable_of_inputs():
    lin = torch.nn.Linear(3, 2).double()
    with lrp.relevance_pass(lin) as mode:
        watched = {"x": mode.watch(torch.randn(4, 3, dtype=DTYPE))}
        out = lin(watched["x"])
        (relevance,) = mode.backward(out, out.detach(), watched.values())
    assert relevance.shape == (4, 3) and float(relevance.abs().sum()) > 0


def test_an_audit_closed_in_another_thread_says_so():
    audit = lrp.RelevanceAudit()
    audit.__enter__()
    failure = []

    def close():
        try:
            audit.__exit__(None, None, None)
        except RuntimeError as error:
            failure.append(str(error))

    thread = threading.Thread(target=close)
    thread.start()
    thread.join()
    audit.__exit__(None, None, None)
    assert failure and "another thread or task" in failure[0]
    assert not audit_module.is_active()


@pytest.mark.parametrize("context", [torch.no_grad, torch.inference_mode])
def test_check_conservation_under_no_grad_and_inference_mode(context):
    """As ``lrp.explain``: the check enables what it needs for itself (under
    ``inference_mode`` it failed with "cannot register a hook on a tensor
    that doesn't require gradient")."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3)).eval()
    x = torch.rand(5, 4)
    expected = lrp.check_conservation(model, x)
    with context():
        found = lrp.check_conservation(model, x)
    assert found.input_relevance == expected.input_relevance and found.seed == expected.seed
    assert [(r.name, r.entering, r.leaving) for r in found.layers] == \
        [(r.name, r.entering, r.leaving) for r in expected.layers]
