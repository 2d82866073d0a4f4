r"""Slow, dense reference twins of more PyG layers (float64).

The vocabulary, the rules and the map machinery are those of
``tests/twins.py`` (a *map* is the affine part of a layer between two
non-linearities, with its gates frozen; a *twin* writes it out with explicit
loops over messages). Nothing here imports ``torch_geometric_lrp``.

Layers made of several maps compose them with two op-level rules:

* an element-wise activation (ReLU, sigmoid) passes relevance unchanged;
* a product of two signals ``a * b`` (FiLM's ``gamma * h``, the sigmoid gate
  times the value in ``ResGatedGraphConv``, ``x_j`` times NNConv's
  edge-conditioned weight when ``edge_attr`` is explained) hands half of its
  relevance to each factor, ``R_a = R_b = R / 2`` (summed over the copies of
  a broadcast factor). The product ends the maps of both factors and starts
  a new map where it is used.

Attention coefficients computed with a softmax (AGNN, GATE) are gates,
computed here from the explained input.
"""
from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
import torch_geometric.nn as pyg_nn
from torch import Tensor

import twins as T
from twins import Back, LayerResult, Msg, Twin, _p, book_messages, gcn_coefficients, map_relevance, \
    message_list, propagate, propagate_t


def _index_sum(values: Tensor, index: list, size: int) -> Tensor:
    """``out[index[e]] += values[e]``: relevance of copies summed back to their source."""
    out = torch.zeros((size,) + tuple(values.shape[1:]), dtype=values.dtype)
    for e, i in enumerate(index):
        out[i] += values[e]
    return out


def _mean_coefficients(msgs: list, num_nodes: int) -> list:
    """``1 / indeg(i)`` for each message into ``i``."""
    deg = [0] * num_nodes
    for m in msgs:
        deg[m.dst] += 1
    return [1.0 / deg[m.dst] for m in msgs]


# ---------------------------------------------------------------------------
# One-map layers
# ---------------------------------------------------------------------------


class TAGTwin(Twin):
    r"""``TAGConv``: :math:`h_0 = x`, :math:`h_k = \hat A h_{k-1}` (GCN
    normalisation, no self-loops), :math:`z = \sum_{k=0}^K h_k W_k^\top + b`.
    Messages :math:`a_{ji} h_{k-1,j}` at hop ``k``."""

    def __init__(self, layer: pyg_nn.TAGConv, edge_index: Tensor, num_nodes: int):
        assert layer.normalize
        self.num_nodes, self.num_edges = num_nodes, edge_index.shape[1]
        self.K = layer.K
        self.msgs = message_list(edge_index, num_nodes, False)
        self.coef = gcn_coefficients(self.msgs, num_nodes)
        self.weights = {f"lins.{k}.weight": _p(layer, f"lins.{k}.weight") for k in range(self.K + 1)}
        self.biases = {} if layer.bias is None else {"bias": _p(layer, "bias")}

    def _hops(self, x):
        return T.hops(self.msgs, self.coef, x, self.K, self.num_nodes)

    def forward(self, xs, p):
        h = self._hops(xs[0])
        z = sum(h[k] @ p[f"lins.{k}.weight"].T for k in range(self.K + 1))
        return z + p["bias"] if "bias" in p else z

    def backward(self, xs, p, g):
        h = self._hops(xs[0])
        edge, loops = self._empty(g)
        d = g @ p[f"lins.{self.K}.weight"]  # d(z.g)/dh_K
        for k in range(self.K, 0, -1):
            book_messages(self, self.msgs, self.coef, h[k - 1], d, edge, loops)
            d = propagate_t(self.msgs, self.coef, d, self.num_nodes) + g @ p[f"lins.{k - 1}.weight"]
        return Back((d,), edge, loops)


class SSGTwin(Twin):
    r"""``SSGConv``: :math:`h_k = \hat A h_{k-1}` (GCN normalisation with
    self-loops), :math:`s = \alpha x + \frac{1 - \alpha}{K} \sum_{k=1}^K h_k`,
    :math:`z = s W^\top + b`; :math:`\alpha` and :math:`(1 - \alpha) / K`
    are gates. Messages :math:`a_{ji} h_{k-1,j}` at hop ``k``."""

    def __init__(self, layer: pyg_nn.SSGConv, edge_index: Tensor, num_nodes: int):
        self.num_nodes, self.num_edges = num_nodes, edge_index.shape[1]
        self.K, self.alpha = layer.K, layer.alpha
        self.msgs = message_list(edge_index, num_nodes, layer.add_self_loops)
        self.coef = gcn_coefficients(self.msgs, num_nodes)
        self.weights = {"lin.weight": _p(layer, "lin.weight")}
        self.biases = {} if layer.lin.bias is None else {"lin.bias": _p(layer, "lin.bias")}

    def _hops(self, x):
        return T.hops(self.msgs, self.coef, x, self.K, self.num_nodes)

    def forward(self, xs, p):
        h = self._hops(xs[0])
        s = self.alpha * h[0] + (1 - self.alpha) / self.K * sum(h[1:])
        z = s @ p["lin.weight"].T
        return z + p["lin.bias"] if "lin.bias" in p else z

    def backward(self, xs, p, g):
        h = self._hops(xs[0])
        edge, loops = self._empty(g)
        ds = g @ p["lin.weight"]
        c = (1 - self.alpha) / self.K
        d = c * ds  # d(z.g)/dh_K
        for k in range(self.K, 0, -1):
            book_messages(self, self.msgs, self.coef, h[k - 1], d, edge, loops)
            d = propagate_t(self.msgs, self.coef, d, self.num_nodes) + (c if k > 1 else self.alpha) * ds
        return Back((d,), edge, loops)


class GCN2Twin(Twin):
    r"""``GCN2Conv`` with :math:`x_0 = x`: :math:`h = \hat A x` (GCN
    normalisation with self-loops; the adjacency itself without ``normalize``), :math:`s = (1 - \alpha) h + \alpha x`,
    :math:`z = (1 - \beta) s + \beta s W_1` (``shared_weights``; else
    :math:`z = (1 - \beta) s + \beta ((1 - \alpha) h W_1 + \alpha x W_2)`),
    no bias; :math:`\alpha` and :math:`\beta` are gates. Messages
    :math:`a_{ji} x_j`."""

    def __init__(self, layer: pyg_nn.GCN2Conv, edge_index: Tensor, num_nodes: int):
        self.num_nodes, self.num_edges = num_nodes, edge_index.shape[1]
        self.alpha, self.beta = layer.alpha, layer.beta
        # without normalize: no self-loops and weights 1 (gcn_norm adds the loops)
        self.msgs = message_list(edge_index, num_nodes, layer.normalize and layer.add_self_loops)
        self.coef = gcn_coefficients(self.msgs, num_nodes) if layer.normalize else [1.0] * len(self.msgs)
        self.weights = {"weight1": _p(layer, "weight1")}
        if layer.weight2 is not None:
            self.weights["weight2"] = _p(layer, "weight2")
        self.biases = {}

    def forward(self, xs, p):
        x = xs[0]
        h, x0 = (1 - self.alpha) * propagate(self.msgs, self.coef, x, self.num_nodes), self.alpha * x
        w2 = p.get("weight2", p["weight1"])
        return (1 - self.beta) * (h + x0) + self.beta * (h @ p["weight1"] + x0 @ w2)

    def backward(self, xs, p, g):
        edge, loops = self._empty(g)
        w2 = p.get("weight2", p["weight1"])
        dh = (1 - self.alpha) * ((1 - self.beta) * g + self.beta * g @ p["weight1"].T)
        dx0 = self.alpha * ((1 - self.beta) * g + self.beta * g @ w2.T)
        book_messages(self, self.msgs, self.coef, xs[0], dh, edge, loops)
        return Back((propagate_t(self.msgs, self.coef, dh, self.num_nodes) + dx0,), edge, loops)


class SGFormerAttentionTwin(Twin):
    r"""``SGFormerAttention`` on one graph of ``N`` nodes (a batch of one, no
    padding) with its attention frozen: unit queries :math:`\hat q_n` and
    keys :math:`\hat k_l` per head (zeros replaced by 1e-6 first, as PyG
    does), :math:`P_{nl} = (\hat q_n \cdot \hat k_l + N \delta_{nl}) /
    (\sum_{l'} \hat q_n \cdot \hat k_{l'} + N)`, and
    :math:`z = \frac{1}{H} \sum_h P_h (x W_{v,h}^\top + b_{v,h})`. The
    value projection's weight and bias are what the rules modify. No
    messages: the attention is over all pairs, not over edges."""

    def __init__(self, layer: pyg_nn.SGFormerAttention, x: Tensor):
        n = x.shape[0]
        self.heads, self.channels = layer.heads, layer.head_channels

        def unit(lin):
            t = lin(x).detach().view(n, self.heads, self.channels)
            t = torch.where(t == 0, torch.full_like(t, 1e-6), t)
            return t / t.norm(dim=-1, keepdim=True)
        q, k = unit(layer.q), unit(layer.k)
        self.P, self.P_magnitudes = [], []
        for h in range(self.heads):
            s = torch.zeros(n, n, dtype=x.dtype)
            paths = torch.zeros(n, n, dtype=x.dtype)  # sum_m |q_m| |k_m|: each path's magnitude
            for a in range(n):
                for b in range(n):
                    s[a, b] = q[a, h] @ k[b, h]
                    paths[a, b] = q[a, h].abs() @ k[b, h].abs()
            eye = n * torch.eye(n, dtype=x.dtype)
            normaliser = s.sum(1, keepdim=True) + n
            self.P.append((s + eye) / normaliser)
            # Flat and WSquare: every gate factor (q, k, the normaliser) as its magnitude
            self.P_magnitudes.append((paths + eye) / normaliser.abs())

        self.weights = {"v.weight": _p(layer, "v.weight")}
        self.biases = {} if layer.v.bias is None else {"v.bias": _p(layer, "v.bias")}

    def magnitudes(self) -> "SGFormerAttentionTwin":
        twin = copy.copy(self)
        twin.P = self.P_magnitudes
        return twin

    def _head(self, w: Tensor, h: int) -> Tensor:
        return w[h * self.channels:(h + 1) * self.channels]

    def forward(self, xs, p):
        z = 0
        for h in range(self.heads):
            v = xs[0] @ self._head(p["v.weight"], h).T
            if "v.bias" in p:
                v = v + self._head(p["v.bias"], h)
            z = z + self.P[h] @ v / self.heads
        return z

    def backward(self, xs, p, g):
        dx = sum((self.P[h].T @ g / self.heads) @ self._head(p["v.weight"], h) for h in range(self.heads))
        return Back((dx,), torch.zeros(0, dtype=g.dtype), torch.zeros(0, dtype=g.dtype))


class MixHopTwin(Twin):
    r"""``MixHopConv``: :math:`h_k = \hat A h_{k-1}` (GCN normalisation with
    self-loops), :math:`z = [h_p W_p^\top]_{p \in P} + b` (concatenated in
    the order of ``powers``). Messages :math:`a_{ji} h_{k-1,j}` at hop ``k``."""

    def __init__(self, layer: pyg_nn.MixHopConv, edge_index: Tensor, num_nodes: int):
        self.num_nodes, self.num_edges = num_nodes, edge_index.shape[1]
        self.powers, self.out = list(layer.powers), layer.out_channels
        self.msgs = message_list(edge_index, num_nodes, layer.add_self_loops)
        self.coef = gcn_coefficients(self.msgs, num_nodes)
        self.weights = {f"lins.{q}.weight": _p(layer, f"lins.{q}.weight") for q in self.powers}
        self.biases = {} if layer.bias is None else {"bias": _p(layer, "bias")}

    def _hops(self, x):
        h = [x]
        for _ in range(max(self.powers)):
            h.append(propagate(self.msgs, self.coef, h[-1], self.num_nodes))
        return h

    def forward(self, xs, p):
        h = self._hops(xs[0])
        z = torch.cat([h[q] @ p[f"lins.{q}.weight"].T for q in self.powers], dim=-1)
        return z + p["bias"] if "bias" in p else z

    def backward(self, xs, p, g):
        h = self._hops(xs[0])
        edge, loops = self._empty(g)
        block = {q: g[:, b * self.out:(b + 1) * self.out] for b, q in enumerate(self.powers)}
        d = torch.zeros_like(xs[0])
        for k in range(max(self.powers), 0, -1):
            if k in block:
                d = d + block[k] @ p[f"lins.{k}.weight"]
            book_messages(self, self.msgs, self.coef, h[k - 1], d, edge, loops)
            d = propagate_t(self.msgs, self.coef, d, self.num_nodes)
        if 0 in block:
            d = d + block[0] @ p["lins.0.weight"]
        return Back((d,), edge, loops)


class ClusterGCNTwin(T.RootNeighbourTwin):
    r"""``ClusterGCNConv``: :math:`z_i = (\sum_{j \to i} c_{ji} x_j)
    W_{out}^\top + b_{out} + x_i W_{root}^\top` over the edges and one
    self-loop per node, with :math:`c_{ji} = 1 / d_i` and
    :math:`c_{ii} = (1 + \lambda) / d_i` (:math:`d_i`: in-degree with the
    self-loop). Message :math:`c_{ji} x_j`."""

    neighbour, neighbour_bias, root = "lin_out.weight", "lin_out.bias", "lin_root.weight"

    def __init__(self, layer: pyg_nn.ClusterGCNConv, edge_index: Tensor, num_nodes: int):
        assert layer.add_self_loops
        self.num_nodes, self.num_edges = num_nodes, edge_index.shape[1]
        self.msgs = message_list(edge_index, num_nodes, True)
        self.coef = [c * (1 + layer.diag_lambda if m.edge is None else 1.0)
                     for m, c in zip(self.msgs, _mean_coefficients(self.msgs, num_nodes))]
        self.weights = {n: _p(layer, n) for n in (self.neighbour, self.root)}
        self.biases = {} if layer.lin_out.bias is None else {self.neighbour_bias: _p(layer, self.neighbour_bias)}


class LETwin(Twin):
    r"""``LEConv``: message :math:`m_{ji} = x_j W_1^\top + b_1 - x_i W_2^\top`,
    :math:`z_i = \sum_{j \to i} m_{ji} + x_i W_3^\top + b_3`. The ``-1`` is
    structure."""

    def __init__(self, layer: pyg_nn.LEConv, edge_index: Tensor, num_nodes: int):
        self.num_nodes, self.num_edges = num_nodes, edge_index.shape[1]
        self.msgs = message_list(edge_index, num_nodes, False)
        self.weights = {f"lin{k}.weight": _p(layer, f"lin{k}.weight") for k in (1, 2, 3)}
        self.biases = {f"lin{k}.bias": _p(layer, f"lin{k}.bias") for k in (1, 3) if getattr(layer, f"lin{k}").bias
                       is not None}

    def _lin(self, k, x, p):
        y = x @ p[f"lin{k}.weight"].T
        return y + p[f"lin{k}.bias"] if f"lin{k}.bias" in p else y

    def _message(self, x, p, m):
        return self._lin(1, x[m.src], p) - x[m.dst] @ p["lin2.weight"].T

    def forward(self, xs, p):
        x = xs[0]
        z = self._lin(3, x, p)
        for m in self.msgs:
            z[m.dst] += self._message(x, p, m)
        return z

    def backward(self, xs, p, g):
        x = xs[0]
        edge, loops = self._empty(g)
        adjoint = g @ p["lin3.weight"]
        for m in self.msgs:
            self._book(edge, loops, m, (self._message(x, p, m) * g[m.dst]).sum())
            adjoint[m.src] += g[m.dst] @ p["lin1.weight"]
            adjoint[m.dst] -= g[m.dst] @ p["lin2.weight"]
        return Back((adjoint,), edge, loops)


class AGNNTwin(Twin):
    r"""``AGNNConv``: :math:`z_i = \sum_{j \to i} \alpha_{ji} x_j` over the
    edges and a self-loop per node, with the frozen attention
    :math:`\alpha_{ji} = \mathrm{softmax}_j(\beta \cos(x_i, x_j))`. No
    weights, no biases. Message :math:`\alpha_{ji} x_j`."""

    def __init__(self, layer: pyg_nn.AGNNConv, x: Tensor, edge_index: Tensor, num_nodes: int):
        self.num_nodes, self.num_edges = num_nodes, edge_index.shape[1]
        self.msgs = message_list(edge_index, num_nodes, layer.add_self_loops)
        beta = float(layer.beta.detach())
        unit = [x[i] / max(float(x[i].norm()), 1e-12) for i in range(num_nodes)]
        logit = [beta * float(unit[m.dst] @ unit[m.src]) for m in self.msgs]
        total = [0.0] * num_nodes
        for m, a in zip(self.msgs, logit):
            total[m.dst] += torch.tensor(a).exp().item()
        self.coef = [torch.tensor(a).exp().item() / total[m.dst] for m, a in zip(self.msgs, logit)]
        self.weights, self.biases = {}, {}

    def forward(self, xs, p):
        return propagate(self.msgs, self.coef, xs[0], self.num_nodes)

    def backward(self, xs, p, g):
        edge, loops = self._empty(g)
        book_messages(self, self.msgs, self.coef, xs[0], g, edge, loops)
        return Back((propagate_t(self.msgs, self.coef, g, self.num_nodes),), edge, loops)


class GATETwin(Twin):
    r"""``GATEConv`` (AttentiveFP): :math:`z_i = \sum_{j \to i} \alpha_{ji}
    x_j W_2^\top + b` with the frozen attention
    :math:`\alpha_{ji} = \mathrm{softmax}_j(\mathrm{lrelu}(\mathrm{lrelu}([x_j, e_{ji}] W_1^\top) a_l
    + x_i a_r))`. Inputs ``x`` and ``edge_attr``; ``edge_attr`` enters the
    attention only, so it gets no relevance. Message :math:`\alpha_{ji} x_j W_2^\top`."""

    def __init__(self, layer, x: Tensor, edge_attr: Tensor, edge_index: Tensor, num_nodes: int):
        self.num_nodes, self.num_edges = num_nodes, edge_index.shape[1]
        self.msgs = message_list(edge_index, num_nodes, False)
        w1, att_l, att_r = _p(layer, "lin1.weight"), _p(layer, "att_l")[0], _p(layer, "att_r")[0]
        logit = []
        for m in self.msgs:
            hidden = F.leaky_relu(torch.cat([x[m.src], edge_attr[m.edge]]) @ w1.T)
            logit.append(F.leaky_relu(hidden @ att_l + x[m.dst] @ att_r))
        peak = [max(float(a) for m, a in zip(self.msgs, logit) if m.dst == i) if any(m.dst == i for m in self.msgs)
                else 0.0 for i in range(num_nodes)]
        exp = [float((a - peak[m.dst]).exp()) for m, a in zip(self.msgs, logit)]
        total = [sum(e for m, e in zip(self.msgs, exp) if m.dst == i) for i in range(num_nodes)]
        self.coef = [e / total[m.dst] for m, e in zip(self.msgs, exp)]
        self.weights = {"lin2.weight": _p(layer, "lin2.weight")}
        self.biases = {"bias": _p(layer, "bias")}

    def forward(self, xs, p):
        return propagate(self.msgs, self.coef, xs[0] @ p["lin2.weight"].T, self.num_nodes) + p["bias"]

    def backward(self, xs, p, g):
        edge, loops = self._empty(g)
        book_messages(self, self.msgs, self.coef, xs[0] @ p["lin2.weight"].T, g, edge, loops)
        adjoint = propagate_t(self.msgs, self.coef, g, self.num_nodes) @ p["lin2.weight"]
        return Back((adjoint, torch.zeros_like(xs[1])), edge, loops)


class RGCNTwin(Twin):
    r"""``RGCNConv`` / ``FastRGCNConv`` (``aggr`` ``'mean'`` or ``'add'``):
    :math:`z_i = \sum_{e = j \to i} c_e\, x_j W_{r_e} + x_i W_{root} + b`
    with :math:`c_e = 1 / |\{e' \to i: r_{e'} = r_e\}|` (mean, a gate) or 1.
    With ``num_bases`` the weight of relation ``r`` is
    :math:`W_r = \sum_b \mathrm{comp}_{rb} V_b`, and the rules modify
    :math:`W_r` (the weight of the map). Message :math:`c_e x_j` (or
    :math:`x_j W_{r_e}`, which has the same relevance)."""

    def __init__(self, layer: pyg_nn.RGCNConv, edge_index: Tensor, edge_type: Tensor, num_nodes: int):
        assert layer.num_blocks is None and layer.aggr in ("mean", "add", "sum")
        self.num_nodes, self.num_edges = num_nodes, edge_index.shape[1]
        self.msgs = message_list(edge_index, num_nodes, False)
        self.types = edge_type.tolist()
        if layer.aggr == "mean":
            count = {}
            for m, r in zip(self.msgs, self.types):
                count[(m.dst, r)] = count.get((m.dst, r), 0) + 1
            self.coef = [1.0 / count[(m.dst, r)] for m, r in zip(self.msgs, self.types)]
        else:
            self.coef = [1.0] * len(self.msgs)
        weight = _p(layer, "weight")
        if layer.num_bases is not None:
            weight = (_p(layer, "comp") @ weight.view(layer.num_bases, -1)).view(layer.num_relations, *weight.shape[1:])
        self.weights = {"weight": weight}
        if layer.root is not None:
            self.weights["root"] = _p(layer, "root")
        self.biases = {} if layer.bias is None else {"bias": _p(layer, "bias")}

    def forward(self, xs, p):
        x = xs[0]
        z = torch.zeros(self.num_nodes, p["weight"].shape[-1], dtype=x.dtype)
        for m, r, c in zip(self.msgs, self.types, self.coef):
            z[m.dst] += c * x[m.src] @ p["weight"][r]
        if "root" in p:
            z = z + x @ p["root"]
        return z + p["bias"] if "bias" in p else z

    def backward(self, xs, p, g):
        x = xs[0]
        edge, loops = self._empty(g)
        adjoint = g @ p["root"].T if "root" in p else torch.zeros_like(x)
        for m, r, c in zip(self.msgs, self.types, self.coef):
            d = g[m.dst] @ p["weight"][r].T  # gradient at the aggregated x_j of relation r
            self._book(edge, loops, m, (c * x[m.src] * d).sum())
            adjoint[m.src] += c * d
        return Back((adjoint,), edge, loops)


def nn_edge_weights(layer: pyg_nn.NNConv, edge_attr: Tensor) -> Tensor:
    """NNConv's edge-conditioned weights ``nn(edge_attr)`` as ``[E, F_in, F_out]``
    (``nn`` a single ``Linear``)."""
    assert isinstance(layer.nn, torch.nn.Linear)
    w = edge_attr @ _p(layer, "nn.weight").T + _p(layer, "nn.bias")
    return w.view(-1, layer.in_channels_l, layer.out_channels)


class NNConvTwin(Twin):
    r"""``NNConv`` (``aggr='add'``) with ``edge_attr`` a constant of the pass:
    :math:`z_i = \sum_{e = j \to i} x_j W(e) + x_i W_{root}^\top + b`. The
    edge-conditioned weights :math:`W(e) = \mathrm{nn}(e)` are gates (computed
    from data, so the rules do not modify them). Message :math:`x_j W(e)`."""

    def __init__(self, layer: pyg_nn.NNConv, edge_attr: Tensor, edge_index: Tensor, num_nodes: int):
        assert layer.aggr == "add" and layer.root_weight
        self.num_nodes, self.num_edges = num_nodes, edge_index.shape[1]
        self.msgs = message_list(edge_index, num_nodes, False)
        self.edge_weight = nn_edge_weights(layer, edge_attr)
        self.weights = {"lin.weight": _p(layer, "lin.weight")}
        self.biases = {} if layer.bias is None else {"bias": _p(layer, "bias")}

    def forward(self, xs, p):
        x = xs[0]
        z = x @ p["lin.weight"].T
        for m in self.msgs:
            z[m.dst] += x[m.src] @ self.edge_weight[m.edge]
        return z + p["bias"] if "bias" in p else z

    def backward(self, xs, p, g):
        x = xs[0]
        edge, loops = self._empty(g)
        adjoint = g @ p["lin.weight"]
        for m in self.msgs:
            self._book(edge, loops, m, (x[m.src] @ self.edge_weight[m.edge] * g[m.dst]).sum())
            adjoint[m.src] += self.edge_weight[m.edge] @ g[m.dst]
        return Back((adjoint,), edge, loops)


class PropagationTwin(Twin):
    r"""Propagation without weights: :math:`z_i = r\, x_i + \sum_{j \to i}
    c_{ji} x_j` with gates :math:`r` and :math:`c_{ji}`; message
    :math:`c_{ji} x_j`.

    * ``SimpleConv``: :math:`c = 1` (``'sum'``) or :math:`1/d_i` (``'mean'``),
      :math:`r = 1` with ``combine_root='sum'``; ``'self_loop'`` adds a
      self-loop per node (counted in :math:`d_i`);
    * ``LGConv``: :math:`c_{ji} = 1/\sqrt{d_j d_i}` (no self-loops), :math:`r = 0`;
    * ``WLConvContinuous``: :math:`c = 1/(2 d_i)`, :math:`r = 1/2`.
    """

    def __init__(self, layer, edge_index: Tensor, num_nodes: int):
        self.num_nodes, self.num_edges = num_nodes, edge_index.shape[1]
        loops = isinstance(layer, pyg_nn.SimpleConv) and layer.combine_root == "self_loop"
        self.msgs = message_list(edge_index, num_nodes, loops)
        if isinstance(layer, pyg_nn.LGConv):
            assert layer.normalize
            self.coef, self.root = gcn_coefficients(self.msgs, num_nodes), 0.0
        elif isinstance(layer, pyg_nn.WLConvContinuous):
            self.coef, self.root = [c / 2 for c in _mean_coefficients(self.msgs, num_nodes)], 0.5
        else:
            assert layer.aggr in ("sum", "add", "mean") and layer.combine_root in (None, "sum", "self_loop")
            mean = layer.aggr == "mean"
            self.coef = _mean_coefficients(self.msgs, num_nodes) if mean else [1.0] * len(self.msgs)
            self.root = 1.0 if layer.combine_root == "sum" else 0.0
        self.weights, self.biases = {}, {}

    def forward(self, xs, p):
        return self.root * xs[0] + propagate(self.msgs, self.coef, xs[0], self.num_nodes)

    def backward(self, xs, p, g):
        edge, loops = self._empty(g)
        book_messages(self, self.msgs, self.coef, xs[0], g, edge, loops)
        return Back((self.root * g + propagate_t(self.msgs, self.coef, g, self.num_nodes),), edge, loops)


class DirGNNTwin(Twin):
    r"""``DirGNNConv(GCNConv(...))``: :math:`z = \alpha\, \mathrm{GCN}_{out}(x, A^\top)
    + (1 - \alpha)\, \mathrm{GCN}_{in}(x, A) + x W^\top + b`, both convolutions
    without self-loops, each with its own GCN normalisation (a gate) and bias;
    :math:`\alpha` is a gate. A message of ``conv_out`` runs against the
    direction of its input edge and is booked to that edge."""

    def __init__(self, layer: pyg_nn.DirGNNConv, edge_index: Tensor, num_nodes: int):
        assert isinstance(layer.conv_in, pyg_nn.GCNConv) and layer.lin is not None
        self.num_nodes, self.num_edges = num_nodes, edge_index.shape[1]
        self.alpha = layer.alpha
        self.msgs_in = message_list(edge_index, num_nodes, False)
        self.msgs_out = [Msg(m.dst, m.src, m.edge) for m in self.msgs_in]
        self.coef_in = gcn_coefficients(self.msgs_in, num_nodes)
        self.coef_out = gcn_coefficients(self.msgs_out, num_nodes)
        names = ["conv_in.lin.weight", "conv_out.lin.weight", "lin.weight"]
        self.weights = {n: _p(layer, n) for n in names}
        self.biases = {n: _p(layer, n) for n in ("conv_in.bias", "conv_out.bias", "lin.bias")
                       if n in dict(layer.named_parameters())}

    def _parts(self):
        return (("conv_in", self.msgs_in, self.coef_in, 1 - self.alpha),
                ("conv_out", self.msgs_out, self.coef_out, self.alpha))

    def forward(self, xs, p):
        x = xs[0]
        z = x @ p["lin.weight"].T + p.get("lin.bias", 0.0)
        for name, msgs, coef, scale in self._parts():
            part = propagate(msgs, coef, x @ p[f"{name}.lin.weight"].T, self.num_nodes)
            z = z + scale * (part + p.get(f"{name}.bias", 0.0))
        return z

    def backward(self, xs, p, g):
        x = xs[0]
        edge, loops = self._empty(g)
        adjoint = g @ p["lin.weight"]
        for name, msgs, coef, scale in self._parts():
            w = p[f"{name}.lin.weight"]
            book_messages(self, msgs, coef, x @ w.T, scale * g, edge, loops)
            adjoint = adjoint + propagate_t(msgs, coef, scale * g, self.num_nodes) @ w
        return Back((adjoint,), edge, loops)


# ---------------------------------------------------------------------------
# Pieces of layers made of several maps
# ---------------------------------------------------------------------------


class AffineTwin(Twin):
    r""":math:`z = x W^\top [+ b]` for a weight (and bias) given by name; no
    messages. A slice of a ``Linear`` (FiLM's :math:`\gamma` rows) is a map
    of its own where only that slice is read."""

    def __init__(self, name: str, weight: Tensor, bias_name: str = "", bias: Tensor = None):
        self.name, self.bias_name = name, bias_name
        self.weights = {name: weight}
        self.biases = {} if bias is None else {bias_name: bias}

    def forward(self, xs, p):
        z = xs[0] @ p[self.name].T
        return z + p[self.bias_name] if self.bias_name in p else z

    def backward(self, xs, p, g):
        return Back((g @ p[self.name],), torch.zeros(0, dtype=g.dtype), torch.zeros(0, dtype=g.dtype))


class ShiftTwin(Twin):
    r""":math:`u_e = P_e + x_{at(e)} W^\top [+ b]`: a signal ``P`` (the output
    of a product) plus an affine term of node ``at(e)``. Inputs ``(x, P)``;
    no messages."""

    def __init__(self, at: list, name: str, weight: Tensor, bias_name: str = "", bias: Tensor = None):
        self.at, self.name, self.bias_name = at, name, bias_name
        self.weights = {name: weight}
        self.biases = {} if bias is None else {bias_name: bias}

    def forward(self, xs, p):
        x, prod = xs
        u = prod + x[self.at] @ p[self.name].T
        return u + p[self.bias_name] if self.bias_name in p else u

    def backward(self, xs, p, g):
        x, _ = xs
        return Back((_index_sum(g @ p[self.name], self.at, x.shape[0]), g.clone()),
                    torch.zeros(0, dtype=g.dtype), torch.zeros(0, dtype=g.dtype))


class AggregateTwin(Twin):
    r""":math:`z_i = \sum_{e \to i} c_e r_e + (\text{terms})`: messages ``r``
    ``[E, ...]`` (an input of the map) aggregated with gate ``c_e``, plus
    ``root`` (an input ``[N, ...]`` added as it is, or an affine term
    :math:`x_i W^\top`) and a bias. Inputs ``(root_input, r)``. Message
    :math:`r_e` (summed over trailing dimensions after ``reduce``)."""

    def __init__(self, msgs: list, coef: list, num_nodes: int, num_edges: int, root: str = "",
                 weights: dict = None, biases: dict = None, reduce: tuple = ()):
        self.msgs, self.coef, self.num_nodes, self.num_edges = msgs, coef, num_nodes, num_edges
        self.root, self.reduce = root, reduce
        self.weights, self.biases = weights or {}, biases or {}

    def _message(self, r, e):
        return r[e].sum(dim=self.reduce) if self.reduce else r[e]

    def forward(self, xs, p):
        top, r = xs
        z = top @ p[self.root].T if self.root else top.clone()
        for m, c in zip(self.msgs, self.coef):
            z[m.dst] += c * self._message(r, m.edge)
        for b in self.biases:
            z = z + p[b]
        return z

    def backward(self, xs, p, g):
        top, r = xs
        edge, loops = self._empty(g)
        dr = torch.zeros_like(r)
        for m, c in zip(self.msgs, self.coef):
            self._book(edge, loops, m, (c * self._message(r, m.edge) * g[m.dst]).sum())
            dr[m.edge] = c * (g[m.dst].unsqueeze(self.reduce[0]) if self.reduce else g[m.dst]).expand_as(r[m.edge])
        return Back((g @ p[self.root] if self.root else g.clone(), dr), edge, loops)


def _half(relevance: Tensor) -> Tensor:
    """The product rule: each factor of ``a * b`` gets half."""
    return relevance / 2


# ---------------------------------------------------------------------------
# Layers made of several maps
# ---------------------------------------------------------------------------


def film_relevance(layer: pyg_nn.FiLMConv, x: Tensor, edge_index: Tensor, edge_type, rule, relevance: Tensor
                   ) -> LayerResult:
    r"""``FiLMConv`` (``act=ReLU``, ``nn=None``, ``aggr='mean'``). With
    :math:`[\beta, \gamma] = x W_f^\top + b_f` per relation (no bias for the
    skip) and :math:`h = x W^\top`:

    * skip :math:`u_i = \gamma^s_i \odot h^s_i + \beta^s_i`, messages
      :math:`u_e = \gamma_i \odot h_j + \beta_i` for :math:`e = j \to i`;
    * :math:`z_i = \mathrm{relu}(u_i) + \sum_r \operatorname{mean}_{e \to i, r_e = r} \mathrm{relu}(u_e)`.

    Maps: ``z`` over the ReLU outputs (message :math:`\mathrm{relu}(u_e)`);
    :math:`u = P + \beta` over the products ``P`` and ``x``; one map for each
    factor of each product (:math:`\gamma`, :math:`h`), which gets half of the
    product's relevance.
    """
    assert isinstance(layer.act, torch.nn.ReLU) and layer.aggr == "mean"
    n, o = x.shape[0], layer.out_channels
    msgs = message_list(edge_index, n, False)
    types = [0] * len(msgs) if edge_type is None else edge_type.tolist()
    src, dst = [m.src for m in msgs], [m.dst for m in msgs]
    coef = []
    for m, r in zip(msgs, types):
        coef.append(1.0 / sum(1 for m2, r2 in zip(msgs, types) if m2.dst == m.dst and r2 == r))

    def film(prefix, bias):  # the (beta, gamma) twins of one FiLM Linear
        w = _p(layer, f"{prefix}.weight")
        b = _p(layer, f"{prefix}.bias") if bias else None
        beta = (f"{prefix}.weight[:o]", w[:o], f"{prefix}.bias[:o]", None if b is None else b[:o])
        gamma = AffineTwin(f"{prefix}.weight[o:]", w[o:], f"{prefix}.bias[o:]", None if b is None else b[o:])
        return beta, gamma

    # forward: skip, then one set of messages per relation
    beta_s, gamma_s = film("film_skip", False)
    lin_skip = AffineTwin("lin_skip.weight", _p(layer, "lin_skip.weight"))
    shift_s = ShiftTwin(list(range(n)), *beta_s)
    prod_s = gamma_s.forward((x,), gamma_s.params()) * lin_skip.forward((x,), lin_skip.params())
    r_s = shift_s.forward((x, prod_s), shift_s.params()).relu()
    relations = []
    for r in range(layer.num_relations):
        beta, gamma = film(f"films.{r}", True)
        lin = AffineTwin(f"lins.{r}.weight", _p(layer, f"lins.{r}.weight"))
        shift = ShiftTwin(dst, *beta)
        prod = gamma.forward((x,), gamma.params())[dst] * lin.forward((x,), lin.params())[src]
        mask = torch.tensor([t == r for t in types], dtype=x.dtype).unsqueeze(-1)
        relations.append((gamma, lin, shift, prod, mask))
    r_msg = sum(shift.forward((x, prod), shift.params()).relu() * mask for _, _, shift, prod, mask in relations)
    top = AggregateTwin(msgs, coef, n, len(msgs))

    # backward
    res_top = map_relevance(top, (r_s, r_msg), rule, relevance)
    rel_x = torch.zeros_like(x)
    results = [res_top]
    res = map_relevance(shift_s, (x, prod_s), rule, res_top.inputs[0])  # ReLU passes
    results.append(res)
    rel_x = rel_x + res.inputs[0]
    for twin, rel in ((gamma_s, _half(res.inputs[1])), (lin_skip, _half(res.inputs[1]))):
        part = map_relevance(twin, (x,), rule, rel)
        results.append(part)
        rel_x = rel_x + part.inputs[0]
    for gamma, lin, shift, prod, mask in relations:
        res = map_relevance(shift, (x, prod), rule, res_top.inputs[1] * mask)
        results.append(res)
        rel_x = rel_x + res.inputs[0]
        half = _half(res.inputs[1])
        for twin, rel in ((gamma, _index_sum(half, dst, n)), (lin, _index_sum(half, src, n))):
            part = map_relevance(twin, (x,), rule, rel)
            results.append(part)
            rel_x = rel_x + part.inputs[0]
    out = top.forward((r_s, r_msg), top.params())
    return LayerResult((rel_x,), res_top.edge, res_top.loops, out, results)


def res_gated_relevance(layer: pyg_nn.ResGatedGraphConv, x: Tensor, edge_index: Tensor, rule,
                        relevance: Tensor) -> LayerResult:
    r"""``ResGatedGraphConv`` (``act=Sigmoid``, ``root_weight``, no edge
    features): :math:`z_i = \sum_{e = j \to i} \sigma(s_e) \odot v_j + x_i
    W_{skip}^\top + b` with :math:`s_e = x_i W_k^\top + b_k + x_j W_q^\top + b_q`
    and :math:`v = x W_v^\top + b_v`.

    The sigmoid factor is a gate, held constant: ``z`` is one map of ``x``
    (message :math:`\sigma(s_e) \odot v_j`), and the gate logits ``s`` get
    no relevance.
    """
    assert isinstance(layer.act, torch.nn.Sigmoid) and layer.edge_dim is None and layer.lin_skip is not None
    n = x.shape[0]
    msgs = message_list(edge_index, n, False)
    src, dst = [m.src for m in msgs], [m.dst for m in msgs]
    logits = _GateLogitTwin(layer, src, dst)
    gate = logits.forward((x,), logits.params()).sigmoid().detach()
    twin = _GatedValueTwin(layer, msgs, gate, n)
    result = map_relevance(twin, (x,), rule, relevance)
    return LayerResult(result.inputs, result.edge, result.loops, twin.forward((x,), twin.params()), [result])


class _GatedValueTwin(Twin):
    r""":math:`z_i = \sum_{e = j \to i} g_e \odot (x_j W_v^\top + b_v) + x_i
    W_{skip}^\top + b` with the gates :math:`g_e` constants (message
    :math:`g_e \odot (x_j W_v^\top + b_v)`)."""

    def __init__(self, layer, msgs: list, gate: Tensor, num_nodes: int):
        self.msgs, self.gate, self.num_nodes, self.num_edges = msgs, gate, num_nodes, len(msgs)
        self.weights = {n: _p(layer, n) for n in ("lin_value.weight", "lin_skip.weight")}
        self.biases = {"lin_value.bias": _p(layer, "lin_value.bias")}
        if layer.bias is not None:
            self.biases["bias"] = _p(layer, "bias")

    def _message(self, x, p, k, m):
        return self.gate[k] * (x[m.src] @ p["lin_value.weight"].T + p.get("lin_value.bias", 0.0))

    def forward(self, xs, p):
        x = xs[0]
        z = x @ p["lin_skip.weight"].T + p.get("bias", 0.0)
        for k, m in enumerate(self.msgs):
            z[m.dst] += self._message(x, p, k, m)
        return z

    def backward(self, xs, p, g):
        x = xs[0]
        edge, loops = self._empty(g)
        dx = g @ p["lin_skip.weight"]
        for k, m in enumerate(self.msgs):
            self._book(edge, loops, m, (self._message(x, p, k, m) * g[m.dst]).sum())
            dx[m.src] += (self.gate[k] * g[m.dst]) @ p["lin_value.weight"]
        return Back((dx,), edge, loops)


class _GateLogitTwin(Twin):
    r""":math:`s_e = x_i W_k^\top + b_k + x_j W_q^\top + b_q` for each edge
    :math:`e = j \to i` (``ResGatedGraphConv``'s gate logits, ``[E, C]``)."""

    def __init__(self, layer, src: list, dst: list):
        self.src, self.dst = src, dst
        self.weights = {n: _p(layer, n) for n in ("lin_key.weight", "lin_query.weight")}
        self.biases = {n: _p(layer, n) for n in ("lin_key.bias", "lin_query.bias")}

    def forward(self, xs, p):
        x = xs[0]
        s = x[self.dst] @ p["lin_key.weight"].T + x[self.src] @ p["lin_query.weight"].T
        return s + p.get("lin_key.bias", 0.0) + p.get("lin_query.bias", 0.0)

    def backward(self, xs, p, g):
        n = xs[0].shape[0]
        adjoint = _index_sum(g @ p["lin_key.weight"], self.dst, n) + _index_sum(g @ p["lin_query.weight"], self.src, n)
        return Back((adjoint,), torch.zeros(0, dtype=g.dtype), torch.zeros(0, dtype=g.dtype))


def nnconv_relevance(layer: pyg_nn.NNConv, x: Tensor, edge_attr: Tensor, edge_index: Tensor, rule,
                     relevance: Tensor) -> LayerResult:
    r"""``NNConv`` (``aggr='add'``, ``nn`` a ``Linear``) with ``edge_attr``
    explained: message :math:`m_e = \sum_f P_{e,f}` with the products
    :math:`P_{e,f,o} = x_{j,f}\, W(e)_{f,o}`, :math:`W(e) = e W_{nn}^\top + b_{nn}`.

    Maps: :math:`z_i = \sum_{e \to i} \sum_f P_{e,f} + x_i W_{root}^\top + b`
    over ``x`` and ``P`` (message :math:`m_e`); :math:`W(e)` over
    ``edge_attr``, with half of the products' relevance. The other half goes
    to :math:`x_j` (summed over ``o``).
    """
    assert layer.aggr == "add" and isinstance(layer.nn, torch.nn.Linear) and layer.root_weight
    n = x.shape[0]
    msgs = message_list(edge_index, n, False)
    src = [m.src for m in msgs]
    weight_map = AffineTwin("nn.weight", _p(layer, "nn.weight"), "nn.bias", _p(layer, "nn.bias"))
    w = weight_map.forward((edge_attr,), weight_map.params()).view(-1, layer.in_channels_l, layer.out_channels)
    prod = x[src].unsqueeze(-1) * w  # [E, F, O]
    top = AggregateTwin(msgs, [1.0] * len(msgs), n, len(msgs), root="lin.weight",
                        weights={"lin.weight": _p(layer, "lin.weight")},
                        biases={} if layer.bias is None else {"bias": _p(layer, "bias")}, reduce=(0,))
    res_top = map_relevance(top, (x, prod), rule, relevance)
    half = _half(res_top.inputs[1])
    res_w = map_relevance(weight_map, (edge_attr,), rule, half.reshape(half.shape[0], -1))
    rel_x = res_top.inputs[0] + _index_sum(half.sum(dim=-1), src, n)
    return LayerResult((rel_x, res_w.inputs[0]), res_top.edge, res_top.loops, top.forward((x, prod), top.params()),
                       [res_top, res_w])


class _ARMALayerTwin(Twin):
    r"""Layer ``t`` of ``ARMAConv`` before its ReLU, for all stacks:
    :math:`z_{k} = \hat A (h_k W_{t,k}) + x V_{t,k} + b_{t,k}` (``[K, N, C]``;
    GCN normalisation without self-loops). Inputs ``(x,)`` for ``t = 0``
    (``h = x``), else ``(x, h)``. Message :math:`a_{ji} (h_k W_{t,k})_j`."""

    def __init__(self, layer: pyg_nn.ARMAConv, t: int, msgs: list, coef: list, num_nodes: int, num_edges: int):
        self.msgs, self.coef, self.num_nodes, self.num_edges = msgs, coef, num_nodes, num_edges
        self.first = t == 0
        s = 0 if layer.shared_weights else t
        self.weights = {"W": _p(layer, "init_weight") if self.first else _p(layer, "weight")[s - 1],
                        "V": _p(layer, "root_weight")[s]}
        self.biases = {} if layer.bias is None else {"b": _p(layer, "bias")[s]}

    def _messages_of(self, xs, p):
        h = xs[0].unsqueeze(0) if self.first else xs[1]
        return torch.matmul(h, p["W"])  # [K, N, C]

    def forward(self, xs, p):
        hw = self._messages_of(xs, p)
        z = torch.stack([propagate(self.msgs, self.coef, hw[k], self.num_nodes) for k in range(hw.shape[0])])
        z = z + torch.matmul(xs[0].unsqueeze(0), p["V"])
        return z + p["b"] if "b" in p else z

    def backward(self, xs, p, g):
        hw = self._messages_of(xs, p)
        edge, loops = self._empty(g)
        for k in range(hw.shape[0]):
            book_messages(self, self.msgs, self.coef, hw[k], g[k], edge, loops)
        d_hw = torch.stack([propagate_t(self.msgs, self.coef, g[k], self.num_nodes) for k in range(g.shape[0])])
        d_h = torch.matmul(d_hw, p["W"].transpose(-1, -2))
        d_x = torch.matmul(g, p["V"].transpose(-1, -2)).sum(dim=0)
        if self.first:
            return Back((d_x + d_h.sum(dim=0),), edge, loops)
        return Back((d_x, d_h), edge, loops)


class _StackMeanTwin(Twin):
    r""":math:`z = \frac{1}{K} \sum_k h_k`: the mean over ARMA's stacks (``1/K``
    a gate). No weights, no messages."""

    weights: dict = {}
    biases: dict = {}

    def forward(self, xs, p):
        return xs[0].mean(dim=0)

    def backward(self, xs, p, g):
        k = xs[0].shape[0]
        return Back(((g / k).expand_as(xs[0]).clone(),), torch.zeros(0, dtype=g.dtype), torch.zeros(0, dtype=g.dtype))


def arma_relevance(layer: pyg_nn.ARMAConv, x: Tensor, edge_index: Tensor, rule, relevance: Tensor) -> LayerResult:
    r"""``ARMAConv`` (``act=ReLU``, no dropout): layer ``t``
    (:class:`_ARMALayerTwin`) then ReLU, ``T`` times, then the mean over the
    stacks (:class:`_StackMeanTwin`). Each ReLU passes relevance; ``x`` gets
    relevance from the first layer and from every root term."""
    assert isinstance(layer.act, torch.nn.ReLU) and layer.aggr == "add"
    n = x.shape[0]
    msgs = message_list(edge_index, n, False)
    coef = gcn_coefficients(msgs, n)
    maps = [_ARMALayerTwin(layer, t, msgs, coef, n, edge_index.shape[1]) for t in range(layer.num_layers)]
    inputs, h = [], None
    for t, twin in enumerate(maps):
        xs = (x,) if t == 0 else (x, h)
        inputs.append(xs)
        h = twin.forward(xs, twin.params()).relu()
    top = _StackMeanTwin()
    res = map_relevance(top, (h,), rule, relevance)
    results, rel_h = [res], res.inputs[0]
    rel_x = torch.zeros_like(x)
    edge = loops = 0
    for twin, xs in reversed(list(zip(maps, inputs))):
        res = map_relevance(twin, xs, rule, rel_h)
        results.append(res)
        rel_x = rel_x + res.inputs[0]
        edge, loops = edge + res.edge, loops + res.loops
        rel_h = res.inputs[1] if len(xs) > 1 else None
    return LayerResult((rel_x,), edge, loops, top.forward((h,), {}), results)


def gradient_x_input(layer: torch.nn.Module, call, inputs: list, relevance: Tensor, edge_index: Tensor,
                     num_nodes: int) -> tuple[list, Tensor, Tensor]:
    """:func:`twins.gradient_x_input` for layers whose messages are not
    stacked along dimension 0 (``ARMAConv``'s ``[K, E, C]``: ``node_dim=-2``).
    Input edges only (no self-loops)."""
    inputs = [t.detach().clone().requires_grad_() for t in inputs]
    seen: list = []
    def keep(mod, args, out):
        out.retain_grad()
        seen.append(out)

    hook = layer.register_message_forward_hook(keep)
    try:
        out = call(layer, *inputs)
    finally:
        hook.remove()
    weight = torch.where(out == 0, torch.zeros_like(out), relevance / out).detach()
    (out * weight).sum().backward()
    edge = torch.zeros(edge_index.shape[1], dtype=torch.float64)
    for messages in seen:  # messages over the input edges, in order
        per = (messages * messages.grad).detach().movedim(layer.node_dim, 0)
        edge += per.reshape(per.shape[0], -1).sum(dim=1)
    return [(t * t.grad).detach() for t in inputs], edge, torch.zeros(num_nodes, dtype=torch.float64)


# ---------------------------------------------------------------------------
# Stock layers made linear, for the gradient x input self-checks: attention
# from detached inputs, products as 1/2 (a b~ + a~ b) and activations as
# gates s act(s~)/s~ (~: detached), whose gradient x input is LRP-0
# ---------------------------------------------------------------------------


def half_product(a: Tensor, b: Tensor) -> Tensor:
    r""":math:`\frac12 (a \tilde b + \tilde a b)`: the value of ``a * b``,
    whose gradient hands each factor half (LRP-0 of the product rule)."""
    return 0.5 * (a * b.detach() + a.detach() * b)


def as_gate(s: Tensor, act) -> Tensor:
    r""":math:`s \cdot \mathrm{act}(\tilde s) / \tilde s`: the value of
    ``act(s)``, through which gradient x input passes relevance unchanged."""
    s0 = s.detach()
    return s * (act(s0) / s0)


class FrozenAGNNConv(pyg_nn.AGNNConv):
    """``AGNNConv`` whose attention sees detached features."""

    def message(self, x_j, x_norm_i, x_norm_j, index, ptr, size_i):
        return super().message(x_j, x_norm_i.detach(), x_norm_j.detach(), index, ptr, size_i)


class FrozenGATEConv(pyg_nn.models.attentive_fp.GATEConv):
    """``GATEConv`` whose attention sees detached inputs."""

    def edge_update(self, x_j, x_i, edge_attr, index, ptr, size_i):
        detached = edge_attr.detach() + 0 * edge_attr  # gradient 0, not None
        return super().edge_update(x_j.detach(), x_i.detach(), detached, index, ptr, size_i)


class FrozenFiLMConv(pyg_nn.FiLMConv):
    """``FiLMConv`` (``act=ReLU``) with its products halved."""

    def forward(self, x, edge_index, edge_type=None):
        beta, gamma = self.film_skip(x).split(self.out_channels, dim=-1)
        out = self.act(half_product(gamma, self.lin_skip(x)) + beta)
        for r, (lin, film) in enumerate(zip(self.lins, self.films)):
            beta, gamma = film(x).split(self.out_channels, dim=-1)
            edges = edge_index if edge_type is None else edge_index[:, edge_type == r]
            out = out + self.propagate(edges, x=lin(x), beta=beta, gamma=gamma)
        return out

    def message(self, x_j, beta_i, gamma_i):
        return self.act(half_product(gamma_i, x_j) + beta_i)


class FrozenResGatedGraphConv(pyg_nn.ResGatedGraphConv):
    """``ResGatedGraphConv`` with the sigmoid gate held constant."""

    def message(self, k_i, q_j, v_j, edge_attr):
        return self.act(k_i + q_j).detach() * v_j


class FrozenNNConv(pyg_nn.NNConv):
    """``NNConv`` with the product of ``x_j`` and the edge weights halved."""

    def message(self, x_j, edge_attr):
        weight = self.nn(edge_attr).view(-1, self.in_channels_l, self.out_channels)
        return half_product(x_j.unsqueeze(-1), weight).sum(dim=-2)


from torch_geometric_lrp.nn.conv import _inherit_call_types  # noqa: E402  (see twins.py)

for _cls in (FrozenAGNNConv, FrozenGATEConv, FrozenFiLMConv, FrozenResGatedGraphConv, FrozenNNConv):
    _inherit_call_types(_cls)
