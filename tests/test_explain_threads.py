"""Explanations from several threads at once (issue items 14 and 15).

The state of a relevance pass (the mode, the audit that measures ``lost`` and
``absorbed``, the rule stack, the edge relevance) belongs to the thread that
opened it; passes on one model take turns; nothing toggles the model's
parameters. Each test runs its threads with timeouts, so a deadlock fails the
test instead of hanging it.
"""
from __future__ import annotations

import copy
import threading
import warnings
from typing import Callable

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.nn import GATConv, GCNConv

import torch_geometric_lrp as lrp
from torch_geometric_lrp import mode as lrp_mode
from explain_cases import (C, DATA, F_IN, assert_conserved, assert_same, build, inputs, one_thread_fixture,
                           snapshot)

one_thread = pytest.fixture(autouse=True, scope="module")(one_thread_fixture)

ROUNDS = 20
TIMEOUT = 60.0  # seconds for a whole thread; a round takes milliseconds
WAIT = 10.0  # seconds for one thread to wait for the other


def run_threads(*bodies: Callable[[threading.Barrier], None]) -> None:
    """Run each ``body(barrier)`` in its own thread, all started together;
    re-raise the first exception of any of them; fail on a thread that is
    still running after ``TIMEOUT`` (a deadlock)."""
    barrier = threading.Barrier(len(bodies), timeout=WAIT)
    errors: list[BaseException] = []

    def wrap(body):
        def run():
            try:
                body(barrier)
            except BaseException as error:  # handed to the main thread
                errors.append(error)
                barrier.abort()  # do not leave the other threads waiting
        return run

    threads = [threading.Thread(target=wrap(body), daemon=True) for body in bodies]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=TIMEOUT)
    assert not any(thread.is_alive() for thread in threads), "a thread did not finish: deadlock?"
    real = [e for e in errors if not isinstance(e, threading.BrokenBarrierError)]
    if real or errors:
        raise (real or errors)[0]


def assert_equal_explanations(got, expected) -> None:
    """Same masks and the same measured accounting."""
    for key in ("node_mask", "edge_mask", "self_loop_relevance"):
        if expected.get(key) is not None:
            torch.testing.assert_close(got[key], expected[key], rtol=0, atol=1e-6, msg=key)
    for key in ("score", "relevance_total", "absorbed", "lost", "residual"):
        assert got[key] == pytest.approx(expected[key], rel=1e-6, abs=1e-6), key


# ---------------------------------------------------------------------------
# A model with lost relevance: a node without incoming edges under a sum
# aggregation has the pre-activation exactly 0, and its sigmoid (0.5) still
# speaks to the target, so that relevance reaches an output of 0 and is lost.
# ---------------------------------------------------------------------------
class Leaky(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = GCNConv(F_IN, 8, add_self_loops=False, normalize=False, bias=False)
        self.conv2 = GCNConv(8, C)

    def forward(self, x, edge_index):
        return self.conv2(torch.sigmoid(self.conv1(x, edge_index)), edge_index)


LOSSY_TARGET, SOURCE = 3, 4


def biased_gat():
    """The GAT of the explain tests, with nonzero biases (PyG starts them at
    0), so that it absorbs relevance."""
    model = build("gat")
    with torch.no_grad():
        for conv in (model.conv1, model.conv2):
            conv.bias.copy_(torch.linspace(-0.5, 0.5, conv.bias.numel()))
    return model


def lossy_case():
    """The model, its inputs and the target: node 4 has no incoming edges and
    sends to node 3, the target."""
    torch.manual_seed(0)
    model = Leaky().eval()
    x, edge_index, _ = inputs("node")
    edge_index = edge_index[:, edge_index[1] != SOURCE]
    edge_index = torch.cat([edge_index, torch.tensor([[SOURCE], [LOSSY_TARGET]])], dim=1)
    return model, x, edge_index


def test_the_lossy_model_loses_relevance():
    """The premise of the two-models test: one model has lost relevance (and
    input relevance beside it), the other none and absorbed relevance, so a
    leak of either into the other would show."""
    model, x, edge_index = lossy_case()
    lossy = lrp.explain(model, x, edge_index, index=LOSSY_TARGET)
    assert lossy.lost > 0.1 * abs(lossy.score)
    assert abs(lossy.relevance_total) > 0.1 * abs(lossy.score)
    assert_conserved(lossy)
    other = lrp.explain(biased_gat(), DATA["x"], DATA["edge_index"], index=17)
    assert other.lost == 0 and abs(other.absorbed) > 1e-4
    assert_conserved(other)


def test_two_threads_two_models():
    """Item 14: each thread's explanations (masks, lost, absorbed, residual)
    are the ones computed in a single thread."""
    lossy_model, lossy_x, lossy_edges = lossy_case()
    gat = biased_gat()
    x, edge_index = DATA["x"], DATA["edge_index"]
    expected = {
        "lossy": lrp.explain(lossy_model, lossy_x, lossy_edges, index=LOSSY_TARGET),
        "gat": lrp.explain(gat, x, edge_index, index=17),
    }
    got: dict[str, list] = {"lossy": [], "gat": []}

    def lossy(barrier):
        for _ in range(ROUNDS):
            barrier.wait()
            got["lossy"].append(lrp.explain(lossy_model, lossy_x, lossy_edges, index=LOSSY_TARGET))

    def attention(barrier):
        for _ in range(ROUNDS):
            barrier.wait()
            got["gat"].append(lrp.explain(gat, x, edge_index, index=17))

    run_threads(lossy, attention)
    for name, explanations in got.items():
        assert len(explanations) == ROUNDS
        for explanation in explanations:
            assert_equal_explanations(explanation, expected[name])
            assert_conserved(explanation)


def test_training_a_converted_gat_while_another_thread_explains():
    """Item 14: while a pass runs in one thread (held open until the other
    thread is done), a thread that trains a converted GAT sees no pass, and
    its attention parameters get the gradients they get without a pass."""
    torch.manual_seed(1)

    class TwoGAT(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = GATConv(F_IN, 8, heads=2)
            self.conv2 = GATConv(16, C, heads=1)

        def forward(self, x, edge_index):
            return self.conv2(F.elu(self.conv1(x, edge_index)), edge_index)

    trained = lrp.convert(TwoGAT()).train()
    x, edge_index = DATA["x"], DATA["edge_index"]
    labels = torch.arange(x.shape[0]) % C

    def step(model) -> list[torch.Tensor]:
        model.zero_grad(set_to_none=True)
        F.cross_entropy(model(x, edge_index), labels).backward()
        return [model.conv1.att_src.grad, model.conv1.att_dst.grad, model.conv2.att_src.grad]

    reference = [g.clone() for g in step(copy.deepcopy(trained))]
    assert all(g.abs().sum() > 0 for g in reference)

    explained = biased_gat()  # stock GATConv layers: the pass swaps in the relevance versions
    expected = lrp.explain(explained, DATA["x"], DATA["edge_index"], index=17)
    inside, done = threading.Event(), threading.Event()
    held: list[bool] = []
    hold_next = []  # the forward to hold open: the first of each round (the subgraph check runs one more)
    seen_active: list[bool] = []
    grads: list[list[torch.Tensor]] = []
    explanations = []

    def hold(module, args, out):
        # runs inside the explaining thread's pass: keep it open for one training step
        # (no assert here: the library turns errors of its check forward into a fallback)
        if not hold_next:
            return
        hold_next.clear()
        held.append(lrp_mode.is_active())
        inside.set()
        held.append(done.wait(WAIT))
        done.clear()

    def explain(barrier):
        handle = explained.conv2.register_forward_hook(hold)
        try:
            for _ in range(ROUNDS // 4):
                barrier.wait()
                hold_next.append(True)
                explanations.append(lrp.explain(explained, DATA["x"], DATA["edge_index"], index=17))
                inside.clear()
        finally:
            handle.remove()

    def train(barrier):
        for _ in range(ROUNDS // 4):
            barrier.wait()
            assert inside.wait(WAIT), "the explaining thread never entered its pass"
            watch = trained.conv1.register_forward_pre_hook(lambda m, a: seen_active.append(lrp_mode.is_active()))
            try:
                grads.append([None if g is None else g.clone() for g in step(trained)])
            finally:
                watch.remove()
            seen_active.append(lrp_mode.is_active())
            done.set()

    run_threads(explain, train)
    assert held == [True, True] * (ROUNDS // 4), "the pass was not held open during the training steps"
    assert seen_active == [False] * (2 * (ROUNDS // 4))
    assert len(grads) == ROUNDS // 4
    for step_grads in grads:
        for g, ref in zip(step_grads, reference):
            assert g is not None and g.abs().sum() > 0, "no gradient reached the attention"
            torch.testing.assert_close(g, ref, rtol=1e-5, atol=1e-7)
    assert len(explanations) == ROUNDS // 4
    for explanation in explanations:
        assert_equal_explanations(explanation, expected)


@pytest.mark.parametrize("second", ["explain", "explain_nodes"])
def test_two_threads_one_model(second):
    """Item 15: two threads explain one model (a GAT in training mode) at the
    same time, for different targets; both get the single-threaded answers,
    and the model (training flags, the ``requires_grad`` of every parameter,
    layer classes, hooks) is as it was."""
    model = biased_gat().train()  # the pass swaps layer classes and flags: a race would show
    model.conv1.lin.weight.requires_grad_(False)  # a frozen part, so the flags are not all alike
    flags = [(name, p.requires_grad) for name, p in model.named_parameters()]
    before = snapshot(model)
    x, edge_index = DATA["x"], DATA["edge_index"]
    targets = torch.tensor([17, 22])

    def first_call():
        return lrp.explain(model, x, edge_index, index=3)

    def second_call():
        if second == "explain":
            return lrp.explain(model, x, edge_index, index=22)
        return lrp.explain_nodes(model, x, edge_index, targets, batch_size=1)

    expected = {"first": first_call(), "second": second_call()}
    got: dict[str, list] = {"first": [], "second": []}

    def body(name, call):
        def run(barrier):
            for _ in range(ROUNDS):
                barrier.wait()
                got[name].append(call())
        return run

    run_threads(body("first", first_call), body("second", second_call))
    assert [(name, p.requires_grad) for name, p in model.named_parameters()] == flags
    assert_same(before, snapshot(model))
    for name in ("first", "second"):
        assert len(got[name]) == ROUNDS
        for result in got[name]:
            pairs = zip(result, expected[name]) if isinstance(result, list) else [(result, expected[name])]
            for explanation, reference in pairs:
                assert_equal_explanations(explanation, reference)
                assert_conserved(explanation)


class WaitsInsideThePass(torch.nn.Module):
    """A GCN layer whose forward, inside a relevance pass, lets another
    thread run the model and waits until it is done."""

    def __init__(self):
        super().__init__()
        self.conv, self.head = GCNConv(F_IN, 8), torch.nn.Linear(8, C)
        self.inside, self.done = threading.Event(), threading.Event()

    def forward(self, x, edge_index):
        if lrp_mode.is_active():
            self.inside.set()
            assert self.done.wait(timeout=30)
        return self.head(F.dropout(self.conv(x, edge_index).relu(), 0.5, training=self.training))


def test_a_forward_in_another_thread_during_a_pass_is_warned_about():
    """The pass puts the model in eval mode for its duration; the flags are
    the modules', so a forward in another thread (a training loop) runs in
    eval mode then too. It says so, once. Before, silently (dropout off,
    batch-norm statistics frozen in the training thread)."""
    torch.manual_seed(0)
    model = WaitsInsideThePass().train()
    x, edge_index, _ = inputs("node")
    errors = []

    def explain():
        try:
            lrp.explain(model, x, edge_index, index=1, subgraph=False)
        except Exception as error:  # noqa: BLE001 (reported below)
            errors.append(error)
    thread = threading.Thread(target=explain)
    thread.start()
    assert model.inside.wait(timeout=30)
    try:
        with pytest.warns(RuntimeWarning, match="runs in this thread while a relevance pass in another thread"):
            model(x, edge_index)
        assert not model.training  # what the warning is about
    finally:
        model.done.set()
        thread.join()
    assert not errors and model.training


class SharesANorm(torch.nn.Module):
    """``conv -> norm -> head``, with a ``BatchNorm1d`` shared with another
    model. Inside a pass, once ``wait_for`` is given, its forward sets
    ``inside`` and waits (at most ``patience`` seconds) for ``wait_for``."""

    def __init__(self, norm: torch.nn.BatchNorm1d):
        super().__init__()
        self.conv, self.norm, self.head = GCNConv(F_IN, 8).double(), norm, torch.nn.Linear(8, C).double()
        self.inside, self.wait_for, self.patience = threading.Event(), None, 0.0

    def forward(self, x, edge_index):
        h = self.conv(x, edge_index)
        if self.wait_for is not None and lrp_mode.is_active():
            self.inside.set()
            self.wait_for.wait(timeout=self.patience)
        return self.head(self.norm(h).relu())


def test_passes_of_two_models_that_share_a_module_take_turns():
    """Two models share a ``BatchNorm1d`` in training mode. The first pass
    puts it in eval mode and, inside its forward, gives the second pass
    half a second to start. Before, the second started at once, the first
    put the norm back into training mode on its exit while the second's
    forward still ran, and that forward updated the running statistics (for
    good) and explained in training mode. Passes now hold a lock per module:
    the second waits for the first."""
    torch.manual_seed(0)
    norm = torch.nn.BatchNorm1d(8).double()
    first, second = SharesANorm(norm).train(), SharesANorm(norm).train()
    x, edge_index, _ = inputs("node")
    x = x.double()
    statistics = copy.deepcopy(norm.state_dict())
    want = {name: lrp.explain(m, x, edge_index, index=1, subgraph=False).node_mask
            for name, m in (("first", first), ("second", second))}
    first_done = threading.Event()
    first.wait_for, first.patience = second.inside, 0.5
    second.wait_for, second.patience = first_done, WAIT
    got = {}

    def explain_first(barrier):
        got["first"] = lrp.explain(first, x, edge_index, index=1, subgraph=False).node_mask
        first_done.set()

    def explain_second(barrier):
        assert first.inside.wait(timeout=WAIT)
        got["second"] = lrp.explain(second, x, edge_index, index=1, subgraph=False).node_mask
    run_threads(explain_first, explain_second)
    assert norm.training
    for key, value in statistics.items():
        assert torch.equal(norm.state_dict()[key], value), key
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=0, atol=0, msg=name)


def test_walks_read_only_their_own_thread_s_forward():
    """``lrp.walks`` records each message-passing layer's output during its
    pass. Another thread running the model meanwhile (a plain forward) ran
    the walk's layer hooks too: its outputs were taken as levels of the walk
    (the walks failed with autograd's 'does not require grad') and replaced
    by the pass's aliases."""
    torch.manual_seed(0)
    model = WaitsInsideThePass().eval()
    x, edge_index, _ = inputs("node")
    model.done.set()  # the references: no waiting
    want_walks = lrp.walks(model, x, edge_index, index=1, rules=lrp.rules.Epsilon(0.0))
    with torch.no_grad():
        want_out = model(x, edge_index)
    model.inside.clear()
    model.done.clear()
    got = {}

    def walks(barrier):
        got["walks"] = lrp.walks(model, x, edge_index, index=1, rules=lrp.rules.Epsilon(0.0))

    def forward(barrier):
        assert model.inside.wait(timeout=WAIT)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the other-thread warning of the test above
                with torch.no_grad():
                    got["out"] = model(x, edge_index)
        finally:
            model.done.set()
    run_threads(walks, forward)
    torch.testing.assert_close(got["out"], want_out, rtol=0, atol=0)
    torch.testing.assert_close(got["walks"].relevance, want_walks.relevance, rtol=0, atol=0)
