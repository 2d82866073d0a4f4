"""Accounting of relevance that a backward pass does not hand on to inputs.

Two kinds of relevance leave the pass on the way back:

* **lost** — relevance that reached an output whose value (the denominator of
  the rule) is exactly ``0``; no input contributed to it, so there is nobody to
  give it to;
* **absorbed** — the rest of the gap between the relevance an op received and
  the relevance it handed to its inputs: what a bias, an epsilon stabiliser or
  an operand without relevance (a constant) kept. It is signed: a negative
  absorbed amount means the op created relevance.

Every relevance op reports to the audits that are open
(``with RelevanceAudit() as audit: ...``): :class:`RelevanceAudit` books both
kinds per op; :class:`LostRelevance` only totals the lost kind, at a fraction
of the cost (what is absorbed then follows from conservation). With none open,
ops do no accounting at all, so the pass pays nothing for it and never warns
per call.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Iterable, Optional

import torch
from torch import Tensor

_open_audits: list["RelevanceAudit"] = []


class _Audit:
    """While open (``with``), relevance ops report to it through ``_record``."""

    def __enter__(self):
        _open_audits.append(self)
        return self

    def __exit__(self, *exc) -> None:
        _open_audits.remove(self)

    def _record(self, op: str, relevance_out: Tensor, dropped: Optional[Tensor],
                relevance_in: Iterable[Optional[Tensor]]) -> None:
        raise NotImplementedError


class RelevanceAudit(_Audit):
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

    def __init__(self) -> None:
        self._lost: dict[str, Tensor] = defaultdict(lambda: torch.zeros((), dtype=torch.float64))
        self._absorbed: dict[str, Tensor] = defaultdict(lambda: torch.zeros((), dtype=torch.float64))
        self._calls: dict[str, int] = defaultdict(int)

    def _record(self, op: str, relevance_out: Tensor, dropped: Optional[Tensor],
                relevance_in: Iterable[Optional[Tensor]]) -> None:
        lost = _lost(relevance_out, dropped)
        total_in = sum((r.sum() for r in relevance_in if r is not None), lost.new_zeros(()))
        self._add(op, lost, relevance_out.sum() - lost - total_in)

    def _add(self, op: str, lost: Tensor, absorbed: Tensor) -> None:
        self._lost[op] = self._lost[op] + lost.detach().double().cpu()
        self._absorbed[op] = self._absorbed[op] + absorbed.detach().double().cpu()
        self._calls[op] += 1

    @property
    def lost(self) -> float:
        """Total relevance that reached outputs equal to 0."""
        return float(sum(v.item() for v in self._lost.values()))

    @property
    def absorbed(self) -> float:
        """Total relevance kept by biases, stabilisers and constant operands."""
        return float(sum(v.item() for v in self._absorbed.values()))

    @property
    def by_op(self) -> dict[str, dict[str, float]]:
        return {
            op: {
                "lost": self._lost[op].item(),
                "absorbed": self._absorbed[op].item(),
                "calls": self._calls[op],
            }
            for op in self._calls
        }

    def __repr__(self) -> str:
        return f"RelevanceAudit(lost={self.lost:.6g}, absorbed={self.absorbed:.6g})"


class LostRelevance(_Audit):
    """The cheap half of :class:`RelevanceAudit`: only the total relevance
    lost at outputs equal to 0 (one masked sum per op, where the full audit
    sums every op's input and output relevance as well).

    Where every op has a rule, what is absorbed follows from it:
    ``absorbed = seed - input relevance - lost``.
    """

    def __init__(self) -> None:
        self._lost: Optional[Tensor] = None

    def _record(self, op: str, relevance_out: Tensor, dropped: Optional[Tensor],
                relevance_in: Iterable[Optional[Tensor]]) -> None:
        if dropped is not None:
            lost = _lost(relevance_out, dropped).detach().double()
            self._lost = lost if self._lost is None else self._lost + lost

    @property
    def lost(self) -> float:
        return 0.0 if self._lost is None else self._lost.item()


def _lost(relevance_out: Tensor, dropped: Optional[Tensor]) -> Tensor:
    if dropped is None:
        return torch.zeros((), dtype=relevance_out.dtype, device=relevance_out.device)
    return torch.where(dropped, relevance_out, 0).sum()


def is_active() -> bool:
    """True when at least one audit is open."""
    return bool(_open_audits)


def record(
    op: str,
    relevance_out: Tensor,
    dropped: Optional[Tensor],
    relevance_in: Iterable[Optional[Tensor]],
) -> None:
    """Report one backward step of ``op`` to every open audit.

    ``dropped`` is a boolean mask (broadcastable to ``relevance_out``) of the
    outputs whose relevance was lost, or ``None`` if none was. ``relevance_in``
    lists the relevance handed to each input (``None`` for inputs that receive
    none). Called by relevance ops only when :func:`is_active`.
    """
    for audit in _open_audits:
        audit._record(op, relevance_out, dropped, relevance_in)
