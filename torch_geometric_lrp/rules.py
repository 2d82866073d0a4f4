r"""LRP rules: how a weighted layer hands relevance back to its inputs.

A rule is a small object with one method,
``linear(x, weight, bias, out, relevance) -> (input_relevance, dropped)``,
for the affine map ``out = x @ weight.T + bias`` (``x`` is ``[..., in]``,
``weight`` is ``[out, in]``). ``dropped`` is the boolean mask of outputs
whose relevance had nowhere to go (their denominator was exactly 0), or
``None``. Every weighted op of the package (:func:`~torch_geometric_lrp.functional.linear`
and the layers built on it) calls its rule through this one method.

All rules share the same pattern, which costs one matmul per modified weight
each way and never builds an ``N x in x out`` tensor:

.. math::

    z = \tilde{x}\,\tilde{W}^\top + \tilde{b}, \qquad
    s = R / \operatorname{stab}(z), \qquad
    R_{\text{in}} = \tilde{x} \odot (s\,\tilde{W})

with the sign-aware stabiliser :func:`stabilize`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "stabilize",
    "divide",
    "Rule",
    "Epsilon",
    "Gamma",
    "AlphaBeta",
    "ZPlus",
    "Flat",
    "WSquare",
    "ZBox",
    "Pass",
]


def stabilize(z: Tensor, epsilon: float) -> Tensor:
    r"""Sign-aware stabiliser :math:`z + \epsilon\,\mathrm{sign}(z)` with
    :math:`\mathrm{sign}(0) = +1`."""
    if epsilon == 0:
        return z
    # sign(z) * (|z| + eps); copysign keeps the sign of zero: +0.0 -> +eps (and -0.0 -> -eps)
    return z.abs().add_(epsilon).copysign_(z)


def divide(relevance: Tensor, z: Tensor, epsilon: float = 0.0) -> tuple[Tensor, Tensor]:
    r"""Return ``(s, dropped)`` with :math:`s = R / \mathrm{stab}(z)` where
    :math:`z \ne 0` and :math:`s = 0` where :math:`z = 0`.

    ``dropped`` marks the outputs whose relevance is lost because :math:`z = 0`:
    no input contributed to them.
    """
    dropped = z == 0
    denominator = stabilize(z, epsilon)
    if denominator is not z and denominator.shape == relevance.shape:
        s = torch.div(relevance, denominator, out=denominator)  # reuse the temporary
    else:
        s = relevance / denominator
    return s.masked_fill_(dropped, 0), dropped


class Rule:
    """Base class of LRP rules for weighted (affine) layers."""

    def linear(
        self,
        x: Tensor,
        weight: Tensor,
        bias: Optional[Tensor],
        out: Tensor,
        relevance: Tensor,
    ) -> tuple[Tensor, Optional[Tensor]]:
        """Relevance of ``x`` for ``out = x @ weight.T + bias``.

        Returns the input relevance (shape of ``x``) and the mask of dropped
        outputs (or ``None``).
        """
        raise NotImplementedError


@dataclass(frozen=True)
class Epsilon(Rule):
    r"""LRP-:math:`\epsilon`: :math:`R_i = \sum_j x_i w_{ji} R_j / \mathrm{stab}(z_j)`.

    ``epsilon=0`` is LRP-0, which equals gradient x input on bias-free
    ReLU networks. The bias and the stabiliser absorb relevance.
    """

    epsilon: float = 1e-6

    def linear(self, x, weight, bias, out, relevance):
        s, dropped = divide(relevance, out, self.epsilon)
        return (s @ weight).mul_(x), dropped


@dataclass(frozen=True)
class Gamma(Rule):
    r"""LRP-:math:`\gamma`: favour positive contributions,
    :math:`\tilde{W} = W + \gamma W^+`, :math:`\tilde{b} = b + \gamma b^+`.

    Meant for layers whose inputs are non-negative (after a ReLU).
    """

    gamma: float = 0.25
    epsilon: float = 1e-6

    def __post_init__(self):
        if self.gamma < 0:
            raise ValueError(f"Gamma: gamma must be >= 0, got gamma={self.gamma}.")

    def linear(self, x, weight, bias, out, relevance):
        w = weight + self.gamma * weight.clamp(min=0)
        b = None if bias is None else bias + self.gamma * bias.clamp(min=0)
        s, dropped = divide(relevance, F.linear(x, w, b), self.epsilon)
        return (s @ w).mul_(x), dropped


@dataclass(frozen=True)
class AlphaBeta(Rule):
    r"""LRP-:math:`\alpha\beta`: positive and negative contributions propagated
    separately,

    .. math::

        R_i = \sum_j \Big(\alpha \frac{z_{ij}^+}{z_j^+} - \beta \frac{z_{ij}^-}{z_j^-}\Big) R_j,

    with :math:`z_{ij} = x_i w_{ji}` and the positive (negative) part of the
    bias in :math:`z_j^+` (:math:`z_j^-`). Requires :math:`\alpha - \beta = 1`
    so that relevance is conserved. An output with only positive (only
    negative) contributions hands all its relevance to them proportionally,
    so conservation holds there too (seed 003's treatment of "rare neurons");
    with ``beta=0`` an output without positive contributions loses its relevance.
    """

    alpha: float = 2.0
    beta: float = 1.0
    epsilon: float = 1e-6

    def __post_init__(self):
        if abs(self.alpha - self.beta - 1.0) > 1e-12:
            raise ValueError(
                f"AlphaBeta: alpha - beta must equal 1 for relevance to be conserved, "
                f"got alpha={self.alpha}, beta={self.beta} (alpha - beta = {self.alpha - self.beta}). "
                f"Use e.g. AlphaBeta(alpha=2, beta=1) or AlphaBeta(alpha=1, beta=0)."
            )
        if self.beta < 0:
            raise ValueError(f"AlphaBeta: beta must be >= 0, got beta={self.beta}.")

    def linear(self, x, weight, bias, out, relevance):
        xp, xn = x.clamp(min=0), x.clamp(max=0)
        wp, wn = weight.clamp(min=0), weight.clamp(max=0)
        bp = bn = None
        if bias is not None:
            bp, bn = bias.clamp(min=0), bias.clamp(max=0)
        zp = F.linear(xp, wp, bp) + F.linear(xn, wn)  # >= 0
        zn = F.linear(xp, wn, bn) + F.linear(xn, wp)  # <= 0
        only_pos, only_neg = zn == 0, zp == 0
        coef_p = torch.where(only_pos, 1.0, self.alpha).to(x.dtype)
        coef_n = torch.where(only_neg, 1.0 if self.beta else 0.0, -self.beta).to(x.dtype)
        sp, _ = divide(relevance, zp, self.epsilon)
        sn, _ = divide(relevance, zn, self.epsilon)
        sp, sn = coef_p * sp, coef_n * sn
        r = xp * (sp @ wp + sn @ wn) + xn * (sp @ wn + sn @ wp)
        dropped = only_neg & only_pos if self.beta else only_neg
        return r, dropped


class ZPlus(AlphaBeta):
    r"""LRP-:math:`z^+`: only positive contributions, i.e. ``AlphaBeta(1, 0)``."""

    def __init__(self, epsilon: float = 1e-6):
        super().__init__(alpha=1.0, beta=0.0, epsilon=epsilon)

    def __repr__(self) -> str:
        return f"ZPlus(epsilon={self.epsilon})"


@dataclass(frozen=True)
class Flat(Rule):
    r"""Flat rule: every input of an output gets an equal share,
    :math:`R_i = \sum_j R_j / n_{\text{in}}`. Ignores inputs, weights and bias."""

    def linear(self, x, weight, bias, out, relevance):
        share = relevance.sum(dim=-1, keepdim=True) / weight.shape[1]
        return share.expand_as(x).clone(), None


@dataclass(frozen=True)
class WSquare(Rule):
    r""":math:`w^2` rule: :math:`R_i = \sum_j w_{ji}^2 R_j / \sum_{i'} w_{ji'}^2`.
    Ignores the inputs and the bias (an input-layer rule)."""

    def linear(self, x, weight, bias, out, relevance):
        w2 = weight * weight
        s, dropped = divide(relevance, w2.sum(dim=1))
        return (s @ w2).expand_as(x).clone(), dropped


@dataclass(frozen=True)
class ZBox(Rule):
    r""":math:`z^{\mathcal{B}}` rule for inputs bounded by ``low <= x <= high``
    (an input-layer rule):

    .. math::

        z_j = \sum_i x_i w_{ji} - l_i w_{ji}^+ - h_i w_{ji}^-, \qquad
        R_i = \sum_j (x_i w_{ji} - l_i w_{ji}^+ - h_i w_{ji}^-) R_j / \mathrm{stab}(z_j).

    ``low`` and ``high`` are floats or tensors broadcastable to the input.
    The bias is not part of :math:`z` (no relevance is absorbed).
    """

    low: Union[float, Tensor] = 0.0
    high: Union[float, Tensor] = 1.0
    epsilon: float = 1e-6

    def linear(self, x, weight, bias, out, relevance):
        low = torch.as_tensor(self.low, dtype=x.dtype, device=x.device).expand_as(x)
        high = torch.as_tensor(self.high, dtype=x.dtype, device=x.device).expand_as(x)
        wp, wn = weight.clamp(min=0), weight.clamp(max=0)
        z = F.linear(x, weight) - F.linear(low, wp) - F.linear(high, wn)
        s, dropped = divide(relevance, z, self.epsilon)
        return x * (s @ weight) - low * (s @ wp) - high * (s @ wn), dropped


@dataclass(frozen=True)
class Pass(Rule):
    """Pass rule: relevance goes through unchanged.

    The rule of element-wise activations. On a weighted layer it only applies
    when input and output have the same width.
    """

    def linear(self, x, weight, bias, out, relevance):
        if relevance.shape != x.shape:
            raise ValueError(
                f"Pass rule needs a layer whose input and output have the same shape, "
                f"got input {tuple(x.shape)} and output {tuple(relevance.shape)}. "
                f"Use Epsilon(), Gamma() or AlphaBeta() for this layer."
            )
        return relevance, None
