r"""LRP rules: how a linear map hands relevance back to its inputs.

A rule acts on a whole *linear map*: everything between two
non-linearities. For a message-passing layer that is the layer itself, with
its messages, aggregation, root term and bias (attention coefficients,
normalisations and degrees are frozen, so the layer is affine in its input):
for ``GCNConv``, :math:`z_i = \sum_j a_{ij} x_j W + b`. For a single
``Linear`` it is :math:`z = x W^\top + b`.

Every rule is described the same way (as in Zennit's ``BasicHook``): a few
*streams* and one *gradient map*.

* Stream :math:`k` runs the map on a modified input :math:`x_k = \phi_k(x)`
  with every weight modified, :math:`W_k = \omega_k(W)`, and every bias or
  constant term modified, :math:`b_k = \beta_k(b)`; its output is
  :math:`z_k = J_k x_k + b_k`.
* The gradient map turns the output relevance :math:`R` into one vector
  :math:`g_k` per stream (for most rules :math:`g = R / \operatorname{stab}(z')`).
* The input relevance is :math:`R_x = \sum_k x_k \odot J_k^\top g_k`, and
  the relevance of anything inside the map (a message, a bias) is its stream
  value times its stream gradient, summed over streams.

:math:`J_k^\top g_k` is a plain gradient of the modified map, so one
mechanism (:mod:`torch_geometric_lrp.mode`) serves every rule and layer at
the cost of one extra forward per stream that modifies something, and never
builds an ``N x in x out`` tensor. The denominators use the sign-aware
stabiliser :func:`stabilize`.
"""
from __future__ import annotations

import contextvars
import math
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from numbers import Real
from typing import Callable, Iterator, Optional, Sequence, Union

import torch
import torch.nn.functional as F
from torch import Tensor

from .audit import on_this_thread

__all__ = [
    "stabilize",
    "divide",
    "times",
    "nonfinite_guard",
    "Stream",
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


_guard: contextvars.ContextVar[bool] = contextvars.ContextVar("lrp_nonfinite_guard", default=False)


@contextmanager
def nonfinite_guard(active: bool = True) -> Iterator[None]:
    """While active (in this thread or task), a zero relevance times a
    non-finite value is 0, not NaN: an ``inf`` or ``NaN`` in a node the
    explained output does not depend on cannot spread into other rows. The
    relevance pass turns it on when an input or the output is not finite.
    Backward passes run on this thread meanwhile (``audit.on_this_thread``),
    where the guard is seen."""
    token = _guard.set(active)
    thread = on_this_thread()
    try:
        yield
    finally:
        thread.__exit__(None, None, None)
        _guard.reset(token)


def times(value: Tensor, relevance: Tensor, in_place: bool = False) -> Tensor:
    """``value * relevance``; under :func:`nonfinite_guard`, 0 where the
    relevance (or gradient) is 0 whatever the value. ``in_place``:
    ``relevance`` is a fresh tensor of the result's shape and dtype, written
    over (one tensor of that size less)."""
    if in_place:
        zero = (relevance == 0) if _guard.get() else None
        out = relevance.mul_(value)
        return out if zero is None else out.masked_fill_(zero, 0)
    out = value * relevance
    if _guard.get():
        out = out.masked_fill_(relevance == 0, 0) if out.shape == relevance.shape else \
            torch.where(relevance == 0, 0, out)
    return out


def check_rule(rule: "Rule", argument: str = "rules") -> None:
    """Refuse a :class:`Rule` subclass that the relevance pass cannot run: one
    that defines :meth:`Rule.linear` only. The pass applies a rule to whole
    linear maps through :meth:`Rule.streams` and :meth:`Rule.gradients`
    (:class:`Pass` has none: under it linear ops use their op-level rules)."""
    if type(rule).gradients is Rule.gradients and not isinstance(rule, Pass):
        raise TypeError(
            f"{argument}: {type(rule).__name__} does not define gradients(relevance, outputs) (and streams()): "
            f"the relevance pass applies a rule to a whole linear map through them (see the Concepts page, "
            f"'The rules'). A rule that defines linear() only serves torch_geometric_lrp.functional.linear.")


HALF = (torch.float16, torch.bfloat16)


def somewhere(mask: Tensor) -> bool:
    """``bool(mask.any())``, for checks; ``False`` where a tensor cannot be
    read as a bool (under the vmap of the walks' batched backward)."""
    try:
        return bool(mask.any())
    except RuntimeError:
        return False


def overflowed(where: str) -> None:
    """Warn that a rule's arithmetic overflowed a half-precision dtype."""
    warnings.warn(f"LRP: in half precision, the relevance of a linear map overflowed ({where}, beyond the dtype's "
                  f"range) although the forward is finite: relevance through it is booked as absorbed or is "
                  f"infinite, so the masks are not reliable. Explain a float32 copy instead "
                  f"(copy.deepcopy(model).float() with x.float()).", RuntimeWarning, stacklevel=2)


def divide(relevance: Tensor, z: Tensor, epsilon: float = 0.0) -> tuple[Tensor, Tensor]:
    r"""Return ``(s, dropped)`` with :math:`s = R / \mathrm{stab}(z)` where
    :math:`z \ne 0` and :math:`s = 0` where :math:`z = 0`.

    ``dropped`` marks the outputs whose relevance is lost because :math:`z = 0`:
    no input contributed to them.
    """
    dropped = z == 0
    if z.dtype in HALF and somewhere(~torch.isfinite(z) & (relevance != 0) & torch.isfinite(relevance)):
        overflowed("a rule's denominator, such as Gamma's z + gamma z+")
    # a plain division (no out=): it also runs under torch.func.vmap, as
    # torch.autograd.grad(..., is_grads_batched=True) needs
    s = relevance / stabilize(z, epsilon)
    if _guard.get():
        return s.masked_fill_(dropped | (relevance == 0), 0), dropped
    return s.masked_fill_(dropped, 0), dropped


def _same(t: Tensor) -> Tensor:
    return t


def _positive(t: Tensor) -> Tensor:
    return t.clamp(min=0)


def _negative(t: Tensor) -> Tensor:
    return t.clamp(max=0)


def _zero(t: Tensor) -> Tensor:
    return torch.zeros_like(t)


def _one(t: Tensor) -> Tensor:
    return torch.ones_like(t)


def _square(t: Tensor) -> Tensor:
    return t * t


@dataclass(frozen=True)
class Stream:
    """One run of a linear map with modified inputs and parameters.

    ``input`` maps the map's input :math:`x` to :math:`x_k`, ``weight`` every
    weight (a multiplicative parameter) to :math:`W_k`, ``bias`` every bias or
    constant additive term to :math:`b_k`, ``gate`` every gate (attention,
    normalisation, edge weights: held constant) to :math:`a_k`; only rules
    that ignore signs change gates (``Flat``, ``WSquare``: :math:`|a|`).
    """

    input: Callable[[Tensor], Tensor] = _same
    weight: Callable[[Tensor], Tensor] = _same
    bias: Callable[[Tensor], Tensor] = _same
    gate: Callable[[Tensor], Tensor] = _same

    @property
    def identity(self) -> bool:
        """True when the stream modifies nothing (the map itself)."""
        return self.input is _same and self.weight is _same and self.bias is _same and self.gate is _same


_IDENTITY = (Stream(),)


class Rule:
    r"""Base class of LRP rules: :meth:`streams` and :meth:`gradients` define
    the rule on any linear map; :meth:`linear` applies it to one affine
    layer.

    A rule with ``signed = True`` splits the paths of the map by sign and
    carries two streams through it; every op of the map keeps them apart (a
    weight or gate :math:`f` counts with the sign of each of its entries, a
    subtraction or a negative number flips the sign, a bias or constant
    counts by its own sign). Which pair depends on ``value_stream``:

    * ``False`` (``AlphaBeta``, ``ZPlus``): the positive and the negative
      *contributions* :math:`(P, N)` of every path (the input times the
      weights, gates and signs along it), opened at :math:`x^+` and
      :math:`x^-`: a factor :math:`f` sends :math:`P f^+ + N f^-` to
      :math:`P` and :math:`P f^- + N f^+` to :math:`N`, a bias :math:`b^+`
      to one and :math:`b^-` to the other;
    * ``True`` (``Gamma``): the map itself :math:`z` and its part over the
      paths whose *coefficient* (the product of the weights, gates and signs
      along them, the input not counted) is positive, :math:`z_\uparrow`,
      both opened at :math:`x`: :math:`z' = f(z)` and
      :math:`z_\uparrow' = f^+ z_\uparrow + f^- (z - z_\uparrow)`, a bias
      adds :math:`b` and :math:`b^+`. The first stream is the map's own
      value, so no run is spent on it: an op whose factors have one sign
      runs twice, and once where every path so far counts up (the two
      streams are then one tensor).
    """

    signed = False
    value_stream = False  # for a signed rule: streams (z, z_up), not (P, N)

    def streams(self) -> Sequence[Stream]:
        """The streams of the rule (default: the map itself)."""
        return _IDENTITY

    def gradients(self, relevance: Tensor, outputs: Sequence[Tensor]) -> tuple[list[Tensor], Optional[Tensor]]:
        """Map the output relevance to one gradient per stream output.

        Returns the gradients and the boolean mask of outputs whose relevance
        had nowhere to go (a denominator of exactly 0), or ``None``.
        """
        raise NotImplementedError

    def linear(
        self,
        x: Tensor,
        weight: Tensor,
        bias: Optional[Tensor],
        out: Tensor,
        relevance: Tensor,
    ) -> tuple[Tensor, Optional[Tensor]]:
        r"""Relevance of ``x`` for ``out = x @ weight.T + bias``:
        :math:`R_x = \sum_k x_k \odot (g_k W_k)`.

        Returns the input relevance (shape of ``x``) and the mask of dropped
        outputs (or ``None``).
        """
        if self.signed:
            return self._signed_linear(x, weight, bias, relevance)
        streams = self.streams()
        inputs = [x if s.input is _same else s.input(x) for s in streams]
        weights = [weight if s.weight is _same else s.weight(weight) for s in streams]
        if len(streams) == 1 and streams[0].identity:
            outputs = [out]
        else:
            outputs = [F.linear(i, w, None if bias is None else s.bias(bias))
                       for s, i, w in zip(streams, inputs, weights)]
        grads, dropped = self.gradients(relevance, outputs)
        r = None
        for i, w, g in zip(inputs, weights, grads):
            part = times(i, g @ w)
            r = part if r is None else r.add_(part)
        return r.expand_as(x) if r.shape != x.shape else r, dropped


    def _signed_linear(self, x: Tensor, weight: Tensor, bias: Optional[Tensor], relevance: Tensor):
        r""":meth:`linear` of a ``signed`` rule (see :class:`Rule`), with the
        streams opened at :math:`x_1, x_2`. Pairs :math:`(P, N)`:
        :math:`z_1 = x_1 W^{+\top} + x_2 W^{-\top} + b^+`,
        :math:`z_2 = x_1 W^{-\top} + x_2 W^{+\top} + b^-` and
        :math:`R_x = x_1 \odot (g_1 W^+ + g_2 W^-) + x_2 \odot (g_1 W^- + g_2 W^+)`.
        Pairs :math:`(z, z_\uparrow)`: :math:`z_1 = x_1 W^\top + b`,
        :math:`z_2 = x_2 W^{+\top} + (x_1 - x_2) W^{-\top} + b^+` and
        :math:`R_x = x_1 \odot (g_1 W + g_2 W^-) + x_2 \odot g_2 (W^+ - W^-)`."""
        first, second = (s.input(x) for s in self.streams())
        wp, wn = weight.clamp(min=0), weight.clamp(max=0)
        bp, bn = (None, None) if bias is None else (bias.clamp(min=0), bias.clamp(max=0))
        if self.value_stream:
            z1 = F.linear(first, weight, bias)
            z2 = F.linear(second, wp, bp) + F.linear(first - second, wn)
            (g1, g2), dropped = self.gradients(relevance, [z1, z2])
            r = times(first, g1 @ weight + g2 @ wn).add_(times(second, g2 @ (wp - wn)))
        else:
            z1 = F.linear(first, wp, bp) + F.linear(second, wn)
            z2 = F.linear(first, wn, bn) + F.linear(second, wp)
            (g1, g2), dropped = self.gradients(relevance, [z1, z2])
            r = times(first, g1 @ wp + g2 @ wn).add_(times(second, g1 @ wn + g2 @ wp))
        return r.expand_as(x) if r.shape != x.shape else r, dropped


def _check_parameters(rule: Rule, *names: str) -> None:
    """Each named parameter of ``rule`` is a finite number >= 0 (a negative
    stabiliser pushes denominators towards 0; NaN or inf gives no relevance)."""
    for name in names:
        value = getattr(rule, name)
        if not isinstance(value, Real) or isinstance(value, bool):
            raise TypeError(f"{type(rule).__name__}: {name} must be a number, got {type(value).__name__} "
                            f"{value!r}.")
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"{type(rule).__name__}: {name} must be a finite number >= 0, got {name}={value}.")
        if type(value) not in (int, float):  # a Fraction or numpy scalar: the tensors of the pass take floats
            object.__setattr__(rule, name, float(value))


@dataclass(frozen=True)
class Epsilon(Rule):
    r"""LRP-:math:`\epsilon`: :math:`g = R / \mathrm{stab}(z)`, so
    :math:`R_j = x_j \odot J^\top (R / \mathrm{stab}(z))`.

    ``epsilon=0`` is LRP-0, which equals gradient x input on bias-free
    ReLU networks. The bias and the stabiliser absorb relevance.
    """

    epsilon: float = 1e-6

    def __post_init__(self):
        _check_parameters(self, "epsilon")

    def gradients(self, relevance, outputs):
        s, dropped = divide(relevance, outputs[0], self.epsilon)
        return [s], dropped


@dataclass(frozen=True)
class Gamma(Rule):
    r"""LRP-:math:`\gamma` (GNN-LRP-:math:`\gamma`): every weight of the map
    becomes :math:`\tilde{W} = W + \gamma W^+` and every bias
    :math:`\tilde{b} = b + \gamma b^+`; with :math:`z'` the output of the
    modified map, :math:`g = R / \mathrm{stab}(z')`. For ``GCNConv``:
    :math:`z'_i = \sum_j a_{ij} x_j \tilde{W} + \tilde{b}` and
    :math:`R_j = x_j \odot \sum_i a_{ij} \tilde{W}^\top R_i / \mathrm{stab}(z'_i)`.

    On a whole map the boost goes to the paths whose coefficient, the
    product of the weights, gates and signs along them, is positive (a
    ``signed`` rule with ``value_stream``, see :class:`Rule`):
    :math:`z' = z + \gamma z_\uparrow`, the positive part of each bias or
    constant term counted up. With one weight per path and non-negative
    gates (GCN, SAGE, GIN) that is the formula above; where a negative
    BatchNorm scale, a subtraction or a signed Laplacian follows the weight,
    it boosts what counts positively in the map, as the formula does on the
    folded weight (Zennit's merged BatchNorm; the biases, though, count term
    by term, not summed first), and a path without a weight (a skip, a
    propagation) has coefficient :math:`+` too.

    Meant for maps whose inputs are non-negative (after a ReLU): on signed
    inputs it favours positive coefficients, not positive contributions.
    """

    gamma: float = 0.25
    epsilon: float = 1e-6

    def __post_init__(self):
        _check_parameters(self, "gamma", "epsilon")

    value_stream = True

    @property
    def signed(self) -> bool:
        return self.gamma != 0

    def streams(self):
        if self.gamma == 0:
            return _IDENTITY
        return _COEFFICIENT_STREAMS

    def gradients(self, relevance, outputs):
        if self.gamma == 0:
            s, dropped = divide(relevance, outputs[0], self.epsilon)
            return [s], dropped
        z, up = outputs  # the map, and its part over positive coefficients
        s, dropped = divide(relevance, z + self.gamma * up, self.epsilon)
        return [s, self.gamma * s], dropped


@dataclass(frozen=True)
class AlphaBeta(Rule):
    r"""LRP-:math:`\alpha\beta`: positive and negative contributions propagated
    separately,

    .. math::

        R_i = \sum_j \Big(\alpha \frac{z_{ij}^+}{z_j^+} - \beta \frac{z_{ij}^-}{z_j^-}\Big) R_j,

    with :math:`z_{ij} = x_i w_{ji}` and the positive (negative) part of the
    bias in :math:`z_j^+` (:math:`z_j^-`). On a whole map (a ``signed``
    rule, see :class:`Rule`) a contribution is a path through the map: the
    input times the weights, gates and signs along it, so a negative gate
    (a BatchNorm scale, a Laplacian entry) or a subtraction counts with its
    sign. Where each input reaches an output along paths of one sign (one
    weight per map, as in GCN, SAGE or GIN's first ``Linear``) this is the
    rule on the layer's affine map; where paths of both signs meet
    (``x_j - x_i``, Chebyshev polynomials, two ``Linear`` in a row) they
    count apart. Requires :math:`\alpha - \beta = 1`
    so that relevance is conserved. An output with only positive (only
    negative) contributions hands all its relevance to them proportionally,
    so conservation holds there too; with ``beta=0`` an output without
    positive contributions loses its relevance.
    """

    alpha: float = 2.0
    beta: float = 1.0
    epsilon: float = 1e-6

    def __post_init__(self):
        _check_parameters(self, "alpha", "beta", "epsilon")
        if abs(self.alpha - self.beta - 1.0) > 1e-12:
            raise ValueError(
                f"AlphaBeta: alpha - beta must equal 1 for relevance to be conserved, "
                f"got alpha={self.alpha}, beta={self.beta} (alpha - beta = {self.alpha - self.beta}). "
                f"Use e.g. AlphaBeta(alpha=2, beta=1) or AlphaBeta(alpha=1, beta=0)."
            )
        if self.beta < 0:
            raise ValueError(f"AlphaBeta: beta must be >= 0, got beta={self.beta}.")

    signed = True

    def streams(self):
        return _SIGNED_STREAMS

    def gradients(self, relevance, outputs):
        zp, zn = outputs  # >= 0, <= 0
        only_pos, only_neg = zn == 0, zp == 0
        sp, _ = divide(relevance, zp, self.epsilon)
        sn, _ = divide(relevance, zn, self.epsilon)
        sp = sp * torch.where(only_pos, 1.0, self.alpha).to(sp.dtype)
        sn = sn * torch.where(only_neg, 1.0 if self.beta else 0.0, -self.beta).to(sn.dtype)
        dropped = only_neg & only_pos if self.beta else only_neg
        return [sp, sn], dropped


#: The streams of ``AlphaBeta`` and ``ZPlus``: the positive and the negative
#: contributions (``bias``: the part of a constant written into the map, see
#: ``RelevanceMode._written_map_end``).
_SIGNED_STREAMS = (Stream(input=_positive, bias=_positive), Stream(input=_negative, bias=_negative))
#: ``Gamma``'s: the map itself and its part over positive coefficients, both
#: from the input as it is (every path starts at coefficient +1).
_COEFFICIENT_STREAMS = (Stream(), Stream(bias=_positive))


class ZPlus(AlphaBeta):
    r"""LRP-:math:`z^+`: only positive contributions, i.e. ``AlphaBeta(1, 0)``."""

    def __init__(self, epsilon: float = 1e-6):
        super().__init__(alpha=1.0, beta=0.0, epsilon=epsilon)

    def gradients(self, relevance, outputs):
        # With beta = 0 the negative contributions get no relevance, and an
        # output without positive ones loses its relevance whatever z^- is.
        s, dropped = divide(relevance, outputs[0], self.epsilon)  # z^+ >= 0
        return [s, torch.zeros_like(s)], dropped

    def __repr__(self) -> str:
        return f"ZPlus(epsilon={self.epsilon})"


@dataclass(frozen=True)
class Flat(Rule):
    r"""Flat rule: inputs and weights set to 1, biases to 0, so every input of
    an output gets an equal share (for one ``Linear``,
    :math:`R_i = \sum_j R_j / n_{\text{in}}`). Gates of the map count with
    their magnitudes :math:`|a|` (a share per path in proportion to them):
    gates of both signs, such as negative edge weights or ``ChebConv``'s
    Laplacian, would otherwise cancel in the denominator."""

    def streams(self):
        return (Stream(_one, _one, _zero, torch.abs),)

    def gradients(self, relevance, outputs):
        s, dropped = divide(relevance, outputs[0])
        return [s], dropped


@dataclass(frozen=True)
class WSquare(Rule):
    r""":math:`w^2` rule: inputs set to 1, weights squared, biases 0, so
    :math:`R_i = \sum_j w_{ji}^2 R_j / \sum_{i'} w_{ji'}^2` for one ``Linear``.
    Ignores the inputs (an input-layer rule). Gates count with their
    magnitudes, as in :class:`Flat`."""

    def streams(self):
        return (Stream(_one, _square, _zero, torch.abs),)

    def gradients(self, relevance, outputs):
        s, dropped = divide(relevance, outputs[0])
        return [s], dropped


def _same_bound(a, b) -> bool:
    if a is b:
        return True
    a, b = torch.as_tensor(a), torch.as_tensor(b)
    return a.shape == b.shape and a.device == b.device and bool(torch.equal(a.to(b.dtype), b))


def _bound_key(value) -> tuple:
    """A ZBox bound as a hashable value: its shape and entries."""
    t = torch.as_tensor(value).detach().cpu().double()
    return tuple(t.shape), tuple(t.flatten().tolist())


@dataclass(frozen=True)
class ZBox(Rule):
    r""":math:`z^{\mathcal{B}}` rule for inputs bounded by ``low <= x <= high``
    (an input-layer rule):

    .. math::

        z_j = \sum_i x_i w_{ji} - l_i w_{ji}^+ - h_i w_{ji}^-, \qquad
        R_i = \sum_j (x_i w_{ji} - l_i w_{ji}^+ - h_i w_{ji}^-) R_j / \mathrm{stab}(z_j).

    Three streams, :math:`(x, W)`, :math:`(l, W^+)` and :math:`(h, W^-)`, all
    without bias (no relevance is absorbed by it). ``low`` and ``high`` are
    numbers or one bound per input feature (shape ``[F]``): the same for
    every row (node), as the explainers cut and batch rows. Exact on a map
    with one weight per path and no negative gate (the input layer of GCN,
    SAGE; GIN's aggregation with the first ``Linear`` of its MLP, whose
    second ``Linear``, after an activation, sees no input bounded by them:
    key it by name with another rule, ``{"conv1": ZBox(...), "conv1.nn.2":
    Epsilon()}``); elsewhere a path's sign can flip after its bound was
    chosen, which the pass warns about, and an input outside the bounds is
    warned about too.
    """

    low: Union[float, Tensor] = 0.0
    high: Union[float, Tensor] = 1.0
    epsilon: float = 1e-6

    def __post_init__(self):
        _check_parameters(self, "epsilon")
        try:
            low, high = torch.as_tensor(self.low), torch.as_tensor(self.high)
            ordered = bool((low <= high).all())
        except (TypeError, ValueError, RuntimeError) as error:
            raise TypeError(f"ZBox: low and high must be numbers or tensors that broadcast together, got "
                            f"low={self.low!r}, high={self.high!r} ({error}).") from error
        if not (bool(torch.isfinite(low).all()) and bool(torch.isfinite(high).all())) or not ordered:
            raise ValueError(f"ZBox: the bounds must be finite with low <= high everywhere, got low={self.low!r}, "
                             f"high={self.high!r}.")
        for name, bound in (("low", low), ("high", high)):
            if any(size != 1 for size in bound.shape[:-1]):
                # A rule treats the rows of a map alike: explanations cut the graph to a target's
                # subgraph, batch copies of it and split rows into blocks, which a bound per row
                # would not follow (it would land on other nodes).
                raise ValueError(f"ZBox: {name} of shape {tuple(bound.shape)} varies along a dimension other "
                                 f"than the last (the features): give one bound per input feature (shape [F]) "
                                 f"or a number.")

    def __eq__(self, other) -> bool:
        # the generated __eq__ compares tensor bounds with ==, which is no bool: two ZBox are one rule
        # (one map continues across them) where their bounds hold the same values. The pass compares a
        # map's rule with itself for every op: that is the identity, no copy of the bounds.
        if other is self:
            return True
        return type(other) is type(self) and self.epsilon == other.epsilon and \
            _same_bound(self.low, other.low) and _same_bound(self.high, other.high)

    def __hash__(self) -> int:
        return hash((type(self), self.epsilon, _bound_key(self.low), _bound_key(self.high)))

    def _low(self, x: Tensor) -> Tensor:
        return self._bound(self.low, "low", x)

    def _high(self, x: Tensor) -> Tensor:
        return self._bound(self.high, "high", x)

    def _bound(self, value, name: str, x: Tensor) -> Tensor:
        bound = torch.as_tensor(value, dtype=x.dtype, device=x.device)
        try:
            bound = bound.expand_as(x)
        except RuntimeError:
            raise ValueError(f"ZBox: {name} of shape {tuple(bound.shape)} does not broadcast to the input of the "
                             f"map it governs, of shape {tuple(x.shape)}: give one bound per input feature (the "
                             f"last dimension), or a number.") from None
        outside = (x < bound) if name == "low" else (x > bound)
        if x.is_floating_point() and bool(outside.any()):
            # z^B's terms x w - l w+ - h w- are signed as the rule means only for l <= x <= h
            found = (x[outside].min() if name == "low" else x[outside].max()).item()
            side = "below low" if name == "low" else "above high"
            warnings.warn(
                f"ZBox: the input of the map it governs reaches {found:.4g}, {side} ({int(outside.sum())} "
                f"entries): the rule assumes low <= x <= high, and outside the bounds its "
                f"relevance is not the z^B rule's. Give the bounds of the data (for example low=x.min(0).values, "
                f"high=x.max(0).values).", RuntimeWarning, stacklevel=2)
        return bound

    def streams(self):
        return (Stream(_same, _same, _zero), Stream(self._low, _positive, _zero),
                Stream(self._high, _negative, _zero))

    def gradients(self, relevance, outputs):
        s, dropped = divide(relevance, outputs[0] - outputs[1] - outputs[2], self.epsilon)
        return [s, -s, -s], dropped


@dataclass(frozen=True)
class Pass(Rule):
    """Pass rule: relevance goes through unchanged.

    The op-level rule of element-wise activations
    (:mod:`torch_geometric_lrp.functional`). On a linear map it only applies
    when input and output have the same shape (the relevance of each output
    goes to the input at the same position). As a module's rule it does not
    give an op without a relevance rule (an activation the pass does not
    know, such as ``hardshrink``) a way through: that op is still refused.
    """

    def streams(self):
        raise TypeError("Pass has no streams: relevance passes through unchanged.")

    def linear(self, x, weight, bias, out, relevance):
        if relevance.shape != x.shape:
            raise ValueError(
                f"Pass rule needs a layer whose input and output have the same shape, "
                f"got input {tuple(x.shape)} and output {tuple(relevance.shape)}. "
                f"Use Epsilon(), Gamma() or AlphaBeta() for this layer."
            )
        return relevance.clone(), None  # a copy: autograd may keep it as an input's .grad
