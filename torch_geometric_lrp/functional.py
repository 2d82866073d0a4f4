r"""Relevance ops: the ordinary op forward, its relevance rule backward.

Each op here computes exactly what the torch op of the same name computes.
Its backward does not return a gradient: it receives the relevance of the
output and returns the relevance of the inputs. Seed the output with
``y.backward(relevance)`` and the input relevance is in ``x.grad``.

Which rule each op uses:

* **merging ops** (``add``, ``sum``, ``mean``, ``scatter`` sum/mean,
  ``matmul``): proportional split, :math:`R_i = x_i R / z` with :math:`z` the
  (un-normalised) sum of the contributions; for ``mean`` the count is a
  constant, so it splits like ``sum``;
* **max / min** (``scatter`` with ``reduce='max'``/``'min'``): the winning
  input gets all the relevance (ties: the last winning index);
* **weighted ops** (``linear``): a rule from :mod:`torch_geometric_lrp.rules`,
  :class:`~torch_geometric_lrp.rules.Epsilon` by default;
* **gates** (``mul``): relevance goes to the signal, the gate (edge weight,
  attention coefficient) is a constant;
* **element-wise activations** and **copies** (``index_select``, ``cat``):
  relevance passes unchanged; for copies plain autograd already does that;
* **homogeneous reductions** (norms, ``std``, ``var``): Euler's split,
  :math:`R_i = x_i \, \partial y / \partial x_i \; R / (d \, y)` for
  :math:`y` homogeneous of degree :math:`d` in :math:`x`.

Relevance reaching an output that is exactly 0 is lost and reported to any
open :class:`~torch_geometric_lrp.audit.RelevanceAudit`, as is relevance
absorbed by a bias, a stabiliser or an operand that carries no relevance.
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence, Union

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd import Function

from . import audit
from .rules import Epsilon, Rule, divide, times

try:  # optional back-end
    import torch_scatter
except ImportError:  # pragma: no cover - exercised where torch_scatter is missing
    torch_scatter = None

try:  # optional sparse adjacency type
    from torch_sparse import SparseTensor
except ImportError:  # pragma: no cover
    SparseTensor = None

__all__ = [
    "add",
    "sum",
    "mean",
    "linear",
    "scatter",
    "index_select",
    "cat",
    "mul",
    "div",
    "product",
    "homogeneous",
    "matmul",
    "batch_norm",
    "layer_norm",
    "activation",
    "relu",
    "leaky_relu",
    "elu",
    "gelu",
    "silu",
    "sigmoid",
    "tanh",
    "softplus",
]

DEFAULT_RULE: Rule = Epsilon()
_BLOCK = 1 << 21  # elements per block of rows in the linear backward (8 MiB in float32)


def _record(op: str, relevance_out: Tensor, dropped, *relevance_in) -> None:
    if audit.is_active():
        audit.record(op, relevance_out, dropped, relevance_in)


# ----------------------------------------------------------------------------
# add, sum, mean
# ----------------------------------------------------------------------------
class _Add(Function):
    @staticmethod
    def forward(ctx, a, b):
        out = a + b
        ctx.save_for_backward(a, b, out)
        return out

    @staticmethod
    def backward(ctx, relevance):
        a, b, out = ctx.saved_tensors
        s, dropped = divide(relevance, out)
        ra = times(a, s).sum_to_size(a.shape) if ctx.needs_input_grad[0] else None
        rb = times(b, s).sum_to_size(b.shape) if ctx.needs_input_grad[1] else None
        _record("add", relevance, dropped, ra, rb)
        return ra, rb


def add(a: Tensor, b: Union[Tensor, float]) -> Tensor:
    r"""``a + b`` with the proportional rule :math:`R_a = a R / (a + b)`,
    :math:`R_b = b R / (a + b)`.

    Operands broadcast (e.g. a bias ``[F]`` added to ``[N, F]``); a broadcast
    operand's relevance is summed over the copies. An operand that does not
    require grad (a constant) absorbs its share.
    """
    if not isinstance(b, Tensor):
        b = torch.as_tensor(b, dtype=a.dtype, device=a.device)
    return _Add.apply(a, b)


def _dims(dim, ndim: int) -> tuple[int, ...]:
    dims = (dim,) if isinstance(dim, int) else None if dim is None else tuple(dim)
    if not dims:  # None or (): every dimension, as torch's sum and mean read them
        return tuple(range(ndim))
    return tuple(sorted(d % ndim for d in dims))


class _Sum(Function):
    @staticmethod
    def forward(ctx, x, dim, keepdim, mean):
        dims = _dims(dim, x.dim())
        total = x.sum(dim=dims, keepdim=True)
        ctx.save_for_backward(x, total)
        ctx.op = "mean" if mean else "sum"
        out = total
        if mean:
            count = 1
            for d in dims:
                count *= x.shape[d]
            out = total / count
        return out if keepdim else out.squeeze(dims) if dims else out

    @staticmethod
    def backward(ctx, relevance):
        x, total = ctx.saved_tensors
        relevance = relevance.reshape(total.shape)
        s, dropped = divide(relevance, total)
        r = times(x, s)
        _record(ctx.op, relevance, dropped, r)
        return r, None, None, None


def sum(x: Tensor, dim=None, keepdim: bool = False) -> Tensor:
    r"""``x.sum(dim, keepdim)`` with :math:`R_i = x_i R / \sum_k x_k`."""
    return _Sum.apply(x, dim, keepdim, False)


def mean(x: Tensor, dim=None, keepdim: bool = False) -> Tensor:
    r"""``x.mean(dim, keepdim)`` with :math:`R_i = x_i R / \sum_k x_k`
    (the count is a constant, so relevance splits as for :func:`sum`)."""
    return _Sum.apply(x, dim, keepdim, True)


# ----------------------------------------------------------------------------
# linear
# ----------------------------------------------------------------------------
class _Linear(Function):
    @staticmethod
    def forward(ctx, x, weight, bias, rule):
        out = F.linear(x, weight, bias)
        ctx.rule = rule
        ctx.save_for_backward(x, weight, bias, out)
        return out

    @staticmethod
    def backward(ctx, relevance):
        x, weight, bias, out = ctx.saved_tensors
        # Rows are independent: apply the rule block by block, so that its
        # temporaries stay small (peak memory close to the plain backward's).
        xs, outs = x.reshape(-1, x.shape[-1]), out.reshape(-1, out.shape[-1])
        rel = relevance.reshape(-1, out.shape[-1])
        step = max(1, _BLOCK // max(xs.shape[1], outs.shape[1]))
        if xs.shape[0] <= step:  # one block: no copy into a result buffer
            r, dropped = ctx.rule.linear(xs, weight, bias, outs, rel)
        else:
            r = torch.empty_like(xs)
            blocks = [] if audit.is_active() else None  # the dropped masks, only for an audit
            for start in range(0, xs.shape[0], step):
                rows = slice(start, start + step)
                r[rows], d = ctx.rule.linear(xs[rows], weight, bias, outs[rows], rel[rows])
                if blocks is not None:
                    blocks.append(torch.zeros_like(outs[rows], dtype=torch.bool) if d is None else d)
            dropped = None if blocks is None else torch.cat(blocks)
        _record("linear", rel, dropped, r)
        return r.view(x.shape), None, None, None


def linear(
    x: Tensor,
    weight: Tensor,
    bias: Optional[Tensor] = None,
    rule: Optional[Rule] = None,
) -> Tensor:
    r"""``F.linear(x, weight, bias)`` whose relevance follows ``rule``
    (default :class:`~torch_geometric_lrp.rules.Epsilon`).

    No relevance is given to ``weight`` or ``bias``: the bias absorbs its share.
    """
    if rule is not None and not isinstance(rule, Rule):
        raise TypeError(f"linear: rule must be a rule instance from torch_geometric_lrp.rules (e.g. "
                        f"lrp.rules.Epsilon()), got {rule!r}.")
    if x.shape[-1] != weight.shape[-1]:
        raise ValueError(
            f"linear: x has {x.shape[-1]} features in its last dimension but weight "
            f"{tuple(weight.shape)} expects {weight.shape[-1]}."
        )
    return _Linear.apply(x, weight, bias, DEFAULT_RULE if rule is None else rule)


# ----------------------------------------------------------------------------
# scatter
# ----------------------------------------------------------------------------
_REDUCES = ("sum", "add", "mean", "max", "min")
_BACKENDS = ("torch", "torch_scatter")


def _along(index: Tensor, src: Tensor, dim: int) -> Tensor:
    """View a 1-D ``index`` along ``dim`` and broadcast it to ``src``'s shape."""
    if index.dim() == src.dim():
        return index.expand_as(src)
    shape = [1] * src.dim()
    shape[dim] = -1
    return index.view(shape).expand_as(src)


def _squeeze_index(index: Tensor, dim: int) -> Tensor:
    """The 1-D index behind ``index`` when ``index`` is a broadcast of one
    (stride 0 off ``dim``, as PyG's ``index.view(-1, 1).expand_as(src)``):
    ``index_select`` with it is several times faster than ``gather``."""
    if index.dim() < 2 or any(stride != 0 and size != 1 for d, (size, stride)
                              in enumerate(zip(index.shape, index.stride())) if d != dim):
        return index
    for d in reversed(range(index.dim())):
        if d != dim:
            index = index.select(d, 0)
    return index


def _pick(values: Tensor, index: Tensor, dim: int) -> Tensor:
    """``values`` at each input's output position (the inverse of scatter)."""
    if index.dim() == 1:
        return values.index_select(dim, index)
    return values.gather(dim, index)


def _scatter_forward(src, index, dim, dim_size, reduce, backend) -> Tensor:
    if backend == "torch_scatter":
        return torch_scatter.scatter(src, index, dim, dim_size=dim_size, reduce=reduce)
    shape = list(src.shape)
    shape[dim] = dim_size
    out = src.new_zeros(shape)
    full = _along(index, src, dim)
    if reduce == "sum":
        return out.scatter_add_(dim, full, src)
    # include_self=False leaves empty groups at 0, as PyG and torch_scatter do
    return out.scatter_reduce_(dim, full, src, "amax" if reduce == "max" else "amin", include_self=False)


class _Scatter(Function):
    @staticmethod
    def forward(ctx, src, index, dim, dim_size, reduce, backend):
        ctx.dim, ctx.reduce = dim, reduce
        if reduce in ("sum", "mean"):
            total = _scatter_forward(src, index, dim, dim_size, "sum", backend)
            ctx.save_for_backward(src, index, total)
            if reduce == "sum":
                return total
            return total / _group_sizes(src, index, dim, total).clamp(min=1)
        out = _scatter_forward(src, index, dim, dim_size, reduce, backend)
        ctx.save_for_backward(src, index, out)
        return out

    @staticmethod
    def backward(ctx, relevance):
        src, index, out = ctx.saved_tensors
        dim = ctx.dim
        if ctx.reduce in ("sum", "mean"):
            # out is the un-normalised sum here: R_i = src_i * R / sum
            s, dropped = divide(relevance, out)
            picked = _pick(s, index, dim)  # a fresh gather: multiplied in place where it has src's shape, one
            # tensor of src's size as the plain backward makes
            r = times(src, picked, in_place=picked.shape == src.shape and picked.dtype == src.dtype)
        else:
            r, dropped = _winner_takes_all(src, index, dim, out, relevance)
        _record(f"scatter_{ctx.reduce}", relevance, dropped, r)
        return r, None, None, None, None, None


def _group_sizes(src, index, dim, out) -> Tensor:
    """Number of entries of each group, broadcastable to ``out``."""
    if index.dim() == 1:
        count = torch.zeros(out.shape[dim], dtype=src.dtype, device=src.device)
        count.scatter_add_(0, index, torch.ones_like(index, dtype=src.dtype))
        shape = [1] * src.dim()
        shape[dim] = -1
        return count.view(shape)
    return torch.zeros_like(out).scatter_add_(dim, index, torch.ones_like(src))


def _winner_takes_all(src, index, dim, out, relevance):
    """Relevance of a max/min scatter: each output's relevance goes to the
    input that produced it (ties: the last such input). Outputs equal to 0,
    empty groups included, lose their relevance."""
    if src.numel() == 0:  # no inputs at all: every output is an empty group
        return torch.zeros_like(src), torch.ones_like(out, dtype=torch.bool)
    full = _along(index, src, dim)
    won = src == _pick(out, index, dim)
    position = torch.arange(src.shape[dim], device=src.device)
    shape = [1] * src.dim()
    shape[dim] = -1
    position = torch.where(won, position.view(shape), -1)
    last = torch.full(out.shape, -1, dtype=position.dtype, device=src.device)
    last.scatter_reduce_(dim, full, position, "amax", include_self=True)
    dropped = out == 0
    keep = torch.where(dropped | (last < 0), 0, relevance)
    # out of place: relevance may be batched (torch.func.vmap), src is not
    r = torch.zeros_like(src).scatter_add(dim, last.clamp(min=0), keep)
    return r, dropped


def scatter(
    src: Tensor,
    index: Tensor,
    dim: int = 0,
    dim_size: Optional[int] = None,
    reduce: str = "sum",
    backend: Optional[str] = None,
) -> Tensor:
    r"""Scatter-reduce ``src`` into ``dim_size`` groups along ``dim`` (PyG's
    ``torch_geometric.utils.scatter`` semantics; empty groups are 0).

    Parameters
    ----------
    src : Tensor
        The values, e.g. messages ``[E, F]``.
    index : LongTensor
        Group of each entry along ``dim``: 1-D of length ``src.size(dim)``, or
        the shape of ``src``.
    dim : int
        The dimension to reduce.
    dim_size : int, optional
        Number of groups; ``index.max() + 1`` if not given.
    reduce : {'sum', 'add', 'mean', 'max', 'min'}
        Sum and mean split relevance proportionally to the contributions;
        max and min give it all to the winning entry.
    backend : {None, 'torch', 'torch_scatter'}
        Which library runs the forward (``None``: torch's native ops). The
        relevance is the same for both.
    """
    if reduce not in _REDUCES:
        raise ValueError(f"scatter: reduce must be one of {_REDUCES}, got reduce={reduce!r}.")
    backend = backend or "torch"
    if backend not in _BACKENDS:
        raise ValueError(f"scatter: backend must be None, 'torch' or 'torch_scatter', got {backend!r}.")
    if backend == "torch_scatter" and torch_scatter is None:
        raise ImportError(
            "scatter: backend='torch_scatter' needs the torch-scatter package "
            "(pip install --no-build-isolation torch-scatter, or the 'scatter' extra)."
        )
    dim = dim % src.dim()
    if index.dtype != torch.long:
        raise TypeError(f"scatter: index must be a LongTensor (torch.long), got {index.dtype}.")
    if not (
        (index.dim() == 1 and index.shape[0] == src.shape[dim])
        or index.shape == src.shape
    ):
        raise ValueError(
            f"scatter: index must be 1-D with src.size({dim}) = {src.shape[dim]} entries, "
            f"or have src's shape {tuple(src.shape)}; got index of shape {tuple(index.shape)}."
        )
    if dim_size is None:
        dim_size = int(index.max()) + 1 if index.numel() > 0 else 0
    reduce = "sum" if reduce == "add" else reduce
    index = _squeeze_index(index, dim)
    return _Scatter.apply(src, index, dim, dim_size, reduce, backend)


# ----------------------------------------------------------------------------
# copies: plain autograd is already the relevance rule
# ----------------------------------------------------------------------------
def index_select(src: Tensor, dim: int, index: Tensor) -> Tensor:
    """``torch.index_select``. A copy: its gradient, which sums the relevance of
    all copies of an entry, is already the relevance rule."""
    return torch.index_select(src, dim, index)


def cat(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """``torch.cat``. A copy: its gradient splits the relevance back to the
    pieces, which is already the relevance rule."""
    return torch.cat(list(tensors), dim=dim)


# ----------------------------------------------------------------------------
# gates and element-wise activations: relevance passes unchanged
# ----------------------------------------------------------------------------
class _Gate(Function):
    @staticmethod
    def forward(ctx, x, w, op):
        ctx.x_shape = x.shape
        return op(x, w)

    @staticmethod
    def backward(ctx, relevance):
        return relevance.sum_to_size(ctx.x_shape), None, None


def mul(x: Tensor, w: Union[Tensor, float]) -> Tensor:
    """``x * w`` where ``w`` is a gate (edge weight, attention coefficient,
    normalisation): all relevance goes to the signal ``x``; ``w`` is a constant
    of the relevance pass. A broadcast ``x`` gets the relevance of its copies."""
    return _Gate.apply(x, w, torch.mul)


def div(x: Tensor, w: Union[Tensor, float]) -> Tensor:
    """``x / w`` where ``w`` is a constant (a degree, a count, a norm): all
    relevance goes to ``x``, as for :func:`mul`."""
    return _Gate.apply(x, w, torch.div)


class _Product(Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.shapes = a.shape, b.shape
        return a * b

    @staticmethod
    def backward(ctx, relevance):
        half = relevance / 2
        return half.sum_to_size(ctx.shapes[0]), half.sum_to_size(ctx.shapes[1])


def product(a: Tensor, b: Tensor) -> Tensor:
    r"""``a * b`` of two signals (e.g. ``x_i * x_j`` in a link predictor): each
    factor gets half of the relevance, :math:`R_a = R_b = R / 2`.

    The product is not linear in either factor, so no proportional split
    exists; the symmetric split conserves relevance and favours neither side.
    Use :func:`mul` instead when one factor is a gate.
    """
    return _Product.apply(a, b)


class _Pass(Function):
    @staticmethod
    def forward(ctx, x, fn, args):
        return fn(x, *args)

    @staticmethod
    def backward(ctx, relevance):
        return relevance, None, None


class _Homogeneous(Function):
    @staticmethod
    def forward(ctx, fn, degree, *xs):
        # torch.func.vjp rather than autograd in the backward: it composes
        # with the vmap of batched backwards (walks)
        out, ctx.vjp = torch.func.vjp(fn, *(x.detach() for x in xs))
        ctx.degree = degree
        ctx.save_for_backward(out, *xs)
        return out

    @staticmethod
    def backward(ctx, relevance):
        out, *xs = ctx.saved_tensors
        s, dropped = divide(relevance, out)
        grads = ctx.vjp(s)
        rs = [times(x, g) / ctx.degree for x, g in zip(xs, grads)]
        _record("homogeneous", relevance, dropped, *rs)
        return (None, None, *rs)


def homogeneous(x: Union[Tensor, Sequence[Tensor]], fn: Callable[..., Tensor], degree: int = 1) -> Tensor:
    r"""``fn(x)`` (``fn(*x)`` for a sequence of inputs) for a function that is
    positively homogeneous of degree ``degree`` in its inputs taken together:
    a norm or a standard deviation of one input (1), a variance (2), a
    multilinear product of ``k`` signals such as an ``einsum`` (``k``).
    By Euler's theorem :math:`\sum_i x_i \, \partial y / \partial x_i = d \, y`
    for every output :math:`y`, so the split
    :math:`R_i = x_i \, \partial y / \partial x_i \, R / (d \, y)` conserves
    relevance exactly; it is gradient x input scaled to the output's
    relevance, and for a product of signals it is the product rule (each
    factor of each term gets an equal share). An output of 0 loses its
    relevance (reported)."""
    xs = (x,) if isinstance(x, Tensor) else tuple(x)
    return _Homogeneous.apply(fn, degree, *xs)


def activation(x: Tensor, fn: Callable[..., Tensor], *args) -> Tensor:
    """Apply the element-wise ``fn(x, *args)``; relevance passes unchanged
    (the pass rule)."""
    return _Pass.apply(x, fn, args)


def relu(x: Tensor) -> Tensor:
    """``F.relu`` with the pass rule."""
    return activation(x, F.relu)


def leaky_relu(x: Tensor, negative_slope: float = 0.01) -> Tensor:
    """``F.leaky_relu`` with the pass rule."""
    return activation(x, F.leaky_relu, negative_slope)


def elu(x: Tensor, alpha: float = 1.0) -> Tensor:
    """``F.elu`` with the pass rule."""
    return activation(x, F.elu, alpha)


def gelu(x: Tensor) -> Tensor:
    """``F.gelu`` with the pass rule."""
    return activation(x, F.gelu)


def silu(x: Tensor) -> Tensor:
    """``F.silu`` with the pass rule."""
    return activation(x, F.silu)


def sigmoid(x: Tensor) -> Tensor:
    """``torch.sigmoid`` with the pass rule."""
    return activation(x, torch.sigmoid)


def tanh(x: Tensor) -> Tensor:
    """``torch.tanh`` with the pass rule."""
    return activation(x, torch.tanh)


def softplus(x: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """``F.softplus`` with the pass rule."""
    return activation(x, F.softplus, beta, threshold)


# ----------------------------------------------------------------------------
# normalisation layers
# ----------------------------------------------------------------------------
def batch_norm(
    x: Tensor,
    running_mean: Tensor,
    running_var: Tensor,
    weight: Optional[Tensor] = None,
    bias: Optional[Tensor] = None,
    eps: float = 1e-5,
) -> Tensor:
    r"""Batch norm with running statistics (eval mode) as the per-feature affine
    map :math:`y = x s + t`, :math:`s = w / \sqrt{\sigma^2 + \epsilon}`,
    :math:`t = b - \mu s`. Relevance: :math:`R_x = x s R / y` (the shift
    :math:`t` is a bias and absorbs its share)."""
    scale = torch.rsqrt(running_var + eps)
    if weight is not None:
        scale = scale * weight
    shift = -running_mean * scale
    if bias is not None:
        shift = shift + bias
    shape = [1] * x.dim()
    shape[1 if x.dim() > 1 else 0] = -1
    return add(mul(x, scale.view(shape)), shift.view(shape))


class _LayerNorm(Function):
    @staticmethod
    def forward(ctx, x, normalized_shape, weight, bias, eps):
        out = F.layer_norm(x, normalized_shape, weight, bias, eps)
        dims = tuple(range(-len(normalized_shape), 0))
        inv_std = torch.rsqrt(x.var(dim=dims, unbiased=False, keepdim=True) + eps)
        ctx.dims = dims
        ctx.save_for_backward(x, weight, out, inv_std)
        return out

    @staticmethod
    def backward(ctx, relevance):
        x, weight, out, inv_std = ctx.saved_tensors
        s, dropped = divide(relevance, out)
        t = s * inv_std if weight is None else s * weight * inv_std
        r = x * (t - t.mean(dim=ctx.dims, keepdim=True))
        _record("layer_norm", relevance, dropped, r)
        return r, None, None, None, None


def layer_norm(
    x: Tensor,
    normalized_shape: Sequence[int],
    weight: Optional[Tensor] = None,
    bias: Optional[Tensor] = None,
    eps: float = 1e-5,
) -> Tensor:
    r"""``F.layer_norm``. The standard deviation is a constant of the pass; the
    centring :math:`x - \bar{x}` is a linear map :math:`C = I - \tfrac{1}{n}\mathbf{1}\mathbf{1}^\top`,
    so with :math:`t = w R / (\sigma y)`:
    :math:`R_{x_i} = x_i (t_i - \bar{t})` (LRP-0 through the centring; the
    bias absorbs its share)."""
    return _LayerNorm.apply(x, tuple(normalized_shape), weight, bias, eps)


# ----------------------------------------------------------------------------
# matmul: adjacency x features
# ----------------------------------------------------------------------------
def _is_sparse_tensor(a) -> bool:
    return SparseTensor is not None and isinstance(a, SparseTensor)


def _transpose(a):
    if _is_sparse_tensor(a):
        return a.t()
    if a.layout == torch.strided:
        return a.transpose(-2, -1)
    return a.to_sparse_coo().transpose(0, 1).coalesce()


class _MatMul(Function):
    @staticmethod
    def forward(ctx, x, adj):
        out = adj @ x
        ctx.adj = adj  # may be a SparseTensor, which save_for_backward does not take
        ctx.save_for_backward(x, out)
        return out

    @staticmethod
    def backward(ctx, relevance):
        x, out = ctx.saved_tensors
        s, dropped = divide(relevance, out)
        r = times(x, _transpose(ctx.adj) @ s)
        _record("matmul", relevance, dropped, r)
        return r, None


def matmul(adj, x: Tensor) -> Tensor:
    r"""``adj @ x`` where ``adj`` mixes the rows of ``x`` (an adjacency or
    propagation matrix: dense, ``torch.sparse`` or ``torch_sparse.SparseTensor``).

    ``adj`` is a constant of the relevance pass and ``x`` the signal:
    :math:`R_{x_{kf}} = x_{kf} \sum_i a_{ik} R_{if} / \sum_{k'} a_{ik'} x_{k'f}`.
    """
    shape = tuple(adj.sizes()) if _is_sparse_tensor(adj) else tuple(adj.shape)
    if len(shape) != 2 or shape[1] != x.shape[0]:
        raise ValueError(
            f"matmul: adj must be a 2-D [N, M] matrix with M = x.size(0) = {x.shape[0]}, "
            f"got adj of shape {shape}."
        )
    return _MatMul.apply(x, adj)

