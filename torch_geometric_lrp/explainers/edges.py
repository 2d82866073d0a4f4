"""Edge relevance: the relevance that flowed through each input edge's messages.

During a relevance pass, every message-passing layer's message tensor is
watched: its gradient *is* the relevance of each message. A layer may
propagate over more edges than the input has (self-loops it adds) or in
another order, so messages are matched back to input edges by their
``(source, target)`` pair (duplicates in order). Messages of self-loops that
the layer added itself are not input edges: their relevance is kept per node
in ``self_loops``.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Optional, Union

import torch
from torch import Tensor
from torch_geometric.nn.conv import MessagePassing

from ..mode import current_mode

__all__ = ["EdgeRelevance", "match_edges", "Routing", "route"]


def match_edges(edges: Tensor, messages: Tensor) -> Tensor:
    """For each column of ``messages`` ``[2, M]``, the column of ``edges``
    ``[2, E]`` with the same pair, or ``-1``. A pair that appears k times in
    both is matched in order."""
    if messages.numel() == 0 or edges.numel() == 0:
        return torch.full((messages.shape[1],), -1, dtype=torch.long, device=messages.device)
    n = int(max(int(edges.max()), int(messages.max()))) + 1
    a = edges[0] * n + edges[1]
    b = messages[0] * n + messages[1]
    a_sorted, a_order = torch.sort(a, stable=True)
    b_sorted, b_order = torch.sort(b, stable=True)
    rank = torch.arange(b.numel(), device=b.device) - torch.searchsorted(b_sorted, b_sorted)
    candidate = torch.searchsorted(a_sorted, b_sorted) + rank
    found = candidate < a.numel()
    found[found.clone()] = a_sorted[candidate[found]] == b_sorted[found]
    match = torch.full_like(b, -1)
    match[b_order[found]] = a_order[candidate[found]]
    return match


@dataclass
class Routing:
    """Where each message of a layer sends its relevance: input edge
    ``edge[k]`` gets message ``message[k]`` (``message`` is a slice when the
    layer's first messages are the input edges, in order), node
    ``loop_node[k]`` gets the self-loop message ``loop[k]``, and messages in
    ``other`` match neither."""

    message: Union[slice, Tensor]
    edge: Union[slice, Tensor]
    loop: Tensor
    loop_node: Tensor
    other: Tensor


def route(edges: Tensor, messages: Tensor) -> Routing:
    """The :class:`Routing` of messages over ``messages`` ``[2, M]`` onto the
    input ``edges`` ``[2, E]``."""
    num = edges.shape[1]
    if messages.shape[1] >= num and torch.equal(messages[:, :num], edges):
        # The common case (the input's edges, then self-loops a layer added,
        # as add_remaining_self_loops does): no sort needed, and the input's
        # pairs are all used up by the prefix.
        head = slice(0, num)
        rest = torch.arange(num, messages.shape[1], device=messages.device)
        match_rest = torch.full_like(rest, -1)
        message, edge = head, head
    else:
        rest = torch.arange(messages.shape[1], device=messages.device)
        match_rest = match_edges(edges, messages)
        found = match_rest >= 0
        message, edge = rest[found], match_rest[found]
    unmatched = rest[match_rest < 0]
    is_loop = messages[0, unmatched] == messages[1, unmatched]
    loop = unmatched[is_loop]
    return Routing(message, edge, loop, messages[0, loop], unmatched[~is_loop])


class EdgeRelevance:
    """Collects per-edge relevance of every message-passing layer of ``model``
    during one pass (a context manager; hooks are removed on exit)."""

    def __init__(self, model: torch.nn.Module, edge_index: Tensor, num_nodes: int):
        self.edge_index = edge_index
        self.edge = torch.zeros(edge_index.shape[1], dtype=torch.float64, device=edge_index.device)
        self.self_loops = torch.zeros(num_nodes, dtype=torch.float64, device=edge_index.device)
        # relevance of messages over edges neither in the input nor self-loops
        self._unmatched = torch.zeros((), dtype=torch.float64, device=edge_index.device)
        self._layers = [m for m in model.modules() if isinstance(m, MessagePassing)]
        self._hooks: list = []
        self._current: dict[int, Optional[Tensor]] = {}
        self._last: Optional[tuple[Tensor, Routing]] = None

    @property
    def unmatched(self) -> float:
        return self._unmatched.item()

    def __enter__(self) -> "EdgeRelevance":
        self._thread = threading.get_ident()
        self._hooked: set[int] = set()
        for layer in self._layers:
            self._hook(layer)
        # layers the forward reaches outside the model (a module called from
        # a global function): hooked when they first run
        self._hooks.append(torch.nn.modules.module.register_module_forward_pre_hook(self._discover))
        return self

    def __exit__(self, *exc) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks.clear()

    def _hook(self, layer: MessagePassing) -> None:
        if id(layer) not in self._hooked:
            self._hooked.add(id(layer))
            self._hooks.append(layer.register_propagate_forward_pre_hook(self._remember_edges))
            self._hooks.append(layer.register_message_forward_hook(self._watch_messages))

    def _discover(self, module, inputs):
        if isinstance(module, MessagePassing) and threading.get_ident() == self._thread:
            self._hook(module)

    def _remember_edges(self, layer, inputs):
        if threading.get_ident() != self._thread:  # another thread runs the same layer
            return None
        edge_index = inputs[0]
        self._current[id(layer)] = edge_index if isinstance(edge_index, Tensor) and not edge_index.is_sparse \
            and edge_index.layout == torch.strided else None

    def _route(self, edges: Tensor) -> Routing:
        """``route`` against the input, reusing the last routing when a layer
        propagates over the same edges as the previous one."""
        if self._last is not None and (self._last[0] is edges or (
                self._last[0].shape == edges.shape and torch.equal(self._last[0], edges))):
            return self._last[1]
        routing = route(self.edge_index, edges)
        self._last = (edges, routing)
        return routing

    def _watch_messages(self, layer, inputs, messages):
        if threading.get_ident() != self._thread:
            return None
        edges = self._current.get(id(layer))
        if edges is None or not (isinstance(messages, Tensor) and messages.requires_grad):
            return None
        with torch._C.DisableTorchFunction():  # bookkeeping: no relevance rules needed
            routing = self._route(edges)
        node_dim = layer.node_dim % messages.dim()

        def collect(relevance: Tensor) -> None:
            dims = [d for d in range(relevance.dim()) if d != node_dim]
            per_message = (relevance.sum(dim=dims) if dims else relevance).double()
            if isinstance(routing.edge, slice):
                self.edge[routing.edge] += per_message[routing.message]
            else:
                self.edge.index_add_(0, routing.edge, per_message[routing.message])
            self.self_loops.index_add_(0, routing.loop_node, per_message[routing.loop])
            self._unmatched += per_message[routing.other].sum()

        mode = current_mode()
        if mode is not None:
            mode.relevance_hook(messages, collect)  # inside a linear map: stream value x stream gradient
        else:
            messages.register_hook(collect)
        return None
