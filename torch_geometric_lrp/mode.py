"""The relevance pass: torch ops called during a forward get relevance rules.

:class:`RelevanceMode` is a :class:`torch.overrides.TorchFunctionMode`. While
it is active (in the thread or task that entered it), every torch function
call whose tensor arguments *carry relevance* is routed. A tensor carries
relevance when it requires grad and is not a parameter: the explained inputs
and everything computed from them. Parameters are constants of the pass (the
mode detaches them at each op, so nothing on the model is toggled).

* **Linear ops** (``add``, ``sub``, ``mul`` / ``div`` by a constant,
  ``linear``, ``matmul``, ``sum``, ``mean``, sum and mean scatters,
  ``batch_norm`` with running statistics, and copies such as indexing,
  ``cat`` and ``view``) extend the *linear map* they belong to. Each runs on
  the plain values and once per stream of the rule in effect (see
  :mod:`torch_geometric_lrp.rules` and :mod:`torch_geometric_lrp.maps`), so
  the rule sees the whole map between two non-linearities: messages,
  aggregation, root term and bias of a message-passing layer, or a chain of
  ``Linear`` layers.
* **Non-linear ops** end the maps that feed them and get an op-level rule from
  :mod:`torch_geometric_lrp.functional`: element-wise activations pass
  relevance, max/min reductions and scatters give it to the winner, the
  product of two signals splits it in halves unless one factor is a gate (a
  sigmoid, softmax, tanh or exp output: held constant), a signal in a
  denominator is a normaliser (held constant), ``layer_norm`` treats its
  standard deviation as a constant. Fused ops (LSTM / GRU, multi-head
  attention, ``addmm``) run as their simple ops
  (``torch_geometric_lrp.recurrent``, ``torch_geometric_lrp.attention``).
* Anything else whose output carries relevance has no rule. It is never given
  gradient semantics silently: with ``strict=True`` it raises
  :class:`UnsupportedOpError` where relevance reaches it (the graph walk
  before the backward, or a hook on its output for a backward of the
  user's own; an op whose output the explained output does not use, an
  auxiliary loss, is not refused), otherwise it is counted in
  :attr:`RelevanceMode.unsupported`.

The rule in effect is the one of the innermost running module that has one
(module hooks keep track), else ``default_rule``. Under the
:class:`~torch_geometric_lrp.rules.Pass` rule linear ops use their op-level
rules instead.

This reaches stock PyG layers (their ``propagate`` is plain torch code) and
the functional code of a model's own ``forward`` alike, so there is one
mechanism for both.
"""
from __future__ import annotations

import contextvars
import functools
import itertools
import math
from numbers import Real
import sys
import warnings
import threading
import weakref
from collections import Counter, OrderedDict
from contextlib import ExitStack, contextmanager, nullcontext
from typing import Any, Callable, Iterator, Optional, Sequence, Union

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn import Parameter
from torch.overrides import TorchFunctionMode, resolve_name
from torch.utils.hooks import RemovableHandle

from torch_geometric.nn.conv.dna_conv import restricted_softmax as _restricted_softmax
from torch_geometric.nn.conv.gcn_conv import gcn_norm as _gcn_norm
from torch_geometric.utils import softmax as _pyg_softmax

from . import functional as R
from .attention import ATTENTION_HANDLERS
from .recurrent import RECURRENT_HANDLERS
from . import maps
from .rules import Epsilon, Pass, Rule, ZBox, _negative, _positive, _zero, check_rule, nonfinite_guard, times

__all__ = ["RelevanceMode", "UnsupportedOpError", "relevance_pass", "is_active", "current_mode"]

_modes: contextvars.ContextVar[tuple] = contextvars.ContextVar("lrp_relevance_modes", default=())


class UnsupportedOpError(RuntimeError):
    """An op without a relevance rule received a tensor that carries relevance."""


def is_active() -> bool:
    """True while a relevance pass runs in this thread or task (layers use it
    to switch behaviour)."""
    return bool(_modes.get())


def current_mode() -> Optional["RelevanceMode"]:
    """The innermost relevance mode of this thread or task, or ``None``."""
    modes = _modes.get()
    return modes[-1] if modes else None


def _is_parameter(obj: Tensor) -> bool:
    # isinstance(obj, Parameter) goes through Parameter's metaclass: slow, and
    # this runs for every tensor of every torch call of the pass.
    cls = type(obj)
    return cls is Parameter or (cls is not Tensor and isinstance(obj, Parameter))


def _carries(obj: Any) -> bool:
    if isinstance(obj, Tensor):
        return obj.requires_grad and not _is_parameter(obj)
    if isinstance(obj, (list, tuple)):
        return _any_carries(obj)
    if isinstance(obj, dict):
        return _any_carries(obj.values())
    return False


def _any_carries(objs) -> bool:
    return _scan(objs) == 2


def _scan(objs) -> int:
    """2 if some tensor in ``objs`` carries relevance, 1 if there are only
    parameters that require grad, else 0 (one plain loop: this runs for every
    torch call of the pass)."""
    found = 0
    for obj in objs:
        if isinstance(obj, Tensor):
            if obj.requires_grad:
                if not _is_parameter(obj):
                    return 2
                found = 1
        elif isinstance(obj, (list, tuple)):
            inner = _scan(obj)
            if inner == 2:
                return 2
            found = found or inner
        elif isinstance(obj, dict):
            inner = _scan(obj.values())
            if inner == 2:
                return 2
            found = found or inner
    return found


def _has_parameter(objs) -> bool:
    for obj in objs:
        if isinstance(obj, Tensor) and _is_parameter(obj):
            return True
        if isinstance(obj, (list, tuple)) and _has_parameter(obj):
            return True
    return False


def _detach_parameters(args, kwargs, weights: Optional["_ByIdentity"] = None):
    """Parameters are constants of the pass: detached, so that nothing
    computed from them alone requires grad. With ``weights``, each detached
    copy is recorded there: a handler that runs an op as simpler ones (an
    ``addmm`` as a product and a sum) hands it on as the weight it is, which
    the rules modify."""
    def detach(obj):
        if isinstance(obj, Tensor) and _is_parameter(obj):
            constant = obj.detach()
            if weights is not None and constant.is_floating_point():
                weights[constant] = True
            return constant
        if isinstance(obj, (list, tuple)) and _has_parameter(obj):
            return type(obj)(detach(o) for o in obj)
        return obj
    return tuple(detach(a) for a in args), {k: detach(v) for k, v in kwargs.items()}


# PyG helpers that compute normalisation weights from the signal (softmax
# attention, GCN's symmetric degree normalisation of learned edge weights):
# their non-linear ops make gates, held constant (see RelevanceMode._route).
_NORMALISERS = frozenset({_pyg_softmax.__code__, _restricted_softmax.__code__, _gcn_norm.__code__})
_NORMALISER_OPS = frozenset("exp pow pow_ sqrt rsqrt".split())


def _in_normaliser() -> bool:
    frame = sys._getframe(2)
    for _ in range(8):  # the mode's own frames, then the helper
        if frame is None:
            return False
        if frame.f_code in _NORMALISERS:
            return True
        frame = frame.f_back
    return False


# Non-linear ops that compute a normalisation layer's statistics (see RelevanceMode._in_norm).
_STATISTICS = frozenset("""pow __pow__ square sqrt rsqrt std var norm mul __mul__""".split())

_names: dict = {}  # func -> short name (resolve_name is slow: cache it)


def _op_name(func: Callable) -> str:
    try:
        return _names[func]
    except (KeyError, TypeError):
        pass
    # torch.mm resolves to its deprecated alias torch.spmm: named as the op it is
    name = "torch.mm" if func is torch.mm else resolve_name(func) or getattr(func, "__name__", repr(func))
    for prefix in ("torch.Tensor.", "torch.nn.functional.", "torch.functional.", "torch_scatter.", "torch."):
        if name.startswith(prefix):
            name = name[len(prefix):]
            break
    try:
        _names[func] = name
    except TypeError:  # unhashable callable
        pass
    return name


# ---------------------------------------------------------------------------
# Ops that copy, select or reshape: plain autograd is the relevance rule.
# ---------------------------------------------------------------------------
COPIES = frozenset("""
__getitem__ __setitem__ index_select gather take take_along_dim masked_select
view view_as reshape reshape_as expand expand_as broadcast_to repeat repeat_interleave tile
cat concat concatenate stack hstack vstack transpose transpose_ t T.__get__ mT.__get__
permute movedim swapaxes squeeze squeeze_ unsqueeze unsqueeze_ contiguous clone
flatten unflatten narrow select split split_with_sizes tensor_split chunk unbind
to float double half bfloat16 type type_as cpu cuda detach detach_ requires_grad_
masked_fill masked_fill_ index_fill index_fill_ flip roll pad where sort topk
index_put index_put_ index_copy index_copy_ gather_csr data.__get__ new_zeros new_ones new_full new_empty
zeros_like ones_like empty_like full_like tril triu diagonal scatter scatter_ masked_scatter masked_scatter_
values _coalesced_ sparse_coo_tensor sparse_csr_tensor
""".split())
# ``values`` / ``_coalesced_`` / ``sparse_*_tensor``: PyG reads edge features
# out of a torch.sparse adjacency and builds one with self-loops; these only move
# the values (``coalesce``, which sums duplicates, is deliberately not a copy).

# Element-wise activations and gates with the pass rule. In-place variants run
# out of place (the relevance Function must own its output).
_PASS = {
    "relu": torch.relu, "relu_": torch.relu, "leaky_relu": F.leaky_relu, "leaky_relu_": F.leaky_relu,
    "elu": F.elu, "elu_": F.elu, "selu": F.selu, "celu": F.celu, "gelu": F.gelu, "silu": F.silu,
    "mish": F.mish, "sigmoid": torch.sigmoid, "sigmoid_": torch.sigmoid, "tanh": torch.tanh,
    "tanh_": torch.tanh, "softplus": F.softplus, "relu6": F.relu6, "hardtanh": F.hardtanh,
    "hardswish": F.hardswish, "hardsigmoid": F.hardsigmoid, "softsign": F.softsign,
    "prelu": F.prelu, "clamp": torch.clamp, "clamp_": torch.clamp, "clamp_min": torch.clamp_min,
    "clamp_max": torch.clamp_max, "clip": torch.clip, "logsigmoid": F.logsigmoid,
    "log1p": torch.log1p, "log1p_": torch.log1p, "expm1": torch.expm1, "expm1_": torch.expm1,
    # identity on finite values
    "nan_to_num": torch.nan_to_num,
    # dropout: identity in eval mode, a gate in training mode
    "dropout": F.dropout, "dropout_": F.dropout, "alpha_dropout": F.alpha_dropout,
    "feature_alpha_dropout": F.feature_alpha_dropout, "dropout1d": F.dropout1d,
    # the last op of a classifier: relevance passes, so seed the logit's value
    "softmax": F.softmax, "log_softmax": F.log_softmax,
    # torch.special's names of the same functions
    "special.expit": torch.sigmoid, "special.softmax": F.softmax, "special.log_softmax": F.log_softmax,
    # |x| = sign(x) x and the square root: monotone pieces, relevance passes
    "abs": torch.abs, "abs_": torch.abs, "sqrt": torch.sqrt, "sqrt_": torch.sqrt,
    # exp: a positive weight (Gaussian kernels, unnormalised attention), a gate in a product
    "exp": torch.exp, "exp_": torch.exp,
    # 1 / y and 1 / sqrt(y): a gate in a product, as y is in x / y (a hand-written RMS norm)
    "rsqrt": torch.rsqrt, "rsqrt_": torch.rsqrt, "reciprocal": torch.reciprocal, "reciprocal_": torch.reciprocal,
}


def _tensor(value, like: Tensor) -> Tensor:
    return value if isinstance(value, Tensor) else torch.as_tensor(value, dtype=like.dtype, device=like.device)


def _scaled(value, factor):
    """``value * factor`` keeping relevance on ``value`` if it carries any."""
    if factor == 1:
        return value
    return R.mul(value, factor) if _carries(value) else value * factor


def _add(mode, input, other, *, alpha=1):
    other = _scaled(other, alpha)
    if not _carries(input):  # the relevance Function wants the signal first
        input, other = other, input
    return R.add(input, _tensor(other, input))


def _sub(mode, input, other, *, alpha=1):
    return _add(mode, input, other, alpha=-alpha)


def _rsub(mode, input, other, *, alpha=1):  # other - alpha * input
    return _add(mode, _scaled(input, -alpha), other)


def _neg(mode, input):
    return R.mul(input, -1)


def _mul(mode, input, other):
    if _carries(input) and _carries(other):
        # A factor that comes out of a sigmoid, softmax, tanh or exp is a gate
        # (HAN's semantic attention, attention readouts, TopK / SAG pooling
        # scores, Gaussian kernels): held constant,
        # the other factor takes all relevance (Arras et al. 2017). The product
        # stays linear in that factor, so it continues its map.
        held = mode.held_factor(input, other)
        if held is not None:
            return mode.gated(torch.mul, input, other, held == 0)
        return R.product(input, other)
    if not _carries(input):
        input, other = other, input
    return R.mul(input, other)


def _div(mode, input, other, *, rounding_mode=None):
    if rounding_mode is not None or not _carries(input):
        return NotImplemented  # 1 / x has no rule
    if _carries(other):
        # A signal in the denominator is a normaliser (a sum of attention
        # scores, a norm, a count): held constant like LayerNorm's std, the
        # numerator takes all relevance. (x / y has gradient x input 0: it is
        # homogeneous of degree 0, so no rule splits it between x and y.)
        return mode.call(torch.div, input, other.detach())
    return R.div(input, other)


def _pow(mode, input, exponent=2):
    """``x ** 2`` (and ``square``): the product ``x * x`` (the product rule)."""
    if isinstance(exponent, Tensor) or exponent != 2 or not _carries(input):
        return NotImplemented
    return mode.call(torch.mul, input, input)


def _addmm(mode, input, mat1, mat2, *, beta=1, alpha=1):
    """``beta * input + alpha * (mat1 @ mat2)`` as those linear ops."""
    product = mode.call(torch.matmul, mat1, mat2)
    if alpha != 1:
        product = mode.call(torch.mul, product, alpha)
    if isinstance(beta, (int, float)) and beta == 0:
        return product
    return mode.call(torch.add, product, mode.call(torch.mul, input, beta) if beta != 1 else input)


def _normalize(mode, input, p=2.0, dim=1, eps=1e-12, out=None):
    r"""``F.normalize``, :math:`x / \max(\lVert x \rVert_p, \epsilon)`, as
    the ops it is made of, so that it is explained as the same division
    written out (``h / h.norm(dim=-1, keepdim=True)``): the norm, a signal in
    a denominator, is held constant (a gate), and the division continues the
    map of ``x``, whose rule's stabiliser then sits on the normalised output."""
    if out is not None:
        return NotImplemented
    denominator = mode.call(Tensor.norm, input, p, dim, True)
    denominator = mode.call(Tensor.clamp_min, denominator, eps)
    return mode.call(torch.div, input, mode.call(Tensor.expand_as, denominator, input))


def _einsum(mode, equation, *operands):
    """``torch.einsum`` with ``k >= 2`` operands that carry relevance (a
    bilinear score ``einsum('nd,de,ne->n', h_i, W, h_j)``): multilinear in
    them, so homogeneous of degree ``k``; Euler's split is the product rule
    per term (each signal factor gets an equal share). The other operands
    are constants, and so are gates (sigmoid or softmax outputs) next to
    other signals. (One signal: a linear op of the map, see ``LINEAR_OPS``.)"""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    signals = [i for i, t in enumerate(operands) if _carries(t)]
    if len(signals) < 2 or not isinstance(equation, str):
        return NotImplemented
    gates = [i for i in signals if mode.is_gate(operands[i])]
    if gates and len(gates) < len(signals):
        # a sigmoid or softmax factor is a gate, as in mul and matmul: held
        # constant, the other factors take the relevance (one of them left:
        # a linear op of its map)
        held = [t.detach() if i in gates else t for i, t in enumerate(operands)]
        return mode.call(torch.einsum, equation, *held)
    constants = [t.detach() if isinstance(t, Tensor) else t for t in operands]

    def fn(*xs):
        filled = list(constants)
        for i, x in zip(signals, xs):
            filled[i] = x
        return torch.einsum(equation, *filled)
    return R.homogeneous([operands[i] for i in signals], fn, len(signals))


def _statistic_and_mean(statistic):
    """``torch.std_mean`` / ``var_mean``: the statistic (Euler's split, see
    ``_homogeneous``) and the mean (linear), each routed as its own op."""
    def handler(mode, input, *args, **kwargs):
        dim = args[0] if args and not isinstance(args[0], bool) else kwargs.get("dim")
        keepdim = kwargs.get("keepdim", args[2] if len(args) > 2 else False)
        mean = mode.call(torch.mean, input) if dim is None and not keepdim else \
            mode.call(torch.mean, input, dim if dim is not None else tuple(range(input.dim())), keepdim=keepdim)
        return mode.call(statistic, input, *args, **kwargs), mean
    return handler


def _linear(mode, input, weight, bias=None):
    if _carries(weight) or _carries(bias):
        return NotImplemented
    rule = mode.current_rule()
    if isinstance(rule, Pass) and isinstance(input, Tensor) and weight.dim() == 2 and weight.shape[0] != input.shape[-1]:
        # (the rule's own check runs in the backward, where no module can be named)
        raise ValueError(f"rules: Pass in {mode.where()} needs a map whose input and output have the same shape, "
                         f"got input {tuple(input.shape)} and output width {weight.shape[0]}. Give this module "
                         f"Epsilon(), Gamma() or AlphaBeta().")
    return R.linear(input, weight, bias, rule=rule)


def _matmul(mode, input, other):
    if _carries(input) and _carries(other):
        held = mode.held_factor(input, other)
        if held is not None:  # softmax(Q K^T) @ V: the attention is a gate (as in mul)
            return mode.gated(torch.matmul, input, other, held == 0)
    if _carries(input) and _carries(other) and input.dim() >= 2 and other.dim() >= 2 and \
            input.layout == other.layout == torch.strided:
        # Two signals (NNConv's edge-conditioned weights with edge_attr explained):
        # each product x_ik w_kj gets the product rule (half each), and the sum
        # over k is a linear op that starts the next map.
        terms = R.product(input.unsqueeze(-1), other.unsqueeze(-3))
        rule = mode.current_rule()
        if isinstance(rule, Pass):
            return R.sum(terms, dim=-2)
        return mode._linear_op("sum", torch.sum, "add", rule, (terms,), {"dim": -2})
    if _carries(input) and not _carries(other) and other.dim() == 2 and other.layout == torch.strided:
        return R.linear(input, other.t(), rule=mode.current_rule())
    if _carries(other) and not _carries(input) and input.dim() == 2 and other.dim() == 2:
        return R.matmul(input, other)
    return NotImplemented


def _sum(mode, input, dim=None, keepdim=False, *, dtype=None):
    if dtype is not None:
        return NotImplemented
    return R.sum(input, dim=dim, keepdim=keepdim)


def _mean(mode, input, dim=None, keepdim=False, *, dtype=None):
    if dtype is not None:
        return NotImplemented
    return R.mean(input, dim=dim, keepdim=keepdim)


_REDUCE = {"sum": "sum", "mean": "mean", "amax": "max", "amin": "min"}


def _scatter_into(base: Tensor, dim: int, index: Tensor, src: Tensor, reduce: str, include_self: bool):
    """``base.scatter_reduce(dim, index, src, reduce, include_self)`` as a new
    tensor with relevance. ``base`` joins the reduction as one more member of
    each group when ``include_self`` (a constant base absorbs what it wins)."""
    if reduce == "prod":
        return _scatter_product(base, dim, index, src, include_self)
    if reduce not in _REDUCE or not (index.shape == src.shape or index.dim() == 1):
        return NotImplemented
    dim = dim % src.dim()
    size = base.shape[dim]
    if include_self and (_carries(base) or bool(base.any())):
        position = torch.arange(size, device=base.device)
        if index.dim() != 1:
            shape = [1] * base.dim()
            shape[dim] = -1
            position = position.view(shape).expand_as(base)
        src = torch.cat([base, src], dim=dim)
        index = torch.cat([position, index], dim=dim)
    elif not include_self and bool(base.any()):
        return NotImplemented  # empty groups would keep base's values
    return R.scatter(src, index, dim, size, _REDUCE[reduce])


def _scatter_product(base: Tensor, dim: int, index: Tensor, src: Tensor, include_self: bool):
    """``base.scatter_reduce(dim, index, src, 'prod')`` (PyG's ``'mul'``
    aggregation): each output is a product of its ``n`` members, times a
    constant ``base`` entry; homogeneous of degree ``n`` in them, so Euler's
    split gives each member ``1 / n`` of the output's relevance (an empty
    group's relevance stays with the constant, measured)."""
    if _carries(base) or index.shape != src.shape:
        return NotImplemented
    constant = base.detach()
    members = torch.zeros_like(constant).scatter_add(dim, index, torch.ones_like(src.detach()))
    degree = members.gather(dim, index).clamp(min=1)
    return R.homogeneous(src, lambda s: constant.scatter_reduce(dim, index, s, "prod", include_self=include_self),
                         degree)


def _scatter_add(mode, input, dim, index, src):
    return _scatter_into(input, dim, index, src, "sum", True)


def _index_add(mode, input, dim, index, source, *, alpha=1):
    return _scatter_into(input, dim, index, _scaled(source, alpha), "sum", True)


def _scatter_reduce(mode, input, dim, index, src, reduce, *, include_self=True):
    return _scatter_into(input, dim, index, src, reduce, include_self)


def _torch_scatter_max_min(reduce):
    def handler(mode, src, index, dim, out=None, dim_size=None):
        if out is not None:
            return NotImplemented
        dim = dim % src.dim()
        if index.dim() != 1 and index.shape != src.shape:
            return NotImplemented
        size = dim_size if dim_size is not None else (int(index.max()) + 1 if index.numel() else 0)
        values = R.scatter(src, index, dim, size, reduce, backend="torch_scatter")
        argument = getattr(torch.ops.torch_scatter, f"scatter_{reduce}")(src.detach(), index, dim, None, size)[1]
        return values, argument
    return handler


def _segment_csr(reduce):
    def handler(mode, src, indptr, out=None):
        if out is not None or indptr.dim() != 1:
            return NotImplemented
        dim = indptr.dim() - 1
        groups = indptr.numel() - 1
        index = torch.repeat_interleave(torch.arange(groups, device=src.device), indptr.diff())
        values = R.scatter(src, index, dim, groups, reduce)
        if reduce in ("max", "min"):
            argument = getattr(torch.ops.torch_scatter, f"segment_{reduce}_csr")(src.detach(), indptr, None)[1]
            return values, argument
        return values
    return handler


def _elementwise_max_min(reduce):
    """``torch.maximum(a, b)`` (``fmax``, and ``torch.max(a, b)``): each
    element is the larger of two members, so it runs as ``stack([a, b])``
    reduced by ``amax`` over the new dimension. The winner takes the
    relevance; a constant operand that wins absorbs it, measured (the
    stack of a constant is part of a map, as for ``cat``)."""
    def handler(mode, input, other, *, out=None):
        if out is not None or not isinstance(input, Tensor) or not isinstance(other, Tensor):
            return NotImplemented
        shape = torch.broadcast_shapes(input.shape, other.shape)
        a, b = (t if t.shape == shape else mode.call(Tensor.expand, t, shape) for t in (input, other))
        return mode.call(torch.amax if reduce == "max" else torch.amin, mode.call(torch.stack, [a, b]), 0)
    return handler


def _homogeneous(fn, degree: int):
    """A norm (``degree`` 1), ``std`` (1) or ``var`` (2) of a signal: Euler's
    split (:func:`torch_geometric_lrp.functional.homogeneous`). Used as a
    divisor (``h / h.norm(...)``), it is a gate there, as every signal in a
    denominator is (``_div``)."""
    def handler(mode, input, *args, **kwargs):
        if not _carries(input) or _carries(args) or _carries(kwargs) or kwargs.get("out") is not None:
            return NotImplemented
        return R.homogeneous(input, lambda x: fn(x, *args, **kwargs), degree)
    return handler


def _cosine_similarity(mode, x1, x2, dim=1, eps=1e-8):
    """``x1 . x2 / (|x1| |x2|)`` as torch computes it, each operand divided by
    its norm (clamped at ``eps``) first: the norms are gates, the product of
    two signals splits by the product rule, the sum over ``dim`` is linear."""
    if not isinstance(x1, Tensor) or not isinstance(x2, Tensor) or not x1.is_floating_point():
        return NotImplemented
    shape = torch.broadcast_shapes(x1.shape, x2.shape)
    unit = []
    for t in (x1, x2):
        if t.shape != shape:
            t = mode.call(Tensor.expand, t, shape)
        norm = torch.linalg.vector_norm(t.detach(), 2, dim=dim, keepdim=True).clamp_min(eps)
        unit.append(mode.call(torch.div, t, norm))
    return mode.call(torch.sum, mode.call(torch.mul, *unit), dim)


def _pairwise_distance(mode, x1, x2, p=2.0, eps=1e-6, keepdim=False):
    """``|x1 - x2 + eps|_p`` over the last dimension, op by op: the difference
    is linear (``eps`` a constant term), the norm splits by Euler."""
    difference = mode.call(torch.add, mode.call(torch.sub, x1, x2), eps)
    return mode.call(torch.linalg.vector_norm, difference, p, -1, keepdim)


def _cdist(mode, x1, x2, p=2.0, compute_mode=None):
    """``|x1_i - x2_j|_p`` for every pair of rows, op by op (the differences
    of all pairs, then a norm that splits by Euler)."""
    if x1.dim() != 2 or x2.dim() != 2:
        return NotImplemented
    difference = mode.call(torch.sub, mode.call(torch.unsqueeze, x1, 1), mode.call(torch.unsqueeze, x2, 0))
    return mode.call(torch.linalg.vector_norm, difference, p, -1)


def _scatter(in_place: bool):
    """``torch.scatter`` writes ``src`` into a copy of ``input``: a copy (see
    ``COPIES``, and ``_is_data`` for its data positions). With ``reduce`` it
    merges instead: ``'add'`` out of place is a scatter sum; the rest (and
    an in-place ``scatter_`` with ``reduce``, whose result the caller may
    drop) has no rule here."""
    def handler(mode, input, dim, index, src=None, *, value=None, reduce=None):
        if reduce is None:
            return NotImplemented  # a copy
        if reduce == "add" and isinstance(src, Tensor) and not in_place:
            out = _scatter_into(input, dim, index, src, "sum", True)
            if out is not NotImplemented:
                return out
        mode._report(f"scatter{'_' if in_place else ''} (reduce={reduce!r})")
        return NotImplemented
    return handler


_NUMBER_WRITES = frozenset("masked_fill index_fill where scatter masked_fill_ index_fill_ __setitem__".split())


def _is_number(v) -> bool:
    """A finite number, or a constant 0-dim float tensor holding one. (An
    infinite fill, as before a softmax, stays a copy: a constant ``-inf``
    would book ``-inf * 0`` as absorbed, and the softmax gives its entries
    nothing anyway.)"""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return math.isfinite(v)
    return isinstance(v, Tensor) and v.dim() == 0 and v.is_floating_point() and not _carries(v) and \
        bool(torch.isfinite(v))


def _number_written(mode, name: str, args, kwargs):
    """``masked_fill(h, mask, v)``, ``index_fill(h, dim, index, v)``,
    ``scatter(h, dim, index, v)`` and ``where(c, v, h)`` / ``where(c, h, v)``
    with a number ``v`` (or a constant 0-dim tensor) put ``v`` into a signal.
    A number is no operand, so whatever relevance reaches its entries would
    vanish unmeasured (under every rule where ``v != 0``, and under rules that
    do not read the input, such as ``Flat``, even for 0). Written as
    ``where(mask, full_like(h, v), h)``, the constant is an operand of the
    map that absorbs its share, measured."""
    if name in ("masked_fill_", "index_fill_", "__setitem__"):
        return _number_written_in_place(mode, name, args, kwargs)
    if name == "where":
        if len(args) != 3 or kwargs:
            return NotImplemented
        condition, a, b = args
        if _is_number(a) and isinstance(b, Tensor) and _carries(b):
            return mode.call(torch.where, condition, _full(b, a), b)
        if _is_number(b) and isinstance(a, Tensor) and _carries(a):
            return mode.call(torch.where, condition, a, _full(a, b))
        return NotImplemented
    names = {"masked_fill": ("input", "mask", "value"), "index_fill": ("input", "dim", "index", "value"),
             "scatter": ("input", "dim", "index", "src")}[name]
    bound = dict(zip(names, args))
    bound.update({("src" if k == "value" and name == "scatter" else k): v for k, v in kwargs.items()})
    if set(bound) != set(names) or not isinstance(bound["input"], Tensor) or not _carries(bound["input"]):
        return NotImplemented
    value = bound["src" if name == "scatter" else "value"]
    if not _is_number(value):
        return NotImplemented
    input = bound["input"]
    if name == "masked_fill":
        mask = bound["mask"]
    else:
        flags = torch.zeros(input.shape, dtype=torch.bool, device=input.device)
        mask = flags.index_fill(bound["dim"], bound["index"], True) if name == "index_fill" else \
            flags.scatter(bound["dim"], bound["index"], True)
    return mode.call(torch.where, mask, _full(input, value), input)


def _number_written_in_place(mode, name: str, args, kwargs):
    """``h.masked_fill_(mask, v)``, ``h.index_fill_(dim, index, v)`` and
    ``h[key] = v`` with a number ``v``, into a signal ``h`` that is no map's
    end (an activation's output; a map's end is replayed as a write of the
    map, :meth:`RelevanceMode._written_map_end`): the same write out of place
    (``_number_written``, whose constant absorbs its share, measured), copied
    into ``h`` with grad (so views of ``h`` follow it, as autograd runs them),
    and standing for ``h`` in the pass where it ends a map, as a replayed
    write into a map's end does. Written in place as autograd runs it, the
    relevance reaching the written entries would vanish unmeasured. (A view
    ``h`` is left to autograd: its base changes too.)"""
    h = args[0] if args else None
    if not isinstance(h, Tensor) or not _carries(h) or (mode._maps and h in mode._maps) or kwargs or h._is_view():
        # (a view: its base changes too, unseen by the write's constant; as autograd runs it, measured)
        return NotImplemented
    if name == "__setitem__" and (len(args) != 3 or not _is_number(args[2])):
        return NotImplemented
    if name != "__setitem__" and not _is_number(args[-1]):
        return NotImplemented
    before = h.clone()  # what the out-of-place write reads (and may save): h is written next
    if name == "__setitem__":
        mask = torch.zeros(h.shape, dtype=torch.bool, device=h.device)
        mask[args[1]] = True
        written = _number_written(mode, "masked_fill", (before, mask, args[2]), {})
    else:
        written = _number_written(mode, name[:-1], (before, *args[1:]), {})
    if written is NotImplemented:
        return NotImplemented
    if h.is_leaf:  # a watched input: torch lets no forward write into it with grad
        if written not in mode._maps:  # (under an op-level rule) nothing could stand for it: autograd refuses it
            return NotImplemented
        origin = mode._stands_for(h, written, lambda t: t.copy_(written.detach()))
        return None if name == "__setitem__" else origin
    with torch.enable_grad():
        h.copy_(written)  # as autograd runs the write: views of h made before it follow it
    if written in mode._maps:  # the next linear op continues the write's map, as after a write into a map's end
        mode._stand_in(h, written, h)
    return None if name == "__setitem__" else h


def _full(like: Tensor, value) -> Tensor:
    """A constant tensor of ``like``'s shape holding the number ``value``."""
    return torch.as_tensor(value, dtype=like.dtype, device=like.device).expand(like.shape).clone()


def _addcmul(mode, input, tensor1, tensor2, *, value=1):
    """``input + value * tensor1 * tensor2``, op by op."""
    product = mode.call(torch.mul, tensor1, tensor2)
    if not (isinstance(value, (int, float)) and value == 1):
        product = mode.call(torch.mul, product, value)
    return mode.call(torch.add, input, product)


def _lerp(mode, input, end, weight):
    """``input + weight * (end - input)``, op by op (a ``weight`` that carries
    relevance makes it a product of signals without a rule here: refused)."""
    if _carries(weight):
        return NotImplemented
    return mode.call(torch.add, input, mode.call(torch.mul, mode.call(torch.sub, end, input), weight))


def _glu(mode, input, dim=-1):
    """``a * sigmoid(b)`` for the two halves of ``input``: the sigmoid is a gate."""
    a, b = mode.call(torch.chunk, input, 2, dim)
    return mode.call(torch.mul, a, mode.call(torch.sigmoid, b))


def _piecewise_constant(fn):
    """``sign``, ``floor``, ``round``, ...: constant between jumps, so no
    relevance flows through them (their gradient is 0). Their output is a
    constant of the pass: a gate where it multiplies a signal, a term that
    absorbs (measured) where it is added."""
    def handler(mode, *args, **kwargs):
        a, kw = _filled(args, kwargs, [t.detach() for t, _ in _tensors_of(args, kwargs)])
        return fn(*a, **kw)
    return handler


def _max_min(reduce):
    def handler(mode, input, dim=None, keepdim=False):
        if isinstance(dim, Tensor):  # torch.max(a, b): element-wise
            return _elementwise_max_min(reduce)(mode, input, dim)
        plain = getattr(torch, reduce)
        if dim is None:
            index = torch.zeros(input.numel(), dtype=torch.long, device=input.device)
            return R.scatter(input.reshape(-1), index, 0, 1, reduce).reshape(())
        index = torch.zeros(input.shape[dim], dtype=torch.long, device=input.device)
        values = R.scatter(input, index, dim, 1, reduce)
        if not keepdim:
            values = values.squeeze(dim)
        indices = plain(input.detach(), dim, keepdim).indices
        return torch.return_types.max((values, indices)) if reduce == "max" else \
            torch.return_types.min((values, indices))
    return handler


def _amax_amin(reduce):
    def handler(mode, input, dim=(), keepdim=False):
        dims = (dim,) if isinstance(dim, int) else tuple(dim) or tuple(range(input.dim()))
        if len(dims) != 1:
            return NotImplemented
        index = torch.zeros(input.shape[dims[0]], dtype=torch.long, device=input.device)
        values = R.scatter(input, index, dims[0], 1, reduce)
        return values if keepdim else values.squeeze(dims[0])
    return handler


def _batch_norm(mode, input, running_mean, running_var, weight=None, bias=None, training=False,
                momentum=0.1, eps=1e-5):
    if training or running_mean is None or running_var is None:
        return NotImplemented  # batch statistics depend on the signal
    return R.batch_norm(input, running_mean, running_var, weight, bias, eps)


def _layer_norm(mode, input, normalized_shape, weight=None, bias=None, eps=1e-5):
    return R.layer_norm(input, normalized_shape, weight, bias, eps)


def _rms_norm(mode, input, normalized_shape, weight=None, eps=None):
    r"""``F.rms_norm`` (``torch.nn.RMSNorm``): :math:`x \, s` with
    :math:`s = w / \sqrt{\mathrm{mean}(x^2) + \epsilon}` a gate, as the
    standard deviation is in LayerNorm: a product of the map."""
    dims = tuple(range(-len(normalized_shape), 0))
    eps = torch.finfo(input.dtype).eps if eps is None else eps
    scale = torch.rsqrt(input.detach().pow(2).mean(dims, keepdim=True) + eps)
    if weight is not None:
        scale = scale * weight.detach()
    return mode.call(torch.mul, input, scale)


# Output activations: the relevance of a class starts from its logit, the
# input of these, which the mode remembers (see RelevanceMode.logits_of).
_OUTPUT_ACTIVATIONS = (F.softmax, F.log_softmax, torch.sigmoid, F.logsigmoid)
# Activations whose outputs are gates when they multiply another signal
# (weights in [0, 1], [-1, 1] or positive: gates, attention, pooling scores, kernels).
_GATES = (F.softmax, torch.sigmoid, torch.exp, torch.tanh, torch.rsqrt, torch.reciprocal)
# Copies whose output is a gate where all their inputs are (``cat``, ``chunk``,
# ``gather``, ``topk`` values, ``masked_fill``): autograd nodes, as for _GATE_SHAPES.
_GATE_COPIES = frozenset({"CatBackward", "StackBackward", "SplitBackward", "SplitWithSizesBackward",
                          "UnbindBackward", "GatherBackward", "TBackward", "RepeatBackward", "FlipBackward",
                          "RollBackward", "MaskedSelectBackward", "TopkBackward", "SortBackward", "MaxBackward",
                          "MinBackward", "KthvalueBackward", "AmaxBackward", "AminBackward",
                          "MaskedFillBackward", "WhereBackward", "IndexPutBackward", "DiagonalBackward",
                          "TrilBackward", "TriuBackward", "UnfoldBackward", "NarrowBackward"})


def _joined(infos: list) -> tuple:
    """The gate ``(kind, made)`` of a sum or join of gates ``infos``: kind
    ``"gate"`` where all are, else ``"tanh"`` (a tanh output carries relevance
    in a product with a sigmoid-like gate, an LSTM's candidate, and so does what
    it is summed into: the cell state ``f c + i g``, a GRU's
    ``(1 - z) n + z h``); made when the latest of them was."""
    kind = "gate" if all(k == "gate" for k, _ in infos) else "tanh"
    return kind, max(made for _, made in infos)


# Identities on a gate's values (FAConv drops out its tanh attention): still a gate.
_GATE_KEEPING = (F.dropout, F.alpha_dropout, F.feature_alpha_dropout, F.dropout1d, torch.nan_to_num)
# Autograd nodes of reshapes that keep the order of elements.
_ORDER_KEEPING = frozenset({"ViewBackward", "ReshapeAliasBackward", "SqueezeBackward", "UnsqueezeBackward",
                            "CloneBackward", "UnsafeViewBackward", "AliasBackward"})
# Selections along a dimension, in order (they keep every element when the dimension has one).
_SELECTIONS = frozenset({"SelectBackward", "SliceBackward"})
# ... and the broadcasts a gate goes through before it multiplies.
_GATE_SHAPES = _ORDER_KEEPING | {"ExpandBackward", "TransposeBackward", "PermuteBackward", "SelectBackward",
                                 "SliceBackward", "IndexBackward", "IndexSelectBackward"}
# What an output's logits are found through (RelevanceMode.logits_of): reshapes, selections
# that keep every element, dtype casts (``.double()``); and every copy or reshape.
_TO_LOGITS = _ORDER_KEEPING | _SELECTIONS | {"ToCopyBackward"}
# Element-wise ops after an output activation (the pass rule's Function: dropout, clamp, exp,
# ...): the output is no longer the activation's, which logits_of warns about.
_AFTER_ACTIVATION = frozenset({"_PassBackward", "ToCopyBackward"})
_COPIES = _GATE_SHAPES | _GATE_COPIES | _SELECTIONS


def _pass(fn):
    def handler(mode, input, *args, **kwargs):
        if not _carries(input) or _carries(args) or _carries(kwargs):
            return NotImplemented
        kwargs.pop("inplace", None)
        out = R.activation(input, lambda x, *a: fn(x, *a, **kwargs), *args)
        if fn in _OUTPUT_ACTIVATIONS:
            mode._pre_activation[out.grad_fn] = input
        if fn in _GATES:
            mode.mark_gate(out, ("tanh" if fn is torch.tanh else "gate", out.grad_fn._sequence_nr()))
        elif fn in _GATE_KEEPING:
            mode.mark_gate(out, mode.gate_info(input))
        return out
    return handler


HANDLERS: dict[str, Callable] = {
    "add": _add, "__add__": _add, "__radd__": _add, "__iadd__": _add, "add_": _add,
    "sub": _sub, "__sub__": _sub, "__isub__": _sub, "sub_": _sub, "subtract": _sub,
    "__rsub__": _rsub, "rsub": _rsub,
    "neg": _neg, "__neg__": _neg, "negative": _neg,
    "mul": _mul, "__mul__": _mul, "__rmul__": _mul, "__imul__": _mul, "mul_": _mul, "multiply": _mul,
    "div": _div, "__truediv__": _div, "__itruediv__": _div, "div_": _div, "true_divide": _div, "divide": _div,
    "linear": _linear,
    "matmul": _matmul, "__matmul__": _matmul, "mm": _matmul, "_sparse_mm": _matmul, "sparse.mm": _matmul,
    "sum": _sum, "mean": _mean,
    "scatter_add_": _scatter_add, "scatter_add": _scatter_add,
    "index_add_": _index_add, "index_add": _index_add,
    "scatter_reduce_": _scatter_reduce, "scatter_reduce": _scatter_reduce,
    "scatter_max": _torch_scatter_max_min("max"), "scatter_min": _torch_scatter_max_min("min"),
    "segment_sum_csr": _segment_csr("sum"), "segment_mean_csr": _segment_csr("mean"),
    "segment_max_csr": _segment_csr("max"), "segment_min_csr": _segment_csr("min"),
    "max": _max_min("max"), "min": _max_min("min"),
    "amax": _amax_amin("max"), "amin": _amax_amin("min"),
    "maximum": _elementwise_max_min("max"), "minimum": _elementwise_max_min("min"),
    "fmax": _elementwise_max_min("max"), "fmin": _elementwise_max_min("min"),
    "norm": _homogeneous(torch.norm, 1),
    "linalg.vector_norm": _homogeneous(torch.linalg.vector_norm, 1),
    "linalg.norm": _homogeneous(torch.linalg.norm, 1),
    "std": _homogeneous(torch.std, 1), "var": _homogeneous(torch.var, 2),
    "scatter": _scatter(False), "scatter_": _scatter(True),
    "cosine_similarity": _cosine_similarity, "pairwise_distance": _pairwise_distance, "cdist": _cdist,
    "addcmul": _addcmul, "lerp": _lerp, "glu": _glu,
    **{name: _piecewise_constant(getattr(torch, name)) for name in "sign sgn floor ceil round trunc heaviside".split()},
    "batch_norm": _batch_norm, "layer_norm": _layer_norm, "rms_norm": _rms_norm, "pow": _pow, "__pow__": _pow, "square": _pow,
    "addmm": _addmm, "baddbmm": _addmm, "addmv": _addmm, "einsum": _einsum,
    "normalize": _normalize,
    "std_mean": _statistic_and_mean(torch.std), "var_mean": _statistic_and_mean(torch.var),
    **{name: _pass(fn) for name, fn in _PASS.items()},
    **ATTENTION_HANDLERS, **RECURRENT_HANDLERS,
}


# ---------------------------------------------------------------------------
# Linear ops: they extend a linear map (run on values and on each stream).
# ---------------------------------------------------------------------------
# Kinds say what a constant operand is: in "add" ops a bias (absorbs
# relevance), in "mul" ops a weight (a parameter, modified by the rule) or a
# gate (kept), in "copy" ops at a data position an input-like constant.
_ADD_OPS = """add __add__ __radd__ __iadd__ add_ sub __sub__ __isub__ sub_ subtract __rsub__ rsub
neg __neg__ negative sum mean scatter_add_ scatter_add index_add_ index_add scatter_reduce_ scatter_reduce
segment_sum_csr segment_mean_csr cumsum diff""".split()
_SCALAR_TERMS = frozenset("""add __add__ __radd__ __iadd__ add_ sub __sub__ __isub__ sub_ subtract __rsub__
rsub""".split())
_MUL_OPS = """mul __mul__ __rmul__ __imul__ mul_ multiply div __truediv__ __itruediv__ div_ true_divide divide
matmul __matmul__ mm bmm mv sparse.mm _sparse_mm""".split()
_WEIGHT_PRODUCTS = frozenset("matmul __matmul__ mm mv".split())
# Linear ops that mix features with a weight matrix: their output is a signal, also of gates.
_MIXING = _WEIGHT_PRODUCTS | frozenset("linear bmm einsum sparse.mm _sparse_mm".split())
MAP_COPIES = frozenset("""
__getitem__ index_select gather take take_along_dim masked_select
view view_as reshape reshape_as expand expand_as broadcast_to repeat repeat_interleave tile
cat concat concatenate stack hstack vstack transpose t T.__get__ mT.__get__
permute movedim swapaxes squeeze unsqueeze contiguous clone
flatten unflatten narrow select split split_with_sizes tensor_split chunk unbind
to float double half bfloat16 type type_as cpu cuda masked_fill index_fill flip roll pad where
index_put index_copy gather_csr tril triu diagonal scatter masked_scatter
""".split())
LINEAR_OPS: dict[str, str] = {
    **{name: "add" for name in _ADD_OPS}, **{name: "mul" for name in _MUL_OPS},
    "linear": "linear", "batch_norm": "batch_norm", "instance_norm": "instance_norm", "einsum": "mul",
    **{name: "copy" for name in MAP_COPIES},
}
# In-place ops run out of place (the caller uses the returned tensor).
_OUT_OF_PLACE = {
    "__iadd__": torch.add, "add_": torch.add, "__isub__": torch.sub, "sub_": torch.sub,
    "subtract_": torch.subtract, "__imul__": torch.mul, "mul_": torch.mul, "multiply_": torch.multiply,
    "__itruediv__": torch.div, "div_": torch.div, "divide_": torch.divide, "true_divide_": torch.true_divide,
    "neg_": torch.neg, "negative_": torch.negative, "addmm_": torch.addmm, "addmv_": torch.addmv,
    "baddbmm_": torch.baddbmm, "addcmul_": torch.addcmul, "lerp_": torch.lerp, "cumsum_": torch.cumsum,
    "scatter_add_": torch.scatter_add, "index_add_": torch.index_add, "scatter_reduce_": torch.scatter_reduce,
}
# Ops that take an index tensor whose backward gathers with it: an int32 index
# is made int64 in the pass (torch's CPU gather with an expanded int32 index, as
# PyG's scatter builds from an int32 batch or edge_index, reads zeros, so such a
# backward silently drops relevance).
_INDEXED = frozenset("""gather take_along_dim scatter scatter_ scatter_add scatter_add_ scatter_reduce
scatter_reduce_ index_add index_add_ index_select index_copy index_copy_ index_fill index_fill_""".split())
_NARROW_INTEGERS = (torch.int32, torch.int16, torch.int8, torch.uint8)


def _long_indices(args, kwargs):
    """``args`` and ``kwargs`` with every integer tensor narrower than int64 made int64."""
    def long(obj):
        return obj.long() if isinstance(obj, Tensor) and obj.dtype in _NARROW_INTEGERS else obj
    return tuple(long(a) for a in args), {k: long(v) for k, v in kwargs.items()}


# In-place copies that write their values into the first argument.
_WRITES = frozenset("__setitem__ index_put_ index_copy_ masked_scatter_ scatter_".split())
# In-place ops that only copy, fill or reshape: replayed on each stream of a
# map end (RelevanceMode._written_map_end); other in-place ops into a map end
# that do not run out of place (_OUT_OF_PLACE) are refused.
_COPY_WRITES = _WRITES | frozenset("""masked_fill_ index_fill_ fill_ zero_ copy_ unsqueeze_ squeeze_ t_
transpose_ swapdims_ swapaxes_""".split())
# In-place ops the pass runs out of place (see RelevanceMode.__torch_function__).
_IN_PLACE = frozenset(_OUT_OF_PLACE) | frozenset(n for n in _PASS if n.endswith("_"))
# Where the written number is among the arguments after the tensor written into.
_WRITTEN_VALUE = {"__setitem__": 1, "masked_fill_": 1, "index_fill_": 2, "fill_": 0, "scatter_": 2}
_write_funcs: dict = {}  # func -> whether it writes into its first argument in place


def _writes_in_place(func) -> bool:
    """``func`` writes into its first argument where it is (``__setitem__``,
    ``masked_fill_``, ``unsqueeze_``, ...; not the in-place ops the pass runs
    out of place, ``_IN_PLACE``)."""
    writes = _write_funcs.get(func)
    if writes is None:
        name = _op_name(func)
        writes = _write_funcs[func] = name == "__setitem__" or (
            name.endswith("_") and not name.endswith("__") and not name.startswith("_") and name not in _IN_PLACE
            and name not in ("requires_grad_", "detach_", "retain_grad_"))
    return writes


# Ops that only read metadata: they neither end a map nor need a rule.
_METADATA = frozenset("""size dim numel shape.__get__ dtype.__get__ device.__get__ ndim.__get__ layout.__get__
is_floating_point is_complex __len__ stride is_contiguous element_size storage_offset requires_grad.__get__
is_leaf.__get__ grad_fn.__get__ is_sparse.__get__ is_cuda.__get__ nelement ndimension get_device
new_zeros new_ones new_full new_empty zeros_like ones_like empty_like full_like""".split())
# The callables of _METADATA met so far, run before any other routing; not
# those that read autograd state, which parameters must answer as constants.
_AUTOGRAD_METADATA = frozenset({"requires_grad.__get__", "is_leaf.__get__", "grad_fn.__get__"})
_METADATA_FUNCS: set = set()
_CUTS = frozenset({"detach", "data.__get__"})  # ops that cut a signal from its relevance
# selections of an edge list's columns that RelevanceMode.track_columns follows
_COLUMN_SELECTIONS = frozenset({Tensor.__getitem__, Tensor.index_select, torch.index_select,
                                torch._C._VariableFunctions.index_select,  # (PyG wraps torch.index_select)
                                Tensor.narrow, torch.narrow})
_BATCH_NORM_ROLES = {1: "gate", "running_mean": "gate", 2: "gate", "running_var": "gate",
                     3: "weight", "weight": "weight", 4: "bias", "bias": "bias"}


def _is_linear(name: str, kind: str, args, kwargs) -> bool:
    """Whether this call of a linear-kind op is linear in its signals."""
    if name.endswith("einsum"):  # einsum(equation, *operands) or einsum(equation, [operands])
        operands = args[1] if len(args) == 2 and isinstance(args[1], (list, tuple)) else args[1:]
        return sum(_carries(a) for a in operands) == 1
    if kind == "mul":
        if name.startswith(("div", "__truediv", "__itruediv", "true_divide", "divide")):
            other = args[1] if len(args) > 1 else kwargs.get("other")
            return kwargs.get("rounding_mode") is None and other is not None and not _carries(other)
        return sum(_carries(a) for a in args[:2]) == 1
    if kind == "linear":
        return not (_carries(args[1:]) or _carries(kwargs.get("weight")) or _carries(kwargs.get("bias")))
    if kind == "batch_norm":
        return not _carries(args[1:]) and not _carries(list(kwargs.values()))
    if kind == "instance_norm":
        return not _carries(args[1:]) and not _carries(list(kwargs.values()))
    if name == "scatter":
        return kwargs.get("reduce") is None
    if name.startswith("scatter_reduce"):
        reduce = args[4] if len(args) > 4 else kwargs.get("reduce")
        return reduce in ("sum", "mean")
    return True


_NEGATED_FIRST = frozenset("neg __neg__ negative rsub __rsub__".split())
_NEGATED_SECOND = frozenset("sub __sub__ __isub__ sub_ subtract".split())
_SCALED_SECOND = frozenset("add __add__ __radd__ __iadd__ add_".split())
_SIGNED_NAMES = _NEGATED_FIRST | _NEGATED_SECOND | _SCALED_SECOND | {"diff", "index_add", "index_add_"}


def _accumulates(args, kwargs) -> bool:
    """``index_put_(indices, values, accumulate=True)``: a sum, not a copy."""
    return bool(args[3] if len(args) > 3 else kwargs.get("accumulate", False))


def _is_real(value) -> bool:
    """A plain number (Python or NumPy), not a bool."""
    return isinstance(value, Real) and not isinstance(value, bool)


def _sign(value) -> int:
    return -1 if _is_real(value) and value < 0 else 1


def _operand_signs(name: str, args, kwargs, keyed: list) -> list[int]:
    """The sign (+1 or -1) with which the linear op ``name`` takes each of
    its tensor operands (``keyed``, :func:`_tensors_of`): -1 for what it
    subtracts or negates, and for everything under a negative number factor
    (``h * -0.5``, ``alpha=-1``). An op that mixes signs within one operand
    (``diff``) has no such split: refused under a sign-splitting rule."""
    if name == "diff":
        raise UnsupportedOpError("'diff' subtracts neighbouring entries of one tensor, so the positive and "
                                 "negative signs that AlphaBeta, ZPlus and Gamma keep apart mix inside it; "
                                 "write it as a subtraction of two slices (h[1:] - h[:-1]), or use Epsilon for "
                                 "this module.")
    if name not in _SIGNED_NAMES and LINEAR_OPS.get(name) != "mul":
        return [1] * len(keyed)  # no operand negated or scaled by a number
    alpha = _sign(kwargs.get("alpha", 1))
    factors = [a for a in (*args, kwargs.get("other")) if _is_real(a)]
    scale = _sign(factors[0]) if LINEAR_OPS.get(name) == "mul" and factors else 1
    signs = []
    for _, key in keyed:
        sign = scale
        position = key[0] if isinstance(key, tuple) else key
        if name in _NEGATED_FIRST and position in (0, "input", "self"):
            sign = -alpha if name in ("rsub",) else -1
        elif name in _NEGATED_SECOND and position in (1, "other"):
            sign = -alpha
        elif name in _SCALED_SECOND and position in (1, "other"):
            sign = alpha
        elif name in ("index_add", "index_add_") and position in (3, "source"):
            sign = alpha
        signs.append(sign)
    return signs


def _signed_part(f: Tensor, sign: int, divides: bool) -> Tensor:
    """The part of factor ``f`` of one sign; as a divisor, ``inf`` elsewhere
    (``x / inf = 0``)."""
    if divides:
        f = f if f.is_floating_point() else f.to(torch.get_default_dtype())
        return torch.where(f > 0 if sign > 0 else f < 0, f, torch.full_like(f, math.inf))
    if f.layout == torch.sparse_coo:  # a sparse factor: the part of its stored values
        f = f.coalesce()
        return torch.sparse_coo_tensor(f.indices(), _signed_part(f.values(), sign, False), f.shape, is_coalesced=True,
                                       check_invariants=False)
    if f.layout == torch.sparse_csr:
        return torch.sparse_csr_tensor(f.crow_indices(), f.col_indices(), _signed_part(f.values(), sign, False),
                                       f.shape, check_invariants=False)
    return f.clamp(min=0) if sign > 0 else f.clamp(max=0)


def _is_data(name: str, key) -> bool:
    """Positions of a copy op that hold data (the rest are shapes, indices or
    dtype references)."""
    if key == 0 or key == "input" or (isinstance(key, tuple) and key[0] == 0):
        return True
    return name == "where" and key in (1, 2, "other") or name == "index_put" and key in (2, "values") or \
        name == "scatter" and key in (3, "src") or name == "masked_scatter" and key in (2, "source") or \
        name == "index_copy" and key in (3, "source")


#: Ops whose second operand divides (a scalar's ``__rtruediv__`` has no signal to divide).
_DIVISIONS = ("div", "__truediv", "__itruediv", "true_divide", "divide")


def _guarding(fn: Callable, roles: list, divides: bool) -> Callable:
    """``fn`` whose gate and weight operands (``roles``, in
    :func:`_tensors_of`'s order) may hold inf / NaN: where they do, it runs through
    :func:`maps.guarded`, whose backward reads 0 relevance times such an
    entry as 0; ``divides``: the gate is a divisor."""
    def call(*args, **kwargs):
        tensors = [t for t, _ in _tensors_of(args, kwargs)]
        # (a weight is a constant of the pass too: guarded as a gate is)
        gates = [i for i, r in enumerate(roles) if r in ("gate", "weight") and i < len(tensors)
                 and tensors[i].is_floating_point() and tensors[i].layout == torch.strided]
        if all(bool(torch.isfinite(tensors[i]).all()) and not (divides and bool((tensors[i] == 0).any()))
               for i in gates):
            return fn(*args, **kwargs)

        def run(values: list) -> Tensor:
            a, kw = _filled(args, kwargs, values)
            return fn(*a, **kw)
        return maps.guarded(run, tensors, gates, divides)
    return call


def _tensors_of(args, kwargs) -> list:
    """``(tensor, key)`` of every tensor of ``args`` (and of lists in them)
    and ``kwargs``, in order; ``key`` is the position, ``(position, item)``
    or the name."""
    found = []
    for i, a in enumerate(args):
        if isinstance(a, Tensor):
            found.append((a, i))
        elif isinstance(a, (list, tuple)):
            found.extend((t, (i, j)) for j, t in enumerate(a) if isinstance(t, Tensor))
    if kwargs:
        found.extend((v, k) for k, v in kwargs.items() if isinstance(v, Tensor))
    return found


def _filled(args, kwargs, values: list):
    """``args`` and ``kwargs`` with their tensors replaced by ``values``, in
    :func:`_tensors_of`'s order."""
    todo = iter(values)
    out = []
    for a in args:
        if isinstance(a, Tensor):
            out.append(next(todo))
        elif isinstance(a, (list, tuple)) and any(isinstance(t, Tensor) for t in a):
            out.append(type(a)([next(todo) if isinstance(t, Tensor) else t for t in a]))
        else:
            out.append(a)
    if kwargs:
        kwargs = {k: next(todo) if isinstance(v, Tensor) else v for k, v in kwargs.items()}
    return out, kwargs


_FUNCTION_APPLY = torch.autograd.Function.apply.__func__.__code__


def _in_function_forward() -> bool:
    """A custom autograd Function's ``forward`` is running (autograd runs it
    without grad): found on the Python stack, looked up only where grad is
    off."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code is _FUNCTION_APPLY:
            return True
        frame = frame.f_back
    return False


_NO_HOOKS: "OrderedDict" = OrderedDict()  # what the handle of a hook that is not registered removes from


def _detached(out):
    """``out`` (a tensor, or a tuple or list of them) with every tensor detached."""
    if isinstance(out, Tensor):
        return out.detach() if out.requires_grad else out
    if isinstance(out, (tuple, list)) and any(isinstance(t, Tensor) and t.requires_grad for t in out):
        items = [t.detach() if isinstance(t, Tensor) and t.requires_grad else t for t in out]
        return type(out)(items) if type(out) in (tuple, list) else type(out)(tuple(items))
    return out


def _distinct(outputs) -> tuple:
    """The stream outputs of a map, each tensor once (where every path of a
    ``Gamma`` map counts up, its two streams are one tensor, whose gradient
    is already the sum of both)."""
    return tuple({id(o): o for o in outputs}.values())


def _value_of(t: Tensor) -> Tensor:
    """A tensor operand as a constant of the pass."""
    return t.detach() if t.requires_grad else t


def _columns_of(source: Tensor, indices: Tensor) -> Optional[list]:
    """The columns of integer ``source`` (``[N]``: one column, ``[N, C]``)
    that ``indices`` views row for row: ``[c]`` for ``source[:, c]`` (or a
    1-D ``source`` itself), ``[c, ...]`` for a slice of columns; else
    ``None``. An empty ``source`` (the ``edge_attr`` of a cut without edges)
    has no memory to compare: ``indices`` must be it or a view of it (a
    lookup of no rows carries no relevance, but keeps ``edge_attr_mask``
    there as on a cut with edges)."""
    if indices.is_floating_point() or indices.device != source.device or indices.dim() not in (1, 2) \
            or source.dim() not in (1, 2) or indices.shape[0] != source.shape[0] \
            or indices.untyped_storage().data_ptr() != source.untyped_storage().data_ptr():
        return None
    if not source.numel() and indices is not source:
        base = source if source._base is None else source._base
        if indices._base is None or indices._base is not base:
            return None
    if source.shape[0] > 1 and indices.stride(0) != source.stride(0):
        return None
    offset = indices.storage_offset() - source.storage_offset()
    if source.dim() == 1:
        return [0] if offset == 0 and indices.dim() == 1 else None
    step = source.stride(1)
    if step == 0 or offset % step:
        return None
    first, width = offset // step, source.shape[1]
    if indices.dim() == 1:
        return [first] if 0 <= first < width else None
    if indices.shape[1] > 1 and indices.stride(1) % step:
        return None
    columns = [first + k * (indices.stride(1) // step) for k in range(indices.shape[1])]
    return columns if all(0 <= c < width for c in columns) else None


class _ByIdentity:
    """``{tensor: value}`` by identity, each entry dropped when its tensor
    dies: :class:`torch.utils.weak.WeakIdKeyDictionary` for the three
    operations the pass needs, at a fraction of its per-call cost (it runs a
    few times for every op of the pass). Values are never ``None``."""

    __slots__ = ("_data",)

    def __init__(self) -> None:
        self._data: dict = {}  # id(tensor) -> (weak reference, value)

    def get(self, t: Tensor):
        entry = self._data.get(id(t))
        return entry[1] if entry is not None and entry[0]() is t else None

    def __contains__(self, t: Tensor) -> bool:
        return self.get(t) is not None

    def __setitem__(self, t: Tensor, value) -> None:
        key, data = id(t), self._data

        def drop(ref, key=key, data=data):  # the tensor died: its id may be reused
            entry = data.get(key)
            if entry is not None and entry[0] is ref:
                del data[key]
        data[key] = (weakref.ref(t, drop), value)

    def tensors(self) -> list:
        """The tensors that have an entry and are alive."""
        return [t for t in (ref() for ref, _ in list(self._data.values())) if t is not None]

    def __bool__(self) -> bool:
        return bool(self._data)


class RelevanceMode(TorchFunctionMode):
    """Routes torch ops on relevance-carrying tensors to relevance rules.

    Parameters
    ----------
    strict : bool
        Raise :class:`UnsupportedOpError` at the first op that carries
        relevance but has no rule (default). With ``False`` such ops run with
        their gradient and are counted in :attr:`unsupported`.
    rules : dict, optional
        ``{module: Rule}``: the rule of the linear maps run inside each module
        (the innermost running module with an entry wins).
    default_rule : Rule, optional
        The rule where no module has one (default ``Epsilon()``).
    type_rules : sequence of (type, Rule), optional
        Rules for modules not in ``rules`` (for example modules a forward
        reaches outside the model), by type.
    model : Module, optional
        Where to find module names for messages.
    """

    def __init__(self, strict: bool = True, rules: Optional[dict] = None,
                 default_rule: Optional[Rule] = None, names: Optional[dict] = None,
                 model: Optional[torch.nn.Module] = None, type_rules: Sequence = ()):
        super().__init__()
        for rule in (default_rule, *(rules or {}).values(), *(r for _, r in type_rules)):
            if rule is not None:
                check_rule(rule)
        self.strict = strict
        self.rules = {id(m): r for m, r in (rules or {}).items()}
        self._keep_alive = list((rules or {}).keys())  # ids stay valid while the mode lives
        self._thread = threading.get_ident()  # the thread of the pass
        self._thread_warned = False  # a module of the model ran in another thread (enter)
        self._outside: set = set()  # ids of modules outside the model that the forward ran
        self.outside_undo: list = []  # how to undo their preparation (relevance_pass, at exit)
        self.type_rules = tuple(type_rules)
        self.unused_types: tuple = ()  # type keys of the rules that no module has had (relevance_pass)
        self._own_hooks = False  # relevance_hook is registering (Tensor.register_hook is let through)
        self.default_rule = default_rule or Epsilon()
        self._names = None if names is None else {id(m): n for m, n in names.items()}
        self._model = model
        self._stack: list = []  # (module, rule in effect) of the running modules
        self.unsupported: Counter = Counter()
        self.in_place: list = []  # in-place ops on relevance tensors, run out of place
        # set where the output was compared with a plain forward (lrp.explain, check_conservation)
        self.in_place_checked = False
        # the tensors an in-place op left behind, running out of place (-> the op), and the ops
        # whose tensor the forward used again afterwards: it then computes something else
        self._stale = _ByIdentity()
        self._any_stale = False
        # copies of a signal cut from its relevance in the forward (detach, .data) and copies of
        # those: one made to require gradients again is a leaf that relevance vanishes into
        self._cut = _ByIdentity()
        self._any_cut = False
        self._cut_leaves = _ByIdentity()  # such copies made to require gradients -> where
        self._weighted = _ByIdentity()  # ends of ZBox maps that went through a weight (see _check_zbox)
        self.lookups_tried = False  # a lookup of a watched integer input ran (it may have failed)
        self._zbox_told = False
        self.stale_used: list = []
        self._pre_activation: dict = {}  # grad_fn of an output activation -> its input
        # grad_fn of gates (sigmoid, softmax, tanh, ... outputs) -> ("gate" or "tanh", when the gate was made)
        self._gates: dict = {}
        # output of a linear op -> (rule, stream outputs): where a linear op
        # that consumes it continues the map
        self._maps = _ByIdentity()
        self._written = _ByIdentity()  # map end written in place -> the map's new end
        self._any_written = False
        self._origins = _ByIdentity()  # a written map's new end -> the user's tensor it stands for
        self._params: dict = {}  # (id(parameter), modifier) -> modified parameter (the pass keeps the model alive)
        self._nonzero: dict = {}  # (id(parameter), modifier) -> whether that has a non-zero entry
        self._factor_signs: dict = {}  # id(parameter) -> the signs of its entries (signed rules)
        self._buffers: Optional[set] = None  # ids of the model's buffers (_is_buffer), found when first needed
        # weights made of parameters in the forward (RGCNConv's weight[i], a basis
        # decomposition comp @ W): the rules modify them like the parameters
        self._weights = _ByIdentity()
        # the first op whose output (carrying relevance) is not finite;
        # tracked op by op only once a watched input is not finite (no cost otherwise)
        self._track_nonfinite = False
        self.nonfinite_gates = False  # a linear op met a gate with inf / NaN entries (see _guarding)
        self.first_nonfinite: Optional[str] = None
        # integer inputs whose embedding lookups start relevance (watch_lookups)
        self._sources: list = []
        self._reported: set = set()  # grad_fn of ops counted in unsupported (strict=False)
        # grad_fn of ops without a rule (strict=True) -> their error, raised where relevance reaches them
        self._refused: dict = {}
        self._functions_checked = None  # the grad_fn of the last output check_functions walked from
        self.lookups: list = []  # (name, columns, watched output) per lookup, in order
        self._columns: Optional[_ByIdentity] = None  # edge lists -> the input edges of their columns (track_columns)
        self._refusal: Optional[str] = None  # why a handler did not take an op it has a rule for (refuse)

    # -- rules of the running modules ------------------------------------------------------
    def enter(self, module: torch.nn.Module, *args) -> None:
        """A module starts running (a forward pre-hook)."""
        if current_mode() is not self:
            if id(module) in self.rules and threading.get_ident() != self._thread and not self._thread_warned:
                # The model's own module runs in another thread during this pass:
                # its training flag (the module's, not the thread's) says eval.
                self._thread_warned = True
                warnings.warn(f"LRP: {type(module).__name__} runs in this thread while a relevance pass in another "
                              f"thread explains its model, which is in eval mode for the pass (training flags "
                              f"belong to the modules, as with PyG's Explainer): this forward runs in eval mode "
                              f"too. Do not train a model while explaining it in another thread.",
                              RuntimeWarning, stacklevel=2)
            return
        rule = self.rules.get(id(module))
        if rule is None and self._model is not None and id(module) not in self._outside:
            # A module the forward reaches outside the model (a global encoder):
            # prepared as the model's own modules are (eval mode first of all),
            # until the pass ends.
            self._outside.add(id(module))
            self._keep_alive.append(module)
            self._forward_bound(module)
            _prepare(module, self.outside_undo)
        if rule is None and self.type_rules:
            from .convert import type_rule  # late: convert imports this module
            rule = type_rule(module, self.type_rules, self._stack[-1][0] if self._stack else None)
            if rule is not None:
                self.unused_types = ()
        self._stack.append((module, rule if rule is not None else self.current_rule()))

    def _forward_bound(self, module: torch.nn.Module) -> None:
        """A module outside the model gets its relevance class only now, in
        its forward pre-hook, when torch has bound its ``forward`` already:
        where that class has a ``forward`` of its own (``TransformerConv``'s
        constant skip gate, ``SGFormerAttention``), this call would run the
        stock one. Refused."""
        from .nn.conv import SWAPPABLE  # late: nn imports this module
        needs = getattr(SWAPPABLE.get(type(module)), "needs_own_forward", None)
        if needs is None or not needs(module):
            return
        swap = SWAPPABLE[type(module)]
        key = f"{type(module).__name__} outside the model, in {self.where()}"
        if self.strict:
            raise UnsupportedOpError(
                f"The forward runs a {type(module).__name__} that is not a submodule of the model ({key}). Inside "
                f"a pass it needs the forward of torch_geometric_lrp.nn.{swap.__name__}, which the pass gives only "
                f"to the model's own modules. Register it in the model (self.encoder = encoder), or build it as "
                f"torch_geometric_lrp.nn.{swap.__name__}; strict=False only reports it.")
        self.unsupported[key] += 1

    def leave(self, module: torch.nn.Module, *args) -> None:
        """It is done (a forward hook that is always called)."""
        if current_mode() is self and self._stack and self._stack[-1][0] is module:
            self._stack.pop()

    def _in_norm(self) -> bool:
        """A normalisation layer of PyG (``torch_geometric.nn.norm``) is running."""
        return any(type(m).__module__.startswith("torch_geometric.nn.norm") for m, _ in self._stack)

    def current_rule(self) -> Rule:
        return self._stack[-1][1] if self._stack else self.default_rule

    # -- linear maps ---------------------------------------------------------------------------
    def alias(self, t: Tensor) -> Tensor:
        """A view of ``t`` in the same linear map (under ``t``'s own rule): a
        separate handle whose relevance counts only the uses of the alias.
        (Of the tensor that stands for ``t`` where the forward wrote into it:
        a module's output built in a buffer, ``out[idx] = lin(h[idx])``.)"""
        t = self.resolved(t)
        entry = self._maps.get(t)
        if entry is None:
            with torch.enable_grad():
                return t.view_as(t)
        return self._linear_op("view_as", Tensor.view_as, "copy", entry[0], (t, t), {})

    def streams_of(self, t: Tensor) -> tuple[Tensor, ...]:
        """The stream outputs of the linear map that ``t`` ends, whose
        gradients ``g_k`` make its relevance :math:`\\sum_k t_k \\odot g_k`;
        ``(t,)`` where ``t`` ends no map (its gradient is its relevance)."""
        entry = self._maps.get(t)
        return (t,) if entry is None else _distinct(entry[1])

    def relevance_hook(self, t: Tensor, fn: Callable[[Tensor], None]) -> None:
        """Call ``fn(relevance)`` with the relevance of ``t`` during the
        backward: its gradient, or inside a linear map the sum over streams of
        stream value times stream gradient (``fn`` may be called once per
        stream with that stream's part)."""
        entry = self._maps.get(t)
        if entry is None:
            self._own_hook(t, lambda grad: fn(grad))
            return
        for output in _distinct(entry[1]):
            value = output.detach()
            self._own_hook(output, lambda grad, value=value: fn(times(value, grad)))

    def _own_hook(self, t: Tensor, fn: Callable) -> None:
        """``t.register_hook(fn)`` as the pass's own hook, which
        ``__torch_function__`` lets through (it drops the model's own)."""
        self._own_hooks = True
        try:
            t.register_hook(fn)
        finally:
            self._own_hooks = False

    def _register(self, value, rule: Rule, outputs: list):
        if isinstance(value, (tuple, list)):
            return type(value)(self._register(v, rule, [o[i] for o in outputs]) for i, v in enumerate(value))
        if not isinstance(value, Tensor) or not value.is_floating_point() or not outputs[0].requires_grad:
            return value  # an integer copy, or nothing left that carries relevance
        # The value leaves as the end of its map (so that a consumer that is
        # not a linear op, or a plain ``backward``, sees relevance); a linear
        # op that consumes it continues the map from the stream outputs.
        closed = maps.close(value, rule, outputs)
        self._maps[closed] = (rule, tuple(outputs))
        return closed

    def _role(self, name: str, kind: str, t: Tensor, key) -> str:
        """What tensor operand ``t`` (at ``key``) is in linear op ``name`` of ``kind``."""
        if kind == "copy" and not _is_data(name, key):
            return "ref"
        if not t.is_floating_point() and kind != "mul":  # an integer factor of a product is a gate
            return "ref"
        if _carries(t):
            return "signal"
        if kind == "add":
            return "bias"
        if kind == "mul":
            return "weight" if _is_parameter(t) or t in self._weights else "gate"
        if kind == "linear":
            return "weight" if key in (1, "weight") else "bias"
        if kind == "batch_norm":
            return _BATCH_NORM_ROLES.get(key, "gate")
        return "input"

    def _stream_arg(self, t: Tensor, role: str, rule: Rule, k: int, stream) -> Tensor:
        """Operand ``t`` (of ``role``) as stream ``k`` of ``rule`` sees it."""
        if role == "signal":
            return self._stream_input(t, rule, k, stream)
        if role == "weight":
            return self._modified(t, stream.weight)
        if role == "gate" and stream.gate is not _same_input:
            return stream.gate(_value_of(t))
        if role in ("gate", "ref"):
            return _value_of(t)
        if role == "bias":
            return self._constant(t, stream.bias, "bias")
        return self._constant(t, stream.input, "constant")

    def _linear_op(self, name: str, func: Callable, kind: str, rule: Rule, args, kwargs):
        fn = _OUT_OF_PLACE.get(name, func)
        if name in _SCALAR_TERMS and len(args) > 1 and isinstance(args[1], (int, float)) and isinstance(args[0], Tensor):
            # a number added to a signal is a constant term: as a tensor, what it absorbs is measured
            args = (args[0], torch.tensor(args[1], dtype=args[0].dtype, device=args[0].device), *args[2:])
        # the tensor operands and their roles, in order (found once, used per stream)
        keyed = _tensors_of(args, kwargs)
        operands = [(t, self._role(name, kind, t, key)) for t, key in keyed]
        if not any(r == "signal" for _, r in operands):
            # relevance only in a shape or dtype reference (expand_as, type_as)
            a, kw = _filled(args, kwargs, [_value_of(t) for t, _ in operands])
            return fn(*a, **kw)
        if kind == "copy" and not any(r == "input" for _, r in operands) and \
                not any(r == "signal" and t in self._maps for t, r in operands):
            # A copy of relevance tensors only: its gradient is the rule, no map needed.
            # (With a constant operand, as in cat([x, degree]), it is part of a map
            # so that what the constant absorbs is measured.)
            return NotImplemented
        infos = [self.gate_info(t) for t, r in operands if r == "signal"] if self._gates else [None]
        divides = name.startswith(_DIVISIONS)
        if any((r == "gate" and t.is_floating_point() and t.layout == torch.strided and (
                not bool(torch.isfinite(t).all()) or (divides and bool((t == 0).any())))) or
               (r == "weight" and not self._finite_weight(t)) for t, r in operands):
            # A gate with inf / NaN entries (attention over a NaN feature, a NaN edge weight; a divisor 0,
            # the degree of an isolated node), or a weight (a row of a class the output does not explain):
            # the op runs on them as the model's does; its backward reads 0 relevance times such an entry
            # as 0 (maps.guarded), so that NaN does not spread into rows the output does not depend on.
            fn = _guarding(fn, [r for _, r in operands], divides)
            self.nonfinite_gates = True
        out = self._linear_op_of_signals(name, fn, kind, rule, args, kwargs, keyed, operands)
        if None not in infos and not (name in _MIXING and any(r == "weight" for _, r in operands)):
            # a gate times constants or weights element by element, summed or joined with gates
            # (FAConv's tanh(.) * w, GMMConv's sum_k exp(.) g_k): still a gate of the products it
            # enters, held constant there as the gates it is made of would be. (A weight matrix
            # that mixes features, Linear(sigmoid(h)), makes a signal: sigmoid and tanh are
            # activations there.)
            self.mark_gate(out, _joined(infos))
        return out

    def _linear_op_of_signals(self, name, fn, kind, rule, args, kwargs, keyed, operands):
        """The op run once per stream of ``rule`` (on the operands as each
        stream sees them), registered as a map end."""
        if rule.signed:
            return self._signed_op(name, fn, rule, args, kwargs, keyed, [r for _, r in operands])
        weighted = self._check_zbox(name, operands) if isinstance(rule, ZBox) else False
        streams = rule.streams()
        outputs = []
        with nullcontext() if torch.is_grad_enabled() else torch.enable_grad():
            for k, stream in enumerate(streams):
                a, kw = _filled(args, kwargs, [self._stream_arg(t, r, rule, k, stream) for t, r in operands])
                outputs.append(fn(*a, **kw))
        if len(streams) == 1 and streams[0].identity:
            value = outputs[0]
        else:  # every operand a constant: no graph is built
            a, kw = _filled(args, kwargs, [_value_of(t) for t, _ in operands])
            value = fn(*a, **kw)
        out = self._register(value, rule, outputs)
        if weighted:  # (the ends of an op with several outputs, split or chunk, each)
            for end in (out if isinstance(out, (tuple, list)) else (out,)):
                if isinstance(end, Tensor):
                    self._weighted[end] = True
        return out

    def _check_zbox(self, name: str, operands: list) -> bool:
        r"""``ZBox`` gives each input its bound by the sign of one weight,
        :math:`l_i w^+ + h_i w^-`: exact on a map with one weight per path
        and no negative gate. A second weight on a path (two ``Linear`` in a
        row) or a negative gate (a negative edge weight, ``ChebConv``'s
        Laplacian) can flip a path's sign after its bound was chosen, so the
        relevance is not that of ``ZBox`` on the merged map: told once per
        pass. Returns whether the op's output has gone through a weight.
        (A second weight is counted where it mixes features, ``name`` in
        ``_MIXING``: an element-wise product with a weight on the way to a
        gate, as GAT's attention scores ``(x W) * a``, is no path of the map.)"""
        weighted = any(r == "weight" for _, r in operands)
        continued = any(r == "signal" and t in self._weighted for t, r in operands)
        again = weighted and continued and name in _MIXING
        negative = any(r == "gate" and t.is_floating_point() and t.layout == torch.strided and
                       bool((_value_of(t) < 0).any()) for t, r in operands)
        if (again or negative) and not self._zbox_told:
            self._zbox_told = True
            warnings.warn(
                f"LRP: ZBox in {self.where()} meets {'a second weight on a path' if again else 'a negative gate'}: "
                "it chooses each input's bound by the sign of one weight (l w+ + h w-), and a second weight or a "
                "negative gate can flip a path's sign after that, so the relevance is not ZBox's on the merged "
                "map. Give ZBox a layer with one weight and non-negative gates (the input layer of GCN, SAGE, "
                "GIN's aggregation with its first Linear), or another rule here.", RuntimeWarning, stacklevel=4)
        return weighted or continued

    def _signed_op(self, name: str, fn: Callable, rule: Rule, args, kwargs, keyed: list, roles: list):
        r"""Linear op ``name`` under a ``signed`` rule (see
        :class:`~torch_geometric_lrp.rules.Rule`), whose two streams split the
        map's paths by sign. With factors :math:`f` (weights, gates) each
        combination of their signs runs once: the parts whose signs (of the
        stream, the factors and the op's own sign for that operand, see
        :func:`_operand_signs`) multiply to ``+`` count up, the others down;
        a bias or constant counts by its own sign. ``(P, N)`` pairs
        (``AlphaBeta``, ``ZPlus``) run that for :math:`P'` and for
        :math:`N'`, and the op once more for its value; ``(z, z_up)`` pairs
        (``Gamma``) run the op on :math:`z` (its value) and the count up on
        :math:`z_\uparrow` and :math:`z - z_\uparrow`. ``keyed`` and
        ``roles``: the tensor operands (:func:`_tensors_of`) and their roles,
        as :meth:`_linear_op` found them."""
        op = _SignedOp(self, name, fn, rule, args, kwargs, keyed, roles)
        with nullcontext() if torch.is_grad_enabled() else torch.enable_grad():
            if rule.value_stream:
                value, up = op.value()
                return self._register(value, rule, [value, value if up else op.count(1)])
            outputs = [op.count(1), op.count(-1)]
        return self._register(op.plain(), rule, outputs)

    def _finite_weight(self, w: Tensor) -> bool:
        """Whether weight ``w`` holds only finite entries; for a parameter
        found once per pass (see :meth:`_signs_of`)."""
        if not w.is_floating_point() or w.layout != torch.strided:
            return True
        key = ("finite", id(w)) if _is_parameter(w) else None
        found = self._factor_signs.get(key) if key is not None else None
        if found is None:
            found = bool(torch.isfinite(_value_of(w)).all())
            if key is not None:
                self._factor_signs[key] = found
        return found

    def _signs_of(self, f: Tensor) -> list:
        """The signs (``1``, ``-1``) that the entries of factor or constant
        ``f`` have (none for all zeros); for a parameter found once per pass."""
        key = id(f) if _is_parameter(f) else None
        found = self._factor_signs.get(key) if key is not None else None
        if found is None:
            v = _value_of(f)
            if v.layout != torch.strided:  # a sparse factor (an adjacency in torch.sparse.mm): its stored values
                v = v.coalesce().values() if v.is_sparse else v.values()
            low, high = torch.stack(torch.aminmax(v)).tolist() if v.numel() else (0, 0)
            found = [1] * (high > 0) + [-1] * (low < 0)
            if key is not None:
                self._factor_signs[key] = found
        return found

    def _is_weight(self, name: str, args) -> bool:
        """Whether ``name(*args)`` makes a weight: a copy (``W[i]``,
        ``W.view(...)``) or a product (``comp @ W``) of parameters and weights."""
        operands = args[:1] if name in MAP_COPIES else args[:2] if name in _WEIGHT_PRODUCTS else ()
        return bool(operands) and all(isinstance(t, Tensor) and (_is_parameter(t) or t in self._weights)
                                      for t in operands)

    def _batch_norm(self, rule: Rule, input, running_mean, running_var, weight=None, bias=None,
                    training=False, momentum=0.1, eps=1e-5):
        r"""Batch norm with running statistics is :math:`x s + t` with
        :math:`s = w / \sqrt{\sigma^2 + \epsilon}` a gate and
        :math:`t = b - \mu s` a bias: two ops of the map, so what ``t``
        absorbs is measured. With batch statistics (no running ones, or
        ``training``) it is instance norm over the batch: the mean a linear op,
        the variance a gate."""
        if training or running_mean is None or running_var is None:
            return self._centred_and_scaled(rule, input, (0, *range(2, input.dim())), weight, bias, eps)
        scale = torch.rsqrt(running_var + eps)
        if weight is not None:
            scale = scale * weight.detach()
        shift = -running_mean * scale
        if bias is not None:
            shift = shift + bias.detach()
        shape = [1] * input.dim()
        shape[1 if input.dim() > 1 else 0] = -1
        scaled = self._linear_op("mul", torch.mul, "mul", rule, (input, scale.view(shape)), {})
        return self._linear_op("add", torch.add, "add", rule, (scaled, shift.view(shape)), {})

    def _instance_norm(self, rule: Rule, input, running_mean=None, running_var=None, weight=None, bias=None,
                       use_input_stats=True, momentum=0.1, eps=1e-5, cudnn_enabled=False):
        r"""Instance norm is :math:`(x - \mu(x)) s + b` per channel: the mean
        over the instance is a linear op of the map, the scale
        :math:`s = w / \sqrt{\sigma^2 + \epsilon}` a gate (the variance held
        constant, as for LayerNorm), ``b`` a bias. With running statistics
        (``use_input_stats=False``) it is batch norm."""
        if not use_input_stats:
            return self._batch_norm(rule, input, running_mean, running_var, weight, bias, False, momentum, eps)
        return self._centred_and_scaled(rule, input, tuple(range(2, input.dim())), weight, bias, eps)

    def _centred_and_scaled(self, rule: Rule, input, dims, weight, bias, eps):
        r""":math:`(x - \mu(x)) s + b` per channel (dim 1), statistics over ``dims``."""
        shape = [1] * input.dim()
        shape[1] = -1
        scale = torch.rsqrt(input.detach().var(dim=dims, unbiased=False, keepdim=True) + eps)
        if weight is not None:
            scale = scale * weight.detach().view(shape)
        mean = self._linear_op("mean", torch.mean, "add", rule, (input,), {"dim": dims, "keepdim": True})
        centred = self._linear_op("sub", torch.sub, "add", rule, (input, mean), {})
        out = self._linear_op("mul", torch.mul, "mul", rule, (centred, scale), {})
        if bias is None:
            return out
        return self._linear_op("add", torch.add, "add", rule, (out, bias.detach().view(shape)), {})

    def _modified(self, t: Tensor, modify: Callable[[Tensor], Tensor]) -> Tensor:
        """``modify(t)``; for a parameter computed once per pass."""
        if modify is _same_input:
            return t.detach()
        if not _is_parameter(t):
            return modify(t.detach())
        key = (id(t), modify)
        value = self._params.get(key)
        if value is None:
            value = self._params[key] = modify(t.detach())
        return value

    def _constant(self, t: Tensor, modify: Callable[[Tensor], Tensor], label: str) -> Tensor:
        """Constant term ``modify(t)`` of a stream, booked as absorbing under
        ``label`` where it has a non-zero entry (for a parameter, checked
        once per pass)."""
        c = self._modified(t, modify)
        if _is_parameter(t):
            key = (id(t), modify)
            nonzero = self._nonzero.get(key)
            if nonzero is None:
                nonzero = self._nonzero[key] = bool(c.any())
        else:
            nonzero = bool(c.any())
        return maps.constant(c, label) if nonzero else c

    def _stream_input(self, t: Tensor, rule: Rule, k: int, stream) -> Tensor:
        """Stream ``k``'s input for ``t``: its stream output when ``t`` is in a
        map of the same rule, else ``t`` opened (a relevance tensor, or the
        closed end of a map under another rule)."""
        entry = self._maps.get(t)
        if entry is not None and entry[0] == rule:
            return entry[1][k]
        return maps.open_stream(t, None if stream.input is _same_input else stream.input)

    def _gated_product(self, name: str, args) -> bool:
        """``a * b`` with one factor a gate (a softmax or sigmoid output) and
        the other not: inside a normalisation layer too (``DiffGroupNorm``'s
        ``softmax(lin(x)) * x``) the gate rule of a product, not a statistic."""
        if name not in ("mul", "__mul__") or len(args) < 2 or not (_carries(args[0]) and _carries(args[1])):
            return False
        return self.is_gate(args[0]) != self.is_gate(args[1])

    def is_gate(self, t: Tensor) -> Optional[str]:
        """What gate ``t`` is: ``"gate"`` for a sigmoid, softmax, exp, rsqrt
        or reciprocal output of this pass, ``"tanh"`` for a tanh output,
        ``None`` for no gate; seen through reshapes and broadcasts (``view``,
        ``expand``, ...) and through copies whose inputs are all gates
        (``cat``, ``chunk``, ``gather``, ``topk`` values, ``masked_fill``),
        of the kind ``_joined`` gives."""
        info = self.gate_info(t)
        return None if info is None else info[0]

    def gate_info(self, t: Tensor) -> Optional[tuple]:
        """``(kind, made)`` of gate ``t`` (see :meth:`is_gate`), ``made`` the
        autograd sequence number of the activation it comes from (the latest
        of several); ``None`` for no gate."""
        return self._gate_of(t.grad_fn) if self._gates else None

    def _gate_of(self, node) -> Optional[tuple]:
        while node is not None and node not in self._gates and \
                type(node).__name__.rstrip("0123456789") in _GATE_SHAPES:
            node = node.next_functions[0][0]
        if node is None:
            return None
        info = self._gates.get(node)
        if info is not None or type(node).__name__.rstrip("0123456789") not in _GATE_COPIES:
            return info
        infos = [self._gate_of(n) for n, _ in node.next_functions if n is not None]
        if not infos or None in infos:
            return None
        return _joined(infos)

    def check_in_place(self, model: torch.nn.Module, plain: Tensor, out: Tensor) -> None:
        """Where the forward ran in-place ops on relevance tensors (:attr:`in_place`,
        run out of place in the pass): raise where the pass's output ``out``
        differs from the ``plain`` forward's, as the forward then went on
        without their returned tensor and computed something else."""
        self.in_place_checked = True
        if not torch.allclose(plain, out.detach(), rtol=1e-4, atol=1e-6, equal_nan=True):
            raise UnsupportedOpError(
                f"{type(unwrap(model)).__name__}: the forward runs in-place ops on tensors that carry relevance "
                f"({', '.join(dict.fromkeys(self.in_place))}) and goes on without a returned tensor. Inside the "
                f"relevance pass such ops run out of place, so the pass would explain another function than the "
                f"model. Write them out of place (x = x.mul(a), not x.mul_(a)).")

    def held_factor(self, a: Tensor, b: Tensor) -> Optional[int]:
        """Which factor of the product of signals ``a`` and ``b`` is a gate,
        held constant (``0`` or ``1``), or ``None`` for neither (the product
        rule): the one gate; of a sigmoid-like gate and a tanh output the
        former (an LSTM's ``i * g``, ``o * tanh(c)``: the tanh output carries,
        as the candidate does); of two gates of one kind the one made later
        (FAConv's ``x_j * tanh(.)`` after a tanh activation, ``exp(s) * (1 /
        sum exp(s))``: a gate is made from the signal it then weighs)."""
        info_a, info_b = self.gate_info(a), self.gate_info(b)
        gate_a, gate_b = (None if info is None else info[0] for info in (info_a, info_b))
        if gate_a is None and gate_b is None:
            return None
        if gate_a != gate_b:
            return 0 if gate_a == "gate" or gate_b is None else 1
        # when their activations ran, not the scaling or view applied where they meet
        made_a, made_b = info_a[1], info_b[1]
        return None if made_a == made_b else 0 if made_a > made_b else 1

    def mark_gate(self, out, info: Optional[tuple]) -> None:
        """Remember ``out`` as a gate of ``info = (kind, made)`` (nothing for ``None``)."""
        if info is not None and isinstance(out, Tensor) and out.grad_fn is not None:
            self._gates[out.grad_fn] = info

    def call(self, func: Callable, *args, **kwargs):
        """``func(*args, **kwargs)`` routed like an op of the forward: for
        handlers that run an op as several simpler ones (an LSTM cell as its
        gates and products, attention as its weights and a product)."""
        return self._route(func, args, kwargs)

    def gated(self, func: Callable, input: Tensor, other: Tensor, input_is_gate: bool) -> Tensor:
        """``func(input, other)`` with the gate operand held constant."""
        if input_is_gate:
            input = input.detach()
        else:
            other = other.detach()
        return self._route(func, (input, other), {})

    # -- the mode ------------------------------------------------------------------------------
    def logits_of(self, out: Tensor) -> Tensor:
        """The logits under ``out``: the input of the softmax / log-softmax /
        sigmoid that produced ``out`` in this pass, seen through reshapes
        that keep the order of elements (``view``, ``squeeze``, ...) and
        selections that keep every element (``p[:, 0]`` of a ``[N, 1]``
        output), reshaped like ``out``; or ``out`` itself. A selection of
        part of such an output (``softmax(z)[:, 1]``) warns: the logit of
        what it kept is not known here, so relevance starts at the
        probability."""
        node = out.grad_fn
        while node is not None and node not in self._pre_activation and \
                type(node).__name__.rstrip("0123456789") in _TO_LOGITS:
            node = node.next_functions[0][0]
        logits = self._pre_activation.get(node)
        if logits is None:
            if self._pre_activation and self._behind_copies(out.grad_fn):
                warnings.warn("LRP: the model's output rearranges, joins or transforms softmax or sigmoid outputs "
                              "after the activation (cat, stack, a transpose or permutation, indexing; clamp, "
                              "dropout, exp, another activation), so relevance starts at the output, not at the "
                              "logits. Return the logits, or apply the activation last.", RuntimeWarning,
                              stacklevel=4)
            return out
        if logits.numel() != out.numel():
            warnings.warn("LRP: the model's output is a part of a softmax or sigmoid output (selected after the "
                          "activation), so relevance starts at that probability, not at its logit. Return the "
                          "logits, or apply the activation after selecting.", RuntimeWarning, stacklevel=4)
            return out
        return logits.reshape(out.shape).to(out.dtype)

    def _behind_copies(self, node, budget: int = 64) -> bool:
        """Whether an output activation of this pass is behind ``node``
        through copies, reshapes and element-wise ops only (at most
        ``budget`` nodes looked at)."""
        stack, seen = [node], set()
        while stack and len(seen) < budget:
            node = stack.pop()
            if node is None or node in seen:
                continue
            seen.add(node)
            if node in self._pre_activation:
                return True
            if type(node).__name__.rstrip("0123456789") in _COPIES | _AFTER_ACTIVATION:
                stack.extend(n for n, _ in node.next_functions)
        return False

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Torch ops run as they are (no routing) while inside, for a plain
        forward of the prepared model in the middle of a pass. The model
        stays prepared (eval mode, attention layers, no caches)."""
        # TorchFunctionMode has no public pause: _pop_mode_temporarily is what
        # torch itself uses to run a mode's own __torch_function__.
        with torch.overrides._pop_mode_temporarily() as popped:
            if popped is not self:
                raise RuntimeError("RelevanceMode.paused: this mode is not the innermost torch function mode.")
            yield

    def watch(self, t: Optional[Tensor]) -> Optional[Tensor]:
        """A copy of input ``t`` that carries relevance (``None`` and
        non-floating tensors are returned as they are). Works under
        ``torch.no_grad()`` and ``torch.inference_mode()``."""
        if not isinstance(t, Tensor) or not t.is_floating_point():
            return t
        with torch.inference_mode(False), torch.enable_grad(), self.unrouted():  # the pass's own copy
            watched = t.detach().clone().requires_grad_()
        if not self._track_nonfinite and not bool(torch.isfinite(t).all()):
            self._track_nonfinite = True
        return watched

    def watch_lookups(self, name: str, t: Tensor) -> None:
        """Integer input ``t`` (named ``name``: ``x``, ``edge_attr``) carries
        relevance through its embedding lookups: each ``embedding`` whose
        indices are ``t``, a column of it or a slice of its columns (a view,
        row for row) returns a watched copy of its output, recorded in
        :attr:`lookups` as ``(name, columns, output)``. Other uses of ``t``
        stay constants."""
        self._sources.append((name, t))

    def _lookup(self, func, args, kwargs) -> Optional[Tensor]:
        """An embedding lookup of a watched integer input: its output, watched
        (``None`` for any other lookup)."""
        if func is F.embedding:
            indices = args[0] if args else kwargs.get("input")
        else:  # torch.embedding(weight, indices, ...)
            indices = args[1] if len(args) > 1 else kwargs.get("indices")
        if not isinstance(indices, Tensor):
            return None
        for name, source in self._sources:
            columns = _columns_of(source, indices)
            if columns is not None:
                self.lookups_tried = True
                args, kwargs = _detach_parameters(args, kwargs)
                out = self.watch(func(*args, **kwargs))
                self.lookups.append((name, columns, out))
                with torch.inference_mode(False), torch.enable_grad(), self.unrouted():
                    return out.clone()  # the forward may write into it in place, which a leaf does not allow
        return None

    def unrouted(self):
        """A context in which torch ops run as they are, for the pass's own
        work after the forward (a plain forward beside it, the backward, the
        accounting): :meth:`paused` where this mode is the innermost torch
        function mode, else nothing to do (it is paused already, or another
        mode runs inside it). The relevance Functions' backward and the
        bookkeeping use torch ops on tensors that carry no relevance, so the
        routing would change nothing there, only add its per-call cost."""
        # torch.overrides has no public accessor of the innermost mode
        if torch.overrides._get_current_function_mode() is self:
            return self.paused()
        return nullcontext()

    def backward(self, out: Tensor, seed: Tensor, inputs: Sequence[Optional[Tensor]],
                 retain_graph: bool = False) -> list[Optional[Tensor]]:
        """Seed ``out`` with relevance ``seed`` and return the relevance of each
        of ``inputs`` (zeros for an input that received none; ``None`` stays
        ``None``). Works inside and after the pass, and under ``no_grad``;
        ``retain_graph=True`` keeps the forward for another seed. Where the
        forward ran in-place ops on relevance tensors (:attr:`in_place`) and
        no caller compared the output with a plain forward, it warns."""
        if not isinstance(out, Tensor):
            raise TypeError(f"out: expected the output tensor of the forward, got {type(out).__name__}.")
        if isinstance(inputs, Tensor):
            raise TypeError("inputs: expected a list of tensors (e.g. [x]), got a tensor, which would be read row "
                            "by row.")
        inputs = list(inputs)
        out_is_stale = out in self._stale
        if (self.stale_used or out_is_stale) and not self.in_place_checked:
            self.in_place_checked = True  # once per pass
            ops = self.stale_used + ([self._stale.get(out)] if out_is_stale else [])
            warnings.warn(f"LRP: the forward ran in-place ops on tensors that carry relevance "
                          f"({', '.join(dict.fromkeys(ops))}) and went on with the tensor they were to change; "
                          f"in the pass they run out of place, so the pass computed something else than the "
                          f"model. Write them out of place (x = x.mul(a)).", RuntimeWarning, stacklevel=2)
        with self.unrouted():  # (shapes are torch calls too)
            if not isinstance(seed, Tensor) or seed.shape != out.shape:
                shape = tuple(seed.shape) if isinstance(seed, Tensor) else type(seed).__name__
                raise ValueError(f"seed: expected a tensor of the output's shape {tuple(out.shape)}, got {shape}.")
            for i, t in enumerate(inputs):
                if isinstance(t, Tensor) and t.is_floating_point() and not t.requires_grad:
                    raise ValueError(f"inputs[{i}]: does not carry relevance (it does not require grad), so none "
                                     f"can reach it: pass the tensor that mode.watch(t) returned and the forward "
                                     f"used.")
            return self._backward(out, seed, inputs, retain_graph)

    def _backward(self, out: Tensor, seed: Tensor, inputs: Sequence[Optional[Tensor]],
                  retain_graph: bool) -> list[Optional[Tensor]]:
        out = self.resolved(out)
        wanted = [t for t in inputs if isinstance(t, Tensor) and t.requires_grad]
        grads: Sequence = ()
        if out.requires_grad:
            self.check_functions(out)
            # inf / NaN somewhere: zero relevance times them must stay 0, or
            # they would spread into rows the seed does not depend on
            guard = self.nonfinite_gates or not all(bool(torch.isfinite(t).all()) for t in (out.detach(), *wanted))
            with torch.enable_grad(), nonfinite_guard(guard):
                extra = [maps.anchor(out.device)]
                try:
                    grads = torch.autograd.grad(out, wanted + extra, seed, allow_unused=True,
                                                retain_graph=retain_graph)[:len(wanted)]
                except RuntimeError as error:
                    raise self._custom_backward_failed(error) from error
        found = {id(t): g for t, g in zip(wanted, grads)}
        if any(g is not None and not bool(torch.isfinite(g).all()) for g in grads):
            if bool((~torch.isfinite(seed) & torch.isfinite(out.detach())).any()):  # not the output's own
                warnings.warn("LRP: the seed holds inf or NaN where the output is finite, so the relevance is "
                              "not finite.", RuntimeWarning, stacklevel=3)
            else:
                if not self._track_nonfinite and bool(torch.isfinite(out.detach()).all()):
                    # every value of the forward that reaches the output is finite: the backward overflowed
                    low = out.dtype in (torch.float16, torch.bfloat16)
                    where = (" The inputs and the output are finite: the relevance overflowed in the backward"
                             + (f" ({out.dtype} holds at most {torch.finfo(out.dtype).max:.4g}); explain a "
                                f"float32 copy (model.float(), x.float())." if low else
                                " (a contribution far larger than the output, over a tiny denominator)."))
                elif not self._track_nonfinite:
                    where = (" The inputs are finite: a value overflowed (or a 0/0, log of a negative, ...) "
                             "inside the forward.")
                else:
                    where = " An explained input holds it" + (
                        f"; the first op that passed it on is {self.first_nonfinite}." if self.first_nonfinite
                        else ".")
                warnings.warn(f"LRP: the explained output depends on a non-finite value (inf or NaN), so its "
                              f"relevance is not finite.{where} Values the output does not depend on do not "
                              f"matter.", RuntimeWarning, stacklevel=3)
        result = []
        for t in inputs:
            if not isinstance(t, Tensor):
                result.append(None)
            else:
                g = found.get(id(t))
                result.append(torch.zeros_like(t) if g is None else g)
        return result

    def check_functions(self, out: Tensor) -> None:
        """Every op between ``out`` and the explained inputs ran where the
        pass saw it. Outside the linear maps (whose streams are ordinary
        autograd by design) the autograd graph may hold only the relevance
        Functions and nodes of ops that copy or select values, whose gradient
        is their relevance rule. Refused (or, with ``strict=False``, counted
        in :attr:`unsupported`):

        * a custom autograd Function of the model's own: its backward would
          stand in for the relevance rules and give gradients (a Function
          whose forward runs torch ops on the tensors it is given never gets
          there: the mode routes those ops, and their relevance graph replaces
          its backward);
        * any other node that mixes values, made by an op the mode never saw
          (TorchScript, compiled regions, extension ops that skip torch's
          function dispatch).

        One walk of the autograd graph: tens of nodes per layer, whatever the
        graph's size, once per output."""
        if out.grad_fn is None or out.grad_fn is self._functions_checked:
            return
        self._functions_checked = out.grad_fn
        seen, todo = set(), [(out.grad_fn, False)]
        while todo:
            node, inside = todo.pop()  # inside: between a map's close and its opens (the streams' own ops)
            if node is None or node in seen:
                continue
            seen.add(node)
            if node in self._refused:
                raise self._refused[node]
            cls = getattr(node, "_forward_cls", None)
            if cls is not None and cls.__module__.startswith("torch_geometric_lrp."):
                inside = cls is maps._Close or (inside and cls is not maps._Open)
            elif cls is not None:
                name = f"{cls.__module__}.{cls.__qualname__}"
                if cls.__module__ == "torch.utils.checkpoint":  # its backward cannot run under the pass
                    raise _checkpointed(f"{name} in the autograd graph")
                if self.strict:
                    raise UnsupportedOpError(
                        f"'{name}', a custom torch.autograd.Function, carries relevance: its forward ran on "
                        f"tensors the relevance pass does not see (detached copies), so its own backward "
                        f"would stand in for the relevance rules and give gradients, not relevance. Write "
                        f"its forward with torch ops on the tensors it is given (the pass then routes "
                        f"them), or pass strict=False to only report it.{_function_hint(name)}"
                        f"{self._invisible_modules()}")
                self.unsupported[f"{name} (custom autograd Function)"] += 1
            elif not inside and node not in self._reported and _node_name(node) not in _COPY_NODES:
                self._unseen(node)
            elif self._any_cut and type(node).__name__ == "AccumulateGrad" and node.variable in self._cut_leaves:
                warnings.warn(
                    f"LRP: {self._cut_leaves.get(node.variable)} makes a detached copy of a signal (t.detach(), "
                    "t.data) require gradients, and the explained output depends on it: it is a new leaf of "
                    "autograd, and the relevance that reaches it reaches no input and is not accounted for (the "
                    "explanation's residual holds it). Leave it detached (a constant of the explanation, whose "
                    "share is absorbed), or use the tensor itself to explain through it.", RuntimeWarning,
                    stacklevel=4)
            todo.extend((next_node, inside) for next_node, _ in node.next_functions)

    def _invisible_modules(self) -> str:
        """The model's submodules whose ops the pass cannot see, for messages."""
        if self._model is None:
            return ""
        found = [(n, m) for n, m in self._model.named_modules()]
        scripted = [f"'{n}' ({type(m).__name__})" for n, m in found if isinstance(m, torch.jit.ScriptModule)]
        compiled = [f"'{n}'" for n, m in found if type(m).__name__ == "OptimizedModule" and n]
        return (f" The model holds TorchScript modules: {', '.join(scripted)}." if scripted else "") + (
            f" The model holds torch.compile-d modules: {', '.join(compiled)} (put the module behind each, its "
            f"'_orig_mod', in its place to explain it)." if compiled else "")

    def _unseen(self, node) -> None:
        """``node`` of the autograd graph mixes values but was made by an op
        the mode never saw (TorchScript, a compiled region, an extension op
        that skips torch's function dispatch): its gradient would stand in
        for a relevance rule."""
        name = node.name()
        if self.strict:
            raise UnsupportedOpError(
                f"'{name}' in the autograd graph of the explained output was made by an op the relevance pass "
                f"did not see run, so relevance would pass through it as a gradient, not by a rule. The pass "
                f"does not see ops inside TorchScript (torch.jit.script / trace), compiled regions and extension "
                f"ops that bypass torch's function dispatch, nor those that made a tensor before the forward "
                f"(a tensor the model reads, such as a module attribute, that still requires grad from an "
                f"earlier computation: detach it).{self._invisible_modules()} Explain the model with its plain "
                f"Python modules and functions, or pass strict=False to only report it.")
        self.unsupported[f"{name} (an op the pass did not see)"] += 1

    def _custom_backward_failed(self, error: RuntimeError) -> RuntimeError:
        """``error`` from the backward, explained where the model's own autograd
        machinery raised it (``strict=False`` lets a custom Function's backward
        run, and non-reentrant checkpointing leaves no Function node to find
        before): other errors are returned as they are."""
        message = str(error)
        if "torch.utils.checkpoint" in message:
            return _checkpointed(message.splitlines()[0])
        if "modified by an inplace operation" in message or "has been modified inplace" in message:
            # a write in place into a tensor that a relevance Function keeps for its backward (the
            # output of an activation, of torch.maximum, a view of a split): plain autograd keeps
            # other tensors, so the model runs where the pass cannot
            return UnsupportedOpError(
                f"The forward writes in place into a tensor that the relevance pass keeps for its backward "
                f"(an activation's output, torch.maximum's, a view from split or chunk), so the backward "
                f"cannot run ({message.splitlines()[0]}). Write it out of place: h = h.clone() before the "
                f"write, or torch.where / index_put / masked_fill without the underscore.")
        if not message.startswith("function ") or "Backward" not in message.split()[1]:
            return error
        name = message.split()[1]
        return UnsupportedOpError(
            f"The backward of {name}, a custom torch.autograd.Function in the model, failed inside the "
            f"relevance pass ({message}). A custom Function's backward computes gradients, not "
            f"relevance; the pass can explain it only where its forward runs torch ops on the inputs it "
            f"was given, not on detached copies.{_function_hint(name)}")

    def where(self) -> str:
        """Where the running op is, for messages: the innermost module whose
        code is running (found on the Python stack, so the pass pays nothing
        for it until a message is written)."""
        if self._names is None:
            self._names = {} if self._model is None else {id(m): n for n, m in self._model.named_modules()}
        frame = sys._getframe(1)
        while frame is not None:
            module = frame.f_locals.get("self")
            if isinstance(module, torch.nn.Module) and (not self._names or id(module) in self._names):
                name = self._names.get(id(module))
                if name is None:
                    return f"a {type(module).__name__} module"
                return f"module '{name}' ({type(module).__name__})" if name else \
                    f"the model ({type(module).__name__})"
            frame = frame.f_back
        return "the model's forward"

    def __enter__(self):
        self._token = _modes.set(_modes.get() + (self,))
        return super().__enter__()

    def __exit__(self, *exc):
        _modes.reset(self._token)
        return super().__exit__(*exc)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in _METADATA_FUNCS:  # a third of a forward's calls: no relevance in, none out
            return func(*args, **(kwargs or {}))
        if self._any_written:  # a plain flag: this runs for every torch call of the pass
            args, kwargs = self._substituted(args, kwargs or {})
        if self._any_stale:  # a plain flag: only after an in-place op ran out of place
            self._note_stale(args, kwargs or {})
        out = self._route(func, args, kwargs or {})
        if self._any_cut and args and isinstance(args[0], Tensor) and args[0] in self._cut:
            self._from_cut(func, args, kwargs or {}, out)
        if self._columns is not None and func in _COLUMN_SELECTIONS:
            self._follow_columns(func, args, kwargs or {}, out)
        if args and isinstance(out, Tensor) and out is not args[0] and isinstance(args[0], Tensor) and \
                _op_name(func) in _IN_PLACE and _carries(args[0]) and out is not self._origins.get(args[0]):
            # The op ran out of place (a relevance Function owns its output): a
            # caller that drops the returned tensor computes something else than
            # the model does. Recorded, so the explainer can check the output,
            # and the tensor it left behind watched (see stale_used).
            self.in_place.append(f"'{_op_name(func)}' in {self.where()}")
            self._stale[args[0]] = self.in_place[-1]
            self._any_stale = True
        if self._track_nonfinite and isinstance(out, Tensor) and out.is_floating_point() and \
                self.first_nonfinite is None and _carries(out) and not bool(torch.isfinite(out).all()):
            self.first_nonfinite = f"'{_op_name(func)}' in {self.where()}"
        return out

    def _data_set(self, t: Tensor, value: Any) -> None:
        """``t.data = value`` in the forward. On a tensor that carries
        relevance it is refused: it swaps the values behind autograd's back,
        and the pass computes a map's end from its start, so the output would
        be computed without the swap (a score the model does not give)."""
        if not _carries(t):
            return Tensor.data.__set__(t, value)
        raise UnsupportedOpError(
            f"LRP: 'data.__set__' in {self.where()}: `t.data = value` on a tensor that carries relevance changes "
            "what the model computes behind autograd's back, which a relevance pass cannot follow. Write "
            "`t = value` instead (a value computed from `t.detach()` or `t.data` is then a constant of the "
            "explanation, its share of the score absorbed).")

    def track_columns(self, edges: Optional[dict]) -> None:
        """From here on, follow which columns of the edge lists ``edges``
        (``{key: [2, E]}``, ``key`` an edge type or ``None``) the forward
        selects: ``edges[:, mask]``, ``edges[:, index]``,
        ``edges.index_select(1, index)``, ``edges.narrow(1, start, length)``
        and selections of those, as ``RGCNConv`` and ``FiLMConv`` propagate
        over each relation's edges and PyG's ``trim_to_layer`` over fewer.
        :meth:`columns_of` tells them (a pair that two relations share is
        then no longer ambiguous). ``None`` stops it. A tensor given under
        two keys is not followed: its selections could be either's."""
        if edges is None:
            self._columns = None
            return
        self._columns = _ByIdentity()
        shared = {id(t) for t in edges.values() if sum(u is t for u in edges.values()) > 1}
        for key, t in edges.items():
            if id(t) not in shared:
                self._columns[t] = (key, torch.arange(t.shape[1], device=t.device))

    def columns_of(self, t: Tensor) -> Optional[tuple]:
        """``(key, columns)``: the tracked edge list that ``t`` selects from
        and the columns it holds, in order (:meth:`track_columns`), or
        ``None``."""
        return None if self._columns is None else self._columns.get(t)

    def _follow_columns(self, func, args, kwargs, out) -> None:
        source = args[0] if args else None
        found = self._columns.get(source) if isinstance(source, Tensor) else None
        if found is None or not isinstance(out, Tensor) or out.dim() != 2 or out.shape[0] != source.shape[0]:
            return
        edge_type, ids = found
        if func is Tensor.__getitem__:
            key = args[1] if len(args) > 1 else None
            picked = key[1] if isinstance(key, tuple) and len(key) == 2 and isinstance(key[0], slice) \
                and key[0] == slice(None) else None
        elif func is Tensor.narrow or func is torch.narrow:  # narrow(source, dim, start, length)
            given = {**dict(zip(("dim", "start", "length"), args[1:])), **kwargs}
            dim, start, length = given.get("dim"), given.get("start"), given.get("length")
            picked = slice(int(start), int(start) + int(length)) if dim in (1, -1) and \
                isinstance(start, (int, Tensor)) and isinstance(length, int) else None
        else:  # index_select(source, dim, index)
            dim = args[1] if len(args) > 1 else kwargs.get("dim")
            index = args[2] if len(args) > 2 else kwargs.get("index")
            picked = index if dim in (1, -1) else None
        if isinstance(picked, (Tensor, slice)):
            columns = ids[picked]
            if columns.shape[0] == out.shape[1]:
                self._columns[out] = (edge_type, columns)

    def _note_stale(self, args, kwargs) -> None:
        """Records the in-place ops whose left-behind tensor this call reads."""
        for value in itertools.chain(args, kwargs.values()):
            for t in (value if isinstance(value, (list, tuple)) else (value,)):
                if isinstance(t, Tensor) and t in self._stale:
                    self.stale_used.append(self._stale.get(t))

    def _route(self, func, args, kwargs):
        if self._sources and (func is F.embedding or func is torch.embedding):
            out = self._lookup(func, args, kwargs)
            if out is not None:
                return out
        found = _scan(args)
        if found != 2 and kwargs:
            found = max(found, _scan(kwargs.values()))
        if found != 2:
            # Bookkeeping (degrees, self-loops, index arithmetic): no relevance
            # goes in, so none comes out; parameters enter as constants.
            if not found and not self._weights:
                return func(*args, **kwargs)
            weight = self._is_weight(_op_name(func), args)
            if found:
                args, kwargs = _detach_parameters(args, kwargs)
            out = func(*args, **kwargs)
            if weight and isinstance(out, Tensor) and out.is_floating_point():
                self._weights[out] = True
            return out
        name = _op_name(func)
        if name in _INDEXED:
            args, kwargs = _long_indices(args, kwargs)
        if name in _METADATA:
            if name not in _AUTOGRAD_METADATA:
                _METADATA_FUNCS.add(func)
            return func(*args, **kwargs)
        if name == "register_hook" and not self._own_hooks:
            # A gradient hook of the model's forward (a gradient reversal, a
            # clip, a recorder): the backward of the pass carries relevance,
            # which such a hook would change or record as if it were a gradient.
            warnings.warn("LRP: a gradient hook that the forward puts on a tensor (Tensor.register_hook) does not "
                          "run during the relevance pass: its backward carries relevance, not gradients.",
                          RuntimeWarning, stacklevel=2)
            return RemovableHandle(_NO_HOOKS)
        if name == "data.__set__":
            return self._data_set(*args)
        if not torch.is_grad_enabled() and not _in_function_forward():
            if args and isinstance(args[0], Tensor) and self._maps and args[0] in self._maps and \
                    (name in _OUT_OF_PLACE or _writes_in_place(func)):
                # A write under no_grad into a map end changes what the model
                # computes as much as one with grad: replayed the same way (unseen,
                # it would leave the map's streams, which the rule reads, behind).
                with torch.enable_grad():
                    return self._route(func, args, kwargs)
            # The forward runs this op under torch.no_grad(): its result is a
            # constant of the pass, as autograd sees it (and as a bias, a gate
            # or a constant operand later, what it takes is measured). A view
            # made under no_grad would still say requires_grad, without a
            # grad_fn: relevance reaching it would vanish, unmeasured. (The
            # forward of a custom autograd Function runs without grad too; its
            # ops are routed: see check_functions.)
            return _detached(func(*args, **kwargs))
        if name in _NUMBER_WRITES:
            out = _number_written(self, name, args, kwargs)
            if out is not NotImplemented:
                return out
        if (name in _OUT_OF_PLACE or (name == "index_put_" and _accumulates(args, kwargs))) and args and \
                isinstance(args[0], Tensor) and args[0].is_floating_point() and \
                (not _carries(args[0]) or (self._maps and args[0] in self._maps)):
            # arithmetic in place into a map end, or into a constant that a
            # signal is added into (z = zeros(...); z.index_add_(0, i, h))
            return self._arithmetic_in_place(func, name, args, kwargs)
        if name in _OUT_OF_PLACE and name not in LINEAR_OPS and args and isinstance(args[0], Tensor) and \
                _carries(args[0]):
            # in-place arithmetic on a signal that ends no map (an activation's output): out of place, as
            # add_ and mul_ run there (that the forward goes on with the returned tensor is checked after it)
            return self._route(_OUT_OF_PLACE[name], args, kwargs)
        kind = LINEAR_OPS.get(name)
        if kind is not None:
            rule = self.current_rule()
            if not isinstance(rule, Pass) and _is_linear(name, kind, args, kwargs):
                if kind == "batch_norm":
                    return self._batch_norm(rule, *args, **kwargs)
                if kind == "instance_norm":
                    return self._instance_norm(rule, *args, **kwargs)
                out = self._linear_op(name, func, kind, rule, args, kwargs)
                if out is not NotImplemented:
                    return out
        # A non-linear op (or the op-level Pass rule): the maps feeding it end
        # here (their outputs are already closed), parameters are constants.
        args, kwargs = _detach_parameters(args, kwargs, self._weights)
        if (name in _STATISTICS and self._in_norm() and not self._gated_product(name, args)) or \
                (name in _NORMALISER_OPS and _in_normaliser()):
            # Inside a normalisation layer, a non-linear op of the signal computes
            # a statistic (a variance, std or norm): held constant, a gate, as
            # LRP treats LayerNorm's std; centring and scaling stay linear.
            # Likewise the exp of PyG's softmax helpers (attention weights) and
            # the degree power of gcn_norm (learned edge weights normalised).
            a, kw = _filled(args, kwargs, [t.detach() for t, _ in _tensors_of(args, kwargs)])
            return func(*a, **kw)
        if args and isinstance(args[0], Tensor) and _writes_in_place(func) and self._maps:
            self._check_aliases(func, args[0])
            if args[0] in self._maps:
                if name not in _COPY_WRITES:
                    return self._unreplayed(name, func, args, kwargs)
                return self._written_map_end(func, args, kwargs)
        handler = HANDLERS.get(name)
        if handler is not None:
            out = handler(self, *args, **kwargs)
            if out is not NotImplemented:
                return out
        if (name in _WRITES or name == "copy_") and args and isinstance(args[0], Tensor) and \
                args[0].is_floating_point() and not _carries(args[0]):
            if self._continues_into(args, kwargs):  # a map's end copied into a buffer of its own
                return self._written_into_buffer(func, args, kwargs)
            if name in _WRITES:
                # Relevance written into a constant (``c[mask] = x``, as in PyG's
                # add_remaining_self_loops): the constant joins the pass first, so
                # what reaches its remaining entries is measured as absorbed.
                with torch.enable_grad():
                    args[0].copy_(maps.held(args[0].detach().clone(), "constant"))
        out = func(*args, **kwargs)
        if name not in COPIES and _carries(out):
            self._report(name, out)
        if name in _CUTS and isinstance(out, Tensor) and not out.requires_grad:
            self._cut[out] = True
            self._any_cut = True
        return out

    def _from_cut(self, func, args, kwargs, out) -> None:
        """``func`` ran on a copy of a signal cut from its relevance
        (``h.detach()``, ``h.data`` and copies of those; a constant of the
        pass). Its copies are such copies too; one the forward makes require
        gradients again is a new leaf of autograd, neither an input nor a
        constant the accounting measures: the relevance that reaches it
        vanishes unseen. Recorded here, and told by :meth:`check_functions`
        where the explained output depends on it."""
        name = _op_name(func)
        if name in ("requires_grad_", "requires_grad.__set__") and args[0].requires_grad:
            # told where the explained output depends on it (check_functions): a copy for work of the
            # forward's own (a gradient penalty it computes aside) takes no relevance
            self._cut_leaves[args[0]] = f"'{name}' in {self.where()}"
        elif name in COPIES and isinstance(out, Tensor) and not out.requires_grad:
            self._cut[out] = True

    def _written_map_end(self, func, args, kwargs):
        r"""``func`` writes in place (``h[mask] = 0``, ``h.masked_fill_(...)``,
        ``h.unsqueeze_(0)``) into ``h = args[0]``, the end of a linear map.
        The write continues the map: it is replayed on a copy of each stream
        output (a number written in becomes a constant of the map, which
        absorbs its share), and the written value closes the map anew. The
        user's tensor gets the written value too, but for the pass the new
        end stands for it from now on (:meth:`resolved`): its own autograd
        history still points at the old streams, whose memory (for a
        one-stream rule) it shares, so it must not carry relevance itself."""
        h, rest = args[0], list(args[1:])
        rule, outputs = self._maps.get(h)
        current = self.current_rule()
        with torch.enable_grad():
            if current == rule:
                sources = list(outputs)
            else:
                # The write runs under another rule, so, as for any linear op, it
                # starts a map of its own: the old map ends at a copy of ``h``
                # (the old streams copied too, since ``h`` shares memory with a
                # one-stream rule's and is about to be written).
                end = self._register(h.detach().clone(), rule, [o.clone() for o in outputs])
                sources = [self._stream_input(end, current, k, stream) for k, stream in enumerate(current.streams())]
                rule = current
        position = _WRITTEN_VALUE.get(_op_name(func))
        if position is not None and position < len(rest) and _is_number(rest[position]):
            rest[position] = _tensor(rest[position], h)  # a number written in: a constant of the map
        numbers = tuple(rest)
        kwargs = {k: _tensor(v, h) if k == "value" and _is_number(v) else v for k, v in kwargs.items()}
        operands = [(t, "signal" if _carries(t) else "input" if t.is_floating_point() else "ref")
                    for t, _ in _tensors_of(numbers, kwargs)]
        streams = []
        with torch.enable_grad():
            for k, stream in enumerate(rule.streams()):
                # a signed rule's stream takes a constant by its sign (Stream.bias), not as an input
                a, kw = _filled(numbers, kwargs, [self._constant(t, stream.bias, "constant")
                                                  if rule.signed and r == "input" else
                                                  self._stream_arg(t, r, rule, k, stream) for t, r in operands])
                copy = sources[k].clone()
                func(copy, *a, **kw)
                streams.append(copy)
        value = h.detach().clone()
        a, kw = _filled(numbers, kwargs, [_value_of(t) for t, _ in operands])
        func(value, *a, **kw)
        end = self._register(value, rule, streams)
        origin = self._stands_for(h, end, lambda t: func(t, *a, **kw))
        return None if _op_name(func) == "__setitem__" else origin

    def _continues_into(self, args, kwargs) -> bool:
        """Whether a copy-write into a constant buffer writes the end of a map
        (``out = x.new_empty(...); out[perm] = lin(x)``,
        as PyG's ``HeteroLinear`` puts rows back in order), into a buffer of
        its own: no view, and no other tensor sharing its memory (a view
        taken before), which would see the written values without their
        history. (Such writes keep autograd's way: the map ends there.)"""
        rule = self.current_rule()
        if isinstance(rule, Pass) or not self._maps or args[0]._base is not None or not _memory_of_its_own(args[0]):
            return False
        # (the end of a map under another rule, a readout's own rule on the layer before it, is
        # opened by the write, as by any linear op of the current rule: _stream_input)
        return any(t in self._maps for t, _ in _tensors_of(args[1:], kwargs))

    def _written_into_buffer(self, func, args, kwargs):
        r"""``func`` copies the end of a map into a constant buffer: the map
        goes on through the write, as it goes on through the copies it is
        made of (an index or a permutation out of place), so that the rule
        sees one map however the rows are numbered. The buffer becomes the
        start of a map of the current rule, its entries constants of the map
        (the entries the write keeps absorb their share), and the write
        continues it (:meth:`_written_map_end`). Before, the buffer was a
        constant of the pass and the map ended at the write: a model that
        writes its rows back in another order (``HeteroLinear`` on node
        types out of order, as a subgraph numbers them) got other relevance
        than the same model on its own numbering."""
        buffer, rule = args[0], self.current_rule()
        held = buffer.detach().clone()  # its values before the write (the user's buffer gets it)
        # The entries the write keeps are constant terms of the map, each stream taking them as it takes a
        # bias (zero padding absorbs nothing, under Flat and ZBox too; ZBox's bounds are for the map's
        # input). Entries that are not finite (torch.empty's leftovers, a NaN fill) are 0 in the streams:
        # written over, or never read, they take no relevance, and a NaN there would spread through the
        # map's denominators; where the model reads one, its output is not finite anyway.
        kept = torch.where(torch.isfinite(held), held, torch.zeros_like(held))
        with torch.enable_grad():
            streams = [self._constant(kept, stream.bias, "constant") for stream in rule.streams()]
            # (a buffer of zeros is no constant term, but the map needs its streams in the graph)
            streams = [t if t.requires_grad else maps.constant(t, "constant") for t in streams]
        start = self._register(held, rule, streams)  # (the streams hold kept, not held)
        self._stand_in(buffer, start, buffer)  # the buffer stands for the new map from here on
        return self._written_map_end(func, (start, *args[1:]), kwargs)

    def _unreplayed(self, name: str, func, args, kwargs):
        """An in-place op into a map end that is neither a copy (replayed on
        the streams) nor arithmetic the pass runs out of place: refused, as
        the map's streams would not see it (``strict=False``: counted, and
        run as it is)."""
        key = f"'{name}' in {self.where()}"
        if self.strict:
            raise UnsupportedOpError(
                f"{key} writes in place into a tensor that a linear op of the pass computed, and has no rule "
                f"there: the rule would not see the write. Write it out of place (h = h.op(...) or torch.op(h, "
                f"...)), or pass strict=False to only report it.")
        self.unsupported[key + " (in place into a map end)"] += 1
        return func(*args, **kwargs)

    def _arithmetic_in_place(self, func, name: str, args, kwargs):
        """``h.mul_(a)``, ``h += b``, ``h.index_add_(...)``,
        ``h.index_put_(..., accumulate=True)`` into ``h = args[0]``, the end
        of a linear map or a constant: the op runs out of place (which
        continues the map, as ``h = h.mul(a)`` does). Running it in place
        would overwrite values that the streams of the map share, or leave
        the sum it makes to autograd, which hands each term all of it.

        Into a map end, the result stands for ``h`` from now on
        (:meth:`_stands_for`). Into a constant (``z = zeros(...);
        z.index_add_(0, batch, h)``, as PyG's ``scatter`` sums), ``h`` itself
        becomes the result, copied in with its autograd history, and ends the
        same map: the caller may go on with ``h`` or with the returned tensor,
        and no later op needs substituting."""
        h = args[0]
        fn = torch.index_put if name == "index_put_" else _OUT_OF_PLACE[name]
        into_constant = not _carries(h) and not self._is_buffer(h)
        if into_constant:  # nothing shares its memory: the op reads it as it is
            out = self._route(fn, args, kwargs)
        else:
            self._check_aliases(func, h)
            entry = self._maps.get(h)
            if entry is not None and entry[0] != self.current_rule():
                # The op runs under another rule than the map's, so it starts a
                # map of its own, opened from its input, which autograd keeps
                # for the backward: from a copy that ends the old map, not from
                # ``h``, which is about to be written (as in _written_map_end).
                rule, outputs = entry
                with torch.enable_grad():
                    source = self._register(h.detach().clone(), rule, [o.clone() for o in outputs])
            else:
                source = self._route(torch.clone, (h,), {})
            out = self._route(fn, (source, *args[1:]), kwargs)
        if not isinstance(out, Tensor) or out.shape != h.shape:
            raise RuntimeError(f"'{name}' in {self.where()}: its result has shape "
                               f"{tuple(getattr(out, 'shape', ()))}, which cannot be written into the tensor of shape "
                               f"{tuple(h.shape)} it runs on.")
        if into_constant:
            with torch.enable_grad():
                h.copy_(out)
            entry = self._maps.get(out)
            if entry is not None:
                self._maps[h] = entry
            return h
        value = out.detach()
        return self._stands_for(h, out, lambda t: t.copy_(value))

    def _is_buffer(self, t: Tensor) -> bool:
        """``t`` is a buffer of the model (found once per pass): written in
        place, it gets the values, never an autograd history."""
        if self._buffers is None:
            self._buffers = {id(b) for b in self._model.buffers()} if self._model is not None else set()
        return id(t) in self._buffers

    def _stands_for(self, h: Tensor, end: Tensor, write: Callable[[Tensor], Any]) -> Tensor:
        """``end`` (the result of an in-place write into ``h``, replayed)
        stands for ``h`` in the pass from now on (:meth:`resolved`), and the
        user's tensor (``h``, or the one ``h`` stands for where it was
        written before) gets the write, ``write(tensor)``, as well. The
        returned user's tensor must not carry relevance itself: its autograd
        history still points at the map before the write."""
        origin = self._origins.get(h)
        origin = h if origin is None else origin
        maps.unshare(origin)  # the map's backward keeps its values, not the written ones
        with torch.no_grad():
            write(origin.detach())
        self._stand_in(h, end, origin)
        return origin

    def _stand_in(self, h: Tensor, end: Tensor, origin: Tensor) -> None:
        """``end`` stands for ``h`` in the pass from now on (:meth:`resolved`),
        ``origin`` being the user's tensor behind both."""
        self._written[h] = end
        self._origins[end] = origin
        self._any_written = True

    def _check_aliases(self, func, t: Tensor) -> None:
        """``t`` is written in place: another map end that shares its memory (a
        view of it, or it a view of the other) would change without its
        streams seeing the change, which no replay on ``t``'s streams fixes."""
        storage = t.untyped_storage().data_ptr()
        for other in self._maps.tensors():
            if other is not t and other.untyped_storage().data_ptr() == storage:
                key = f"'{_op_name(func)}' in {self.where()}"
                if self.strict:
                    raise UnsupportedOpError(
                        f"{key} writes in place into memory that a tensor computed by a linear op of the pass "
                        f"shares (a view of it, such as h[:, :2] or h.view(-1)): that tensor would change "
                        f"without the rule seeing it. Write it out of place (v = v.masked_fill(...), "
                        f"torch.cat or torch.where on h), or pass strict=False to only report it.")
                self.unsupported[key + " (in place into a view of a map end)"] += 1
                return

    def _substituted(self, args, kwargs):
        """``args`` and ``kwargs`` with every tensor written in place into a
        map end replaced by the map's new end (see :meth:`_written_map_end`)."""
        def sub(obj):
            if isinstance(obj, Tensor):
                return self.resolved(obj)
            if isinstance(obj, (list, tuple)):
                return type(obj)(sub(o) for o in obj)
            return obj
        return tuple(sub(a) for a in args), {k: sub(v) for k, v in kwargs.items()}

    def resolved(self, t):
        """``t``, or the tensor that stands for it in the pass where the forward
        wrote into it in place (a model that returns such a tensor)."""
        if not isinstance(t, Tensor):
            return t
        written = self._written.get(t)
        while written is not None:  # written again: the newest end
            t, written = written, self._written.get(written)
        return t

    def refuse(self, reason: str):
        """For a handler of an op that has a rule, but not with these
        arguments: ``NotImplemented``, with ``reason`` for the report."""
        self._refusal = reason
        return NotImplemented

    def _report(self, name: str, out=None) -> None:
        key = f"{name} in {self.where()}"
        reason, self._refusal = self._refusal, None
        if self.strict and reason is not None:
            raise UnsupportedOpError(
                f"'{name}' in {self.where()} has a relevance rule, but not {reason}; running it with its "
                f"gradient would break conservation. Build the module without it, or pass strict=False to only "
                f"report it.")
        if self.strict:
            error = UnsupportedOpError(
                f"'{name}' in {self.where()} carries relevance but has no relevance rule; running it "
                f"with its gradient would break conservation. Rewrite it with "
                f"torch_geometric_lrp.functional ops, detach an operand that is a gate (attention, "
                f"normalisation), or pass strict=False to only report it (lrp.explain's residual shows what "
                f"it changes).")
            outputs = [t for t in (out if isinstance(out, (tuple, list)) else (out,))
                       if isinstance(t, Tensor) and t.grad_fn is not None]
            if not outputs:
                raise error
            # Refused where relevance reaches it (check_functions walks from the output before any
            # backward), not here: an op that only feeds a value the output does not use (an auxiliary
            # loss, as dense_diff_pool's entropy) changes no relevance.
            for t in outputs:
                self._refused[t.grad_fn] = error
                self._own_hook(t, functools.partial(_raise, error))  # and where a backward of the user's reaches it
            return
        self.unsupported[key] += 1
        for t in (out if isinstance(out, (tuple, list)) else (out,)):
            if isinstance(t, Tensor) and t.grad_fn is not None:
                self._reported.add(t.grad_fn)  # counted here: the graph walk skips it


# Autograd nodes of ops that only copy, select or move values: where the pass
# runs such an op with plain autograd, its gradient is the relevance rule.
# Anything else outside a map ran where the pass could not see it.
_COPY_NODES = frozenset([f"torch::autograd::{name}" for name in ("AccumulateGrad", "CopySlices", "CopyBackwards",
                                                                  "CppNode<GatherCSR>")] + [
    f"{name}Backward" for name in """View UnsafeView ReshapeAlias Alias AsStrided Expand Repeat Cat Stack T Transpose
    Permute Squeeze Unsqueeze Clone Select Slice Index IndexSelect Gather Take MaskedSelect Split SplitWithSizes
    Unbind ToCopy MaskedFill IndexFill Flip Roll ConstantPadNd ReflectionPad1D ReflectionPad2D ReflectionPad3D
    ReplicationPad1D ReplicationPad2D ReplicationPad3D Where Sort Topk IndexPut IndexCopy Values Scatter MaskedScatter
    SparseCooTensorWithDimsAndTensors Tril Triu Diagonal""".split()])


class _SignedOp:
    """One linear op under a ``signed`` rule (:meth:`RelevanceMode._signed_op`):
    its operands, their roles and signs, and the runs that split it."""

    def __init__(self, mode: "RelevanceMode", name: str, fn: Callable, rule: Rule, args, kwargs, keyed: list,
                 roles: list):
        self.mode, self.fn, self.rule, self.args, self.kwargs, self.roles = mode, fn, rule, args, kwargs, roles
        self.keyed = keyed
        self.signs = _operand_signs(name, args, kwargs, self.keyed)
        self.factors = [i for i, r in enumerate(roles) if r in ("weight", "gate")]
        self.divides = name.startswith(_DIVISIONS)
        # the signs each factor has (a non-negative gate, such as a degree
        # normalisation or attention, needs no run for its negative part)
        self.present = [mode._signs_of(self.keyed[i][0]) or [1] for i in self.factors]
        self.streams = rule.streams()
        self.signals = [i for i, r in enumerate(roles) if r == "signal"]
        self.opened: dict = {}  # (operand, stream) -> its stream input, found once per op
        self.down: dict = {}  # operand -> z - z_up (value_stream rules)

    def stream(self, i: int, k: int) -> Tensor:
        """Stream ``k`` of signal operand ``i``. Where a ``value_stream``
        rule opens both streams alike, they are one tensor (z_up = z)."""
        found = self.opened.get((i, k))
        if found is None:
            t, rule = self.keyed[i][0], self.rule
            entry = self.mode._maps.get(t)
            if k == 1 and rule.value_stream and self.streams[1].input is self.streams[0].input and \
                    not (entry is not None and entry[0] == rule):
                found = self.stream(i, 0)
            else:
                found = self.mode._stream_input(t, rule, k, self.streams[k])
            self.opened[i, k] = found
        return found

    def counted(self, i: int, up: bool) -> Tensor:
        """Signal ``i``'s part that counts up (``up``) or down."""
        if not self.rule.value_stream:
            return self.stream(i, 0 if up else 1)
        if up:
            return self.stream(i, 1)
        if i not in self.down:
            self.down[i] = self.stream(i, 0) - self.stream(i, 1)
        return self.down[i]

    def _label(self, role: str) -> str:
        return "bias" if role == "bias" else "constant"

    def value(self) -> tuple[Tensor, bool]:
        """The op on the map itself (a ``value_stream`` rule's first stream),
        and whether every path and constant term of it counts up (then the
        second stream is the same tensor)."""
        mode, signs = self.mode, self.signs
        up = all(len(p) == 1 and p[0] == 1 for p in self.present)
        values = []
        for i, ((t, _), role) in enumerate(zip(self.keyed, self.roles)):
            if role == "signal":
                values.append(self.stream(i, 0))
                up = up and signs[i] > 0 and self.stream(i, 0) is self.stream(i, 1)
            elif role in ("bias", "input"):
                values.append(mode._constant(t, _same_input, self._label(role)))
                up = up and set(mode._signs_of(t)) <= {signs[i]}
            else:
                values.append(_value_of(t))
        a, kw = _filled(self.args, self.kwargs, values)
        return self.fn(*a, **kw), up

    def count(self, want: int) -> Tensor:
        """The paths that count ``want`` (+1: up, -1: down), summed over the
        combinations of the factors' signs."""
        mode, signs, roles, factors = self.mode, self.signs, self.roles, self.factors
        # where the one signal's part down is 0 (z_up = z), the runs that read it give 0
        skip = self.rule.value_stream and len(self.signals) == 1 and \
            self.stream(self.signals[0], 0) is self.stream(self.signals[0], 1)
        total = None
        for n, combo in enumerate(itertools.product(*self.present)):
            parity = math.prod(combo)
            if skip and n and want * parity * signs[self.signals[0]] < 0:
                continue
            values = []
            for i, ((t, _), role) in enumerate(zip(self.keyed, roles)):
                if role == "signal":
                    values.append(self.counted(i, want * parity * signs[i] > 0))
                elif role in ("weight", "gate"):
                    k = factors.index(i)
                    sign = combo[k]
                    if self.divides:
                        values.append(_signed_part(_value_of(t), sign, True))
                    elif len(self.present[k]) == 1:  # one-signed (or 0): its part of that sign is itself
                        values.append(_value_of(t))
                    else:
                        values.append(mode._modified(t, _positive if sign > 0 else _negative)
                                      if _is_parameter(t) else _signed_part(_value_of(t), sign, False))
                elif role in ("bias", "input"):  # enters once: no factor multiplies it
                    part = (_positive if want * signs[i] > 0 else _negative) if n == 0 else _zero
                    values.append(mode._constant(t, part, self._label(role)))
                else:  # a reference (indices, shapes)
                    values.append(_value_of(t))
            a, kw = _filled(self.args, self.kwargs, values)
            out = self.fn(*a, **kw)
            total = out if total is None else total + out
        return total

    def plain(self) -> Tensor:
        """The op on the operands' values (a ``(P, N)`` rule's value)."""
        a, kw = _filled(self.args, self.kwargs, [_value_of(t) for t, _ in self.keyed])
        return self.fn(*a, **kw)


def _storage_users(t: Tensor) -> Optional[int]:
    """How many tensors share ``t``'s memory (``None`` where torch does not
    tell: a private call, which may go)."""
    try:
        return torch._C._storage_Use_Count(t.untyped_storage()._cdata)
    except (AttributeError, RuntimeError, TypeError):
        return None


_ONE_USER = _storage_users(torch.empty(1))


def _memory_of_its_own(t: Tensor) -> bool:
    """Whether no other tensor shares ``t``'s memory (no view of it is alive);
    ``False`` where that cannot be told."""
    users = _storage_users(t)
    return users is not None and _ONE_USER is not None and users <= _ONE_USER


def _node_name(node) -> str:
    """``ViewBackward0`` -> ``ViewBackward``."""
    return node.name().rstrip("0123456789")



def _raise(error: Exception, grad=None):
    """A hook that refuses any backward reaching an op without a rule: the
    tensors of a pass carry relevance (parameters are constants there), in
    the pass and after it, so such a backward gives no gradient either."""
    raise error


def _checkpointed(detail: str) -> UnsupportedOpError:
    return UnsupportedOpError(
        f"The model checkpoints part of its forward (torch.utils.checkpoint: {detail}), which reruns that "
        f"part during the backward, outside the relevance pass: it would compute gradients, not relevance. "
        f"Explain the model with checkpointing off (for DeepGCNLayer: ckpt_grad=False).")


def _function_hint(name: str) -> str:
    if "InvertibleFunction" in name:  # torch_geometric.nn.models.rev_gnn (GroupAddRev)
        return (" GroupAddRev's InvertibleFunction detaches its inputs and recomputes them in its backward to "
                "save memory; set disable=True on it (the same forward, run directly, without the memory "
                "saving) to explain it.")
    return ""


from .rules import _same as _same_input  # noqa: E402  (the identity input modifier)


# ---------------------------------------------------------------------------
# The pass on a model: a reversible context
# ---------------------------------------------------------------------------
_locks: "weakref.WeakKeyDictionary[torch.nn.Module, threading.RLock]" = weakref.WeakKeyDictionary()
_locks_guard = threading.Lock()


@contextmanager
def _locked(modules: list) -> Iterator[None]:
    """Hold the lock of every module of a pass: passes of models that share a
    module (an encoder, a ``BatchNorm``) run one after the other, so that
    one pass does not put back the flags it changed (training mode) while
    the other's forward still runs. One lock per module, not per model,
    taken in one order (by ``id``) so that two passes never wait on each
    other (a pass within a pass is refused by :func:`relevance_pass`)."""
    with _locks_guard:
        locks = {}
        for module in modules:
            lock = _locks.get(module)
            if lock is None:
                lock = _locks[module] = threading.RLock()
            locks[id(module)] = lock
    held = []
    try:
        for key in sorted(locks):
            locks[key].acquire()
            held.append(locks[key])
        yield
    finally:
        for lock in reversed(held):
            lock.release()


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The eager module behind a ``torch.compile``-d one (the pass needs the
    Python forward; compiled graphs do not call the mode op by op)."""
    return getattr(model, "_orig_mod", model) if type(model).__name__ == "OptimizedModule" else model


def _attribute(module: torch.nn.Module, name: str):
    """``getattr(module, name, None)`` for a plain attribute (of the module or
    its class) without ``Module.__getattr__``, which raises (slowly, for
    every module of every pass) where the module has no such attribute."""
    found = vars(module)
    if name in found:
        return found[name]
    value = getattr(type(module), name, None)
    return getattr(module, name, None) if isinstance(value, property) else value


def _prepare(module: torch.nn.Module, undo: list) -> None:
    """What the pass needs of one module (see :func:`_prepared`), with how
    to undo it appended to ``undo``."""
    from .nn.conv import SWAPPABLE  # late: nn imports this module
    # (each undo is recorded before its change: an interrupt in between leaves nothing changed unrecorded)
    if module.training:
        undo.append((module, "training", True))
        module.training = False
    for attr in ("_backward_hooks", "_backward_pre_hooks"):
        # The user's module backward hooks (gradient monitors, per-sample
        # gradients) would be called with relevance, and what they return
        # would change it: the pass's backward is no gradient. Set aside
        # for the pass, like the tensor hooks the mode drops.
        hooks = vars(module).get(attr)
        if hooks:
            undo.append((module, attr, hooks))
            object.__setattr__(module, attr, OrderedDict())
    for attr, off in (("fuse", False), ("cached", False), ("_explain", False)):
        if _attribute(module, attr) is True:
            undo.append((module, attr, True))
            object.__setattr__(module, attr, off)
    if _attribute(module, "cached") is not None:
        # GCNConv reads _cached_* whenever it is set, whatever `cached` says
        for key in [k for k, v in vars(module).items() if k.startswith("_cached_") and v is not None]:
            undo.append((module, key, getattr(module, key)))
            object.__setattr__(module, key, None)
    if isinstance(module, torch.nn.Embedding) and module.max_norm is not None:
        # its forward renormalises the looked-up rows of its weight in place: put back after the pass
        undo.append((module, "weight values", module.weight.detach().clone()))
    swap = SWAPPABLE.get(type(module))
    if swap is not None:
        undo.append((module, "__class__", type(module)))
        module.__class__ = swap


def _check_no_global_backward_hooks() -> None:
    """Refuse global module backward hooks: they would see relevance in
    every module's backward, and they cannot be set aside for one thread."""
    from torch.nn.modules import module as module_hooks
    if module_hooks._global_backward_hooks or module_hooks._global_backward_pre_hooks:
        raise RuntimeError(
            "relevance_pass: a global module backward hook is registered "
            "(torch.nn.modules.module.register_module_full_backward_hook or "
            "register_module_full_backward_pre_hook): it would be called with relevance instead of gradients "
            "and could change it. Remove it (handle.remove()) for the explanation and register it again "
            "after; hooks on the model's own modules are set aside for the pass by themselves.")


def _check_no_inference_tensors(model: torch.nn.Module) -> None:
    """Refuse parameters made under ``torch.inference_mode()``: no backward
    can run through them."""
    # (parameters only: a buffer the forward reads fails in torch's words, one it does not read is harmless)
    if not any(t.is_inference() for t in model.parameters()):
        return
    name = next(n for n, t in model.named_parameters() if t.is_inference())
    raise RuntimeError(
        f"model: {name!r} is an inference tensor (the model was built under torch.inference_mode()), and "
        f"relevance needs a backward pass through it. Build the model outside inference mode; its weights "
        f"can be loaded there from any state_dict (model.load_state_dict(state)).")


def _undo(undo: list) -> None:
    for module, attr, value in reversed(undo):
        if attr == "__class__":
            module.__class__ = value
        elif attr == "weight values":
            with torch.no_grad():
                module.weight.copy_(value)
        else:
            object.__setattr__(module, attr, value)
    undo.clear()


@contextmanager
def _prepared(model: torch.nn.Module, modules: Optional[list] = None) -> Iterator[None]:
    """What the pass needs of the model, undone on exit whatever happens:
    eval mode, messages through ``message`` / ``aggregate`` (no fused
    sparse kernels), no cached normalised graph (the pass may run on a
    subgraph), no edge masks of other explainers, and the attention layers'
    relevance versions (:mod:`torch_geometric_lrp.nn`, whose attention is a
    constant inside a pass and which behave exactly like the PyG layer
    elsewhere, in every thread)."""
    undo: list = []
    try:
        for module in (model.modules() if modules is None else modules):
            _prepare(module, undo)
        yield
    finally:
        _undo(undo)


def compiled_modules(named: list) -> str:
    """What a message says of the compiled modules among ``named`` (pairs
    of name and module); ``""`` where there are none. The pass runs a
    forward op by op, and a compiled region run under its mode fails inside
    torch's compiler, with an error that names neither the module nor the
    way out; a copy made by ``convert`` would run the original's compiled
    forward. (A ``torch.compile`` wrapper around the whole model is
    unwrapped: :func:`unwrap`.)"""
    wrapped = [f"'{n}'" for n, m in named if n and type(m).__name__ == "OptimizedModule"]
    in_place = [f"'{n or '(the model)'}'" for n, m in named if getattr(m, "_compiled_call_impl", None) is not None]
    if not wrapped and not in_place:
        return ""
    return ("the relevance pass runs the forward op by op, which a compiled module does not; " +
            (f"torch.compile-d submodules: {', '.join(wrapped)} (put the module behind each, its '_orig_mod', "
             f"in its place). " if wrapped else "") +
            (f"modules compiled in place with Module.compile(): {', '.join(in_place)} (use a copy made "
             f"before compiling, or compile with torch.compile(model), whose wrapper around the whole model is "
             f"unwrapped)." if in_place else ""))


@contextmanager
def relevance_pass(
    model: Optional[torch.nn.Module] = None,
    *,
    strict: bool = True,
    rules: Union[None, Rule, dict] = None,
    default_rule: Optional[Rule] = None,
) -> Iterator[RelevanceMode]:
    """Run a forward (and :meth:`RelevanceMode.backward`) as a relevance pass
    of ``model`` itself.

    Inside, the model is in eval mode, messages go through ``message`` and
    ``aggregate``, cached graphs are not used, the attention layers treat
    their coefficients as constants, and :class:`RelevanceMode` is active
    in this thread. Everything is put back on exit, whatever happens inside;
    passes on one model from several threads take turns. Parameters are not
    touched: the mode treats them as constants.

    ``rules`` is a :class:`~torch_geometric_lrp.rules.Rule` for every module,
    or a composite ``{module type or qualified name (glob): Rule}`` merged over
    the default (see :func:`torch_geometric_lrp.convert.resolve_rules`); a
    model made by :func:`~torch_geometric_lrp.convert` brings its own. With
    only ``default_rule`` given, that rule applies everywhere (also on a
    converted model); next to a composite, it takes the modules the
    composite does not key, in place of the default composite.

    Examples
    --------
    >>> with lrp.relevance_pass(model) as mode:
    ...     x = mode.watch(x)
    ...     out = model(x, edge_index)
    ...     (relevance,) = mode.backward(out, seed, [x])
    """
    from .convert import resolve_rules, type_rules, unused_types, unused_types_error  # late: convert imports nn
    if model is not None and not isinstance(model, torch.nn.Module):
        raise TypeError(f"model: expected a torch.nn.Module (or None), got {type(model).__name__}.")
    if default_rule is not None and not isinstance(default_rule, Rule):
        raise TypeError(f"default_rule: expected a rule instance from torch_geometric_lrp.rules (e.g. "
                        f"lrp.rules.Epsilon()), got {default_rule!r}.")
    if is_active():
        # The open pass would route the inner pass's own stream ops as the model's, and refuse them.
        raise RuntimeError("relevance_pass: a relevance pass is open already in this thread (an explanation or "
                           "check_conservation called inside relevance_pass, or from a model's forward during "
                           "an explanation); run them one after the other.")
    _check_no_global_backward_hooks()
    hooked: dict = {}
    by_type: tuple = ()
    unused: tuple = ()
    if model is not None:
        model = unwrap(model)
        named = list(model.named_modules())
        compiled = compiled_modules(named)
        if compiled:
            raise UnsupportedOpError(f"model: {compiled}")
        _check_no_inference_tensors(model)
        if rules is None and default_rule is not None:
            by_name = {}  # one rule everywhere
        elif rules is None and hasattr(model, "_lrp_rules"):
            by_name = model._lrp_rules
        elif isinstance(rules, dict) and default_rule is not None:
            # the modules the composite does not key take default_rule, not the default composite
            by_name = resolve_rules(model, {torch.nn.Module: default_rule, **rules}, named)
        else:
            by_name = resolve_rules(model, rules, named)
        hooked = {module: by_name[name] for name, module in named if name in by_name}
        by_type = type_rules(rules)
        # type keys no module has yet may still fit a module the forward
        # reaches outside the model: ``enter`` clears them when one does
        unused = unused_types(rules, (m for _, m in named))
        if isinstance(rules, Rule) and default_rule is None:
            default_rule = rules
    elif rules is not None:
        hooked = dict(rules) if isinstance(rules, dict) else {}
        default_rule = rules if isinstance(rules, Rule) else default_rule
    mode = RelevanceMode(strict=strict, rules=hooked, default_rule=default_rule, model=model, type_rules=by_type)
    mode.unused_types = unused
    with ExitStack() as stack:
        if model is not None:
            modules = [m for _, m in named]
            stack.enter_context(_locked(modules))
            stack.enter_context(_prepared(model, modules))
        stack.callback(_undo, mode.outside_undo)
        stack.enter_context(torch.inference_mode(False))
        stack.enter_context(torch.enable_grad())
        if hooked or by_type:
            pre = torch.nn.modules.module.register_module_forward_pre_hook(mode.enter)
            stack.callback(pre.remove)
            post = torch.nn.modules.module.register_module_forward_hook(mode.leave, always_call=True)
            stack.callback(post.remove)
        stack.enter_context(mode)
        yield mode
    if mode.unused_types:
        raise unused_types_error(model, mode.unused_types)
