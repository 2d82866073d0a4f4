r"""Accounting of relevance that a backward pass does not hand on to inputs.

Two kinds of relevance leave the pass on the way back:

* **lost** — relevance that reached an output whose value (the denominator of
  the rule) is exactly ``0``; no input contributed to it, so there is nobody to
  give it to;
* **absorbed** — what a bias, a constant term (a constant operand of ``add``
  or ``cat``), or an epsilon stabiliser kept. Each is *measured* where it
  happens: a bias or constant :math:`b` of a linear map absorbs
  :math:`\sum b \odot g` (its value times its gradient in the map), a
  stabiliser absorbs :math:`\sum R - \sum_k z_k \odot g_k`. It is signed: a
  negative absorbed amount means relevance was created there.

Every relevance op reports to the audits that are open in the current thread
or task (``with RelevanceAudit() as audit: ...``, kept in a
``contextvars`` variable). With none open, ops do no accounting at all, so
the pass pays nothing for it and never warns per call. While an audit is
open, backward passes run on the thread that opened it
(:func:`on_this_thread`): on a GPU autograd would otherwise run them on its
own device thread, where no audit is open.

Since every amount is measured, ``seed = input relevance + absorbed + lost``
is a check, not an identity: whatever does not add up (an op that changes
relevance without reporting it) is the *residual*.
"""
from __future__ import annotations

import contextvars
from collections import defaultdict
from contextlib import contextmanager
from typing import Iterable, Iterator, Optional

import torch
from torch import Tensor

_open_audits: contextvars.ContextVar[tuple] = contextvars.ContextVar("lrp_open_audits", default=())


class RelevanceAudit:
    r"""Collects lost and absorbed relevance of every relevance op run while open.

    Examples
    --------
    >>> with RelevanceAudit() as audit:
    ...     y.backward(relevance)
    >>> audit.lost, audit.absorbed, audit.by_op

    Attributes are plain floats, summed over all ops (and over batches and
    features). ``by_op`` maps an op name (``"linear"``, ``"scatter_sum"``, ...)
    to a ``{"lost": float, "absorbed": float, "calls": int}`` dict.
    """

    def __enter__(self):
        if self._opened is not None:
            # entered twice, it would count every op twice while nested, and the outer exit
            # would find its state spent
            raise RuntimeError("RelevanceAudit: this audit is open already; to nest, open another "
                               "RelevanceAudit().")
        self._opened = (_open_audits.set(_open_audits.get() + (self,)), on_this_thread())
        return self

    def __exit__(self, *exc) -> None:
        if self._opened is None:
            raise RuntimeError("RelevanceAudit: this audit is not open.")
        if self not in _open_audits.get():
            raise RuntimeError("RelevanceAudit: closed in another thread or task than the one it was opened in.")
        if _open_audits.get()[-1:] != (self,):
            raise RuntimeError("RelevanceAudit: an audit opened after this one is still open; close audits in "
                               "the reverse order of opening (with blocks do).")
        token, thread = self._opened
        self._opened = None
        thread.__exit__(*exc)
        _open_audits.reset(token)

    def __init__(self) -> None:
        # Per op, the signed scalar terms of its lost and absorbed amounts, kept
        # as tensors and summed (in float64) only when read: a record costs no
        # conversion, no host copy and no synchronisation.
        self._lost: dict[str, list] = defaultdict(list)
        self._absorbed: dict[str, list] = defaultdict(list)
        self._calls: dict[str, int] = defaultdict(int)
        self._opened: Optional[tuple] = None  # while open: its context token and thread setting

    def _record(self, op: str, relevance_out: Tensor, dropped: Optional[Tensor],
                relevance_in: Iterable[Optional[Tensor]], lost: Optional[Tensor] = None) -> None:
        # absorbed = sum(R_out) - lost - sum(R_in), kept as its terms
        lost = lost_of(relevance_out, dropped) if lost is None else lost
        absorbed = self._absorbed[op]
        absorbed.append((1.0, relevance_out.detach().sum()))
        absorbed.append((-1.0, lost.detach()))
        absorbed.extend((-1.0, r.detach().sum()) for r in relevance_in if r is not None)
        self._lost[op].append((1.0, lost.detach()))
        self._calls[op] += 1

    def _absorbed_only(self, op: str, amount: Tensor) -> None:
        self._absorbed[op].append((1.0, amount.detach()))
        self._calls[op] += 1

    @staticmethod
    def _total(terms: list) -> float:
        """The sum of signed scalar terms, in float64 (one stack per dtype and device)."""
        groups: dict = defaultdict(lambda: ([], []))
        for sign, t in terms:
            signs, values = groups[(t.dtype, t.device)]
            signs.append(sign)
            values.append(t if t.dim() == 0 else t.reshape(()))
        total = 0.0
        for signs, values in groups.values():
            stacked = torch.stack(values).to(torch.float64)
            total += float((stacked * stacked.new_tensor(signs)).sum())
        return total

    @property
    def lost(self) -> float:
        """Total relevance that reached outputs equal to 0."""
        return self._total([t for terms in self._lost.values() for t in terms])

    @property
    def absorbed(self) -> float:
        """Total relevance kept by biases, stabilisers and constant operands, as
    each of them reported it."""
        return self._total([t for terms in self._absorbed.values() for t in terms])

    @property
    def by_op(self) -> dict[str, dict[str, float]]:
        return {
            op: {
                "lost": self._total(self._lost[op]),
                "absorbed": self._total(self._absorbed[op]),
                "calls": self._calls[op],
            }
            for op in self._calls
        }

    def __repr__(self) -> str:
        return f"RelevanceAudit(lost={self.lost:.6g}, absorbed={self.absorbed:.6g})"


def on_this_thread() -> torch.autograd.set_multithreading_enabled:
    """Backward passes run on the calling thread until the returned object's
    ``__exit__`` (thread-local).

    Pass state that relevance ops read in the backward (open audits, the
    non-finite guard) belongs to the thread that set it. On CPU autograd runs
    the backward on the calling thread anyway; on CUDA it hands it to a
    worker thread per device, which would see none of that state."""
    return torch.autograd.set_multithreading_enabled(False)


def lost_of(relevance_out: Tensor, dropped: Optional[Tensor]) -> Tensor:
    """The relevance at the ``dropped`` outputs (0 for ``None``)."""
    if dropped is None:
        return torch.zeros((), dtype=relevance_out.dtype, device=relevance_out.device)
    return torch.where(dropped, relevance_out, 0).sum()


@contextmanager
def suspended() -> Iterator[None]:
    """No open audit sees the backward steps run inside: a pass that runs
    parts of its backward again (the walks' level-to-level steps) would count
    their absorbed and lost relevance once per run."""
    token = _open_audits.set(())
    try:
        yield
    finally:
        _open_audits.reset(token)


def is_active() -> bool:
    """True when at least one audit is open in this thread or task."""
    return bool(_open_audits.get())


def record(
    op: str,
    relevance_out: Tensor,
    dropped: Optional[Tensor],
    relevance_in: Iterable[Optional[Tensor]],
    lost: Optional[Tensor] = None,
) -> None:
    """Report one backward step of ``op`` to every open audit.

    ``dropped`` is a boolean mask (broadcastable to ``relevance_out``) of the
    outputs whose relevance was lost, or ``None`` if none was. ``relevance_in``
    lists the relevance handed to each input (``None`` for inputs that receive
    none); ``lost`` the lost amount where the caller already has it. Called by
    relevance ops only when :func:`is_active`.
    """
    for audit in _open_audits.get():
        audit._record(op, relevance_out, dropped, relevance_in, lost)


def record_absorbed(op: str, amount: Tensor) -> None:
    """Report relevance ``amount`` (a scalar) kept by a bias or constant."""
    for audit in _open_audits.get():
        audit._absorbed_only(op, amount)
