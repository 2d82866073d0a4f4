"""LRP message-passing layers.

Layers whose steps are sums, means, max/min, gathers, gates and linear maps
need no code of their own: the relevance mode routes those ops. The attention
layers override the one step where attention is computed, so that inside a
relevance pass the coefficients are computed from detached inputs: they are
constants, and relevance flows along the value path only.
"""
from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
import torch_geometric.nn as pyg_nn
from torch import Tensor
from torch_geometric.inspector import Inspector
from torch_geometric.typing import OptTensor
from torch_geometric.utils import softmax

from ..mode import is_active


def _constant(t):
    """Detach ``t`` inside a relevance pass: it becomes a gate, not a signal."""
    return t.detach() if (t is not None and is_active()) else t


class _PythonPropagate:
    """PyG compiles ``propagate`` (and ``edge_updater``) per class when the
    class is first built, and keeps the Python one as ``_orig_propagate``:
    the one its explain mode (edge masks of GNNExplainer, Captum) and
    ``decomposed_layers`` switch to. A subclass built after its PyG parent
    inherits the parent's *compiled* ``propagate`` and would keep that, which
    has no explain branch: PyG's edge masks would be ignored. The Python one
    is kept here, whatever was built first."""

    def _set_jittable_templates(self, raise_on_error: bool = False) -> None:
        super()._set_jittable_templates(raise_on_error)
        cls = type(self)
        for name in ("propagate", "edge_updater"):
            kept = vars(cls).get(f"_orig_{name}")
            if kept is not None and _compiled(kept, name):
                setattr(cls, f"_orig_{name}", next(vars(k)[name] for k in cls.__mro__
                                                    if name in vars(k) and not _compiled(vars(k)[name], name)))


def _compiled(fn, name: str) -> bool:
    """Whether ``fn`` is one of PyG's compiled (template) ``propagate`` / ``edge_updater``."""
    return getattr(fn, "__module__", "").endswith(f"_{name}")


class GCNConv(_PythonPropagate, pyg_nn.GCNConv):
    """:class:`torch_geometric.nn.GCNConv`; the normalisation is a constant gate."""


class GraphConv(_PythonPropagate, pyg_nn.GraphConv):
    """:class:`torch_geometric.nn.GraphConv`."""


class SAGEConv(_PythonPropagate, pyg_nn.SAGEConv):
    """:class:`torch_geometric.nn.SAGEConv`; ``normalize=True`` divides by a constant norm."""


class GINConv(_PythonPropagate, pyg_nn.GINConv):
    """:class:`torch_geometric.nn.GINConv`; the ``nn`` is explained with the mode's rules."""


class GINEConv(_PythonPropagate, pyg_nn.GINEConv):
    """:class:`torch_geometric.nn.GINEConv`; edge features receive relevance."""


class ChebConv(_PythonPropagate, pyg_nn.ChebConv):
    """:class:`torch_geometric.nn.ChebConv`; the scaled Laplacian is a constant."""


class SGConv(_PythonPropagate, pyg_nn.SGConv):
    """:class:`torch_geometric.nn.SGConv`."""


class APPNP(_PythonPropagate, pyg_nn.APPNP):
    """:class:`torch_geometric.nn.APPNP`."""


class EdgeConv(_PythonPropagate, pyg_nn.EdgeConv):
    """:class:`torch_geometric.nn.EdgeConv`; ``x_j - x_i`` splits relevance by sign."""


class GATConv(_PythonPropagate, pyg_nn.GATConv):
    """:class:`torch_geometric.nn.GATConv`; attention coefficients are constants."""

    def edge_update(self, alpha_j: Tensor, alpha_i: OptTensor, edge_attr: OptTensor, index: Tensor,
                    ptr: OptTensor, dim_size: Optional[int]) -> Tensor:
        return super().edge_update(_constant(alpha_j), _constant(alpha_i), _constant(edge_attr),
                                   index, ptr, dim_size)


class GATv2Conv(_PythonPropagate, pyg_nn.GATv2Conv):
    """:class:`torch_geometric.nn.GATv2Conv`; attention coefficients are constants."""

    def edge_update(self, x_j: Tensor, x_i: Tensor, edge_attr: OptTensor, index: Tensor,
                    ptr: OptTensor, dim_size: Optional[int]) -> Tensor:
        return super().edge_update(_constant(x_j), _constant(x_i), _constant(edge_attr),
                                   index, ptr, dim_size)


def _detach_inputs(module, args):
    return tuple(a.detach() if isinstance(a, Tensor) else a for a in args)


class TransformerConv(_PythonPropagate, pyg_nn.TransformerConv):
    """:class:`torch_geometric.nn.TransformerConv`; attention coefficients are
    constants, relevance flows through the values (and edge features added to
    them). With ``beta=True`` the learned skip gate
    ``beta = sigmoid(lin_beta([out, x_r, out - x_r]))`` is a constant too, so
    ``beta * x_r + (1 - beta) * out`` splits relevance between the skip and
    the aggregated messages in proportion to their contributions."""

    @staticmethod
    def needs_own_forward(module: pyg_nn.TransformerConv) -> bool:
        """Whether a pass needs this class's ``forward`` on ``module`` (with
        ``beta=True``), not only its ``message``."""
        return module.lin_beta is not None

    def forward(self, x, edge_index, edge_attr: OptTensor = None, return_attention_weights=None):
        # The gate is a constant: if it carried relevance, ``1 - beta`` would be
        # an add with the constant 1 that absorbs (or creates) relevance.
        # Inside a pass, lin_beta sees detached inputs.
        if self.lin_beta is None or not is_active():
            return super().forward(x, edge_index, edge_attr, return_attention_weights)
        handle = self.lin_beta.register_forward_pre_hook(_detach_inputs)
        try:
            return super().forward(x, edge_index, edge_attr, return_attention_weights)
        finally:
            handle.remove()

    def message(self, query_i: Tensor, key_j: Tensor, value_j: Tensor, edge_attr: OptTensor,
                index: Tensor, ptr: OptTensor, size_i: Optional[int]) -> Tensor:
        if not is_active():
            return super().message(query_i, key_j, value_j, edge_attr, index, ptr, size_i)
        key = key_j.detach()
        if self.lin_edge is not None:
            assert edge_attr is not None
            edge_attr = self.lin_edge(edge_attr).view(-1, self.heads, self.out_channels)
            key = key + edge_attr.detach()
        alpha = (query_i.detach() * key).sum(dim=-1) / math.sqrt(self.out_channels)
        alpha = softmax(alpha, index, ptr, size_i)
        self._alpha = alpha
        out = value_j if edge_attr is None else value_j + edge_attr
        return out * alpha.view(-1, self.heads, 1)


class GeneralConv(_PythonPropagate, pyg_nn.GeneralConv):
    """:class:`torch_geometric.nn.GeneralConv`; with ``attention=True`` the
    coefficients are constants."""

    def message(self, x_i: Tensor, x_j: Tensor, edge_index_i: Tensor, size_i: Tensor,
                edge_attr: Tensor) -> Tensor:
        if not (self.attention and is_active()):
            return super().message(x_i, x_j, edge_index_i, size_i, edge_attr)
        x_j_out = self.message_basic(x_i, x_j, edge_attr).view(-1, self.heads, self.out_channels)
        x_i_d, x_j_d, attr_d = x_i.detach(), x_j.detach(), _constant(edge_attr)
        key = self.message_basic(x_i_d, x_j_d, attr_d).view(-1, self.heads, self.out_channels)
        if self.attention_type == "dot_product":
            query = self.message_basic(x_j_d, x_i_d, attr_d).view(-1, self.heads, self.out_channels)
            alpha = (query * key).sum(dim=-1) / self.scaler
        else:
            alpha = (key * self.att_msg).sum(dim=-1)
        alpha = F.leaky_relu(alpha, negative_slope=0.2)
        alpha = softmax(alpha, edge_index_i, num_nodes=size_i)
        return x_j_out * alpha.view(-1, self.heads, 1)


class GCN2Conv(_PythonPropagate, pyg_nn.GCN2Conv):
    r""":class:`torch_geometric.nn.GCN2Conv`:
    :math:`z = (1 - \beta) s + \beta s W_1` with
    :math:`s = (1 - \alpha) \hat A x + \alpha x_0` (with a second weight for
    ``x_0`` where ``shared_weights=False``); :math:`\hat A`, :math:`\alpha`
    and :math:`\beta` are gates. Its in-place scaling (``x.mul_(1 -
    alpha)``, result dropped) is replayed by the relevance mode like any
    in-place arithmetic on the end of a linear map."""


class SGFormerAttention(pyg_nn.SGFormerAttention):
    r""":class:`torch_geometric.nn.SGFormerAttention`; inside a relevance
    pass the queries and keys are computed from the detached input, so the
    (linear, all-pairs) attention is a constant like GAT's (explained as PyG
    writes it, the einsum of keys and values would split relevance between
    them as a product of two signals).
    Per head, with :math:`\hat q_n`, :math:`\hat k_l` the unit queries and
    keys, :math:`z_n = \sum_l P_{nl} v_l` where
    :math:`P_{nl} = (\hat q_n \cdot \hat k_l + N \delta_{nl}) /
    (\sum_{l'} \hat q_n \cdot \hat k_{l'} + N)`; heads are averaged."""

    @staticmethod
    def needs_own_forward(module: pyg_nn.SGFormerAttention) -> bool:
        """A pass needs this class's ``forward``."""
        return True

    def forward(self, x: Tensor, mask: Optional[Tensor] = None) -> Tensor:
        if not is_active():
            return super().forward(x, mask)
        B, N, *_ = x.shape
        gate = x.detach()
        qs, ks = (lin(gate).reshape(B, N, self.heads, self.head_channels) for lin in (self.q, self.k))
        vs = self.v(x).reshape(B, N, self.heads, self.head_channels)
        if mask is not None:
            vs = vs.masked_fill(~mask[:, :, None, None], 0.)
        qs, ks = (t.masked_fill(t == 0, 1e-6) for t in (qs, ks))
        qs, ks = (t / torch.linalg.norm(t, ord=2, dim=-1, keepdim=True) for t in (qs, ks))
        kvs = torch.einsum("blhm,blhd->bhmd", ks, vs)
        numerator = torch.einsum("bnhm,bhmd->bnhd", qs, kvs) + N * vs
        ks_sum = torch.einsum("blhm,bl->bhm", ks, torch.ones([B, N], device=ks.device, dtype=ks.dtype))
        normalizer = torch.einsum("bnhm,bhm->bnh", qs, ks_sum).unsqueeze(-1) + N
        return (numerator / normalizer).mean(dim=2)


def _inherit_call_types(cls: type) -> type:
    """Give ``cls`` the ``propagate`` / ``edge_updater`` argument types of its
    PyG parent.

    PyG reads them from the ``# propagate_type: (...)`` comment in the layer's
    source, but caches sources by class *name*, so a subclass of the same name
    hides its parent's source and PyG would compile ``propagate`` with no
    arguments. PyG also accepts the types as a ``{func}_type`` class attribute,
    which is what we set.
    """
    parent = Inspector(cls.__bases__[-1])  # the PyG layer (after _PythonPropagate)
    for func in ("propagate", "edge_updater"):
        params = parent.get_params_from_method_call(func, exclude=[0, "edge_index", "size"])
        if params:
            setattr(cls, f"{func}_type", {name: p.type for name, p in params.items()})
    return cls


for _cls in (GCNConv, GraphConv, SAGEConv, GINConv, GINEConv, ChebConv, SGConv, APPNP, EdgeConv,
             GATConv, GATv2Conv, TransformerConv, GeneralConv, GCN2Conv):
    _inherit_call_types(_cls)

#: PyG layers whose attention must be a constant inside a relevance pass ->
#: their relevance version. ``relevance_pass`` gives a layer of these types
#: this class for the duration of the pass (and back on exit); outside a pass
#: it computes exactly what the PyG layer computes. PyG has no public hook at
#: the one step where these layers turn inputs into attention (inside
#: ``edge_update`` or ``message``), hence the subclass. A class whose pass
#: needs its own ``forward`` says so with ``needs_own_forward(module)``.
SWAPPABLE: dict[type, type] = {pyg_nn.GATConv: GATConv, pyg_nn.GATv2Conv: GATv2Conv,
                               pyg_nn.TransformerConv: TransformerConv, pyg_nn.GeneralConv: GeneralConv,
                               pyg_nn.SGFormerAttention: SGFormerAttention}
