"""The relevance pass: torch ops called during a forward get relevance rules.

:class:`RelevanceMode` is a :class:`torch.overrides.TorchFunctionMode`. While
it is active, every torch function call whose tensor arguments *carry
relevance* (``requires_grad``; inside :func:`relevance_pass` the parameters do
not, so exactly the tensors computed from the explained inputs do) is routed:

* ops that merge or scale values (``add``, ``sub``, ``mul``, ``div``,
  ``linear``, ``matmul``, ``sum``, ``mean``, ``scatter_add_``,
  ``scatter_reduce_``, ``index_add_``, torch_scatter's max/min and segment
  ops, ``batch_norm``, ``layer_norm``, max/min reductions) go to their
  relevance Function in :mod:`torch_geometric_lrp.functional`;
* element-wise activations go to the pass rule;
* copies and views (indexing, ``cat``, ``view``, ...) run as they are: their
  gradient already is the relevance rule;
* anything else whose output carries relevance has no rule. It is never given
  gradient semantics silently: with ``strict=True`` it raises
  :class:`UnsupportedOpError`, otherwise it is counted in
  :attr:`RelevanceMode.unsupported`.

This reaches stock PyG layers (their ``propagate`` is plain torch code) and
the functional code of a model's own ``forward`` alike, so there is one
mechanism for both.
"""
from __future__ import annotations

import sys
from collections import Counter
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Optional

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.overrides import TorchFunctionMode, resolve_name

from . import functional as R
from .rules import Epsilon, Rule

__all__ = ["RelevanceMode", "UnsupportedOpError", "relevance_pass", "is_active", "current_mode"]

_active: list["RelevanceMode"] = []


class UnsupportedOpError(RuntimeError):
    """An op without a relevance rule received a tensor that carries relevance."""


def is_active() -> bool:
    """True while a relevance pass runs (layers use it to switch behaviour)."""
    return bool(_active)


def current_mode() -> Optional["RelevanceMode"]:
    return _active[-1] if _active else None


def _carries(obj: Any) -> bool:
    if isinstance(obj, Tensor):
        return obj.requires_grad
    if isinstance(obj, (list, tuple)):
        return _any_carries(obj)
    if isinstance(obj, dict):
        return _any_carries(obj.values())
    return False


def _any_carries(objs) -> bool:
    # A plain loop: this runs for every torch call of the pass.
    for obj in objs:
        if isinstance(obj, Tensor):
            if obj.requires_grad:
                return True
        elif isinstance(obj, (list, tuple, dict)) and _carries(obj):
            return True
    return False


_names: dict = {}  # func -> short name (resolve_name is slow: cache it)


def _op_name(func: Callable) -> str:
    try:
        return _names[func]
    except (KeyError, TypeError):
        pass
    name = resolve_name(func) or getattr(func, "__name__", repr(func))
    for prefix in ("torch.Tensor.", "torch.nn.functional.", "torch_scatter.", "torch."):
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
index_put index_put_ gather_csr data.__get__ new_zeros new_ones new_full new_empty
zeros_like ones_like empty_like full_like
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
    "clip": torch.clip,
    # dropout: identity in eval mode, a gate in training mode
    "dropout": F.dropout, "dropout_": F.dropout, "alpha_dropout": F.alpha_dropout,
    "feature_alpha_dropout": F.feature_alpha_dropout, "dropout1d": F.dropout1d,
    # the last op of a classifier: relevance passes, so seed the logit's value
    "softmax": F.softmax, "log_softmax": F.log_softmax,
    # x / ||x||: the norm is treated as a constant gate
    "normalize": F.normalize,
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
        return R.product(input, other)
    if not _carries(input):
        input, other = other, input
    return R.mul(input, other)


def _div(mode, input, other, *, rounding_mode=None):
    if rounding_mode is not None or _carries(other):
        return NotImplemented  # a signal in the denominator has no rule
    return R.div(input, other)


def _linear(mode, input, weight, bias=None):
    if _carries(weight) or _carries(bias):
        return NotImplemented
    return R.linear(input, weight, bias, rule=mode.current_rule())


def _matmul(mode, input, other):
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


def _max_min(reduce):
    def handler(mode, input, dim=None, keepdim=False):
        if isinstance(dim, Tensor):  # torch.max(a, b): element-wise, no rule
            return NotImplemented
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


# Output activations: the relevance of a class starts from its logit, the
# input of these, which the mode remembers (see RelevanceMode.logits_of).
_OUTPUT_ACTIVATIONS = (F.softmax, F.log_softmax, torch.sigmoid)
# Autograd nodes of reshapes that keep the order of elements.
_ORDER_KEEPING = frozenset({"ViewBackward", "ReshapeAliasBackward", "SqueezeBackward", "UnsqueezeBackward",
                            "CloneBackward", "UnsafeViewBackward", "AliasBackward"})


def _pass(fn):
    def handler(mode, input, *args, **kwargs):
        if not _carries(input) or _carries(args) or _carries(kwargs):
            return NotImplemented
        kwargs.pop("inplace", None)
        out = R.activation(input, lambda x, *a: fn(x, *a, **kwargs), *args)
        if fn in _OUTPUT_ACTIVATIONS:
            mode._pre_activation[out.grad_fn] = input
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
    "batch_norm": _batch_norm, "layer_norm": _layer_norm,
    **{name: _pass(fn) for name, fn in _PASS.items()},
}


class RelevanceMode(TorchFunctionMode):
    """Routes torch ops on relevance-carrying tensors to relevance Functions.

    Parameters
    ----------
    strict : bool
        Raise :class:`UnsupportedOpError` at the first op that carries
        relevance but has no rule (default). With ``False`` such ops run with
        their gradient and are counted in :attr:`unsupported`.
    rules : dict, optional
        ``{module: Rule}``: the rule of the weighted ops run inside each module
        (the innermost running module with an entry wins; a module's entry
        takes effect when something calls :meth:`enter` and :meth:`leave`
        around its forward, as :func:`relevance_pass` does).
    default_rule : Rule, optional
        The rule where no module has one (default ``Epsilon()``).
    names : dict, optional
        ``{module: qualified name}`` for messages.
    model : Module, optional
        Where to find module names for messages when ``names`` is not given
        (looked up only when a message is written).
    """

    def __init__(self, strict: bool = True, rules: Optional[dict] = None,
                 default_rule: Optional[Rule] = None, names: Optional[dict] = None,
                 model: Optional[torch.nn.Module] = None):
        super().__init__()
        self.strict = strict
        self.rules = {id(m): r for m, r in (rules or {}).items()}
        self.default_rule = default_rule or Epsilon()
        self._names = None if names is None else {id(m): n for m, n in names.items()}
        self._model = model
        self.modules: list[torch.nn.Module] = []  # the running modules that have a rule
        self.unsupported: Counter = Counter()
        self._pre_activation: dict = {}  # grad_fn of an output activation -> its input

    def enter(self, module: torch.nn.Module, *args) -> None:
        """A module with a rule starts running (a forward pre-hook)."""
        self.modules.append(module)

    def leave(self, module: torch.nn.Module, *args) -> None:
        """It is done (a forward hook)."""
        self.modules.pop()

    def logits_of(self, out: Tensor) -> Tensor:
        """The logits under ``out``: the input of the softmax / log-softmax /
        sigmoid that produced ``out`` in this pass, seen through reshapes
        that keep the order of elements (``view``, ``squeeze``, ...), reshaped
        like ``out``; or ``out`` itself."""
        node = out.grad_fn
        while node is not None and node not in self._pre_activation and \
                type(node).__name__.rstrip("0123456789") in _ORDER_KEEPING:
            node = node.next_functions[0][0]
        logits = self._pre_activation.get(node)
        if logits is None or logits.numel() != out.numel():
            return out
        return logits.reshape(out.shape)

    def current_rule(self) -> Rule:
        if self.modules:
            return self.rules[id(self.modules[-1])]
        return self.default_rule

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
        _active.append(self)
        return super().__enter__()

    def __exit__(self, *exc):
        _active.remove(self)
        return super().__exit__(*exc)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not (_any_carries(args) or kwargs and _any_carries(kwargs.values())):
            # Bookkeeping (degrees, self-loops, index arithmetic): no relevance
            # goes in, so none comes out (parameters are frozen in the pass).
            return func(*args, **kwargs)
        name = _op_name(func)
        handler = HANDLERS.get(name)
        if handler is not None:
            out = handler(self, *args, **kwargs)
            if out is not NotImplemented:
                return out
        out = func(*args, **kwargs)
        if name not in COPIES and _carries(out):
            self._report(name)
        return out

    def _report(self, name: str) -> None:
        key = f"{name} in {self.where()}"
        if self.strict:
            raise UnsupportedOpError(
                f"'{name}' in {self.where()} carries relevance but has no relevance rule; running it "
                f"with its gradient would break conservation. Rewrite it with "
                f"torch_geometric_lrp.functional ops, detach an operand that is a gate (attention, "
                f"normalisation), or pass strict=False to only report it."
            )
        self.unsupported[key] += 1


@contextmanager
def relevance_pass(
    model: Optional[torch.nn.Module] = None,
    *,
    strict: bool = True,
    rules: Optional[dict] = None,
    default_rule: Optional[Rule] = None,
) -> Iterator[RelevanceMode]:
    """Run a forward (and its ``backward``) as a relevance pass.

    Inside, the model is in eval mode, its parameters do not require grad
    (so only tensors computed from inputs that do carry relevance), fused
    sparse message passing is off (so messages go through ``message`` and
    ``aggregate``), and :class:`RelevanceMode` is active. Everything is put
    back on exit, whatever happens inside.

    ``rules`` defaults to the composite that :func:`torch_geometric_lrp.convert`
    stored on ``model``.

    Examples
    --------
    >>> x = x.clone().requires_grad_()
    >>> with lrp.relevance_pass(model):
    ...     out = model(x, edge_index)
    ...     out.backward(seed)
    >>> x.grad  # input relevance
    """
    saved_grad, saved_training, saved_fuse, hooks = [], [], [], []
    hooked: dict = {}
    if model is not None:
        named = list(model.named_modules())
        if rules is None:
            by_name = getattr(model, "_lrp_rules", {})
            rules = {module: by_name[name] for name, module in named if name in by_name}
        hooked = _rule_changes(named, rules, default_rule or Epsilon())
        for p in model.parameters():
            if p.requires_grad:
                saved_grad.append(p)
                p.requires_grad_(False)
        for _, m in named:
            if m.training:
                saved_training.append(m)
            if getattr(m, "fuse", None) is True:
                saved_fuse.append(m)
                m.fuse = False
        if saved_training:
            model.eval()
    else:
        hooked = dict(rules or {})
    mode = RelevanceMode(strict=strict, rules=hooked, default_rule=default_rule, model=model)
    for module in hooked:
        hooks.append(module.register_forward_pre_hook(mode.enter))
        hooks.append(module.register_forward_hook(mode.leave, always_call=True))
    try:
        with mode:
            yield mode
    finally:
        for h in hooks:
            h.remove()
        for p in saved_grad:
            p.requires_grad_(True)
        for m in saved_training:
            m.training = True
        for m in saved_fuse:
            m.fuse = True


def _rule_changes(named: list, rules: dict, default_rule: Rule) -> dict:
    """The entries of ``rules`` that change the rule in effect, given the
    model's ``named_modules()``: a module whose rule equals its parent's needs
    no bookkeeping while it runs (hooks on every module made each module call
    slower). This reads the module tree as the call nesting, as it is in
    PyTorch models; a module that is called from outside its parent and has
    its parent's rule runs with the rule of the module that calls it."""
    effective: dict[str, Rule] = {}
    changes, seen = {}, set()
    for name, module in named:
        seen.add(id(module))
        inherited = effective[name.rpartition(".")[0]] if name else default_rule
        rule = rules.get(module, inherited)
        effective[name] = rule
        if rule != inherited:
            changes[module] = rule
    # modules outside the model (called from its forward) keep their entry
    changes.update({m: r for m, r in rules.items() if id(m) not in seen})
    return changes
