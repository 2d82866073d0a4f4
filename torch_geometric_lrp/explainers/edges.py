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
from torch_geometric.nn.conv import DirGNNConv, HypergraphConv, MessagePassing
from torch_geometric.nn.pool import ASAPooling, ClusterPooling, EdgePooling, PANPooling, SAGPooling, TopKPooling
from torch_geometric.nn.pool.connect import Connect
from torch_geometric.nn.pool.select import Select
from torch_geometric.nn.module_dict import ModuleDict as PyGModuleDict

from ..mode import current_mode

__all__ = ["EdgeRelevance", "match_edges", "Routing", "route", "SortedEdges"]

# Pooling layers that return a graph of their own, its nodes numbered anew (kept or merged nodes in
# another order): from then on, a pair (i, j) of an edge list the pass did not follow from the input's
# is no input edge (i, j), even where the pooled graph has as many nodes (TopKPooling(ratio=k) on
# graphs of fewer than k nodes keeps them all, sorted by score).
RENUMBERING_POOLS = (ASAPooling, ClusterPooling, EdgePooling, PANPooling, SAGPooling, TopKPooling, Select, Connect)


@dataclass
class SortedEdges:
    """Edges ``[2, E]`` as keys ``source * base + target`` sorted (stably),
    with their columns: sorted once, matched against many message lists."""

    base: int
    keys: Tensor
    order: Tensor

    @classmethod
    def of(cls, edges: Tensor, base: Optional[int] = None) -> "SortedEdges":
        base = int(edges.max()) + 1 if base is None else base
        keys, order = torch.sort(edges[0] * base + edges[1], stable=True)
        return cls(base, keys, order)


def match_edges(edges: Tensor, messages: Tensor, sorted_edges: Optional[SortedEdges] = None) -> Tensor:
    """For each column of ``messages`` ``[2, M]``, the column of ``edges``
    ``[2, E]`` with the same pair, or ``-1``. A pair that appears k times in
    both is matched in order. ``sorted_edges``: ``edges`` sorted already
    (:class:`SortedEdges`), used where the messages' node ids fit its base."""
    if messages.numel() == 0 or edges.numel() == 0:
        return torch.full((messages.shape[1],), -1, dtype=torch.long, device=messages.device)
    top = int(messages.max())
    if sorted_edges is None or top >= sorted_edges.base:
        sorted_edges = SortedEdges.of(edges, max(int(edges.max()), top) + 1)
    n, a_sorted, a_order = sorted_edges.base, sorted_edges.keys, sorted_edges.order
    b = messages[0] * n + messages[1]
    b_sorted, b_order = torch.sort(b, stable=True)
    rank = torch.arange(b.numel(), device=b.device) - torch.searchsorted(b_sorted, b_sorted)
    candidate = torch.searchsorted(a_sorted, b_sorted) + rank
    found = candidate < a_sorted.numel()
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


def route(edges: Tensor, messages: Tensor, sorted_edges: Optional[SortedEdges] = None,
          reversed_edges: bool = False) -> Routing:
    """The :class:`Routing` of messages over ``messages`` ``[2, M]`` onto the
    input ``edges`` ``[2, E]`` (``sorted_edges``: see :func:`match_edges`);
    ``reversed_edges``: the layer propagates over the input's edges reversed
    (``DirGNNConv``'s ``conv_out``, ``HypergraphConv``'s way back)."""
    num = edges.shape[1]
    head_of = messages[:, :num] if messages.shape[1] >= num else None
    if head_of is not None and (torch.equal(head_of, edges) or (
            reversed_edges and num and torch.equal(head_of, edges.flip(0)))):
        # The common case (the input's edges, then self-loops a layer added,
        # as add_remaining_self_loops does): no sort needed, and the input's
        # pairs are all used up by the prefix. The same holds for the layer
        # that propagates over the reversed edges: message k belongs to input
        # edge k, whatever pairs exist both ways. (Only for it: edges that a
        # model sorts, which can equal the reversed input of an undirected
        # graph listed by target, go by their pairs.)
        head = slice(0, num)
        rest = torch.arange(num, messages.shape[1], device=messages.device)
        match_rest = torch.full_like(rest, -1)
        message, edge = head, head
    else:
        rest = torch.arange(messages.shape[1], device=messages.device)
        match_rest = match_edges(edges, messages, sorted_edges)
        found = match_rest >= 0
        message, edge = rest[found], match_rest[found]
    unmatched = rest[match_rest < 0]
    is_loop = messages[0, unmatched] == messages[1, unmatched]
    loop = unmatched[is_loop]
    return Routing(message, edge, loop, messages[0, loop], unmatched[~is_loop])


class EdgeRelevance:
    """Collects per-edge relevance of every message-passing layer of ``model``
    during one pass (a context manager; hooks are removed on exit).

    ``edge_index`` is the input's ``[2, E]`` edges, or for a heterogeneous
    graph a ``{edge_type: [2, E_t]}`` dict (with ``num_nodes`` a
    ``{node_type: N_t}`` dict); :attr:`edge` and :attr:`self_loops` are then
    dicts too. A layer's messages are booked on the edge type whose edges it
    propagates over: the type its module is registered under in a
    ``ModuleDict`` (``to_hetero``, ``HeteroConv``), else the one type whose
    input edge tensor its forward got (or propagates over), else the one type
    whose edges its messages start with; for a layer that propagates over
    several types at once with per-type node offsets (``HGTConv``), each
    type's block of the concatenation, in the order of the edge-type dict
    its forward got. Messages that none of these place (two types sharing
    one tensor, for a layer not registered under either) are counted in
    :attr:`unrouted`, and the pass warns."""

    def __init__(self, model: torch.nn.Module, edge_index: Union[Tensor, dict], num_nodes: Union[int, dict]):
        self.hetero = isinstance(edge_index, dict)
        self._inputs = dict(edge_index) if self.hetero else {None: edge_index}
        device = next(iter(self._inputs.values())).device if self._inputs else None
        self._edge = {key: torch.zeros(e.shape[1], dtype=torch.float64, device=e.device)
                      for key, e in self._inputs.items()}
        counts = num_nodes if self.hetero else {None: num_nodes}
        self._loops = {key: torch.zeros(n, dtype=torch.float64, device=device) for key, n in counts.items()}
        # relevance of messages over edges neither in the input nor self-loops,
        # and the sum of its magnitudes (a sum of both signs can cancel)
        self._unmatched = torch.zeros((), dtype=torch.float64, device=device)
        self._unmatched_abs = torch.zeros((), dtype=torch.float64, device=device)
        self.unmatched_layers: list[str] = []
        # relevance of messages that no input edge type could be told for (heterogeneous graphs)
        self._unrouted = torch.zeros((), dtype=torch.float64, device=device)
        self.unrouted_layers: list[str] = []
        self._given: dict[int, Optional[tuple]] = {}  # id(layer) -> the edge types its forward got
        self._forward_edges: dict[int, list] = {}  # id(layer) -> the [2, E] tensors its forward got
        self._layers = [m for m in model.modules() if isinstance(m, MessagePassing)]
        self._pools = [m for m in model.modules() if isinstance(m, RENUMBERING_POOLS)]
        self._pooled = False  # a pooling layer of RENUMBERING_POOLS has returned in this forward
        self._before_pooling: list = []  # edge tensors layers got before it: the graph's numbering
        self.sparse_layers: list[str] = []  # layers that propagated over a sparse adjacency of their own
        self._edge_type_of = _registered_edge_types(model, self._inputs) if self.hetero else {}
        self._hooks: list = []
        self._current: dict[int, Optional[Tensor]] = {}
        self._into: dict[int, dict] = {}
        # layers that propagate over the input's edges reversed, message k for input edge k:
        # DirGNNConv's conv_out, HypergraphConv (nodes -> hyperedges, then back over the incidence
        # flipped). A special case, as such a tensor equals the input flipped, which pairs alone
        # would not tell from a model that sorts an undirected graph's edges.
        self._reversed = {id(m.conv_out) if isinstance(m, DirGNNConv) else id(m) for m in model.modules()
                          if isinstance(m, (DirGNNConv, HypergraphConv))}
        self._bipartite: dict[int, bool] = {}
        self._num_nodes = None if self.hetero else num_nodes
        self._last: Optional[tuple[Tensor, list]] = None
        self._sorted: Optional[SortedEdges] = None

    def reset(self) -> None:
        """Start from zero for another backward over the same forward (new
        tensors: what :attr:`edge` and :attr:`self_loops` returned before
        keeps its values)."""
        self._edge = {key: torch.zeros_like(v) for key, v in self._edge.items()}
        self._loops = {key: torch.zeros_like(v) for key, v in self._loops.items()}
        self._unmatched = torch.zeros_like(self._unmatched)
        self._unmatched_abs = torch.zeros_like(self._unmatched_abs)
        self.unmatched_layers = []
        self._unrouted = torch.zeros_like(self._unrouted)

    @property
    def edge(self) -> Union[Tensor, dict]:
        return self._edge if self.hetero else self._edge[None]

    @property
    def self_loops(self) -> Union[Tensor, dict]:
        return self._loops if self.hetero else self._loops[None]

    @property
    def unmatched(self) -> float:
        """Relevance of messages over edges that are neither input edges nor
        self-loops (edges the model built itself: ``to_undirected``, a k-NN
        graph): missing from :attr:`edge` and :attr:`self_loops`."""
        return self._unmatched.item()

    @property
    def unmatched_magnitude(self) -> float:
        """The sum of :attr:`unmatched`'s magnitudes, message by message."""
        return self._unmatched_abs.item()

    @property
    def unrouted(self) -> float:
        """Relevance of messages that no input edge type could be told for
        (heterogeneous graphs): missing from :attr:`edge`."""
        return self._unrouted.item()

    def __enter__(self) -> "EdgeRelevance":
        self._thread = threading.get_ident()
        self._hooked: set[int] = set()
        try:  # (an exit stack registers __exit__ only once this returns: undone here if it raises)
            for layer in self._layers:
                self._hook(layer)
            for pool in self._pools:
                self._hooks.append(pool.register_forward_hook(self._after_pooling))
            # layers the forward reaches outside the model (a module called from
            # a global function): hooked when they first run
            self._hooks.append(torch.nn.modules.module.register_module_forward_pre_hook(self._discover))
            mode = current_mode()
            if mode is not None:  # which input edges (of which type) a layer's selection of columns holds
                mode.track_columns(self._inputs)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks.clear()
        mode = current_mode()
        if mode is not None:
            mode.track_columns(None)

    def _hook(self, layer: MessagePassing) -> None:
        if id(layer) not in self._hooked:
            self._hooked.add(id(layer))
            # the edges its forward gets: which input edge types (heterogeneous), or whether they are the
            # input's (before the layer adds self-loops to them)
            self._hooks.append(layer.register_forward_pre_hook(self._remember_inputs, with_kwargs=True))
            self._hooks.append(layer.register_propagate_forward_pre_hook(self._remember_edges))
            self._hooks.append(layer.register_message_forward_hook(self._watch_messages))
            if not self.hetero:
                self._hooks.append(layer.register_aggregate_forward_pre_hook(self._check_destinations))

    def _after_pooling(self, module, inputs, output):
        if threading.get_ident() == self._thread:
            self._pooled = True

    def _discover(self, module, inputs):
        if isinstance(module, MessagePassing) and threading.get_ident() == self._thread:
            self._hook(module)

    def _remember_inputs(self, layer, args, kwargs):
        """The input edge types a layer's forward gets: ``("tensor", keys)``
        for an input edge tensor (the keys of every type that holds that very
        tensor), ``("dict", keys)`` for a ``{edge_type: edges}`` dict of the
        input's edge tensors, in its order (``HGTConv``)."""
        if threading.get_ident() != self._thread:
            return None
        if not self.hetero:
            edges = [v for v in (*args, *kwargs.values()) if isinstance(v, Tensor) and v.dim() == 2
                     and v.shape[0] == 2 and not v.is_floating_point()]
            self._forward_edges[id(layer)] = edges
            if self._pools and not self._pooled:  # only a model with a pooling layer needs them
                self._before_pooling.extend(edges)
            return None
        given = None
        for value in (*args, *kwargs.values()):
            if isinstance(value, dict) and value and all(k in self._inputs for k in value):
                if all(v is self._inputs[k] or (isinstance(v, Tensor) and v.shape == self._inputs[k].shape
                                                 and torch.equal(v, self._inputs[k])) for k, v in value.items()):
                    given = ("dict", tuple(value))
                break
            if isinstance(value, Tensor):
                keys = tuple(k for k, e in self._inputs.items() if e is value)
                if keys:
                    given = ("tensor", keys)
                    break
        self._given[id(layer)] = given
        return None

    def _remember_edges(self, layer, inputs):
        if threading.get_ident() != self._thread:  # another thread runs the same layer
            return None
        edge_index = inputs[0]
        if not self.hetero:  # from one node set into another (a tuple of two sizes), see _check_destinations
            size, kwargs = (inputs[1], inputs[2]) if len(inputs) > 2 else (None, {})
            sizes = [tuple(_rows(v[k], layer.node_dim) for k in (0, 1))
                     for v in (kwargs or {}).values() if isinstance(v, (tuple, list)) and len(v) == 2]
            if isinstance(size, (tuple, list)) and len(size) == 2:
                sizes.append(tuple(size))
            self._bipartite[id(layer)] = any(a is not None and b is not None and a != b for a, b in sizes)
        self._current[id(layer)] = edge_index if isinstance(edge_index, Tensor) and not edge_index.is_sparse \
            and edge_index.layout == torch.strided else None
        if self._current[id(layer)] is None and not self.hetero and self._inputs[None].numel():
            # a sparse adjacency the layer built from the input's edges (PANConv's path matrix): its messages
            # are aggregated fused, unseen, so edge_mask misses them; the pass says so
            self.sparse_layers.append(type(layer).__name__)

    def _locate(self, layer, edges: Tensor) -> list:
        """``[(key, Routing)]``: where the messages over ``edges`` go, per
        input edge type (``key`` is ``None`` for a homogeneous graph),
        reusing the last answer when a layer propagates over the same edges
        as the previous one."""
        # what decides the routing besides the edges (heterogeneous graphs: the
        # layer's registered type and the edge types its forward got)
        context = (self._edge_type_of.get(id(layer)), self._given.get(id(layer))) if self.hetero else None
        mode = current_mode()
        selected = mode.columns_of(edges) if mode is not None and \
            not any(edges is e for e in self._inputs.values()) else None
        if selected is not None:
            # a selection of an input's columns (one relation's edges, a threshold on edge weights):
            # message k is input edge columns[k] of that edge type, even where another list holds the
            # same pairs (before the last answer, which an equal list of other columns would reuse)
            key, columns = selected
            empty = edges.new_empty(0)
            return [(key, Routing(slice(0, edges.shape[1]), columns, empty, empty, empty))]
        if self._last is not None and self._last[2] == context and (self._last[0] is edges or (
                not self.hetero and self._last[0].shape == edges.shape and torch.equal(self._last[0], edges))):
            return self._last[1]
        if not self.hetero:
            if self._sorted is None and edges.shape[1] != self._inputs[None].shape[1]:
                # messages over another edge list than the input (a trimmed
                # layer, trim.py): the input's pairs sorted once for all layers
                self._sorted = SortedEdges.of(self._inputs[None]) if self._inputs[None].numel() else None
            located = [(None, route(self._inputs[None], edges, self._sorted, id(layer) in self._reversed))]
        else:
            located = self._locate_hetero(layer, edges)
        self._last = (edges, located, context)
        return located

    def _locate_hetero(self, layer, edges: Tensor) -> list:
        inputs = self._inputs
        given = self._given.get(id(layer))
        registered = self._edge_type_of.get(id(layer), ())
        key = registered[0] if len(registered) == 1 else None
        if key is None and given is not None and given[0] == "tensor":
            # a layer registered under several types (one conv shared by two relations of a
            # HeteroConv) propagates over the one whose input tensor this call got
            keys = [k for k in given[1] if not registered or k in registered]
            key = keys[0] if len(keys) == 1 else None
        if key is None:
            same = [k for k, e in inputs.items() if e is edges]
            key = same[0] if len(same) == 1 else None
        reversed_edges = id(layer) in self._reversed
        if key is not None:
            return [(key, route(inputs[key], edges, reversed_edges=reversed_edges))]
        if given is not None and given[0] == "dict":
            # the layer got the edge dict and joined its types' edges in its order (HGTConv)
            located = _concatenation({k: inputs[k] for k in given[1]}, edges)
            if located:
                return located
        # a layer given no dict, over edges the model joined itself: booked where the edges tell the
        # one order they were joined in (a shift per block in the input's order alone also takes
        # blocks joined in another order whose edges are shifted copies of each other's, one edge per
        # type or a relation and its reverse one-to-one, and books them on the wrong type)
        located = _joined(inputs, edges)
        if located:
            return located
        starts = [k for k, e in inputs.items() if e.shape[1] and e.shape[1] <= edges.shape[1]
                  and torch.equal(edges[:, :e.shape[1]], e)]
        if len(starts) == 1:  # one type's edges, then more (self-loops the layer added)
            return [(starts[0], route(inputs[starts[0]], edges, reversed_edges=reversed_edges))]
        self.unrouted_layers.append(type(layer).__name__)
        everything = torch.arange(edges.shape[1], device=edges.device)
        empty = edges.new_empty(0)
        return [(None, Routing(empty, empty, empty, empty, everything))]

    def _check_destinations(self, layer, inputs):
        """Notes where a layer aggregates its messages into other nodes than
        the graph's: more nodes than it has, or, from one node set, into
        another of another size (``AttentiveFP``'s molecule-level attention
        propagates from the atoms into one node per graph, over pairs
        ``(i, batch[i])``). Those pairs are no edges of the graph, even where
        one equals an input edge or a self-loop."""
        if threading.get_ident() != self._thread:
            return None
        into = self._into.get(id(layer))
        dim_size = inputs[0].get("dim_size") if inputs and isinstance(inputs[0], dict) else None
        if into is not None and isinstance(dim_size, int) and dim_size != self._num_nodes:
            # more nodes, or another set than the sources: not the graph's nodes
            into["other"] = dim_size > self._num_nodes or self._bipartite.get(id(layer), False)
            if not into["other"] and "renumbered" not in into:  # (told already after a pooling layer)
                # Fewer nodes: PyG's trim_to_layer keeps a prefix of the graph's nodes and edges (ids
                # unchanged); pooling (TopKPooling, SAGPooling, EdgePooling) or subgraph(relabel_nodes=True)
                # numbers the nodes anew, where a pair (i, j) is no longer input edge (i, j).
                into["renumbered"] = not self._same_numbering(layer)
        return None

    def _same_numbering(self, layer) -> bool:
        """Whether ``layer``, propagating into fewer nodes than the graph has
        or after a pooling layer, still uses the graph's node ids: the edges
        its forward got (to which it may add self-loops, as ``GCNConv`` and
        ``GATConv`` do) or those it propagates over are the input's, or a
        selection of its columns that the pass followed (PyG's
        ``trim_to_layer`` narrows them; ``subgraph`` without relabelling
        masks them). Other pairs may be numbered anew, even where they equal
        input pairs, so they are not matched."""
        propagated = self._current.get(id(layer))
        if propagated is None:
            return True  # a sparse adjacency: its messages are not matched by pairs
        mode = current_mode()

        def graphs(edges: Tensor) -> bool:
            # the input's edges, a followed selection of them, or edges a layer got before any pooling ran
            # (a U-Net's own prepared edge list, used again after unpooling)
            return edges is self._inputs[None] or (mode is not None and mode.columns_of(edges) is not None) or \
                (self._pooled and any(edges is seen for seen in self._before_pooling))

        if graphs(propagated):
            return True
        with torch._C.DisableTorchFunction():  # bookkeeping
            own = propagated[:, propagated[0] != propagated[1]]
            # the graph's edges its forward got, with self-loops dropped or added only (the same pairs
            # otherwise, in order); a layer that renumbers them itself propagates over other pairs
            return any(graphs(edges) and torch.equal(edges[:, edges[0] != edges[1]], own)
                       for edges in self._forward_edges.get(id(layer), []))

    def _book_unmatched(self, layer, relevance: Tensor) -> None:
        if relevance.numel():
            self._unmatched += relevance.sum()
            self._unmatched_abs += relevance.abs().sum()
            self.unmatched_layers.append(type(layer).__name__)

    def _watch_messages(self, layer, inputs, messages):
        if threading.get_ident() != self._thread:
            return None
        edges = self._current.get(id(layer))
        if edges is None or not (isinstance(messages, Tensor) and messages.requires_grad):
            return None
        with torch._C.DisableTorchFunction():  # bookkeeping: no relevance rules needed
            located = self._locate(layer, edges)
        node_dim = layer.node_dim % messages.dim()
        into = self._into[id(layer)] = {}  # the aggregation's node count, told by _check_destinations
        if self._pooled and not self.hetero:  # over a pooled graph (also one as large as the input)?
            into["renumbered"] = not self._same_numbering(layer)

        def collect(relevance: Tensor) -> None:
            dims = [d for d in range(relevance.dim()) if d != node_dim]
            per_message = (relevance.sum(dim=dims) if dims else relevance).double()
            if into.get("renumbered"):  # a pooled or relabelled graph: its pairs are no input edges
                self._book_unmatched(layer, per_message)
                return
            if into.get("other") and not all(isinstance(r.message, slice) for _, r in located):
                # into other nodes than the graph's (a readout) over pairs of its own: on no input edge.
                # (Messages that start with the input edges, in order, are those edges: a virtual node's
                # extra edges follow them, and a bipartite layer over a prefix of the nodes propagates
                # over the input edges as they are.)
                self._book_unmatched(layer, per_message)
                return
            for key, routing in located:
                if key is None and self.hetero:  # matched no input edge type
                    self._unrouted += per_message[routing.other].sum()
                    continue
                edge = self._edge[key]
                if isinstance(routing.edge, slice):
                    edge[routing.edge] += per_message[routing.message]
                else:
                    edge.index_add_(0, routing.edge, per_message[routing.message])
                if self.hetero and key[0] != key[2]:  # between two node types, i -> i is no self-loop
                    self._book_unmatched(layer, per_message[routing.loop])
                else:
                    loops = self._loops[key[2] if self.hetero else None]
                    inside = routing.loop_node < loops.shape[0]
                    loop = per_message[routing.loop]
                    loops.index_add_(0, routing.loop_node[inside], loop[inside])
                    # a self-loop of a node the model added (a virtual node): no node of the input
                    self._book_unmatched(layer, loop[~inside])
                self._book_unmatched(layer, per_message[routing.other])

        mode = current_mode()
        if mode is not None:
            mode.relevance_hook(messages, collect)  # inside a linear map: stream value x stream gradient
        else:
            messages.register_hook(collect)
        return None


def _rows(value, node_dim: int) -> Optional[int]:
    """The node count of a propagate argument (its size along ``node_dim``), or
    ``None`` for what has none (not a tensor, or too few dimensions)."""
    if not isinstance(value, Tensor) or not -value.dim() <= node_dim < value.dim():
        return None
    return value.shape[node_dim]


def _joined(inputs: dict, edges: Tensor, limit: int = 10_000) -> list:
    """``[(edge_type, Routing)]`` where ``edges`` is the input types' edges
    joined by the model itself, in the one order the edges tell: blocks
    that each are one type's edges shifted by constant node offsets. The
    offsets number the node types as one graph (one offset per node type,
    as a source and as a destination alike), or, where no order fits that,
    sources and destinations apart (one per source type, one per
    destination type). ``[]`` where no order or several fit (blocks that are
    shifted copies of each other, a relation and its reverse one-to-one:
    the messages could be either type's), or the search takes over
    ``limit`` steps."""
    total = edges.shape[1]
    if total != sum(e.shape[1] for e in inputs.values()):
        return []
    keys = [k for k, e in inputs.items() if e.shape[1]]
    steps = [0]

    def search(start: int, blocks: list, offsets: dict, one: bool, found: list) -> None:
        if len(found) > 1 or steps[0] > limit:
            return
        if start == total:
            found.append(blocks)
            return
        for key in keys:
            e = inputs[key]
            if any(key == k for k, _ in blocks) or start + e.shape[1] > total:
                continue
            steps[0] += 1
            shift = edges[:, start:start + e.shape[1]] - e
            if not bool((shift == shift[:, :1]).all()):
                continue
            ends = ((key[0], shift[0, 0].item()), (key[-1], shift[1, 0].item())) if one else \
                (((key[0], "source"), shift[0, 0].item()), ((key[-1], "destination"), shift[1, 0].item()))
            if any(offsets.get(t, o) != o for t, o in ends) or (one and ends[0][0] == ends[1][0] and
                                                                ends[0][1] != ends[1][1]):
                continue
            search(start + e.shape[1], blocks + [(key, start)], {**offsets, **dict(ends)}, one, found)

    found: list = []
    search(0, [], {}, True, found)
    if not found:
        search(0, [], {}, False, found)
    if len(found) != 1 or steps[0] > limit:
        return []
    empty = edges.new_empty(0)
    return [(key, Routing(slice(start, start + inputs[key].shape[1]), slice(0, inputs[key].shape[1]), empty, empty,
                          empty)) for key, start in found[0]]


def _concatenation(inputs: dict, edges: Tensor) -> list:
    """``[(edge_type, Routing)]`` where ``edges`` is every type's edges in
    order, each block shifted by constant node offsets (one propagate over
    all types, as ``HGTConv`` builds it, its sources numbered per edge type);
    ``[]`` otherwise."""
    if edges.shape[1] != sum(e.shape[1] for e in inputs.values()):
        return []
    located, start = [], 0
    empty = edges.new_empty(0)
    for key, e in inputs.items():
        shift = edges[:, start:start + e.shape[1]] - e
        if e.shape[1] and not bool((shift == shift[:, :1]).all()):
            return []
        located.append((key, Routing(slice(start, start + e.shape[1]), slice(0, e.shape[1]), empty, empty, empty)))
        start += e.shape[1]
    return located


def _registered_edge_types(model: torch.nn.Module, edge_types) -> dict[int, tuple]:
    """``{id(layer): (edge_type, ...)}`` for the message-passing layers that
    a ``ModuleDict`` of ``model`` holds under an edge type's key (its
    ``'__'``-joined name, as ``to_hetero`` registers them, or PyG's
    ``ModuleDict`` key, as ``HeteroConv`` does): every type a layer is held
    under (one conv may serve several relations)."""
    names = {name: t for t in edge_types for name in ("__".join(t), PyGModuleDict.to_internal_key(t), t)}
    found: dict[int, tuple] = {}
    for module in model.modules():
        if isinstance(module, torch.nn.ModuleDict):
            for key, sub in module.items():
                edge_type = names.get(key)
                if edge_type is not None:
                    for layer in sub.modules():
                        if isinstance(layer, MessagePassing) and edge_type not in found.get(id(layer), ()):
                            found[id(layer)] = found.get(id(layer), ()) + (edge_type,)
    return found
