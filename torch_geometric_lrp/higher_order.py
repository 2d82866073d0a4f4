r"""Higher-order relevance: relevant walks and subgraph relevance (GNN-LRP).

Once the forward is done, the relevance pass is a *linear* map of the seed:
every rule hands relevance on in fixed proportions (the denominators and
gates come from the forward). So the relevance that reaches the input can be
split by the nodes it passed on the way.

**Levels.** Let :math:`h^{(1)}, \dots, h^{(L)}` be the outputs of the model's
``L`` message-passing calls, in call order, and :math:`h^{(0)} = x`. The
*state* :math:`u_m` of level ``m`` is what the backward holds there: the
gradients of the streams of :math:`h^{(m)}`'s linear map, one row per node
(:meth:`~torch_geometric_lrp.RelevanceMode.streams_of`). Step ``m`` maps
:math:`u_m` to :math:`u_{m-1}` linearly; its block :math:`B_m[j, i]` carries
row ``i`` of level ``m`` to row ``j`` of level ``m - 1``, and is non-zero only
where layer ``m`` passes a message from ``j`` to ``i`` (an edge, a self-loop
or a root term). At level 0 the state is the relevance of ``x``.

**Walks.** A walk :math:`(j_0, \dots, j_L)` is the relevance that passes row
:math:`j_L` of :math:`h^{(L)}`, ..., row :math:`j_1` of :math:`h^{(1)}` and
lands on node :math:`j_0` of ``x``:

.. math::

    R_{j_0 \dots j_L} = \mathbf 1^\top B_1[j_0, j_1]\, B_2[j_1, j_2] \cdots
    B_L[j_{L-1}, j_L]\; u_L[j_L].

Since the rows of each level partition it, the walks sum to the first-order
relevance of ``x`` (node by node: the walks from :math:`j_0` sum to
:math:`j_0`'s relevance). For LRP-0 on a bias-free GCN this is Schnake et
al.'s walk relevance; with ε and γ it is their GNN-LRP with the rule applied
to whole layers. Node-level targets end their walks at the target; a graph-
level target at every node that feeds the readout.

**Subgraph relevance** (Xiong et al., sGNN-LRP, 2022) of a node set ``S`` is
the relevance of all walks inside ``S``: the same backward with every
level's state masked to the rows of ``S``, ``L`` masked steps, no
enumeration.

Everything comes from the relevance pass itself, by batched backward passes
of one step (``torch.autograd.grad(..., is_grads_batched=True)``), so every
rule and layer of the relevance pass has walks, with no per-layer code. Two
exact ways, the cheaper taken: push every walk suffix's state down a step,
suffixes with disjoint neighbourhoods sharing a seed
(``_enumerate_suffixes``); or build the blocks from unit seeds at the
rows relevance reaches (``_structure``), then enumerate them or search
the top ``k`` with a proven bound (``_search``).
"""
from __future__ import annotations

import heapq
import itertools
import numbers
import threading
import warnings
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Optional, Sequence, Union

import torch
from torch import Tensor
from torch_geometric.explain import Explanation
from torch_geometric.explain.config import ModelConfig, ModelMode, ModelTaskLevel
from torch_geometric.nn import DirGNNConv, MessagePassing

from . import audit, maps
from .explainers.core import Pass, Settings, check_layer_state, fall_back, resolve_task, same_output
from .explainers.subgraph import Cut, count_hops, cut, message_flow, pays_off, slice_inputs
from .explainers.targets import (check_edge_index, check_graph_inputs, check_rules, check_target, check_x,
                                 enum_of, is_sparse, seed_of, whole)
from .mode import unwrap
from .rules import Rule, nonfinite_guard

__all__ = ["Walks", "walks", "subgraph_relevance", "MAX_WALKS"]

#: ``walks(top_k=None)`` refuses to enumerate more walks than this by default.
MAX_WALKS = 1_000_000

# elements of one batched backward's output (the blocks of a chunk of rows)
_BUDGET = 2 ** 24


@dataclass
class Walks:
    """Relevant walks of one explained output.

    Attributes
    ----------
    walks : LongTensor ``[K, L + 1]``
        Node ids in message order: the input node first, the explained node
        (node level) or the readout's node (graph level) last. Equal
        consecutive ids are self steps (a self-loop or a root term).
    relevance : Tensor ``[K]``
        Relevance of each walk, largest ``|relevance|`` first.
    score : float
        The explained score (the seed).
    relevance_total : float
        First-order relevance of ``x``: what all walks sum to.
    num_walks : int
        How many walks carry relevance (``K`` when all were returned; with
        ``top_k`` found by the best-first search, the walks through non-zero
        blocks, a bound of it).
    index, target
        The explained output row and its target.
    """

    walks: Tensor
    relevance: Tensor
    score: float
    relevance_total: float
    num_walks: int
    index: int
    target: Tensor
    num_nodes: int
    edge_index: Tensor
    flow: str = "source_to_target"
    node_relevance: Tensor = field(default=None, repr=False)  # first-order relevance of x, per node
    config: Optional[ModelConfig] = field(default=None, repr=False)  # task level, mode and return type
    batch: Optional[Tensor] = field(default=None, repr=False)  # graph level: the graph of each node

    def __len__(self) -> int:
        return self.walks.shape[0]

    def _values(self, absolute: bool) -> Tensor:
        return self.relevance.abs() if absolute else self.relevance

    def node_mask(self, absolute: bool = False) -> Tensor:
        r"""``[N]``: per node, the relevance of the walks that pass it (each
        walk counted once per node it visits), :math:`\sum_{w \ni v} R_w`.
        ``absolute=True`` sums :math:`|R_w|` instead, the walk mass through
        the node: walks of opposite sign through a node add up instead of
        cancelling."""
        mask = torch.zeros(self.num_nodes, dtype=self.relevance.dtype, device=self.relevance.device)
        if len(self):  # one (walk, node) key per node a walk visits
            walk = torch.arange(len(self), device=self.walks.device)[:, None]
            visits = torch.unique(walk * self.num_nodes + self.walks)
            mask.index_add_(0, visits % self.num_nodes, self._values(absolute)[visits // self.num_nodes])
        return mask

    def edge_mask(self, absolute: bool = False) -> tuple[Tensor, Tensor]:
        r"""``([E], [N])``: per input edge, the relevance of the walk steps
        along it (summed over steps and walks; a step along parallel edges is
        split evenly), and per node the relevance of self steps that no
        self-loop edge carries. ``absolute=True`` sums :math:`|R_w|`.

        A step ``a -> b`` where ``edge_index`` holds only ``b -> a`` (a model
        that makes its edges undirected inside) lands on ``b -> a``, the edge
        :func:`~torch_geometric_lrp.visualize.visualize_walks` draws it along.
        Then both sum to ``L`` times the walks' relevance. Steps along pairs
        that are no edge in either direction have no entry: a warning says
        how much relevance they carry."""
        n, e = self.num_nodes, self.edge_index.shape[1]
        dtype, device = self.relevance.dtype, self.relevance.device
        edge, loops = torch.zeros(e, dtype=dtype, device=device), torch.zeros(n, dtype=dtype, device=device)
        if not len(self) or self.walks.shape[1] < 2:
            return edge, loops
        walk_src, walk_dst = self.walks[:, :-1].reshape(-1).long(), self.walks[:, 1:].reshape(-1).long()
        src, dst = (walk_dst, walk_src) if self.flow == "target_to_source" else (walk_src, walk_dst)
        value = self._values(absolute)[:, None].expand(-1, self.walks.shape[1] - 1).reshape(-1)
        edges = self.edge_index.long()  # keys up to n**2: an int32 edge_index would overflow
        keys, inverse = torch.unique(edges[0] * n + edges[1], return_inverse=True)
        per_key = torch.zeros(keys.numel(), dtype=dtype, device=device)

        def book(step_key: Tensor, among: Tensor) -> Tensor:
            """Adds the steps ``among`` whose key is an edge's; returns which."""
            if not keys.numel():
                return torch.zeros_like(among)
            position = torch.searchsorted(keys, step_key).clamp(max=keys.numel() - 1)
            found = among & (keys[position] == step_key)
            per_key.index_add_(0, position[found], value[found])
            return found

        every = torch.ones_like(src, dtype=torch.bool)
        along = book(src * n + dst, every)
        against = book(dst * n + src, ~along & (src != dst))  # only the reverse edge is given
        multiplicity = torch.bincount(inverse, minlength=keys.numel()).to(dtype)
        edge = (per_key / multiplicity.clamp(min=1))[inverse]
        self_steps = ~along & (src == dst)
        loops.index_add_(0, src[self_steps], value[self_steps])
        missing = ~along & ~against & (src != dst)
        if bool(missing.any()):
            pairs = torch.unique(walk_src[missing] * n + walk_dst[missing])
            first = int(missing.nonzero()[0])
            count = pairs.numel()
            warnings.warn(
                f"edge_mask: walk steps along {count} node pair{'s' if count > 1 else ''} that "
                f"{'are' if count > 1 else 'is'} no edge of edge_index in either direction (first "
                f"{int(walk_src[first])} -> {int(walk_dst[first])}) carry relevance "
                f"{value[missing].sum().item():.6g} of the steps' {value.sum().item():.6g} (L times the walks'); "
                f"edge_mask leaves it out. The model passed messages along edges it made itself, or edge_index "
                f"is not the graph the walks were computed on.", stacklevel=2)
        return edge, loops

    def to_explanation(self, x: Optional[Tensor] = None, absolute: bool = False) -> Explanation:
        r"""The walks as PyG masks, for PyG's metrics and for comparing with
        first-order masks: ``node_mask`` ``[N, 1]`` (:meth:`node_mask`),
        ``edge_mask`` ``[E]`` and ``self_loop_relevance`` ``[N]``
        (:meth:`edge_mask`), summing :math:`|R_w|` where ``absolute``; ``x``
        and ``edge_index`` of the explained graph."""
        edge, loops = self.edge_mask(absolute)
        explanation = Explanation(node_mask=self.node_mask(absolute)[:, None], edge_mask=edge, x=x,
                                  edge_index=self.edge_index)
        explanation.self_loop_relevance = loops
        if self.config is not None:  # as lrp.explain records it: pictures and PyG's tools read the task level
            explanation._model_config = self.config
        if self.batch is not None:
            explanation.batch = self.batch
        if self.flow != "source_to_target":
            explanation.flow = self.flow
        explanation.index = self.index
        explanation.target = self.target
        explanation.score = self.score
        explanation.relevance_total = float(self.relevance.sum())
        return explanation


class _Steps:
    """The levels of one relevance pass and the backward of each step.

    States are ``[B, N, W_m]``: ``B`` seeds side by side, ``W_m`` the widths
    of level ``m``'s streams, concatenated. Level 0 is the explained input:
    ``x``, or for integer ``x`` the outputs of its embedding lookups.
    """

    def __init__(self, inputs: tuple[Tensor, ...], levels: list[tuple[Tensor, ...]], out: Tensor, seed: Tensor):
        self.inputs, self.levels, self.out, self.seed = inputs, levels, out, seed
        self.n = inputs[0].shape[0]

    @property
    def depth(self) -> int:
        return len(self.levels)

    def _tensors(self, m: int) -> tuple[Tensor, ...]:
        return self.inputs if m == 0 else self.levels[m - 1]

    def width(self, m: int) -> int:
        return sum(t[0].numel() if t.dim() else 1 for t in self._tensors(m))

    def _flat(self, grads: Sequence[Optional[Tensor]], m: int, batch: int) -> Tensor:
        parts = [torch.zeros(batch, self.n, t[0].numel(), dtype=t.dtype, device=t.device) if g is None
                 else g.reshape(batch, self.n, -1) for t, g in zip(self._tensors(m), grads)]
        return torch.cat(parts, dim=-1)

    def start(self) -> Tensor:
        """The state of level ``L`` for the seed: ``[1, N, W_L]``."""
        grads = torch.autograd.grad(self.out, self._tensors(self.depth), self.seed, retain_graph=True,
                                    allow_unused=True)
        return self._flat(grads, self.depth, 1)

    def first_order(self) -> Tensor:
        """Relevance of the input for the seed, by the plain backward: ``[N, W_0]``
        (with the anchor of the maps' constants, so that biases report what they absorb)."""
        anchor = maps.anchor(self.out.device)
        grads = torch.autograd.grad(self.out, (*self.inputs, anchor), self.seed, retain_graph=True,
                                    allow_unused=True)[:len(self.inputs)]
        return self._flat(grads, 0, 1)[0]

    def step(self, m: int, states: Tensor) -> Tensor:
        """States of level ``m`` (``[B, N, W_m]``) to level ``m - 1``."""
        outputs = self._tensors(m)
        grads, start = [], 0
        for t in outputs:
            size = t[0].numel()
            grads.append(states[..., start:start + size].reshape(states.shape[0], *t.shape))
            start += size
        inputs = self._tensors(m - 1)
        try:
            found = torch.autograd.grad(outputs, inputs, grads, retain_graph=True, allow_unused=True,
                                        is_grads_batched=True)
        except RuntimeError as error:
            if "vmap" not in str(error) and "Batching rule" not in str(error):
                raise
            # A backward that torch.func.vmap cannot batch (an in-place op on an
            # unbatched tensor, in a user's own autograd Function): seed by seed.
            found = [None if all(g is None for g in column) else
                     torch.stack([torch.zeros_like(t) if g is None else g for g in column])
                     for t, column in zip(inputs, zip(*[
                         torch.autograd.grad(outputs, inputs, [g[b] for g in grads], retain_graph=True,
                                             allow_unused=True) for b in range(states.shape[0])]))]
        return self._flat(found, m - 1, states.shape[0])

    def blocks(self, m: int, rows: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Step ``m``'s non-zero blocks from the ``rows`` of level ``m``:
        ``(j, i, B)`` with ``B[p]`` (``[W_{m-1}, W_m]``) carrying row ``i[p]``
        to row ``j[p]``."""
        w, w_below = self.width(m), self.width(m - 1)
        chunk = max(1, _BUDGET // max(1, w * self.n * w_below))
        js, is_, bs = [], [], []
        dtype, device = self.inputs[0].dtype, self.inputs[0].device
        for start in range(0, rows.numel(), chunk):
            r = rows[start:start + chunk]
            seeds = torch.zeros(r.numel() * w, self.n, w, dtype=dtype, device=device)
            unit = torch.arange(r.numel() * w, device=device)
            seeds[unit, r.repeat_interleave(w), unit % w] = 1
            below = self.step(m, seeds).view(r.numel(), w, self.n, w_below)
            a, j = (below.abs().amax(dim=(1, 3)) > 0).nonzero(as_tuple=True)
            js.append(j)
            is_.append(r[a])
            bs.append(below[a, :, j, :].transpose(1, 2))
        if not js:
            empty = rows.new_zeros(0)
            return empty, empty, torch.zeros(0, w_below, w, dtype=dtype, device=device)
        return torch.cat(js), torch.cat(is_), torch.cat(bs)


def _message_passing_calls(model: torch.nn.Module) -> list[MessagePassing]:
    """The outermost message-passing modules (a layer inside another is part of it)."""
    inner = set()
    for module in model.modules():
        if isinstance(module, MessagePassing):
            inner.update(id(m) for m in module.modules() if m is not module)
    layers = [m for m in model.modules() if isinstance(m, MessagePassing) and id(m) not in inner]
    if any(isinstance(m, DirGNNConv) for m in model.modules()):
        raise ValueError("model: DirGNNConv runs two message-passing layers side by side, over the in-edges "
                         "and over the out-edges reversed, and mixes their outputs: a walk takes one step per "
                         "message-passing call, along one direction. lrp.explain gives its node and edge "
                         "relevance.")
    for layer in layers:
        hops = count_hops(layer)
        if hops != 1:
            raise ValueError(f"model: {type(layer).__name__} passes messages {hops} hops in one call; a walk takes "
                             f"one step per message-passing call, so walks need layers of one hop each "
                             f"(APPNP, SGConv, TAGConv with K > 1, ChebConv with K > 2 and GatedGraphConv with "
                             f"num_layers > 1 are not).")
    return layers


def _check_index(index, name: str = "index") -> int:
    if isinstance(index, Tensor):
        if index.numel() != 1:
            raise ValueError(f"{name}: walks explain one output row; got {index.numel()} rows. Call once per row.")
        index = index.item()
    index = whole(index)
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise ValueError(f"{name}: expected the output row to explain as an int >= 0, got {index!r}.")
    return index


def _run(model: torch.nn.Module, x: Tensor, edge_index: Tensor, index, target, rules, mode, kwargs: dict, body):
    """Check the arguments, run one relevance pass with the levels recorded
    and return ``body(steps, info)``.

    A node-level target is explained on its computation subgraph (the cut of
    :mod:`~torch_geometric_lrp.explainers.subgraph`) where that is at most
    half the graph and proves itself: the target's output equals the full
    graph's, and no relevance reaches the nodes kept for the degrees only.
    Otherwise (and for graph-level targets) on the whole input."""
    check_x(x, categorical=True)
    edge_index = check_edge_index(edge_index, None)
    if is_sparse(edge_index):
        raise ValueError("edge_index: walks follow the messages of each edge; pass the edges as a [2, E] tensor "
                         "(torch_geometric.utils.to_edge_index(adj)), not a sparse adjacency.")
    check_graph_inputs(x, edge_index, kwargs)
    check_rules(rules)
    index = _check_index(index)
    settings = Settings(rules=rules, track_edges=False, strict=True, mode=enum_of(ModelMode, mode, "mode"))
    check_target(target, None)
    check_layer_state(model, lambda: unwrap(model)(x, edge_index, **kwargs))
    layers = _message_passing_calls(unwrap(model))
    if not layers:
        raise ValueError(f"model: {type(model).__name__} has no message-passing layer, so it has no walks.")
    n, e = x.shape[0], edge_index.shape[1]
    if index < n:
        c = cut(torch.tensor([index], device=x.device), count_hops(model), edge_index, n, message_flow(model))
        if pays_off(c, n, e) and not slice_inputs(kwargs, c, n, e)[1]:
            result = _one_pass(model, x, edge_index, kwargs, index, target, settings, layers, body, c)
            if result is not None:
                return result
    return _one_pass(model, x, edge_index, kwargs, index, target, settings, layers, body, None)


def _one_pass(model, x, edge_index, kwargs, index, target, settings, layers, body, c: Optional[Cut]):
    """The pass on the cut ``c`` (``None`` where it does not prove itself)
    or on the whole input."""
    levels: list[tuple[Tensor, ...]] = []
    messages: list[list[Tensor]] = []  # per level: the (source, target) pairs its propagate calls used
    n, e = x.shape[0], edge_index.shape[1]
    thread = threading.get_ident()  # the layers' hooks read this pass's forward, not another thread's
    with Pass(model, settings) as p, ExitStack() as stack:
        def enter(module, args):
            if threading.get_ident() == thread:
                messages.append([])

        def propagate(module, inputs):
            if messages and threading.get_ident() == thread:
                messages[-1].append(_message_pairs(inputs[0], module.flow))

        def record(module, args, output):
            if threading.get_ident() != thread:
                return None
            if not isinstance(output, Tensor):
                raise TypeError(f"model: walks read the output of each message-passing layer; "
                                f"{type(module).__name__} returned a {type(output).__name__}.")
            alias = p.mode.alias(output)  # a handle of its own: every use of the output passes it
            levels.append(p.mode.streams_of(alias))
            return alias

        inputs = kwargs if c is None else slice_inputs(kwargs, c, n, e)[0]
        hooks = []
        try:  # (the hooks inside it, so that an interrupt while they are set leaves none behind)
            for layer in layers:  # (one by one: a list built first would be lost if a registration raised)
                hooks.append(layer.register_forward_pre_hook(enter))
            for m in unwrap(model).modules():
                if isinstance(m, MessagePassing):
                    hooks.append(m.register_propagate_forward_pre_hook(propagate))
            for layer in layers:
                hooks.append(layer.register_forward_hook(record))
            out = p.forward(x if c is None else x[c.nodes], edge_index if c is None else c.edge_index, inputs)
        finally:
            for hook in hooks:
                hook.remove()
        rows_n = n if c is None else c.num_nodes
        full = None if c is None else p.plain(x, edge_index, kwargs)
        if c is not None and (out.shape[0] != c.num_nodes or full.shape[0] != n):
            return None  # not node-level: the whole input
        level, mode, return_type = resolve_task(p, settings, rows_n, edge_index if c is None else c.edge_index,
                                                inputs)
        if level == ModelTaskLevel.edge:
            raise ValueError("task_level: walks explain node- and graph-level outputs; this model is edge-level.")
        if c is not None and level != ModelTaskLevel.node:
            return None
        if index >= (out.shape[0] if c is None else n):
            raise ValueError(f"index: row {index} is out of range for an output of {out.shape[0]} rows.")
        if c is not None and not same_output(out.detach()[c.index], full[index:index + 1]):
            fall_back(model, "the target's output on its computation subgraph differs from the full graph's")
            return None
        checked = check_target(target, mode)
        place = torch.tensor([index], device=out.device) if c is None else c.index
        rows = torch.tensor([index], device=out.device)
        seed, explained = seed_of(p.logits, place, rows, n, checked, mode)
        if not bool(torch.isfinite(seed).all()):
            raise ValueError(f"index: the output explained, row {index}, is not finite "
                             f"({seed.sum().item():.6g}): the model's output there depends on an inf or NaN (an "
                             f"input, an overflow), so its relevance has no walks. lrp.explain shows it with its "
                             f"non-finite relevance.")
        # integer x: relevance starts at its embedding lookups (their outputs are level 0)
        inputs = (p.x,) if p.x.is_floating_point() else tuple(t for name, _, t in p.mode.lookups if name == "x")
        steps = _Steps(inputs, levels, out, seed.view_as(out))
        # inf / NaN in the forward: 0 relevance times them is 0 in every backward here, as in the pass's own
        guard = nonfinite_guard(p.mode.nonfinite_gates or not all(bool(torch.isfinite(t).all())
                                                                  for t in (out.detach(), *inputs)))
        stack.enter_context(guard)
        # The plain backward is the pass's one backward, which an open
        # RelevanceAudit counts; the level-to-level steps run parts of it again.
        first = steps.first_order()
        with audit.suspended():
            start = steps.start()
            reached, states = _check_chain(steps, start, first)
        if c is not None and bool(reached[:, c.ring].any()):
            fall_back(model, "relevance reached nodes beyond the hops its message-passing layers count")
            return None
        info = dict(index=index, target=explained[0], score=seed.sum(dtype=torch.float64).item(),
                    start=start, first=first, nodes=None if c is None else c.nodes, num_nodes=n, reached=reached,
                    states=states,
                    messages=[torch.cat(pairs, dim=1) if pairs else None for pairs in messages],
                    config=ModelConfig(mode=mode, task_level=level, return_type=return_type),
                    batch=kwargs.get("batch") if level == ModelTaskLevel.graph else None)
        with audit.suspended():
            return body(steps, info)


def _chain(steps: _Steps, state: Tensor, masks: Optional[Tensor] = None) -> tuple[Tensor, list[Tensor]]:
    """States pushed down to ``x`` (``[B, N, F]``), each level masked to
    ``masks`` (``[B, N]``) when given; and the states of every level."""
    states = []
    for m in range(steps.depth, 0, -1):
        if masks is not None:
            state = state * masks[..., None]
        states.append(state)
        state = steps.step(m, state)
    return (state if masks is None else state * masks[..., None]), states


def _check_chain(steps: _Steps, start: Tensor, first: Tensor) -> tuple[Tensor, list[Tensor]]:
    """The levels must cut every path of relevance: pushed down level by
    level, the seed must give the plain backward's relevance of ``x``.
    Returns which rows hold relevance at some level (``[levels + 1, N]``),
    and the states of the levels (:func:`_chain`)."""
    chained, states = _chain(steps, start)
    chained = chained[0]
    scale = first.abs().max().item() if first.numel() else 0.0
    tolerance = (1e-9 if first.dtype == torch.float64 else 1e-4) * max(scale, 1e-30)
    if not torch.allclose(chained, first, rtol=0, atol=tolerance):
        raise ValueError(
            "model: relevance reaches the input around the message-passing layers (a skip or residual "
            "connection, jumping knowledge, or a layer reading x directly), so it does not split into walks "
            "of one step per layer. Walks need the layers in a chain: x -> layer 1 -> ... -> layer L -> output.")
    return torch.stack([s[0].abs().amax(dim=-1) > 0 for s in states] + [first.abs().amax(dim=-1) > 0]), states


def _suffix_counts(messages: list[Tensor], n: int, end_rows: Tensor) -> list[Tensor]:
    """``counts[k][j]``: walk suffixes of ``k`` steps that start at row ``j``
    and end at ``end_rows``, along each level's messages (each pair of nodes
    once) and self steps; an upper bound of those that carry relevance."""
    count = torch.zeros(n, dtype=torch.float64, device=end_rows.device)
    count[end_rows] = 1
    counts = [count]
    for pairs in reversed(messages):
        src, dst = pairs
        keys = torch.unique(src[src != dst] * n + dst[src != dst])
        count = count.clone().index_add_(0, keys // n, count[keys % n])  # self step + messages
        counts.append(count)
    return counts


def _message_pairs(edge_index, flow: str) -> Tensor:
    """``[2, E]`` (source, target) of the messages a ``propagate`` call
    passes, from its ``edge_index`` (a ``[2, E]`` tensor, or a sparse
    adjacency ``adj_t`` with ``adj_t[target, source]``)."""
    if isinstance(edge_index, Tensor) and edge_index.layout == torch.strided:
        pairs = edge_index.detach().long()  # int64: node-pair keys reach n**2
        return pairs if flow == "source_to_target" else pairs.flip(0)
    if isinstance(edge_index, Tensor):  # torch.sparse adj_t
        target, source = edge_index.coalesce().indices() if edge_index.layout == torch.sparse_coo else \
            edge_index.to_sparse_coo().coalesce().indices()
    else:  # torch_sparse.SparseTensor adj_t
        target, source, _ = edge_index.coo()
    return torch.stack([source, target])


def _neighbours(pairs: Tensor, n: int) -> list[list[int]]:
    """Per node ``i``, the rows a step can carry its relevance to: ``i``
    itself (a root term or self-loop) and the sources of its messages."""
    found = [{i} for i in range(n)]
    for j, i in zip(pairs[0].tolist(), pairs[1].tolist()):
        found[i].add(j)
    return [sorted(f) for f in found]


def _pack(rows: list[int], neighbours: list[list[int]]) -> list[list[int]]:
    """Greedy groups of suffixes (by position) whose rows have disjoint
    neighbourhoods: one seed of a batched step carries a whole group, and
    each output row belongs to one suffix of it."""
    groups: list[list[int]] = []
    taken: list[set] = []
    for k, r in enumerate(rows):
        for group, used in zip(groups, taken):
            if used.isdisjoint(neighbours[r]):
                group.append(k)
                used.update(neighbours[r])
                break
        else:
            groups.append([k])
            taken.append(set(neighbours[r]))
    return groups


def _enumerate_suffixes(steps: _Steps, start: Tensor, neighbours: list[list[list[int]]]) -> tuple[Tensor, Tensor]:
    """Every walk and its relevance, by pushing each walk suffix's state
    down one step at a time: suffixes whose rows have disjoint neighbourhoods
    at that step (``neighbours[m - 1]``, from the messages its layer passed)
    share a seed of a batched backward (:func:`_pack`). A step that reaches
    rows outside them, or carries a suffix's relevance to rows of another
    suffix of its seed (a layer with connections other than its messages and
    root term, a sum over the nodes fed back), is run again one suffix per
    seed, which is exact; :func:`_check_steps` then refuses the steps along
    no message."""
    rows = (start[0].abs().amax(dim=-1) > 0).nonzero().view(-1)
    vectors, paths = start[0, rows], rows[:, None]  # each suffix: its state, held on its first row
    for m in range(steps.depth, 0, -1):
        first = paths[:, 0].tolist()
        found = _step_suffixes(steps, m, first, vectors, _pack(first, neighbours[m - 1]), neighbours[m - 1])
        if found is None:  # the step left the neighbourhoods or mixed suffixes up: one suffix per seed
            found = _step_suffixes(steps, m, first, vectors, [[k] for k in range(len(first))], None)
        found_paths = [torch.cat([j[:, None], paths[k]], dim=1) for j, k, _ in found]
        found_vectors = [v for _, _, v in found]
        width = steps.width(m - 1)
        vectors = torch.cat(found_vectors) if found_vectors else start.new_zeros(0, width)
        paths = torch.cat(found_paths) if found_paths else paths.new_zeros(0, steps.depth - m + 2)
    return paths, vectors.sum(dim=-1)


def _step_suffixes(steps: _Steps, m: int, first: list[int], vectors: Tensor, groups: list[list[int]],
                   neighbours: Optional[list[list[int]]]):
    r"""Step ``m`` of the suffixes, ``groups`` of them per seed: per chunk of
    seeds, the rows reached, the suffix each came from, and its state there.
    ``None`` where a group's relevance left its neighbourhoods.

    Packed (``neighbours`` given), one seed more checks that no suffix's
    relevance landed on a row of another suffix of its group (a leak the
    neighbourhoods cover, which would be credited to that suffix): the
    suffixes weighted by fixed random :math:`c_k` in one seed give
    :math:`\sum_k c_k\, s_k` below, which must equal
    :math:`\sum_k c_k\, \hat s_k`, :math:`\hat s_k` what the packed
    seeds credited to suffix ``k``. ``None`` also where it does not."""
    n = steps.n
    check = neighbours is not None and len(groups) < len(first)  # one suffix per seed: nothing to mix up
    owner = torch.full((len(groups), n), -1, dtype=torch.long, device=vectors.device)
    for g, group in enumerate(groups):
        if neighbours is None:  # one suffix per seed: every row is its own
            owner[g] = group[0]
        for k in group if neighbours is not None else ():
            owner[g, neighbours[first[k]]] = k
    if check:
        weights = (torch.rand(len(first), generator=torch.Generator().manual_seed(0), dtype=torch.float64)
                   + 0.5).to(dtype=vectors.dtype, device=vectors.device)
        rows = torch.tensor(first, dtype=torch.long, device=vectors.device)
    seeds = len(groups) + check  # the checking seed last
    chunk = max(1, _BUDGET // max(1, n * max(steps.width(m), steps.width(m - 1))))
    found, mixed = [], None
    for s in range(0, seeds, chunk):
        part = groups[s:s + chunk]
        states = vectors.new_zeros(min(chunk, seeds - s), n, vectors.shape[1])
        for g, group in enumerate(part):
            states[g, [first[k] for k in group]] = vectors[group]
        if states.shape[0] > len(part):
            states[-1].index_add_(0, rows, weights[:, None] * vectors)
        below = steps.step(m, states)
        if states.shape[0] > len(part):
            mixed, below = below[-1], below[:-1]
        g, j = (below.abs().amax(dim=-1) > 0).nonzero(as_tuple=True)
        k = owner[s + g, j]
        if bool((k < 0).any()):
            return None
        found.append((j, k, below[g, j]))
    if check:
        credited = torch.cat([weights[k, None] * v for _, k, v in found])
        expected = mixed.new_zeros(mixed.shape).index_add_(0, torch.cat([j for j, _, _ in found]), credited)
        scale = max(credited.abs().max().item() if credited.numel() else 0.0, mixed.abs().max().item())
        tolerance = (1e-9 if mixed.dtype == torch.float64 else 1e-4) * max(scale, 1e-30)
        if not bool(((mixed - expected).abs() <= tolerance).all()):
            return None
    return found


def _structure(steps: _Steps, start: Tensor) -> list[tuple[Tensor, Tensor, Tensor]]:
    """Blocks of every step (index ``m - 1`` for step ``m``), from the rows
    the relevance of the seed reaches, top level first."""
    rows = (start[0].abs().amax(dim=-1) > 0).nonzero().view(-1)
    found: list = [None] * steps.depth
    for m in range(steps.depth, 0, -1):
        j, i, b = steps.blocks(m, rows)
        found[m - 1] = (j, i, b)
        rows = torch.unique(j)
    return found


def _count(structure, end_rows: Tensor, n: int) -> int:
    """Number of walks through the blocks, ending at ``end_rows``."""
    count = torch.zeros(n, dtype=torch.float64)
    count[end_rows.cpu()] = 1
    for j, i, _ in reversed(structure):
        below = torch.zeros(n, dtype=torch.float64)
        below.index_add_(0, j.cpu(), count[i.cpu()])
        count = below
    return int(count.sum().item())


def _by_row(j: Tensor, i: Tensor, n: int) -> tuple[Tensor, Tensor]:
    """CSR of the blocks by their upper row ``i``: ``(ptr, order)``."""
    order = torch.sort(i, stable=True).indices
    ptr = torch.zeros(n + 1, dtype=torch.long, device=i.device)
    ptr[1:] = torch.cumsum(torch.bincount(i, minlength=n), 0)
    return ptr, order


def _enumerate(steps: _Steps, structure, start: Tensor) -> tuple[Tensor, Tensor]:
    """Every walk and its relevance (exhaustive)."""
    n = steps.n
    rows = (start[0].abs().amax(dim=-1) > 0).nonzero().view(-1)
    states, paths = start[0, rows], rows[:, None]
    for m in range(steps.depth, 0, -1):
        j, i, b = structure[m - 1]
        ptr, order = _by_row(j, i, n)
        count = ptr[paths[:, 0] + 1] - ptr[paths[:, 0]]
        owner = torch.repeat_interleave(count)
        offset = torch.arange(owner.numel(), device=owner.device) - (torch.cumsum(count, 0) - count)[owner]
        pair = order[ptr[paths[owner, 0]] + offset]
        chunk = max(1, _BUDGET // max(1, b.shape[1] * b.shape[2]))
        states = torch.cat([torch.bmm(b[pair[s:s + chunk]], states[owner[s:s + chunk], :, None])[..., 0]
                            for s in range(0, pair.numel(), chunk)] or [states.new_zeros(0, b.shape[1])])
        paths = torch.cat([j[pair][:, None], paths[owner]], dim=1)
    return paths, states.sum(dim=-1)


def _search(steps: _Steps, structure, start: Tensor, k: int) -> tuple[Tensor, Tensor]:
    r"""The ``k`` walks of largest ``|R|``: best-first search with an
    admissible bound (A*), so the result equals exhaustive enumeration.

    Bound: for every walk prefix that reaches row ``i`` of level ``m``,
    :math:`|\mathbf 1^\top B_1 \cdots B_m u| \le h_m[i]^\top |u|` with

    .. math::

        h_1[i] = \max_j \mathbf 1^\top |B_1[j, i]|, \qquad
        h_m[i] = \max_j h_{m-1}[j]^\top |B_m[j, i]|

    (element-wise maxima of non-negative vectors), a max-product dynamic
    programme over the levels. A partial walk is expanded only while its
    bound can still beat the ``k``-th best complete walk. The bounds are
    raised by a few hundred rounding units: computed in the pass's dtype, a
    bound summed in another order than a walk's value could fall a unit below
    it (float32: walks one rounding step out of order).
    """
    n, depth = steps.n, steps.depth
    bounds: list = [None] * (depth + 1)  # bounds[m]: h_m, per row of level m
    for m in range(1, depth + 1):
        j, i, b = structure[m - 1]
        below = b.abs().sum(dim=1) if m == 1 else torch.bmm(bounds[m - 1][j][:, None, :], b.abs())[:, 0]
        h = torch.zeros(n, b.shape[2], dtype=b.dtype, device=b.device)
        bounds[m] = h.scatter_reduce(0, i[:, None].expand_as(below), below, reduce="amax", include_self=True)
    slack = 1.0 + 256 * torch.finfo(start.dtype).eps
    bounds = [None if h is None else h * slack for h in bounds]
    csr = [None] + [_by_row(j, i, n) for j, i, _ in structure]
    tie = itertools.count()
    heap: list = []
    rows = (start[0].abs().amax(dim=-1) > 0).nonzero().view(-1)
    for r in rows.tolist():
        u = start[0, r]
        heapq.heappush(heap, (-float(bounds[depth][r] @ u.abs()), next(tie), depth, (r,), u))
    found_walks, found_values = [], []
    while heap and len(found_walks) < k:
        _, _, m, path, u = heapq.heappop(heap)
        if m == 0:
            found_walks.append(path)
            found_values.append(u)
            continue
        j, i, b = structure[m - 1]
        ptr, order = csr[m]
        pair = order[ptr[path[0]]:ptr[path[0] + 1]]
        below = b[pair] @ u
        for jj, v in zip(j[pair].tolist(), below):
            if m == 1:
                value = v.sum()
                heapq.heappush(heap, (-float(value.abs()), next(tie), 0, (jj,) + path, value))
            else:
                heapq.heappush(heap, (-float(bounds[m - 1][jj] @ v.abs()), next(tie), m - 1, (jj,) + path, v))
    walks_ = torch.tensor(found_walks, dtype=torch.long).view(-1, depth + 1)
    values = torch.stack(found_values) if found_values else start.new_zeros(0)
    return walks_, values


def walks(
    model: torch.nn.Module,
    x: Tensor,
    edge_index: Tensor,
    index: Union[int, Tensor],
    *,
    target: Optional[Tensor] = None,
    rules: Union[None, Rule, dict] = None,
    mode: Optional[str] = None,
    top_k: Optional[int] = None,
    max_walks: int = MAX_WALKS,
    **kwargs,
) -> Walks:
    r"""Relevant walks of the output row ``index`` of ``model(x, edge_index, **kwargs)``.

    Parameters
    ----------
    index : int
        The explained node (node-level model) or graph (graph-level model,
        with ``batch`` in ``kwargs``).
    target : Tensor, optional
        The class (or 0/1 labels) to explain; default: the prediction.
    rules : Rule or dict, optional
        As for :class:`~torch_geometric_lrp.LRP` (default: the default composite).
    mode : str, optional
        ``'binary_classification'``, ``'multiclass_classification'`` or
        ``'regression'``, as for :func:`~torch_geometric_lrp.explain`;
        needed only where the model gives one raw output per row.
    top_k : int, optional
        ``None``: every walk that carries relevance, exactly (refused, with the
        count, past ``max_walks``). ``k``: the ``k`` walks of largest
        ``|relevance|``, exactly: the top of every walk where walk suffixes
        are cheap, else a best-first search over the blocks whose bound is a
        max-product dynamic programme over the layers (docs: Relevant walks),
        which visits only partial walks whose bound beats the ``k``-th best.
    max_walks : int
        Most walks ``top_k=None`` enumerates.
    **kwargs
        Further model inputs (``edge_weight``, ``edge_attr``, ``batch``, ...).

    Returns
    -------
    Walks
        ``walks`` ``[K, L + 1]`` (input node first) and ``relevance`` ``[K]``,
        largest ``|relevance|`` first; with ``top_k=None`` they sum to
        ``relevance_total``, the first-order relevance of ``x``.

    A node-level target is explained on its computation subgraph, cut as
    :func:`explain` cuts it, where that is at most half the graph and proves
    itself (the target's output equals the full graph's and no relevance
    reaches the nodes kept for the degrees only); a cut that fails the proof
    falls back to the whole graph with a ``SubgraphWarning``. Walks and
    their node ids are those of the graph passed in either way.
    """
    top_k, max_walks = whole(top_k), whole(max_walks)
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"top_k: expected None (every walk) or an int >= 1, got {top_k!r}.")
    if isinstance(max_walks, bool) or not isinstance(max_walks, int) or max_walks < 1:
        raise ValueError(f"max_walks: expected an int >= 1, got {max_walks!r}.")

    def body(steps: _Steps, info: dict) -> Walks:
        start, first = info["start"], info["first"]
        end_rows = (start[0].abs().amax(dim=-1) > 0).nonzero().view(-1)
        messages = [pairs if pairs is not None else torch.zeros(2, 0, dtype=torch.long, device=start.device)
                    for pairs in info["messages"]]
        counts = _suffix_counts(messages, steps.n, end_rows)
        bound = int(counts[-1].sum().item())
        if top_k is None and bound > max_walks:
            raise ValueError(f"top_k: there are {bound} walks of {steps.depth} steps along the edges and self-loops "
                             f"into row {info['index']}; top_k=None lists every one that carries relevance and "
                             f"stops at max_walks={max_walks}. Pass top_k=k for the k most relevant, or a larger "
                             f"max_walks.")
        # Two exact ways, by cost in seeds of a batched backward step: push every
        # walk suffix down (one seed per suffix), or build the blocks (one unit
        # seed per reached row and state entry) and enumerate or search them.
        by_suffix = sum(float(c.sum()) for c in counts[:-1])
        by_blocks = sum(int(info["reached"][k].sum()) * steps.width(steps.depth - k) for k in range(steps.depth))
        if by_suffix <= by_blocks:
            paths, values = _enumerate_suffixes(steps, start, [_neighbours(pairs, steps.n) for pairs in messages])
            total = values.numel()
        else:
            structure = _structure(steps, start)
            total = _count(structure, end_rows, steps.n)
            if top_k is not None:
                paths, values = _search(steps, structure, start, top_k)
            else:
                paths, values = _enumerate(steps, structure, start)
        if top_k is None or values.numel() > len(paths[:top_k]) or by_suffix <= by_blocks:
            order = torch.sort(values.abs(), descending=True, stable=True).indices[:top_k]
            paths, values = paths[order], values[order]
        # walks through non-zero blocks may still carry exactly 0 (a dead unit in every path): not listed
        carries = values != 0
        if top_k is None:
            total = int(carries.sum())
        paths, values = paths[carries], values[carries]
        _check_steps(paths, values, messages, steps.n, info["nodes"])
        node_relevance = first.sum(dim=-1).detach()
        if info["nodes"] is not None:  # from the cut back to the input graph
            paths = info["nodes"][paths]
            node_relevance = node_relevance.new_zeros(info["num_nodes"]).index_put_((info["nodes"],), node_relevance)
        return Walks(walks=paths.to(x.device), relevance=values.detach(), score=info["score"],
                     relevance_total=first.sum(dtype=torch.float64).item(), num_walks=total,
                     index=info["index"], target=info["target"], num_nodes=x.shape[0], edge_index=edge_index,
                     flow=message_flow(model), node_relevance=node_relevance, config=info["config"],
                     batch=info["batch"])

    return _run(model, x, edge_index, index, target, rules, mode, kwargs, body)


#: Rows per level whose step :func:`_check_moves` pushes down (the largest by relevance).
MOVES_CHECKED = 256


def _check_moves(steps: _Steps, states: list[Tensor], messages: list[Optional[Tensor]],
                 nodes: Optional[Tensor]) -> None:
    """:func:`_check_steps` without listing the walks (``subgraph_relevance``):
    at each level (``states``, of :func:`_chain`), the relevance state of
    each reached row (the ``MOVES_CHECKED`` largest), pushed one level down
    on its own, may reach only that row and the rows it got messages from.
    A per-graph statistic
    between layers (``GraphNorm``, ``PairNorm``) moves relevance between
    every two nodes of a graph; masked per level, that relevance would be
    counted for sets of nodes no walk joins."""
    n = steps.n
    for m in range(steps.depth, 0, -1):
        state = states[steps.depth - m][0]  # level m: [N, W]
        size = state.abs().sum(dim=-1)
        rows = (size > 0).nonzero().view(-1)
        rows = rows[size[rows].argsort(descending=True)[:MOVES_CHECKED]]
        pairs = messages[m - 1]
        keys = torch.zeros(0, dtype=torch.long, device=state.device) if pairs is None else pairs[0] * n + pairs[1]
        for chunk in rows.split(64):
            seeds = torch.zeros(chunk.numel(), n, state.shape[-1], dtype=state.dtype, device=state.device)
            seeds[torch.arange(chunk.numel(), device=state.device), chunk] = state[chunk]
            below = steps.step(m, seeds).abs().amax(dim=-1)  # [b, N]
            tolerance = (1e-9 if below.dtype == torch.float64 else 1e-4) * float(below.max() or 0.0)
            k, source = (below > tolerance).nonzero(as_tuple=True)
            into = chunk[k]
            ok = (source == into) | torch.isin(source * n + into, keys)
            if not bool(ok.all()):
                bad = int((~ok).nonzero()[0])
                _moves_outside(int(source[bad]), int(into[bad]), m - 1, nodes)


def _moves_outside(a: int, b: int, m: int, nodes: Optional[Tensor]) -> None:
    """Refuse relevance passing from node ``b`` to ``a`` at call ``m + 1``
    (rows of the cut ``nodes``, where given), which passed no such message."""
    if nodes is not None:
        a, b = int(nodes[a]), int(nodes[b])
    raise ValueError(f"model: relevance passes from node {b} to node {a} at message-passing call {m + 1}, "
                     f"which passed no message {a} -> {b}: the model moves information between nodes "
                     f"outside its messages (a layer that propagates more than once per call, a sum or "
                     f"pooling over the nodes fed back to them, a per-graph normalisation, a virtual node), "
                     f"so its relevance does not split into walks along edges. lrp.explain gives its node and "
                     f"edge relevance.")


def _check_steps(paths: Tensor, values: Tensor, messages: list[Tensor], n: int, nodes: Optional[Tensor]) -> None:
    """Every step of a walk that carries relevance is a message of its
    level's call (or a node to itself: a root term or self-loop). Else the
    model moves relevance between nodes outside its message passing (a layer
    that propagates twice per call, a sum over the nodes fed back), and its
    relevance does not split into walks along edges: refused."""
    live = values != 0
    for m, pairs in enumerate(messages):
        source, into = paths[live, m], paths[live, m + 1]
        ok = (source == into) | torch.isin(source * n + into, pairs[0] * n + pairs[1])
        if not bool(ok.all()):
            k = int((~ok).nonzero()[0])
            _moves_outside(int(source[k]), int(into[k]), m, nodes)


def _node_sets(nodes, n: int, device) -> tuple[Tensor, bool]:
    """``nodes`` as boolean masks ``[B, N]``, and whether one set was given."""
    def one(value, k=None) -> Tensor:
        name = "nodes" if k is None else f"nodes[{k}]"
        try:
            value = torch.as_tensor(value, device=device)
        except (TypeError, ValueError, RuntimeError):
            raise TypeError(f"{name}: expected node ids (ints, a 1-D LongTensor) or a boolean mask of {n} nodes, "
                            f"got {type(value).__name__} {value!r}.") from None
        if value.dim() == 1 and not value.numel():
            value = value.long()  # no nodes (an empty list is made float): the empty set
        if value.dtype == torch.uint8:  # torch indexes with it as a mask, the library reads integers as ids
            raise TypeError(f"{name}: a uint8 tensor is a mask to torch's indexing and node ids elsewhere; pass "
                            f"{name}.bool() for a mask or {name}.long() for node ids.")
        if value.dtype == torch.bool:
            if value.shape != (n,):
                raise ValueError(f"{name}: a boolean mask needs one entry per node ({n}), got shape "
                                 f"{tuple(value.shape)}.")
            return value
        if value.is_floating_point() or value.dim() > 1:
            raise ValueError(f"{name}: expected node ids (a 1-D LongTensor) or a boolean mask of {n} nodes, "
                             f"got {value.dtype} of shape {tuple(value.shape)}.")
        if value.numel() and (int(value.min()) < 0 or int(value.max()) >= n):
            raise ValueError(f"{name}: node ids must lie in 0 .. {n - 1}.")
        mask = torch.zeros(n, dtype=torch.bool, device=device)
        mask[value.long()] = True
        return mask

    if isinstance(nodes, Tensor) and nodes.dtype == torch.bool and nodes.dim() == 2:
        if nodes.shape[1] != n:
            raise ValueError(f"nodes: a batch of masks needs shape [B, {n}], got {tuple(nodes.shape)}.")
        return nodes.to(device), False
    if isinstance(nodes, (list, tuple)) and nodes and all(  # a list of sets (a 0-dim tensor is one node id)
            isinstance(v, (list, tuple)) or (isinstance(v, Tensor) and v.dim() > 0) for v in nodes):
        return torch.stack([one(v, k) for k, v in enumerate(nodes)]), False
    return one(nodes)[None], True


def subgraph_relevance(
    model: torch.nn.Module,
    x: Tensor,
    edge_index: Tensor,
    nodes,
    index: Union[int, Tensor],
    *,
    target: Optional[Tensor] = None,
    rules: Union[None, Rule, dict] = None,
    mode: Optional[str] = None,
    alpha: float = 0.0,
    **kwargs,
) -> Union[float, Tensor]:
    r"""Relevance of all walks that stay inside ``nodes`` (sGNN-LRP).

    One backward with the state of every level (and the relevance of ``x``)
    masked to ``nodes``: ``L`` masked steps, the cost of about ``L``
    backward passes, whatever the number of walks.

    With ``alpha`` > 0, sGNN-LRP's relaxed set relevance: every walk that
    visits ``S`` counts, weighted by ``alpha`` per position outside ``S``,

    .. math::
        S_\alpha(S) = \sum_{w:\, w \cap S \ne \emptyset} \alpha^{|\{k:\, w_k \notin S\}|}\, R_w,

    over the ``L + 1`` positions of a walk (input node to explained node):
    two masked passes, one with weight 1 in ``S`` and ``alpha`` outside, one
    with ``alpha`` outside only (the walks that never enter ``S``),
    subtracted. ``alpha = 0`` is the plain subgraph relevance.

    Parameters
    ----------
    nodes : LongTensor, BoolTensor ``[N]``, a list of those, or BoolTensor ``[B, N]``
        One node set, or a batch of them (explained together, in one pass;
        ``B = 0`` gives an empty tensor). A uint8 tensor is refused (torch
        reads it as a mask, the library reads integers as ids).
    index, target, rules, mode, **kwargs
        As for :func:`walks`.
    alpha : float
        Weight of a walk position outside the set, ``0 <= alpha <= 1``
        (sGNN-LRP reports ``alpha = 0.05`` next to ``0``).

    Returns
    -------
    float or Tensor ``[B]``
        A float for one node set; one value per set for a batch. All nodes
        give the first-order relevance of ``x``, the sum of every walk.
    """
    if isinstance(alpha, Tensor) and alpha.numel() == 1 and alpha.is_floating_point():
        alpha = alpha.item()
    elif not isinstance(alpha, bool) and isinstance(alpha, numbers.Real):
        alpha = float(alpha)  # numpy floats too
    if isinstance(alpha, bool) or not (isinstance(alpha, (int, float)) and 0.0 <= alpha <= 1.0):
        raise ValueError(f"alpha: the weight of a walk position outside the set, a number in [0, 1], got "
                         f"{alpha!r}.")

    def body(steps: _Steps, info: dict):
        masks, single = _node_sets(nodes, info["num_nodes"], x.device)
        _check_moves(steps, info["states"], info["messages"], info["nodes"])
        if info["nodes"] is not None:
            masks = masks[:, info["nodes"]]
        start = info["start"]
        inside = masks.to(start.dtype)
        if alpha:  # both passes in one batch: weights 1 / alpha, then 0 / alpha (walks that never enter)
            outside = alpha * (1 - inside)
            weights = torch.cat([inside + outside, outside])
        else:
            weights = inside
        if not weights.shape[0]:  # a batch of no sets: no values
            return torch.zeros(0, dtype=torch.float64, device=start.device)
        relevance, _ = _chain(steps, start.expand(weights.shape[0], -1, -1), weights)
        values = relevance.sum(dim=(1, 2), dtype=torch.float64).detach()
        if alpha:
            values = values[:inside.shape[0]] - values[inside.shape[0]:]
        return values.item() if single else values

    return _run(model, x, edge_index, index, target, rules, mode, kwargs, body)
