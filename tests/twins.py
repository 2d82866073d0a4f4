r"""Slow, dense reference twins of the layer-level LRP rules (float64).

Nothing here imports ``torch_geometric_lrp``: these are the independent
definitions the library is tested against (``tests/test_layer_twins.py``).

Vocabulary
----------
A *map* is the part of a layer between two non-linearities. With attention
coefficients, normalisations and degree weights computed from the forward and
then frozen (*gates*), every supported map is affine in its inputs:
``z = f(x) = J x + c``. A *twin* writes one map out with explicit loops over
its messages:

* ``forward(xs, p)`` is ``z`` for inputs ``xs`` (a tuple: node features, and
  edge features where the map reads them) and parameters ``p``;
* ``backward(xs, p, g)`` is ``J^T g`` for each input and the relevance of
  each message, ``<m, d(z . g)/dm>`` (``m`` is the message as PyG's
  ``message()`` returns it, so constants inside it count; a multi-hop map
  has one message per edge and hop, and its relevance is summed over hops).
  Messages over input edges are booked per input edge, messages over
  self-loops the layer adds itself per node.

A *rule* turns one map into ``K`` streams (:func:`streams`): stream ``k``
runs the same map (same frozen gates) on a modified input ``x_k = in_k(x)``
with every weight ``W`` replaced by ``w_k(W)`` and every bias ``b`` by
``b_k(b)``. ``in_k`` may ignore ``x`` (ones for ``Flat`` and ``WSquare``,
the bounds for ``ZBox``); a map with several inputs (node and edge
features) has each of them modified the same way. Structural constants (the
``-1`` of a difference, an identity, GIN's ``1 + eps``) are neither weights
nor biases: no rule modifies them. :func:`stream_gradients` maps the output
relevance ``R`` to one gradient ``g_k`` per stream, and (:func:`map_relevance`)

.. math::

    R_x = \sum_k x_k \odot J_k^\top g_k, \qquad
    R_{j \to i} = \sum_k \langle m_k(j \to i), \partial (z_k \cdot g_k) / \partial m_k \rangle .

``stab(z) = z + eps * sign(z)`` with ``sign(0) = +1``; an output with
``z = 0`` in a stream passes nothing (``g = 0`` there: no input contributed,
its relevance is lost). Layers made of several maps (GIN, GINE) compose the
maps with the pass rule at the ReLU between them.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Optional, Union

import torch
import torch_geometric.nn as pyg_nn
from torch import Tensor
from torch_geometric.utils import softmax

# ---------------------------------------------------------------------------
# Rules
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Epsilon:
    """One stream, nothing modified; ``g = R / stab(z)``."""

    epsilon: float = 1e-6


@dataclass(frozen=True)
class Gamma:
    """Two streams on ``x``: ``W -> W + gamma W+``, ``b -> b + gamma b+``,
    and all weights and biases 0 (the paths without a weight, whose
    coefficient is positive, boosted by ``gamma`` too);
    ``z' = z_1 + gamma z_2``, ``g = (1, gamma) R / stab(z')``. For a map
    whose paths carry at most one weight and no negative gate or sign."""

    gamma: float = 0.25
    epsilon: float = 1e-6


@dataclass(frozen=True)
class AlphaBeta:
    """Six streams ``(x+, W+, b+)``, ``(x-, W-, 0)``, ``(x-, 0, 0)``,
    ``(x+, W-, b-)``, ``(x-, W+, 0)``, ``(x+, 0, 0)``; ``z+ = z_1 + z_2 -
    z_3``, ``z- = z_4 + z_5 - z_6`` (the positive and negative contributions
    of a map whose paths carry at most one weight and no negative gate or
    sign; the zero-weight streams take out the paths without a weight, which
    ``x-`` would otherwise put into ``z+``);
    ``g_1 = g_2 = -g_3 = c+ R / stab(z+)``, ``g_4 = g_5 = -g_6 = c- R / stab(z-)`` with
    ``c+ = alpha``, ``c- = -beta``, except ``c+ = 1`` where ``z- = 0`` and
    ``c- = (1 if beta > 0 else 0)`` where ``z+ = 0``."""

    alpha: float = 2.0
    beta: float = 1.0
    epsilon: float = 1e-6


@dataclass(frozen=True)
class Flat:
    """One stream ``(1, 1, 0)``: every input and every weight set to 1,
    every bias to 0, every gate to its magnitude; ``g = R / z'`` (no
    stabiliser)."""


@dataclass(frozen=True)
class WSquare:
    """One stream ``(1, W * W, 0)``: every input set to 1, every weight
    squared, every bias 0, every gate its magnitude; ``g = R / z'`` (no
    stabiliser)."""


@dataclass(frozen=True)
class ZBox:
    """Three streams ``(x, W, 0)``, ``(l, W+, 0)``, ``(h, W-, 0)`` (``l``,
    ``h``: every input filled with ``low``, ``high``);
    ``s = R / stab(z_1 - z_2 - z_3)``, ``g = [s, -s, -s]``."""

    low: float = 0.0
    high: float = 1.0
    epsilon: float = 1e-6


Rule = Union[Epsilon, Gamma, AlphaBeta, Flat, WSquare, ZBox]


def stab(z: Tensor, epsilon: float) -> Tensor:
    """``z + eps * sign(z)`` with ``sign(0) = +1``."""
    return z + epsilon * torch.where(z >= 0, 1.0, -1.0).to(z.dtype)


def ratio(relevance: Tensor, z: Tensor, epsilon: float) -> Tensor:
    """``R / stab(z)``, and 0 where ``z == 0`` (nothing flowed into that output)."""
    return torch.where(z == 0, torch.zeros_like(z), relevance / stab(z, epsilon))


Params = dict  # name -> tensor


def streams(rule: Rule, xs: tuple, weights: Params, biases: Params) -> list[tuple[tuple, Params]]:
    """The ``(x_k, p_k)`` of each stream of ``rule`` (see the rule classes)."""
    if isinstance(rule, Epsilon):
        return [(xs, {**weights, **biases})]
    if isinstance(rule, Gamma):
        def mod(t):
            return t + rule.gamma * t.clamp(min=0)
        # the paths without a weight have a positive coefficient: boosted too
        zero = {n: torch.zeros_like(t) for n, t in {**weights, **biases}.items()}
        return [(xs, {n: mod(t) for n, t in {**weights, **biases}.items()}), (xs, zero)]
    if isinstance(rule, AlphaBeta):
        xp = tuple(x.clamp(min=0) for x in xs)
        xn = tuple(x.clamp(max=0) for x in xs)
        wp = {n: w.clamp(min=0) for n, w in weights.items()}
        wn = {n: w.clamp(max=0) for n, w in weights.items()}
        bp = {n: b.clamp(min=0) for n, b in biases.items()}
        bn = {n: b.clamp(max=0) for n, b in biases.items()}
        b0 = {n: torch.zeros_like(b) for n, b in biases.items()}
        w0 = {n: torch.zeros_like(w) for n, w in weights.items()}
        # z = L0(x) + L1(x, W) + b (paths without a weight, paths through one
        # weight): z+ = L0(x+) + L1(x+, W+) + L1(x-, W-) + b+, which is
        # f(x+, W+, b+) + f(x-, W-, 0) - f(x-, 0, 0); z- likewise
        return [(xp, {**wp, **bp}), (xn, {**wn, **b0}), (xn, {**w0, **b0}),
                (xp, {**wn, **bn}), (xn, {**wp, **b0}), (xp, {**w0, **b0})]
    b0 = {n: torch.zeros_like(b) for n, b in biases.items()}
    if isinstance(rule, Flat):
        ones = tuple(torch.ones_like(x) for x in xs)
        return [(ones, {**{n: torch.ones_like(w) for n, w in weights.items()}, **b0})]
    if isinstance(rule, WSquare):
        ones = tuple(torch.ones_like(x) for x in xs)
        return [(ones, {**{n: w * w for n, w in weights.items()}, **b0})]
    if isinstance(rule, ZBox):
        low = tuple(torch.full_like(x, rule.low) for x in xs)
        high = tuple(torch.full_like(x, rule.high) for x in xs)
        wp = {n: w.clamp(min=0) for n, w in weights.items()}
        wn = {n: w.clamp(max=0) for n, w in weights.items()}
        return [(xs, {**weights, **b0}), (low, {**wp, **b0}), (high, {**wn, **b0})]
    raise TypeError(f"unknown rule {rule!r}")


def stream_gradients(rule: Rule, relevance: Tensor, zs: list[Tensor]) -> list[Tensor]:
    """The gradient ``g_k`` of each stream, from the output relevance."""
    if isinstance(rule, Epsilon):
        (z,) = zs
        return [ratio(relevance, z, rule.epsilon)]
    if isinstance(rule, Gamma):
        s = ratio(relevance, zs[0] + rule.gamma * zs[1], rule.epsilon)
        return [s, rule.gamma * s]
    if isinstance(rule, (Flat, WSquare)):
        (z,) = zs
        return [ratio(relevance, z, 0.0)]
    if isinstance(rule, ZBox):
        s = ratio(relevance, zs[0] - zs[1] - zs[2], rule.epsilon)
        return [s, -s, -s]
    if isinstance(rule, AlphaBeta):
        zp, zn = zs[0] + zs[1] - zs[2], zs[3] + zs[4] - zs[5]
        cp = torch.where(zn == 0, 1.0, rule.alpha).to(relevance.dtype)
        cn = torch.where(zp == 0, 1.0 if rule.beta > 0 else 0.0, -rule.beta).to(relevance.dtype)
        gp = cp * ratio(relevance, zp, rule.epsilon)
        gn = cn * ratio(relevance, zn, rule.epsilon)
        return [gp, gp, -gp, gn, gn, -gn]
    raise TypeError(f"unknown rule {rule!r}")


# ---------------------------------------------------------------------------
# Messages
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Msg:
    """One message ``src -> dst``: over input edge ``edge``, or over a
    self-loop the layer added itself (``edge is None``)."""

    src: int
    dst: int
    edge: Optional[int]


def message_list(edge_index: Tensor, num_nodes: int, self_loops: bool) -> list[Msg]:
    """The input edges, then (``self_loops``) one loop per node (the inputs
    of these tests have no self-loops, so every node gets one)."""
    msgs = [Msg(int(s), int(d), e) for e, (s, d) in enumerate(edge_index.t().tolist())]
    if self_loops:
        msgs += [Msg(n, n, None) for n in range(num_nodes)]
    return msgs


@dataclass
class Back:
    """What ``Twin.backward`` returns: ``J^T g`` per input, and the relevance
    of the messages per input edge ``[E]`` and per added self-loop ``[N]``."""

    adjoint: tuple
    edge: Tensor
    loops: Tensor


class Twin:
    """One affine map, written out. Subclasses set ``weights`` / ``biases``
    (name -> tensor: what the rules modify; gates are attributes) and write
    ``forward`` and ``backward``."""

    weights: Params
    biases: Params
    num_edges: int = 0
    num_nodes: int = 0

    def params(self) -> Params:
        return {**self.weights, **self.biases}

    def forward(self, xs: tuple, p: Params) -> Tensor:
        raise NotImplementedError

    def backward(self, xs: tuple, p: Params, g: Tensor) -> Back:
        raise NotImplementedError

    def _empty(self, like: Tensor) -> tuple[Tensor, Tensor]:
        return (torch.zeros(self.num_edges, dtype=like.dtype), torch.zeros(self.num_nodes, dtype=like.dtype))

    @staticmethod
    def _book(edge: Tensor, loops: Tensor, msg: Msg, value) -> None:
        if msg.edge is None:
            loops[msg.src] += value
        else:
            edge[msg.edge] += value


def propagate(msgs: list[Msg], coef: list, h: Tensor, num_nodes: int) -> Tensor:
    """``out_i = sum_{m: j -> i} coef_m * h_j`` (``coef_m`` a scalar, or a
    per-head vector for ``h`` of shape ``[N, H, C]``)."""
    out = torch.zeros((num_nodes,) + tuple(h.shape[1:]), dtype=h.dtype)
    for m, c in zip(msgs, coef):
        out[m.dst] += _scale(c, h[m.src])
    return out


def hops(msgs: list[Msg], coef: list, x: Tensor, k: int, num_nodes: int) -> list[Tensor]:
    """``[x, A x, ..., A^k x]`` by :func:`propagate`, for the multi-hop layers."""
    h = [x]
    for _ in range(k):
        h.append(propagate(msgs, coef, h[-1], num_nodes))
    return h


def propagate_t(msgs: list[Msg], coef: list, d: Tensor, num_nodes: int) -> Tensor:
    """The adjoint of :func:`propagate`: ``out_j = sum_{m: j -> i} coef_m * d_i``."""
    out = torch.zeros((num_nodes,) + tuple(d.shape[1:]), dtype=d.dtype)
    for m, c in zip(msgs, coef):
        out[m.src] += _scale(c, d[m.dst])
    return out


def _scale(c, v: Tensor) -> Tensor:
    return c.unsqueeze(-1) * v if isinstance(c, Tensor) and c.dim() == 1 and v.dim() == 2 else c * v


def book_messages(twin: Twin, msgs: list[Msg], coef: list, h: Tensor, d: Tensor,
                  edge: Tensor, loops: Tensor) -> None:
    """Add ``<coef_m h_j, d_i>`` (message ``m = coef_m h_j`` times the
    gradient at the node it is aggregated into) to each message's slot."""
    for m, c in zip(msgs, coef):
        twin._book(edge, loops, m, (_scale(c, h[m.src]) * d[m.dst]).sum())


# ---------------------------------------------------------------------------
# Gates, computed here from the graph (GCN, mean, Chebyshev) or read from
# PyG's forward (attention)
# ---------------------------------------------------------------------------


def gcn_coefficients(msgs: list[Msg], num_nodes: int, weight: Optional[list] = None) -> list[float]:
    """``a_ji = w_ji / sqrt(d_j d_i)`` with ``d_i = sum_{m into i} w_m`` (the
    in-degree, self-loops included); a degree of 0 gives 0."""
    w = weight or [1.0] * len(msgs)
    deg = [0.0] * num_nodes
    for m, wm in zip(msgs, w):
        deg[m.dst] += wm
    inv = [d ** -0.5 if d > 0 else 0.0 for d in deg]
    return [inv[m.src] * wm * inv[m.dst] for m, wm in zip(msgs, w)]


def mean_coefficients(msgs: list[Msg], num_nodes: int) -> list[float]:
    """``1 / indeg(i)`` for each message into ``i``."""
    deg = [0] * num_nodes
    for m in msgs:
        deg[m.dst] += 1
    return [1.0 / deg[m.dst] for m in msgs]


def chebyshev_coefficients(msgs: list[Msg], num_nodes: int) -> list[float]:
    r"""Entries of PyG's scaled Laplacian ``2 L / lambda_max - I`` for
    ``normalization='sym'``, ``lambda_max = 2``: ``-1 / sqrt(o_j o_i)`` on an
    edge ``j -> i`` where ``o`` is the *out*-degree (``get_laplacian`` counts
    degrees at the source), 0 on the self-loops (``1 - 1``)."""
    out_deg = [0.0] * num_nodes
    for m in msgs:
        if m.edge is not None:
            out_deg[m.src] += 1.0
    inv = [d ** -0.5 if d > 0 else 0.0 for d in out_deg]
    return [0.0 if m.edge is None else -inv[m.src] * inv[m.dst] for m in msgs]


def attention_coefficients(msgs: list[Msg], edge_index: Tensor, alpha: Tensor) -> list[Tensor]:
    """PyG's attention ``alpha [M, H]`` over its ``edge_index [2, M]``,
    looked up for each of ``msgs`` by ``(src, dst)`` (no repeated pairs)."""
    by_pair = {(int(s), int(d)): alpha[k].detach() for k, (s, d) in enumerate(edge_index.t().tolist())}
    return [by_pair[(m.src, m.dst)] for m in msgs]


def _p(layer: torch.nn.Module, name: str) -> Tensor:
    return layer.get_parameter(name).detach().clone()


# ---------------------------------------------------------------------------
# Twins, one per layer family
# ---------------------------------------------------------------------------


class LinearTwin(Twin):
    r"""``torch.nn.Linear`` alone: :math:`z = x W^\top + b`. No messages."""

    def __init__(self, lin: torch.nn.Linear, prefix: str = ""):
        self.w, self.b = prefix + "weight", prefix + "bias"
        self.weights = {self.w: lin.weight.detach().clone()}
        self.biases = {} if lin.bias is None else {self.b: lin.bias.detach().clone()}

    def forward(self, xs, p):
        z = xs[0] @ p[self.w].T
        return z + p[self.b] if self.b in p else z

    def backward(self, xs, p, g):
        return Back((g @ p[self.w],), torch.zeros(0, dtype=g.dtype), torch.zeros(0, dtype=g.dtype))


class LinearChainTwin(Twin):
    r"""``Linear -> Linear`` with nothing between: one map with two weights,
    :math:`z = (x W_1^\top + b_1) W_2^\top + b_2`. Every weight gets the
    rule's modifier (so the stream of ``AlphaBeta`` with ``W-`` uses
    :math:`W_1^- W_2^-`). No messages."""

    def __init__(self, seq: torch.nn.Sequential):
        first, second = seq[0], seq[1]
        self.weights = {"0.weight": first.weight.detach().clone(), "1.weight": second.weight.detach().clone()}
        self.biases = {n: t.detach().clone() for n, t in (("0.bias", first.bias), ("1.bias", second.bias))
                       if t is not None}

    def forward(self, xs, p):
        h = xs[0] @ p["0.weight"].T
        if "0.bias" in p:
            h = h + p["0.bias"]
        z = h @ p["1.weight"].T
        return z + p["1.bias"] if "1.bias" in p else z

    def backward(self, xs, p, g):
        return Back((g @ p["1.weight"] @ p["0.weight"],), torch.zeros(0, dtype=g.dtype),
                    torch.zeros(0, dtype=g.dtype))


class GCNTwin(Twin):
    r"""``GCNConv``: :math:`z_i = \sum_{j \to i} a_{ji}\, x_j W^\top + b`,
    message :math:`a_{ji} x_j W^\top`.

    ``a`` is the GCN normalisation :math:`1/\sqrt{d_j d_i}` over the edges
    and (``add_self_loops``) one self-loop per node, or 1 without
    ``normalize``. Weight ``lin.weight``, bias ``bias``.
    """

    def __init__(self, layer: pyg_nn.GCNConv, edge_index: Tensor, num_nodes: int):
        self.num_nodes, self.num_edges = num_nodes, edge_index.shape[1]
        self.msgs = message_list(edge_index, num_nodes, layer.normalize and layer.add_self_loops)
        self.coef = gcn_coefficients(self.msgs, num_nodes) if layer.normalize else [1.0] * len(self.msgs)
        self.weights = {"lin.weight": _p(layer, "lin.weight")}
        self.biases = {} if layer.bias is None else {"bias": _p(layer, "bias")}

    def forward(self, xs, p):
        z = propagate(self.msgs, self.coef, xs[0] @ p["lin.weight"].T, self.num_nodes)
        return z + p["bias"] if "bias" in p else z

    def backward(self, xs, p, g):
        edge, loops = self._empty(g)
        book_messages(self, self.msgs, self.coef, xs[0] @ p["lin.weight"].T, g, edge, loops)
        return Back((propagate_t(self.msgs, self.coef, g, self.num_nodes) @ p["lin.weight"],), edge, loops)


class RootNeighbourTwin(Twin):
    r"""Aggregate, then a neighbour linear, plus a root linear:
    :math:`z_i = (\sum_{j \to i} c_{ji} x_j) W_n^\top + b_n + x_i W_r^\top`,
    message :math:`c_{ji} x_j` (its relevance is
    :math:`\langle c_{ji} x_j W_n^\top, g_i \rangle`). Both weights get the
    rule's modifier."""

    neighbour: str
    neighbour_bias: str
    root: Optional[str]

    def forward(self, xs, p):
        z = propagate(self.msgs, self.coef, xs[0], self.num_nodes) @ p[self.neighbour].T
        if self.neighbour_bias in p:
            z = z + p[self.neighbour_bias]
        if self.root is not None:
            z = z + xs[0] @ p[self.root].T
        return z

    def backward(self, xs, p, g):
        edge, loops = self._empty(g)
        d = g @ p[self.neighbour]  # gradient at the aggregated neighbours
        book_messages(self, self.msgs, self.coef, xs[0], d, edge, loops)
        adjoint = propagate_t(self.msgs, self.coef, d, self.num_nodes)
        if self.root is not None:
            adjoint = adjoint + g @ p[self.root]
        return Back((adjoint,), edge, loops)


class GraphConvTwin(RootNeighbourTwin):
    r"""``GraphConv`` (``aggr='add'``): :math:`z_i = (\sum_{j \to i} x_j)
    W_{rel}^\top + b_{rel} + x_i W_{root}^\top`. Weights ``lin_rel.weight``,
    ``lin_root.weight``; bias ``lin_rel.bias``."""

    neighbour, neighbour_bias, root = "lin_rel.weight", "lin_rel.bias", "lin_root.weight"

    def __init__(self, layer: pyg_nn.GraphConv, edge_index: Tensor, num_nodes: int):
        assert layer.aggr == "add"
        self.num_nodes, self.num_edges = num_nodes, edge_index.shape[1]
        self.msgs = message_list(edge_index, num_nodes, False)
        self.coef = [1.0] * len(self.msgs)
        self.weights = {n: _p(layer, n) for n in (self.neighbour, self.root)}
        self.biases = {} if layer.lin_rel.bias is None else {self.neighbour_bias: _p(layer, self.neighbour_bias)}


class SAGETwin(RootNeighbourTwin):
    r"""``SAGEConv`` (``aggr`` ``'mean'`` or ``'sum'``): :math:`z_i =
    (\sum_{j \to i} c_i x_j) W_l^\top + b_l\ [+ x_i W_r^\top]` with
    :math:`c_i = 1/\mathrm{indeg}(i)` (mean, a gate) or 1 (sum). Weights
    ``lin_l.weight``, ``lin_r.weight`` (``root_weight``); bias ``lin_l.bias``."""

    neighbour, neighbour_bias = "lin_l.weight", "lin_l.bias"

    def __init__(self, layer: pyg_nn.SAGEConv, edge_index: Tensor, num_nodes: int):
        assert layer.aggr in ("mean", "sum", "add") and not layer.normalize and not layer.project
        self.num_nodes, self.num_edges = num_nodes, edge_index.shape[1]
        self.msgs = message_list(edge_index, num_nodes, False)
        self.coef = mean_coefficients(self.msgs, num_nodes) if layer.aggr == "mean" else [1.0] * len(self.msgs)
        self.root = "lin_r.weight" if layer.root_weight else None
        self.weights = {n: _p(layer, n) for n in (self.neighbour, self.root) if n is not None}
        self.biases = {} if layer.lin_l.bias is None else {self.neighbour_bias: _p(layer, self.neighbour_bias)}


class GINAggregationTwin(Twin):
    r"""The first map of ``GINConv``: aggregation and the first ``Linear`` of
    ``nn``, :math:`z_i = ((1 + \epsilon) x_i + \sum_{j \to i} x_j) W_1^\top + b_1`,
    message :math:`x_j`. ``1 + eps`` is a constant (a buffer, not a weight).
    Weight ``nn.0.weight``, bias ``nn.0.bias``."""

    def __init__(self, layer: pyg_nn.GINConv, edge_index: Tensor, num_nodes: int):
        self.num_nodes, self.num_edges = num_nodes, edge_index.shape[1]
        self.msgs = message_list(edge_index, num_nodes, False)
        self.coef = [1.0] * len(self.msgs)
        self.self_coef = 1.0 + float(layer.eps)
        self.weights = {"nn.0.weight": _p(layer, "nn.0.weight")}
        self.biases = {"nn.0.bias": _p(layer, "nn.0.bias")}

    def forward(self, xs, p):
        h = self.self_coef * xs[0] + propagate(self.msgs, self.coef, xs[0], self.num_nodes)
        return h @ p["nn.0.weight"].T + p["nn.0.bias"]

    def backward(self, xs, p, g):
        edge, loops = self._empty(g)
        d = g @ p["nn.0.weight"]
        book_messages(self, self.msgs, self.coef, xs[0], d, edge, loops)
        return Back((self.self_coef * d + propagate_t(self.msgs, self.coef, d, self.num_nodes),), edge, loops)


class GINEMessageTwin(Twin):
    r"""The message map of ``GINEConv``, closed by the message's ReLU:
    :math:`u_e = x_j + e_{ji} W_e^\top + b_e` for each input edge ``e = j -> i``
    (inputs ``x`` and ``edge_attr``; output ``[E, F]``). The identity on
    :math:`x_j` is structure, not a weight. Weight ``lin.weight``, bias
    ``lin.bias``. Its output is not a message: the message is ``relu(u)``,
    booked by :class:`GINEAggregationTwin`."""

    def __init__(self, layer: pyg_nn.GINEConv, edge_index: Tensor, num_nodes: int):
        self.num_nodes, self.num_edges = num_nodes, edge_index.shape[1]
        self.src = edge_index[0].tolist()
        self.weights = {"lin.weight": _p(layer, "lin.weight")}
        self.biases = {"lin.bias": _p(layer, "lin.bias")}

    def forward(self, xs, p):
        x, e = xs
        u = e @ p["lin.weight"].T + p["lin.bias"]
        for k, j in enumerate(self.src):
            u[k] += x[j]
        return u

    def backward(self, xs, p, g):
        x, _ = xs
        dx = torch.zeros_like(x)
        for k, j in enumerate(self.src):
            dx[j] += g[k]
        edge, loops = self._empty(g)
        return Back((dx, g @ p["lin.weight"]), edge, loops)


class GINEAggregationTwin(Twin):
    r"""The second map of ``GINEConv``: :math:`z_i = ((1 + \epsilon) x_i +
    \sum_{e = j \to i} r_e) W_1^\top + b_1` with inputs ``x`` and the
    messages ``r = relu(u)`` ``[E, F]``; message :math:`r_e`. Weight
    ``nn.0.weight``, bias ``nn.0.bias``."""

    def __init__(self, layer: pyg_nn.GINEConv, edge_index: Tensor, num_nodes: int):
        self.num_nodes, self.num_edges = num_nodes, edge_index.shape[1]
        self.dst = edge_index[1].tolist()
        self.self_coef = 1.0 + float(layer.eps)
        self.weights = {"nn.0.weight": _p(layer, "nn.0.weight")}
        self.biases = {"nn.0.bias": _p(layer, "nn.0.bias")}

    def forward(self, xs, p):
        x, r = xs
        h = self.self_coef * x
        for k, i in enumerate(self.dst):
            h[i] += r[k]
        return h @ p["nn.0.weight"].T + p["nn.0.bias"]

    def backward(self, xs, p, g):
        x, r = xs
        d = g @ p["nn.0.weight"]
        dr = torch.stack([d[i] for i in self.dst])
        edge, loops = self._empty(g)
        edge += (r * dr).sum(dim=1)
        return Back((self.self_coef * d, dr), edge, loops)


class AttentionTwin(Twin):
    r"""Frozen attention over messages with heads: values
    :math:`v = x W_v^\top [+ b_v]` viewed ``[N, H, C]``,
    :math:`z_{i,h} = \sum_{j \to i} \alpha_{ji,h} v_{j,h}` (concatenated
    over heads) :math:`[+ x_i W_s^\top + b_s] [+ b]`; message
    :math:`\alpha_{ji,h} v_{j,h}` (value bias included).

    GATConv: ``W_v = lin.weight``, final ``bias``; GATv2Conv: ``W_v =
    lin_l.weight``, ``b_v = lin_l.bias`` and final ``bias`` (``lin_r`` only
    feeds the attention); TransformerConv: ``W_v = lin_value.weight``,
    ``b_v = lin_value.bias``, root ``lin_skip``. The coefficients are the
    ones PyG's forward returns (``return_attention_weights``).
    """

    value: str
    value_bias: Optional[str] = None
    skip: Optional[str] = None
    skip_bias: Optional[str] = None
    out_bias: Optional[str] = None

    def _setup(self, layer, x, edge_index, num_nodes, self_loops):
        self.num_nodes, self.num_edges = num_nodes, edge_index.shape[1]
        self.heads, self.channels = layer.heads, layer.out_channels
        assert layer.concat
        with torch.no_grad():
            _, (att_index, alpha) = layer(x, edge_index, return_attention_weights=True)
        self.msgs = message_list(edge_index, num_nodes, self_loops)
        self.coef = attention_coefficients(self.msgs, att_index, alpha)
        names_w = [self.value, self.skip]
        names_b = [self.value_bias, self.skip_bias, self.out_bias]
        params = dict(layer.named_parameters())
        self.weights = {n: _p(layer, n) for n in names_w if n in params}
        self.biases = {n: _p(layer, n) for n in names_b if n in params}

    def _values(self, x, p):
        v = x @ p[self.value].T
        if self.value_bias in p:
            v = v + p[self.value_bias]
        return v.view(-1, self.heads, self.channels)

    def forward(self, xs, p):
        x = xs[0]
        z = propagate(self.msgs, self.coef, self._values(x, p), self.num_nodes).reshape(self.num_nodes, -1)
        if self.skip is not None:
            z = z + x @ p[self.skip].T + p[self.skip_bias]
        if self.out_bias in p:
            z = z + p[self.out_bias]
        return z

    def backward(self, xs, p, g):
        x = xs[0]
        edge, loops = self._empty(g)
        d = g.view(-1, self.heads, self.channels)
        book_messages(self, self.msgs, self.coef, self._values(x, p), d, edge, loops)
        adjoint = propagate_t(self.msgs, self.coef, d, self.num_nodes).reshape(self.num_nodes, -1) @ p[self.value]
        if self.skip is not None:
            adjoint = adjoint + g @ p[self.skip]
        return Back((adjoint,), edge, loops)


class GATTwin(AttentionTwin):
    r"""``GATConv`` (concat heads): :math:`z_{i,h} = \sum_{j \to i}
    \alpha_{ji,h} (x_j W^\top)_h + b`, with a self-loop per node."""

    value, out_bias = "lin.weight", "bias"

    def __init__(self, layer: pyg_nn.GATConv, x: Tensor, edge_index: Tensor, num_nodes: int):
        assert layer.res is None and layer.lin is not None
        self._setup(layer, x, edge_index, num_nodes, layer.add_self_loops)


class GATv2Twin(AttentionTwin):
    r"""``GATv2Conv`` (concat heads): :math:`z_{i,h} = \sum_{j \to i}
    \alpha_{ji,h} (x_j W_l^\top + b_l)_h + b`, with a self-loop per node."""

    value, value_bias, out_bias = "lin_l.weight", "lin_l.bias", "bias"

    def __init__(self, layer: pyg_nn.GATv2Conv, x: Tensor, edge_index: Tensor, num_nodes: int):
        assert layer.res is None and not layer.share_weights
        self._setup(layer, x, edge_index, num_nodes, layer.add_self_loops)


class TransformerTwin(AttentionTwin):
    r"""``TransformerConv`` (concat heads, ``root_weight=True``,
    ``beta=False``, no edge features): :math:`z_{i,h} = \sum_{j \to i}
    \alpha_{ji,h} (x_j W_v^\top + b_v)_h + x_i W_s^\top + b_s`."""

    value, value_bias, skip, skip_bias = "lin_value.weight", "lin_value.bias", "lin_skip.weight", "lin_skip.bias"

    def __init__(self, layer: pyg_nn.TransformerConv, x: Tensor, edge_index: Tensor, num_nodes: int):
        assert layer.root_weight and layer.lin_beta is None and layer.lin_edge is None
        self._setup(layer, x, edge_index, num_nodes, False)


class ChebTwin(Twin):
    r"""``ChebConv`` (``normalization='sym'``, ``lambda_max = 2``):
    :math:`T_0 = x`, :math:`T_1 = \hat L x`,
    :math:`T_k = 2 \hat L T_{k-1} - T_{k-2}`,
    :math:`z = \sum_k T_k W_k^\top + b`. The Laplacian entries (and the 2
    and -1 of the recursion) are gates; every :math:`W_k` gets the
    modifier. Messages: :math:`\hat L_{ji} T_{k-1,j}` at hop ``k``, over
    the input edges and the (zero-weighted) self-loops ``get_laplacian``
    adds."""

    def __init__(self, layer: pyg_nn.ChebConv, edge_index: Tensor, num_nodes: int):
        assert layer.normalization == "sym"
        self.num_nodes, self.num_edges = num_nodes, edge_index.shape[1]
        self.K = len(layer.lins)
        self.msgs = message_list(edge_index, num_nodes, True)
        self.coef = chebyshev_coefficients(self.msgs, num_nodes)
        self.weights = {f"lins.{k}.weight": _p(layer, f"lins.{k}.weight") for k in range(self.K)}
        self.biases = {} if layer.bias is None else {"bias": _p(layer, "bias")}

    def _basis(self, x):
        T = [x]
        if self.K > 1:
            T.append(propagate(self.msgs, self.coef, x, self.num_nodes))
        for _ in range(2, self.K):
            T.append(2.0 * propagate(self.msgs, self.coef, T[-1], self.num_nodes) - T[-2])
        return T

    def forward(self, xs, p):
        T = self._basis(xs[0])
        z = sum(T[k] @ p[f"lins.{k}.weight"].T for k in range(self.K))
        return z + p["bias"] if "bias" in p else z

    def backward(self, xs, p, g):
        T = self._basis(xs[0])
        dT = [g @ p[f"lins.{k}.weight"] for k in range(self.K)]  # d(z.g)/dT_k, direct part
        edge, loops = self._empty(g)
        for k in range(self.K - 1, 0, -1):  # T_k = c_k * L T_{k-1} - [k >= 2] T_{k-2}
            c = 1.0 if k == 1 else 2.0
            book_messages(self, self.msgs, self.coef, T[k - 1], c * dT[k], edge, loops)
            dT[k - 1] = dT[k - 1] + c * propagate_t(self.msgs, self.coef, dT[k], self.num_nodes)
            if k >= 2:
                dT[k - 2] = dT[k - 2] - dT[k]
        return Back((dT[0],), edge, loops)


class SGTwin(Twin):
    r"""``SGConv``: :math:`h_0 = x`, :math:`h_t = \hat A h_{t-1}` (GCN
    normalisation with self-loops), :math:`z = h_K W^\top + b`. Messages
    :math:`a_{ji} h_{t-1,j}` at hop ``t``."""

    def __init__(self, layer: pyg_nn.SGConv, edge_index: Tensor, num_nodes: int):
        self.num_nodes, self.num_edges = num_nodes, edge_index.shape[1]
        self.K = layer.K
        self.msgs = message_list(edge_index, num_nodes, layer.add_self_loops)
        self.coef = gcn_coefficients(self.msgs, num_nodes)
        self.weights = {"lin.weight": _p(layer, "lin.weight")}
        self.biases = {} if layer.lin.bias is None else {"lin.bias": _p(layer, "lin.bias")}

    def _hops(self, x):
        return hops(self.msgs, self.coef, x, self.K, self.num_nodes)

    def forward(self, xs, p):
        z = self._hops(xs[0])[-1] @ p["lin.weight"].T
        return z + p["lin.bias"] if "lin.bias" in p else z

    def backward(self, xs, p, g):
        h = self._hops(xs[0])
        edge, loops = self._empty(g)
        d = g @ p["lin.weight"]
        for t in range(self.K, 0, -1):
            book_messages(self, self.msgs, self.coef, h[t - 1], d, edge, loops)
            d = propagate_t(self.msgs, self.coef, d, self.num_nodes)
        return Back((d,), edge, loops)


class APPNPTwin(Twin):
    r"""``APPNP`` (propagation only; no weights, no biases):
    :math:`h_0 = x`, :math:`h_t = (1 - \alpha) \hat A h_{t-1} + \alpha x`,
    :math:`z = h_K`. :math:`\hat A`, :math:`1 - \alpha` and :math:`\alpha`
    are gates. Messages :math:`a_{ji} h_{t-1,j}` at hop ``t`` (before the
    :math:`1 - \alpha` scaling, as PyG's ``message`` returns them)."""

    def __init__(self, layer: pyg_nn.APPNP, edge_index: Tensor, num_nodes: int):
        self.num_nodes, self.num_edges = num_nodes, edge_index.shape[1]
        self.K, self.alpha = layer.K, layer.alpha
        self.msgs = message_list(edge_index, num_nodes, layer.add_self_loops)
        self.coef = gcn_coefficients(self.msgs, num_nodes)
        self.weights, self.biases = {}, {}

    def _hops(self, x):
        h = [x]
        for _ in range(self.K):
            h.append((1 - self.alpha) * propagate(self.msgs, self.coef, h[-1], self.num_nodes) + self.alpha * x)
        return h

    def forward(self, xs, p):
        return self._hops(xs[0])[-1]

    def backward(self, xs, p, g):
        h = self._hops(xs[0])
        edge, loops = self._empty(g)
        d, dx = g, torch.zeros_like(g)
        for t in range(self.K, 0, -1):  # d = d(z.g)/dh_t
            dx = dx + self.alpha * d
            book_messages(self, self.msgs, self.coef, h[t - 1], (1 - self.alpha) * d, edge, loops)
            d = (1 - self.alpha) * propagate_t(self.msgs, self.coef, d, self.num_nodes)
        return Back((dx + d,), edge, loops)


class GeneralConvTwin(Twin):
    r"""``GeneralConv`` (``attention=False``, no edge features, ``aggr='add'``):
    message :math:`m_{ji} = x_j W_m^\top + b_m\ [+ x_i W_{mi}^\top + b_{mi}]`
    (``[H, C]``; the second term when ``directed_msg=False``),
    :math:`z_i = \frac1H \sum_h \sum_{j \to i} m_{ji,h} + x_i W_s^\top + b_s`
    (the mean over heads is a gate)."""

    def __init__(self, layer: pyg_nn.GeneralConv, edge_index: Tensor, num_nodes: int):
        assert not layer.attention and layer.aggr == "add" and layer.in_edge_channels is None
        assert hasattr(layer.lin_self, "weight")  # a Linear, not Identity
        self.num_nodes, self.num_edges = num_nodes, edge_index.shape[1]
        self.heads, self.channels = layer.heads, layer.out_channels
        self.msgs = message_list(edge_index, num_nodes, False)
        self.directed = layer.directed_msg
        lins = ["lin_msg", "lin_self"] + ([] if self.directed else ["lin_msg_i"])
        self.weights = {f"{n}.weight": _p(layer, f"{n}.weight") for n in lins}
        self.biases = {f"{n}.bias": _p(layer, f"{n}.bias") for n in lins if getattr(layer, n).bias is not None}

    def _lin(self, name, x, p):
        y = x @ p[f"{name}.weight"].T
        return y + p[f"{name}.bias"] if f"{name}.bias" in p else y

    def _message(self, x, p, m):
        out = self._lin("lin_msg", x[m.src], p)
        if not self.directed:
            out = out + self._lin("lin_msg_i", x[m.dst], p)
        return out

    def forward(self, xs, p):
        x = xs[0]
        agg = torch.zeros(self.num_nodes, self.heads * self.channels, dtype=x.dtype)
        for m in self.msgs:
            agg[m.dst] += self._message(x, p, m)
        return agg.view(-1, self.heads, self.channels).mean(dim=1) + self._lin("lin_self", x, p)

    def backward(self, xs, p, g):
        x = xs[0]
        edge, loops = self._empty(g)
        d = g.repeat(1, self.heads) / self.heads  # gradient at the aggregated messages [N, H*C]
        adjoint = g @ p["lin_self.weight"]
        for m in self.msgs:
            self._book(edge, loops, m, (self._message(x, p, m) * d[m.dst]).sum())
            adjoint[m.src] += d[m.dst] @ p["lin_msg.weight"]
            if not self.directed:
                adjoint[m.dst] += d[m.dst] @ p["lin_msg_i.weight"]
        return Back((adjoint,), edge, loops)


class EdgeConvTwin(Twin):
    r"""``EdgeConv`` with ``aggr='add'`` and ``nn = Linear(2F, F')``: message
    :math:`m_{ji} = [x_i, x_j - x_i] W^\top + b`, :math:`z_i = \sum_{j \to i}
    m_{ji}`. The ``-1`` of ``x_j - x_i`` is structure (not modified).
    Weight ``nn.weight``, bias ``nn.bias``."""

    def __init__(self, layer: pyg_nn.EdgeConv, edge_index: Tensor, num_nodes: int):
        assert layer.aggr == "add" and isinstance(layer.nn, torch.nn.Linear)
        self.num_nodes, self.num_edges = num_nodes, edge_index.shape[1]
        self.msgs = message_list(edge_index, num_nodes, False)
        self.weights = {"nn.weight": _p(layer, "nn.weight")}
        self.biases = {} if layer.nn.bias is None else {"nn.bias": _p(layer, "nn.bias")}

    def _message(self, x, p, m):
        out = torch.cat([x[m.dst], x[m.src] - x[m.dst]]) @ p["nn.weight"].T
        return out + p["nn.bias"] if "nn.bias" in p else out

    def forward(self, xs, p):
        x = xs[0]
        z = torch.zeros(self.num_nodes, p["nn.weight"].shape[0], dtype=x.dtype)
        for m in self.msgs:
            z[m.dst] += self._message(x, p, m)
        return z

    def backward(self, xs, p, g):
        x = xs[0]
        f = x.shape[1]
        edge, loops = self._empty(g)
        adjoint = torch.zeros_like(x)
        for m in self.msgs:
            self._book(edge, loops, m, (self._message(x, p, m) * g[m.dst]).sum())
            d = g[m.dst] @ p["nn.weight"]  # [2F]: d/d[x_i, x_j - x_i]
            adjoint[m.dst] += d[:f] - d[f:]
            adjoint[m.src] += d[f:]
        return Back((adjoint,), edge, loops)


# ---------------------------------------------------------------------------
# The rule applied to a map, and to layers made of several maps
# ---------------------------------------------------------------------------


@dataclass
class MapResult:
    """The relevance of one map's inputs and messages, with what the
    self-checks need: per stream ``z_k``, ``g_k`` and the constant part
    ``c_k = f_k(0)`` of the map."""

    inputs: tuple
    edge: Tensor
    loops: Tensor
    zs: list
    gs: list
    constants: list
    relevance: Tensor


@dataclass
class LayerResult:
    """The relevance of a layer's inputs and of its messages per input edge
    and per added self-loop; ``maps`` holds each map's result (for checks)."""

    inputs: tuple
    edge: Tensor
    loops: Tensor
    out: Tensor
    maps: list = field(default_factory=list)


#: Gates held as other attributes than ``coef*``: GIN's root factor,
#: edge-conditioned weights (``NNConvTwin``). A twin whose gates are products
#: of several factors says itself (``magnitudes()``).
GATE_ATTRIBUTES = ("self_coef", "edge_weight")


def magnitudes(twin: Twin) -> Twin:
    """``twin`` with its gates (the ``coef*`` lists and ``GATE_ATTRIBUTES``)
    as their magnitudes: the map ``Flat`` and ``WSquare`` run (the constants
    of the code, the 2 and -1 of Chebyshev's recursion, stay)."""
    def size(c):
        if isinstance(c, list):
            return [size(v) for v in c]
        return c.abs() if isinstance(c, Tensor) else abs(c)

    if hasattr(twin, "magnitudes"):  # gates made of several factors: each factor's magnitude
        return twin.magnitudes()
    twin = copy.copy(twin)
    for name, value in list(vars(twin).items()):
        if (name.startswith("coef") and isinstance(value, list)) or name in GATE_ATTRIBUTES:
            setattr(twin, name, size(value))
    return twin


def map_relevance(twin: Twin, xs: tuple, rule: Rule, relevance: Tensor) -> MapResult:
    r""":math:`R_x = \sum_k x_k \odot J_k^\top g_k` and the message
    relevance :math:`\sum_k \langle m_k, \partial(z_k \cdot g_k)/\partial m_k\rangle`."""
    if isinstance(rule, (Flat, WSquare)):
        twin = magnitudes(twin)
    sts = streams(rule, xs, twin.weights, twin.biases)
    zs = [twin.forward(xk, pk) for xk, pk in sts]
    gs = stream_gradients(rule, relevance, zs)
    rel = [torch.zeros_like(x) for x in xs]
    edge = loops = 0
    constants = []
    for (xk, pk), g in zip(sts, gs):
        back = twin.backward(xk, pk, g)
        for i, x in enumerate(xk):
            rel[i] = rel[i] + x * back.adjoint[i]
        edge, loops = edge + back.edge, loops + back.loops
        constants.append(twin.forward(tuple(torch.zeros_like(x) for x in xk), pk))
    return MapResult(tuple(rel), edge, loops, zs, gs, constants, relevance)


def single_map(twin: Twin, xs: tuple, rule: Rule, relevance: Tensor) -> LayerResult:
    """A layer that is one map (every family but GIN and GINE)."""
    res = map_relevance(twin, xs, rule, relevance)
    return LayerResult(res.inputs, res.edge, res.loops, twin.forward(xs, twin.params()), [res])


def gin_relevance(layer: pyg_nn.GINConv, x: Tensor, edge_index: Tensor, rule: Rule,
                  relevance: Tensor) -> LayerResult:
    r"""``GINConv`` with ``nn = Sequential(Linear, ReLU, Linear)``: two maps.
    :math:`z^{(1)} = ((1+\epsilon) x_i + \sum_j x_j) W_1^\top + b_1`
    (:class:`GINAggregationTwin`), :math:`h = \mathrm{relu}(z^{(1)})`,
    :math:`z = h W_2^\top + b_2` (:class:`LinearTwin`). The ReLU passes
    relevance unchanged: :math:`R_{z^{(1)}} = R_h`."""
    first = GINAggregationTwin(layer, edge_index, x.shape[0])
    second = LinearTwin(layer.nn[2], "nn.2.")
    h = first.forward((x,), first.params()).relu()
    top = map_relevance(second, (h,), rule, relevance)
    bottom = map_relevance(first, (x,), rule, top.inputs[0])
    return LayerResult(bottom.inputs, bottom.edge, bottom.loops, second.forward((h,), second.params()),
                       [top, bottom])


def gine_relevance(layer: pyg_nn.GINEConv, x: Tensor, edge_index: Tensor, edge_attr: Tensor,
                   rule: Rule, relevance: Tensor) -> LayerResult:
    r"""``GINEConv`` with ``nn = Sequential(Linear, ReLU, Linear)`` and
    ``edge_dim``: three maps. :math:`u_e = x_j + e_{ji} W_e^\top + b_e`
    (:class:`GINEMessageTwin`), message :math:`r_e = \mathrm{relu}(u_e)`;
    :math:`z^{(1)}_i = ((1+\epsilon) x_i + \sum_{e \to i} r_e) W_1^\top + b_1`
    (:class:`GINEAggregationTwin`, inputs ``x`` and ``r``);
    :math:`z = \mathrm{relu}(z^{(1)}) W_2^\top + b_2`. Both ReLUs pass
    relevance unchanged. ``x`` collects relevance from the root term and
    through its messages; the edge relevance is that of ``r`` (summed over
    features)."""
    n = x.shape[0]
    msg, agg, second = GINEMessageTwin(layer, edge_index, n), GINEAggregationTwin(layer, edge_index, n), \
        LinearTwin(layer.nn[2], "nn.2.")
    r = msg.forward((x, edge_attr), msg.params()).relu()
    h = agg.forward((x, r), agg.params()).relu()
    top = map_relevance(second, (h,), rule, relevance)
    middle = map_relevance(agg, (x, r), rule, top.inputs[0])
    bottom = map_relevance(msg, (x, edge_attr), rule, middle.inputs[1])
    return LayerResult((middle.inputs[0] + bottom.inputs[0], bottom.inputs[1]), middle.edge, middle.loops,
                       second.forward((h,), second.params()), [top, middle, bottom])


# ---------------------------------------------------------------------------
# Stock layers with their gates detached, for gradient x input self-checks
# ---------------------------------------------------------------------------


class FrozenGATConv(pyg_nn.GATConv):
    """``GATConv`` whose attention logits are constants (so its gradient is
    the gradient of the frozen-attention map)."""

    def edge_update(self, alpha_j, alpha_i, edge_attr, index, ptr, dim_size):
        alpha_i = None if alpha_i is None else alpha_i.detach()
        return super().edge_update(alpha_j.detach(), alpha_i, edge_attr, index, ptr, dim_size)


class FrozenGATv2Conv(pyg_nn.GATv2Conv):
    """``GATv2Conv`` whose attention sees detached inputs."""

    def edge_update(self, x_j, x_i, edge_attr, index, ptr, dim_size):
        return super().edge_update(x_j.detach(), x_i.detach(), edge_attr, index, ptr, dim_size)


class FrozenTransformerConv(pyg_nn.TransformerConv):
    """``TransformerConv`` (no edge features) whose attention sees detached
    queries and keys."""

    def message(self, query_i, key_j, value_j, edge_attr, index, ptr, size_i):
        assert edge_attr is None
        alpha = (query_i.detach() * key_j.detach()).sum(dim=-1) / math.sqrt(self.out_channels)
        alpha = softmax(alpha, index, ptr, size_i)
        self._alpha = alpha
        return value_j * alpha.view(-1, self.heads, 1)


# PyG reads a layer's propagate / edge_updater argument types from its
# source; the frozen subclasses take their parent's (the library's helper).
from torch_geometric_lrp.nn.conv import _inherit_call_types  # noqa: E402

for _cls in (FrozenGATConv, FrozenGATv2Conv, FrozenTransformerConv):
    _inherit_call_types(_cls)


def gradient_x_input(layer: torch.nn.Module, call, inputs: list, relevance: Tensor, edge_index: Tensor,
                     num_nodes: int) -> tuple[list, Tensor, Tensor]:
    r"""LRP-0 of a bias-free piecewise-linear layer, as plain autograd:
    ``x * d/dx sum(out * R / out)`` for each input, and for each message
    ``sum(m * d/dm ...)``, booked per input edge and per self-loop the layer
    added (by ``(src, dst)`` pair). ``R / out`` is 0 where ``out == 0``."""
    inputs = [t.detach().clone().requires_grad_() for t in inputs]
    seen: list = []
    pairs = {(int(s), int(d)): e for e, (s, d) in enumerate(edge_index.t().tolist())}
    hooks = []
    if isinstance(layer, pyg_nn.MessagePassing):
        current = {}
        hooks.append(layer.register_propagate_forward_pre_hook(
            lambda mod, args: current.__setitem__("edges", args[0])))

        def keep(mod, args, out):
            out.retain_grad()
            seen.append((current["edges"], out))
        hooks.append(layer.register_message_forward_hook(keep))
    try:
        out = call(layer, *inputs)
    finally:
        for h in hooks:
            h.remove()
    weight = torch.where(out == 0, torch.zeros_like(out), relevance / out).detach()
    (out * weight).sum().backward()
    edge = torch.zeros(edge_index.shape[1], dtype=torch.float64)
    loops = torch.zeros(num_nodes, dtype=torch.float64)
    for edges, messages in seen:
        per_message = (messages * messages.grad).detach().reshape(messages.shape[0], -1).sum(dim=1)
        for k, (s, d) in enumerate(edges.t().tolist()):
            if (s, d) in pairs:
                edge[pairs[(s, d)]] += per_message[k]
            else:
                assert s == d
                loops[s] += per_message[k]
    return [(t * t.grad).detach() for t in inputs], edge, loops
