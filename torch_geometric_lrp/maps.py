r"""Linear maps: the three autograd Functions that apply a rule to a whole map.

Between two non-linearities a model computes a linear map (with attention
coefficients, normalisations and degrees frozen). The relevance mode runs the
map's ops once on the plain values and once per :class:`~torch_geometric_lrp.rules.Stream`
of the rule (modified inputs, weights and biases) with ordinary autograd, and
marks the edges of the map with these Functions:

* :func:`open_stream` where relevance enters the map (the output of a
  non-linearity, a model input): forward :math:`x_k = \phi_k(x)`, backward
  :math:`R_x \mathrel{+}= x_k \odot g`, where :math:`g = J_k^\top g_k` arrives
  by autograd;
* :func:`constant` for a bias or constant term of stream ``k``: forward the
  term :math:`b_k`, backward books :math:`\sum b_k \odot g` as absorbed;
* :func:`close` where the map ends (the input of a non-linearity, the model
  output): forward the plain value :math:`z`, backward the rule's gradient map,
  :math:`g_k = G_k(R, z_1, \dots, z_K)`, into each stream, and books what the
  stabiliser kept, :math:`\sum R - \sum_k z_k \odot g_k`, as absorbed.

Conservation is therefore checkable: the relevance entering every map equals
what its inputs, biases, constants and stabiliser report, up to float error,
only if the streams really are linear.
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import torch
from torch import Tensor
from torch.autograd import Function

from . import audit
from .rules import HALF as _HALF, Rule, overflowed as _overflowed, somewhere, times

__all__ = ["open_stream", "constant", "close", "unshare", "anchor"]


class _Open(Function):
    @staticmethod
    def forward(ctx, x, modify):
        xk = x.view_as(x) if modify is None else modify(x)
        ctx.save_for_backward(x if modify is None else xk)
        return xk

    @staticmethod
    def backward(ctx, grad):
        (xk,) = ctx.saved_tensors
        return times(xk, grad), None


def open_stream(x: Tensor, modify: Callable[[Tensor], Tensor] | None) -> Tensor:
    """Stream input :math:`x_k = \\phi_k(x)` (``modify=None``: :math:`x`); its
    backward hands :math:`x_k \\odot g` to ``x`` as relevance."""
    return _Open.apply(x, modify)


def _booked(value: Tensor, grad: Tensor) -> Tensor:
    """``sum(value * grad)`` for the accounting, with the entries where ``grad``
    is 0 left out: an infinite value there (a ``-inf`` mask before a
    softmax) passes nothing, and would otherwise book ``inf * 0 = NaN``."""
    return torch.where(grad == 0, 0, value * grad).sum()


class _Constant(Function):
    @staticmethod
    def forward(ctx, anchor, value, label):
        ctx.label = label
        ctx.save_for_backward(value)
        return value.clone()

    @staticmethod
    def backward(ctx, grad):
        if audit.is_active():
            (value,) = ctx.saved_tensors
            audit.record_absorbed(ctx.label, _booked(value, grad))
        return None, None, None


class _Held(Function):
    @staticmethod
    def forward(ctx, anchor, value, label):
        ctx.label = label
        return value.clone()

    @staticmethod
    def backward(ctx, relevance):
        if audit.is_active():
            audit.record_absorbed(ctx.label, relevance.sum())
        return None, None, None


_anchors: dict = {}


def anchor(device) -> Tensor:
    """A scalar that requires grad, one per device: it makes the output of
    :func:`constant` part of the autograd graph (a constant has no other input
    that requires grad). Pass it to ``torch.autograd.grad`` so that the
    constants' backward runs."""
    key = torch.device(device)
    t = _anchors.get(key)
    if t is None:
        t = _anchors[key] = torch.zeros((), device=key, requires_grad=True)
    return t


def held(value: Tensor, label: str) -> Tensor:
    """A constant that relevance tensors are written into (``c[mask] = x``):
    outside a map its gradient is relevance, which it absorbs (booked under
    ``label``)."""
    return _Held.apply(anchor(value.device), value, label)


def constant(value: Tensor, label: str) -> Tensor:
    """A bias or constant term of a stream; it absorbs
    :math:`\\sum b_k \\odot g` (booked under ``label``)."""
    return _Constant.apply(anchor(value.device), value, label)


class _Guarded(Function):
    """A linear op whose gate operands hold inf / NaN, or a divisor 0 (:func:`guarded`)."""

    @staticmethod
    def forward(ctx, run, tensors, signals, gates, divides, *values):
        ctx.run, ctx.tensors, ctx.signals, ctx.gates, ctx.divides = run, tensors, signals, gates, divides
        ctx.save_for_backward(*values)
        return run(_placed(tensors, signals, values))

    @staticmethod
    def backward(ctx, grad):
        values = [v.detach().requires_grad_() for v in ctx.saved_tensors]
        finite, reach = list(ctx.tensors), list(ctx.tensors)
        for i in ctx.gates:
            gate = ctx.tensors[i]
            # a divisor inf passes 0 (its gradient is exact): NaN and 0 (a factor 1 / 0) are bad there
            bad = (torch.isnan(gate) | (gate == 0)) if ctx.divides else ~torch.isfinite(gate)
            # the op with such entries contributing nothing (a factor 0; a divisor inf), and with only them
            # (a factor 1 there, 0 elsewhere): where the latter meets a non-zero gradient, the relevance
            # really does pass such an entry, and is NaN
            finite[i] = gate.masked_fill(bad, math.inf if ctx.divides else 0.0)
            reach[i] = torch.where(bad, 1.0, math.inf).to(gate.dtype) if ctx.divides else bad.to(gate.dtype)
        with torch.enable_grad():
            grads = torch.autograd.grad(ctx.run(_placed(finite, ctx.signals, values)), values, grad,
                                        allow_unused=True)
            hits = torch.autograd.grad(ctx.run(_placed(reach, ctx.signals, values)), values,
                                       (grad != 0).to(grad.dtype), allow_unused=True)
        out = [None if g is None else g.masked_fill(h != 0, math.nan) if h is not None else g
               for g, h in zip(grads, hits)]
        return (None, None, None, None, None, *out)


def _placed(tensors: list, signals: list, values) -> list:
    placed = list(tensors)
    for i, v in zip(signals, values):
        placed[i] = v
    return placed


def guarded(run: Callable[[list], Tensor], tensors: list, gates: list, divides: bool) -> Tensor:
    """``run(tensors)``, a linear op whose gates (positions ``gates`` of
    ``tensors``) hold inf / NaN, with the model's values; its backward gives
    the operands that carry relevance (those that require grad) what the op
    gives them with those entries contributing nothing (a factor 0, a divisor
    inf), and NaN only where a non-zero gradient meets such an entry. So
    0 relevance times an inf or NaN gate is 0, as in ``times`` under
    ``nonfinite_guard``, inside the map's streams too."""
    signals = [i for i, t in enumerate(tensors) if t.requires_grad]
    return _Guarded.apply(run, tensors, signals, gates, divides, *(tensors[i] for i in signals))


class _Close(Function):
    @staticmethod
    def forward(ctx, value, rule, *outputs):
        if value.dtype in _HALF and bool(torch.isfinite(value).all()) and \
                not all(bool(torch.isfinite(o).all()) for o in outputs):
            _overflowed(f"a stream of {type(rule).__name__}, whose modified weights or inputs raise the output")
        ctx.rule = rule
        # two streams that are one tensor (Gamma where every path counts up): booked once
        ctx.shared = len(outputs) == 2 and outputs[0] is outputs[1]
        ctx.save_for_backward(*outputs)
        ctx.copies = None  # set by unshare
        ctx.kept = None  # set by check_conservation: told what this end keeps (stabiliser, lost), as a scalar
        return value.detach()

    @staticmethod
    def backward(ctx, relevance):
        outputs = ctx.saved_tensors if ctx.copies is None else ctx.copies
        grads, dropped = ctx.rule.gradients(relevance, outputs)
        if relevance.dtype in _HALF and not somewhere(~torch.isfinite(relevance)) and \
                any(g is not None and somewhere(~torch.isfinite(g)) for g in grads):
            _overflowed("the relevance divided by a small output, R / z")
        if audit.is_active():
            lost = audit.lost_of(relevance, dropped)
            passed = _booked(outputs[0], grads[0] + grads[1]) if ctx.shared else \
                sum(_booked(z, g) for z, g in zip(outputs, grads))
            audit.record("stabilizer", relevance, dropped, [passed], lost=lost)
            if ctx.kept is not None:
                ctx.kept(relevance.sum() - passed)
        return (None, None, *grads)


def unshare(end: Tensor) -> None:
    """Before the forward writes into ``end``, a map's end, in place: the
    stream outputs that its map keeps for the backward and that share
    ``end``'s memory (the one stream of a rule that does not modify it) are
    copied, so the rule still sees the values of the map. (Autograd's
    version check of the saved outputs guards every other write.)"""
    node = end.grad_fn
    if type(node) is not _Close._backward_cls or node.copies is not None:
        return
    storage = end.untyped_storage().data_ptr()
    outputs = node.saved_tensors
    if any(o.untyped_storage().data_ptr() == storage for o in outputs):
        node.copies = tuple(o.detach().clone() if o.untyped_storage().data_ptr() == storage else o.detach()
                            for o in outputs)


def close(value: Tensor, rule: Rule, outputs: Sequence[Tensor]) -> Tensor:
    """End of a map: the plain ``value``, whose relevance :math:`R` goes to
    the stream outputs as ``rule.gradients(R, outputs)``."""
    return _Close.apply(value, rule, *outputs)
