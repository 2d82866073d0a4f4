r"""Trimming a cut's messages layer by layer.

A target ``t`` of a model with ``L`` hops reads the last layer's output at
``t`` only, that layer reads the one before at the nodes within 1 hop of
``t``, and so on: a propagation with ``d`` hops before it (``d = 0`` for the
first layer) is read at the nodes within

.. math::

    h_d = L - 1 - d

hops of a target. Its messages into nodes further away change nothing that
the targets' outputs read, and get no relevance. On a cut of a graph with 10
edges per node and 3 layers, that is about 10,000 of the first layer's
11,000 messages, and nearly all of the later layers'.

:class:`Trimming` drops them: a propagate pre-hook (PyG's public hook) on
every message-passing layer keeps the edges whose reading end
(``edge_index[1]`` under ``flow="source_to_target"``) is within ``h_d``
hops, with the per-edge arguments of ``message`` (``edge_weight``,
``edge_attr``, attention coefficients) cut alike. Everything a layer
computes before it propagates (normalisations over degrees, the attention
softmax of ``edge_update``) still sees every edge, and every kept node keeps
all of its incoming messages, so its aggregation is exact.

``d`` counts, in the order the layers start propagating in the forward, the
hops of the layers started before (as
:func:`~torch_geometric_lrp.explainers.subgraph.count_hops` counts them),
plus the layer's own propagations so far up to its hops (``APPNP``'s ``K``
steps; a layer that propagates once per relation has them at one depth).
Every chain of layers that feeds a target starts its layers in order, so
``d`` is never more than a layer's true depth, and layers side by side only
add slack. A layer applied more often than counted can break this: the
targets' outputs then differ from the full graph's, the cut's check sees it
and the cut runs again untrimmed
(:func:`~torch_geometric_lrp.explainers.core.on_cut`). A propagation whose
inputs cannot be cut safely (a sparse adjacency, an argument of unknown
shape, node ids past the cut) is left whole.
"""
from __future__ import annotations

import threading
from typing import Optional

import torch
from torch import Tensor
from torch_geometric.nn.conv import FiLMConv, MessagePassing, RGCNConv, SignedConv

from ..mode import current_mode
from .subgraph import layer_hops

__all__ = ["hop_distance", "Trimming", "Propagations"]


def hop_distance(edge_index: Tensor, index: Tensor, num_nodes: int, num_hops: int,
                 flow: str = "source_to_target") -> Tensor:
    """Per node, the hops from the nearest of ``index`` against the message
    flow (a node ``j`` is 1 hop from ``i`` when ``i`` reads ``j``), up to
    ``num_hops``; ``num_hops + 1`` beyond."""
    reader = 1 if flow == "source_to_target" else 0
    hop = torch.full((num_nodes,), num_hops + 1, dtype=torch.long, device=edge_index.device)
    hop[index] = 0
    src, dst = edge_index[1 - reader], edge_index[reader]
    for h in range(1, num_hops + 1):
        reached = src[hop[dst] == h - 1]
        hop[reached[hop[reached] > h]] = h
    return hop


class Trimming:
    """Within the context, every message-passing layer of ``model``
    propagates only the messages its targets read (see the module
    docstring); ``hop`` is :func:`hop_distance` on the graph the model runs
    on, for ``num_hops``. :meth:`reset` before each forward; :attr:`dropped`
    says whether any message was left out."""

    def __init__(self, model: torch.nn.Module, hop: Tensor, num_hops: int):
        self.model = model
        self.hop = hop
        self.num_hops = num_hops
        self.dropped = False
        self._started: dict[int, list[int]] = {}  # id(layer) -> [hops before it, its propagations so far]
        self._used = 0
        self._hooks: list = []
        self._thread = threading.get_ident()
        self._hops = layer_hops(model)

    def __enter__(self) -> "Trimming":
        try:  # (undone here if it raises: an exit stack registers __exit__ only once this returns)
            for module in self.model.modules():
                if isinstance(module, MessagePassing):
                    self._hooks.append(module.register_propagate_forward_pre_hook(self._trim))
        except BaseException:
            _remove(self._hooks)
            raise
        return self

    def __exit__(self, *exc) -> None:
        _remove(self._hooks)

    def reset(self) -> None:
        self._started.clear()
        self._used = 0

    def _depth(self, layer: MessagePassing) -> int:
        """How many hops lie before this propagation of ``layer``: the hops
        of the layers that started propagating before it (in this forward),
        plus its own propagations so far, up to its own hops less one (a
        layer that propagates once per relation, as ``RGCNConv`` does, has
        them all at one depth)."""
        own = max(self._hops.get(id(layer), 1), 1)
        if id(layer) not in self._started:
            self._started[id(layer)] = [self._used, 0]
            self._used += own
        start = self._started[id(layer)]
        start[1] += 1
        return start[0] + min(start[1] - 1, own - 1)

    def _trim(self, layer: MessagePassing, inputs):
        if threading.get_ident() != self._thread:  # another thread runs the same layer
            return None
        left = self.num_hops - 1 - self._depth(layer)
        edge_index, size, kwargs = inputs
        # left < 0: more propagations than counted (the cut's check decides)
        if left < 0 or not _plain_edges(edge_index):
            return None
        reader = edge_index[1 if layer.flow == "source_to_target" else 0]
        if not reader.numel() or int(reader.max()) >= self.hop.numel():
            return None
        per_edge = _per_edge_args(layer, kwargs, edge_index.shape[1])
        if per_edge is None:
            return None
        keep = self.hop[reader] <= left
        if bool(keep.all()):
            return None
        self.dropped = True
        kept = keep.nonzero().view(-1)
        kwargs = {name: value.index_select(0, kept) if name in per_edge else value for name, value in kwargs.items()}
        return edge_index.index_select(1, kept), size, kwargs


def _plain_edges(edge_index) -> bool:
    """A ``[2, E]`` integer tensor (not a sparse adjacency, not PyG's
    ``EdgeIndex`` with its cached orders)."""
    return type(edge_index) is Tensor and edge_index.layout == torch.strided and edge_index.dim() == 2 \
        and edge_index.shape[0] == 2 and not edge_index.is_floating_point()


def _per_edge_args(layer: MessagePassing, kwargs: dict, num_edges: int) -> Optional[set]:
    """The names of ``kwargs`` that hold one row per edge: the tensors that
    ``message`` takes by their own name (not as ``x_i`` / ``x_j``), each
    with ``num_edges`` rows. ``None`` where a tensor argument of another
    shape, or one that ``aggregate`` or ``update`` takes by name, leaves
    its role open."""
    node_level = {a[:-2] for a in layer._user_args if a.endswith(("_i", "_j"))}
    message = set(layer.inspector.get_param_names("message", exclude=layer.special_args))
    per_edge = set()
    for name in layer._user_args:
        value = kwargs.get(name)
        if name in node_level or not isinstance(value, Tensor):
            continue
        if name not in message or value.dim() == 0 or value.shape[0] != num_edges:
            return None
        per_edge.add(name)
    return per_edge


#: Layers that propagate more than once per call side by side, each over
#: some of the edges, at one depth: once per relation (``RGCNConv``,
#: ``FiLMConv``), over positive and negative edges (``SignedConv``).
PARALLEL_PROPAGATIONS: tuple = (RGCNConv, FiLMConv, SignedConv)


class Propagations:
    """Counts each message-passing layer's propagations in a forward (a
    context manager over ``model``): :meth:`beyond` names the layers that
    propagated more often than their hops
    (:func:`~torch_geometric_lrp.explainers.subgraph.layer_hops`) allow, so
    that a cut for that many hops may be too small (a layer applied more
    often than it appears, a layer of the user's that propagates ``K``
    times). Every propagation counts, those side by side too (two statistics
    of the same neighbours): whether one reads another's output cannot be
    told in general (the pass holds gates constant, a forward may detach or
    run under ``no_grad``), and one hop too many only costs a fallback. The
    known exceptions are ``PARALLEL_PROPAGATIONS``."""

    def __init__(self, model: torch.nn.Module):
        self.model = model
        self.counts: dict[int, int] = {}
        self._hops = layer_hops(model)
        self._layers = {id(m): m for m in model.modules() if isinstance(m, MessagePassing)}
        self._hooks: list = []
        self._thread = threading.get_ident()
        self._mode = current_mode()

    def __enter__(self) -> "Propagations":
        try:  # (undone here if it raises, as Trimming's)
            for layer in self._layers.values():
                self._hooks.append(layer.register_propagate_forward_pre_hook(self._count))
        except BaseException:
            _remove(self._hooks)
            raise
        return self

    def __exit__(self, *exc) -> None:
        _remove(self._hooks)

    def _count(self, layer, inputs):
        # the model's forward only, not a plain forward the pass runs beside it (its mode paused)
        if threading.get_ident() == self._thread and (
                self._mode is None or self._mode in torch.overrides._get_current_function_mode_stack()):
            self.counts[id(layer)] = self.counts.get(id(layer), 0) + 1
        return None

    def beyond(self) -> list[str]:
        """``"Name (n propagations, counted as k hops)"`` for each layer beyond its hops."""
        return [f"{type(self._layers[i]).__name__} ({n} propagations, counted as {max(self._hops[i], 1)} hops)"
                for i, n in self.counts.items()
                if n > max(self._hops[i], 1) and not isinstance(self._layers[i], PARALLEL_PROPAGATIONS)]


def _remove(hooks: list) -> None:
    """Remove every hook of ``hooks`` and empty it."""
    for hook in hooks:
        hook.remove()
    hooks.clear()
