r"""One way to explain: the pass, the cut, the check, the ``Explanation``.

:func:`explain_rows` serves :class:`~torch_geometric_lrp.LRP`,
:func:`~torch_geometric_lrp.explain` and (per batch)
:func:`~torch_geometric_lrp.explain_nodes`. It runs one relevance pass
(:class:`Pass`) on the user's model: on the targets' computation subgraph
(:mod:`.subgraph`) for node-level targets, else on the whole input.

A pass on the subgraph is used only when it proves itself: the targets'
outputs equal the full graph's (on graphs of up to ``FULL_CHECK_EDGES``
edges; above, they are the same with unrelated nodes present), and no relevance reached
the nodes that are there for the degrees only. Otherwise the full graph is
explained and a :class:`SubgraphWarning` says why.

Accounting, all measured (:class:`~torch_geometric_lrp.RelevanceAudit`):

.. math::

    \text{score} = \sum R_{seed}, \qquad
    \text{residual} = \text{score} - \text{relevance\_total} - \text{absorbed} - \text{lost},

where ``relevance_total`` is the relevance of the inputs (``x`` and
``edge_attr``), ``absorbed`` what biases, stabilisers and constant operands
reported keeping and ``lost`` what reached outputs equal to 0. A residual
far from 0 is relevance that an op changed without reporting it.
"""
from __future__ import annotations

import math
import warnings
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from typing import Callable, Iterator, Optional, Union

import torch
from torch import Tensor
from torch_geometric.explain import Explanation, HeteroExplanation
from torch_geometric.explain.config import MaskType, ModelMode, ModelReturnType, ModelTaskLevel
from torch_geometric.nn import MessagePassing

from ..audit import RelevanceAudit
from .edges import EdgeRelevance
from ..mode import UnsupportedOpError, _locked, _prepared, relevance_pass, unwrap
from .subgraph import (Cut, context_features, context_inputs, count_hops, cut, layout_bound, lean, message_flow,
                       pays_off, per_node_guesses, reaches_ring, slice_inputs, with_context)
from .trim import Propagations, Trimming, hop_distance
from .targets import (MASK_VIEWS, check_mask_rows, check_one_graph, check_output_shape, check_target, infer_mode,
                      infer_return_type, infer_task_level, is_sparse, seed_of)

__all__ = ["SubgraphWarning", "Pass", "Relevance", "Settings", "explain_rows", "on_graph", "on_cut", "InFull",
           "proves_lean_cuts", "full_output",
           "explanation_of", "resolve_task", "same_output", "fall_back", "input_total", "check_layer_state"]


#: Graphs with at most this many edges check a cut against the full graph's output.
FULL_CHECK_EDGES = 50_000


class SubgraphWarning(UserWarning):
    """A node-level explanation fell back from the targets' computation
    subgraph to the full graph."""


@dataclass
class Settings:
    """How to explain: what is known of the task, and the pass options."""

    task_level: Optional[ModelTaskLevel] = None
    mode: Optional[ModelMode] = None
    return_type: Optional[ModelReturnType] = None
    rules: object = None
    strict: bool = True
    subgraph: bool = True
    track_edges: bool = True
    # Passes on cuts leave out the messages into the ring (subgraph.lean)
    # and, layer by layer, the messages no target reads (trim.Trimming);
    # cleared for the rest of a call once such a pass fails its check (the
    # model reads out-degrees, or propagates more often than counted).
    lean: bool = True
    # A residual warning was given (one per call; see warn_if_not_conserved).
    residual_warned: bool = False
    # A batch of several targets' copies passed the check with unrelated nodes
    # added (on_cut's copies), or the model cannot run on those nodes: the
    # later batches of the call skip it (it would tell them nothing new).
    copies_checked: bool = False
    # The length of ``index`` where it is a boolean mask (targets.mask_rows),
    # checked against the output's rows once the forward has run.
    index_mask_rows: Optional[int] = None
    # ``target`` holds one entry per explained row, as the caller decided for
    # the whole call (explain_nodes): never read per output row, even where a
    # batch has as many rows as the graph has nodes.
    target_per_row: bool = False


@dataclass
class Relevance:
    """The outcome of one relevance pass, placed on the input graph (or, for
    a batch of cuts, on the batch)."""

    output: Tensor                # model output at the explained rows
    seed: Tensor                  # the seed, shaped like the output of the pass
    target: Tensor                # per explained row: class, labels or value
    node: Tensor                  # relevance of x
    edge: Optional[Tensor]        # per input edge
    self_loops: Optional[Tensor]  # per node: messages of self-loops the layers added
    edge_attr: Optional[Tensor]   # relevance of edge_attr
    lost: float
    absorbed: float
    task_level: ModelTaskLevel
    mode: ModelMode
    return_type: ModelReturnType
    total: Optional[float] = None  # relevance of the inputs, summed before spreading to the input graph
    embedding: Optional[Tensor] = None  # integer x: relevance of its embedding lookups' outputs, [N, D]

    @property
    def score(self) -> float:
        return self.seed.sum(dtype=torch.float64).item()


def _usable(value):
    """Tensors made under ``torch.inference_mode()`` cannot be saved for a
    backward: a normal copy of those (others as they are)."""
    if isinstance(value, Tensor) and value.is_inference():
        with torch.inference_mode(False):
            return value.clone()
    return value


def _given(value):
    """A model input that is not explained, as the pass reads it: usable
    (:func:`_usable`) and a constant, detached. (One that still requires
    grad from an earlier computation, a learned ``edge_weight`` for example,
    would carry relevance out of the pass into that computation.) A
    parameter stays one: this runs inside the pass, where a parameter reads
    ``requires_grad=False`` (the mode holds parameters constant, and the
    rules modify those that act as weights). The explained inputs are
    watched afresh."""
    if isinstance(value, dict):
        return {k: _given(v) for k, v in value.items()}
    if type(value) in (list, tuple):
        return type(value)(_given(v) for v in value)
    value = _usable(value)
    return value.detach() if isinstance(value, Tensor) and value.requires_grad else value


class Pass:
    """One relevance pass of the user's ``model`` (a context manager):
    :meth:`forward` with the explained inputs watched, then :meth:`relevance`
    for a seed. :meth:`plain` runs a forward without relevance in between."""

    def __init__(self, model: torch.nn.Module, settings: Settings):
        self.model = model
        self.settings = settings
        self._stack = ExitStack()
        self._edges: Optional[EdgeRelevance] = None
        self._trimming: Optional[Trimming] = None
        self.embedding: Optional[Tensor] = None

    def __enter__(self) -> "Pass":
        # the one place that opens a relevance pass on the user's model
        self.mode = self._stack.enter_context(
            relevance_pass(self.model, rules=self.settings.rules, strict=self.settings.strict))
        return self

    def __exit__(self, *exc) -> None:
        self._stack.close()
        if exc[0] is None and self.mode.unsupported:
            # strict=False: the ops without a rule ran with their gradient; say which
            found = ", ".join(f"{name} ({count}x)" for name, count in self.mode.unsupported.items())
            warnings.warn(f"LRP (strict=False): what has no relevance rule ran with its gradient, so relevance "
                          f"is not conserved there: {found}. The explanation's residual shows the gap.",
                          RuntimeWarning, stacklevel=2)

    def trim(self, hop: Tensor, num_hops: int) -> Trimming:
        """From here on, the model's layers propagate only the messages that
        the nodes at ``hop`` 0 read
        (:class:`~torch_geometric_lrp.explainers.trim.Trimming`)."""
        self._trimming = self._stack.enter_context(Trimming(self.model, hop, num_hops))
        return self._trimming

    def _call(self, x: Tensor, edge_index, kwargs: dict) -> Tensor:
        if self._trimming is not None:
            self._trimming.reset()
        out = unwrap(self.model)(x, edge_index, **kwargs)
        if not isinstance(out, Tensor):
            hint = (" For a heterogeneous model returning one output per node type, return the explained type's "
                    "(out['paper']) in forward, or wrap the model in a module that does."
                    if isinstance(out, dict) else "")
            raise TypeError(f"model: an explained model must return one tensor, got {type(out).__name__}.{hint}")
        return out

    def plain(self, x: Tensor, edge_index, kwargs: dict) -> Tensor:
        """The model's output, no relevance recorded."""
        with torch.no_grad(), self.mode.unrouted():
            return self._call(_usable(x), _usable(edge_index), {k: _usable(v) for k, v in kwargs.items()})

    def forward(self, x: Tensor, edge_index, kwargs: dict) -> Tensor:
        """The forward whose relevance :meth:`relevance` gives; the inputs
        ``x`` and ``edge_attr`` (when floating) carry relevance."""
        kwargs = {k: _given(v) for k, v in kwargs.items()}
        if isinstance(x, dict):  # a heterogeneous graph: one watched input per type
            return self._forward_hetero(x, edge_index, kwargs)
        edge_index = _usable(edge_index)
        self.x = self.mode.watch(x)
        self.edge_attr = kwargs.get("edge_attr")
        if isinstance(self.edge_attr, Tensor) and self.edge_attr.is_floating_point():
            self.edge_attr = kwargs["edge_attr"] = self.mode.watch(self.edge_attr)
        else:
            self.edge_attr = None
        # integer inputs: relevance starts at the outputs of their embedding lookups
        categorical = not self.x.is_floating_point()
        if categorical:
            self.x = _usable(x)
            self.mode.watch_lookups("x", self.x)
            attr = kwargs.get("edge_attr")
            if isinstance(attr, Tensor) and not attr.is_floating_point() and not attr.is_complex():
                self.mode.watch_lookups("edge_attr", attr)
        if self.settings.track_edges and not is_sparse(edge_index):
            self._edges = self._stack.enter_context(EdgeRelevance(self.model, edge_index, x.shape[0]))
        try:
            self.out = self._call(self.x, edge_index, kwargs)
        except Exception as error:
            if categorical and not self._looked_up() and not self.mode.lookups_tried:
                # (a lookup of x that failed, as one of ids out of its table's range does: its own error)
                raise self._no_lookup(x) from error
            if isinstance(error, RuntimeError) and "leaf Variable that requires grad" in str(error):
                # the pass's copy of an explained input is a leaf of autograd, which torch does not let
                # a forward write into in place (the user's own input, without grad, it would)
                raise UnsupportedOpError(
                    f"model: the forward writes in place into an explained input (x or a floating edge_attr, "
                    f"or a view of it), which the relevance pass watches as a leaf of autograd ({error}). Write "
                    f"on a copy: x = x.clone() before the write.") from error
            if isinstance(error, AssertionError) and is_sparse(edge_index):
                # a layer's own invariant, broken where the pass turns its fused sparse kernel off
                raise RuntimeError(
                    f"model: a layer's forward failed in the relevance pass on this sparse adjacency "
                    f"({type(error).__name__}{': ' + str(error) if str(error) else ''}). The pass runs message "
                    f"passing through message and aggregate (PyG's fused sparse kernels would hide the messages), "
                    f"which some layers support only on edge_index (EGConv with 'symnorm' keeps its normalisation "
                    f"in the adjacency's values). Pass the edges as a [2, E] edge_index "
                    f"(torch_geometric.utils.to_edge_index(adj)).") from error
            raise
        if categorical and not self._looked_up():
            raise self._no_lookup(x)
        return self._checked(self.x, edge_index, kwargs)

    def _checked(self, x, edge_index, kwargs: dict) -> Tensor:
        """The output of the pass, checked: an error when the forward dropped
        the result of an in-place op (see ``RelevanceMode.in_place``) and so
        computed something else than the model; a warning when no explained
        input reaches it (a forward under ``torch.no_grad()``, detached
        tensors): every mask would be 0. Sets the logits.

        From here on the pass's torch calls are its own bookkeeping (checks,
        seeds, the backward, the accounting) on tensors that carry no
        relevance, or that the relevance Functions handle: they run past the
        mode (:meth:`RelevanceMode.unrouted`) until the pass closes."""
        self._stack.enter_context(self.mode.unrouted())
        # an output written in place (a buffer the forward filled: out[perm] = lin(h)) is stood in for
        # by the map the write continued, which holds its history
        self.out = self.mode.resolved(self.out)
        if self.mode.in_place:
            with torch.no_grad():
                plain = self._call(x, edge_index, kwargs)
            self.mode.check_in_place(self.model, plain, self.out)
        if not self.out.requires_grad:
            warnings.warn(f"LRP: the output of {type(unwrap(self.model)).__name__} does not depend on the explained "
                          f"inputs as the pass sees them (a forward under torch.no_grad(), detached tensors, or "
                          f"inputs that reach it only through gates the rules hold constant: attention weights from "
                          f"a query, a normalisation), so no relevance reaches them: the masks are 0 and the "
                          f"residual is the whole score.",
                          RuntimeWarning, stacklevel=5)
        self.mode.check_functions(self.out)  # before anything reads a backward of it (walks, seeds)
        self.logits = self.mode.logits_of(self.out)
        return self.out

    def _forward_hetero(self, x: dict, edge_index: dict, kwargs: dict) -> Tensor:
        """:meth:`forward` on ``{node_type: x}`` and ``{edge_type: edges}``:
        every node type's features carry relevance, and the edge features
        of ``edge_attr_dict`` (or ``edge_attr`` given as a dict) where floating."""
        edge_index = {k: _usable(v) for k, v in edge_index.items()}
        self.x = {k: self.mode.watch(_usable(v)) for k, v in x.items()}
        self.edge_attr = None
        name = next((k for k in ("edge_attr_dict", "edge_attr") if isinstance(kwargs.get(k), dict)), None)
        if name is not None:
            attr = {k: v for k, v in kwargs[name].items() if isinstance(v, Tensor) and v.is_floating_point()}
            if attr:
                self.edge_attr = {k: self.mode.watch(_usable(v)) for k, v in attr.items()}
                kwargs[name] = {**kwargs[name], **self.edge_attr}
        if self.settings.track_edges and not any(is_sparse(e) for e in edge_index.values()):
            self._edges = self._stack.enter_context(
                EdgeRelevance(self.model, edge_index, {k: v.shape[0] for k, v in x.items()}))
        self.out = self._call(self.x, edge_index, kwargs)
        return self._checked(self.x, edge_index, kwargs)

    def _looked_up(self) -> bool:
        return any(name == "x" for name, _, _ in self.mode.lookups)

    def _no_lookup(self, x: Tensor) -> TypeError:
        return TypeError(
            f"x: relevance is carried by floating-point node features or by an embedding lookup of x; x has "
            f"dtype {x.dtype} and {type(unwrap(self.model)).__name__} calls no embedding (torch.nn.Embedding, "
            f"F.embedding) on x, or on a column x[:, c] of it, before using it. Pass x.float() for numeric "
            f"features, or look the categories up in the model's forward.")

    def relevance(self, seed: Tensor, retain: bool = False) -> tuple[Tensor, Optional[Tensor], float, float]:
        """Relevance of ``x`` and ``edge_attr`` for ``seed`` on the output,
        and what was lost and absorbed on the way. ``retain=True`` keeps the
        forward for another seed; each call's edge relevance is its own."""
        lookups = self.mode.lookups
        if self._edges is not None:
            self._edges.reset()
        if isinstance(self.x, dict):  # heterogeneous: per node type and per edge type
            attr = self.edge_attr or {}
            with RelevanceAudit() as audit:
                found = self.mode.backward(self.out, seed, [*self.x.values(), *attr.values()], retain)
            node = dict(zip(self.x, found[:len(self.x)]))
            edge_attr = dict(zip(attr, found[len(self.x):])) if attr else None
            if self._edges is not None and self._edges.unrouted != 0:
                layers = ", ".join(dict.fromkeys(self._edges.unrouted_layers))
                warnings.warn(f"LRP: the messages of {layers} in {type(unwrap(self.model)).__name__} could not be "
                              f"booked on an input edge type (the layer is not registered under one in a ModuleDict, "
                              f"as to_hetero and HeteroConv do, and two edge types hold the same edge tensor, or no "
                              f"type's edges match its own), so {self._edges.unrouted:.3g} of relevance is missing "
                              f"from edge_mask; the node masks are complete. Give each edge type its own tensor, or "
                              f"register the layer per edge type (HeteroConv).", RuntimeWarning, stacklevel=3)
            self._warn_unmatched(seed)
            return node, edge_attr, audit.lost, audit.absorbed
        with RelevanceAudit() as audit:
            node, edge_attr, *found = self.mode.backward(
                self.out, seed, [self.x, self.edge_attr, *(out for _, _, out in lookups)], retain)
        if lookups:
            node, self.embedding = _categorical(self.x, "x", lookups, found)
            if any(name == "edge_attr" for name, _, _ in lookups):  # an integer edge_attr, looked up
                source = next(t for name, t in self.mode._sources if name == "edge_attr")
                edge_attr = _categorical(source, "edge_attr", lookups, found)[0]
        self._warn_unmatched(seed)
        return node, edge_attr, audit.lost, audit.absorbed

    def _warn_unmatched(self, seed: Tensor) -> None:
        """Warns where messages over edges the model built itself (neither
        input edges nor self-loops) carried relevance: ``edge_mask`` has no
        entry for them, so it would not add up to what the layers passed on."""
        edges = self._edges
        if edges is not None and edges.sparse_layers:
            layers = ", ".join(dict.fromkeys(edges.sparse_layers))
            warnings.warn(f"LRP: {layers} in {type(unwrap(self.model)).__name__} propagated over a sparse adjacency "
                          f"it built itself (as PANConv's path matrix), whose messages are aggregated without being "
                          f"seen one by one: edge_mask has no entry for their relevance, which is in the node masks.",
                          RuntimeWarning, stacklevel=4)
        if edges is None or not edges.unmatched_layers:
            return
        magnitude = edges.unmatched_magnitude
        if magnitude <= 1e-6 * float(seed.detach().abs().sum()):
            return
        layers = ", ".join(dict.fromkeys(edges.unmatched_layers))
        warnings.warn(f"LRP: messages of {layers} in {type(unwrap(self.model)).__name__} went over edges that are "
                      f"neither input edges nor self-loops (edges the model builds itself, e.g. with to_undirected "
                      f"or knn_graph; pairs of a graph with other nodes than the input's, as after TopKPooling, "
                      f"SAGPooling or subgraph(relabel_nodes=True); or pairs into other nodes than the graph's, as "
                      f"AttentiveFP's readout into one node per graph); their relevance ({edges.unmatched:.3g}, magnitude {magnitude:.3g}) is in the "
                      f"node masks but has no entry in edge_mask. Pass the edges the model propagates over as "
                      f"edge_index to see it per edge.", RuntimeWarning, stacklevel=4)

    @property
    def _dtype(self) -> torch.dtype:
        if isinstance(self.x, dict):
            return next(iter(self.x.values())).dtype
        if self.x.is_floating_point() or not self.mode.lookups:
            return self.x.dtype
        return self.mode.lookups[0][2].dtype

    def _cast(self, value):
        if isinstance(value, dict):
            return {k: v.to(self._dtype) for k, v in value.items()}
        return value.to(self._dtype)

    @property
    def edge(self) -> Union[None, Tensor, dict]:
        return None if self._edges is None else self._cast(self._edges.edge)

    @property
    def self_loops(self) -> Union[None, Tensor, dict]:
        return None if self._edges is None else self._cast(self._edges.self_loops)


def _categorical(source: Tensor, name: str, lookups: list, found: list) -> tuple[Tensor, Optional[Tensor]]:
    """The relevance of integer input ``source`` from its embedding lookups
    (those of ``lookups`` named ``name``, with relevance ``found``): per row
    and column (summed over the embedding dimensions of the column's
    lookups), and per row and embedding dimension (summed over the lookups;
    ``None`` where their widths differ)."""
    mine = [(columns, r) for (n, columns, _), r in zip(lookups, found) if n == name]
    dtype = mine[0][1].dtype
    rows = source.shape[0]
    per_column = torch.zeros(rows, source.shape[1] if source.dim() > 1 else 1, dtype=dtype, device=source.device)
    per_dim: Optional[Tensor] = None
    widths = {r.shape[-1] for _, r in mine}
    for columns, r in mine:
        r = r.reshape(rows, len(columns), -1) if r.dim() != 2 or len(columns) != 1 else r.unsqueeze(1)
        per_column[:, columns] += r.sum(-1).to(dtype)
        if len(widths) == 1:
            per_dim = r.sum(1) if per_dim is None else per_dim + r.sum(1)
    return per_column, per_dim


def num_nodes_of(x) -> Union[int, tuple[int, ...]]:
    """The number of nodes of ``x``; per node type for a ``{node_type: x}`` dict."""
    return tuple(v.shape[0] for v in x.values()) if isinstance(x, dict) else x.shape[0]


def resolve_task(p: Pass, settings: Settings, num_nodes, edge_index, kwargs: dict
                 ) -> tuple[ModelTaskLevel, ModelMode, ModelReturnType]:
    """Task level, mode and return type: as given, else read off the pass's output."""
    activated = p.logits is not p.out
    out = p.out.detach()
    check_output_shape(out, settings.mode)
    level = settings.task_level or infer_task_level(out, num_nodes, edge_index, kwargs)
    mode = settings.mode
    if mode is None:  # read off the output, then checked as a given one was
        check_one_graph(out, activated, level, kwargs)
        mode = infer_mode(out, activated)
        check_output_shape(out, mode)
    return_type = settings.return_type or infer_return_type(out, mode, activated)
    return level, mode, return_type


def same_output(a: Tensor, b: Tensor) -> bool:
    """Two outputs of the model agree up to float noise (NaN equal to NaN):
    in float64 to 1e-9 of the largest output, in float32 to 1e-4, in half
    precision to 16 rounding steps of its dtype (sums in another order, on a
    subgraph, differ by that much). Relative to the outputs' own size, so
    that small outputs are told apart as well as large ones."""
    finite = a[torch.isfinite(a)]
    scale = finite.abs().max().item() if finite.numel() else 1.0
    if not a.is_floating_point():
        rtol = 1e-4
    else:
        rtol = 1e-9 if a.dtype == torch.float64 else max(1e-4, 16 * torch.finfo(a.dtype).eps)
    return a.shape == b.shape and torch.allclose(a, b, rtol=rtol, atol=rtol / 10 * scale, equal_nan=True)


def _dtype_of(node) -> Optional[torch.dtype]:
    """The dtype of node relevance (a tensor, or one per node type)."""
    if isinstance(node, dict):
        node = next(iter(node.values()), None)
    return node.dtype if isinstance(node, Tensor) else None


def fall_back(model: torch.nn.Module, reason: str) -> None:
    """Warn that a subgraph did not prove itself and the full graph is used."""
    warnings.warn(f"LRP: the computation subgraph of the targets does not explain {type(model).__name__}: "
                  f"{reason}. Explaining on the full graph instead.", SubgraphWarning, stacklevel=4)


def _naming_hint(kwargs: dict, n: int, e: int) -> str:
    """Where a failed check may come from an input cut as per-node that holds
    one row per edge (a graph with as many edges as nodes), say so."""
    names = per_node_guesses(kwargs, n, e)
    if not names:
        return ""
    return (f" (or: {', '.join(map(repr, names))} has as many rows as the graph has nodes and edges, and was cut "
            f"as one row per node; name a per-edge input edge_*, as edge_weight and edge_attr are)")


def _spread(values: Optional[Tensor], positions: Tensor, size: int) -> Optional[Tensor]:
    if values is None:
        return None
    full = values.new_zeros((size, *values.shape[1:]))
    full[positions] = values
    return full


def _materialize(model: torch.nn.Module, x, edge_index, kwargs: dict) -> None:
    """Lazy parameters (``in_channels=-1``, as ``to_hetero`` and HGT/HAN models
    use) get their shapes from one plain forward, as the model's first call
    would give them; in eval mode, so that no running statistic moves."""
    if not any(isinstance(p, torch.nn.parameter.UninitializedParameter) for p in model.parameters()):
        return
    modes = [(m, m.training) for m in model.modules()]
    try:
        model.eval()
        with torch.no_grad():
            unwrap(model)(x, edge_index, **kwargs)
    finally:
        for m, training in modes:
            m.training = training


def _layer_state(model: torch.nn.Module) -> dict:
    """What layers hold that makes them compute something else than they
    would from their inputs, and that a pass turns off (``_prepared``), by
    ``(module, attribute)``: a ``_cached_*`` attribute that is set (the
    normalised graph of ``GCNConv``/``APPNP``/..., SGConv's propagated
    features; ``cached=True``), and PyG's explain edge masks while they are on
    (``set_masks``: ``_explain`` and ``_edge_mask``)."""
    found = {}
    for m in model.modules():
        if not isinstance(m, MessagePassing):  # (both live on PyG's message-passing layers)
            continue
        for k, v in vars(m).items():
            if k.startswith("_cached_") and v is not None:
                found[m, k] = v
        if vars(m).get("_explain") is True and getattr(m, "_edge_mask", None) is not None:
            found[m, "_edge_mask"] = m._edge_mask
    return found


def _coalesced(value):
    if isinstance(value, Tensor) and value.layout == torch.sparse_coo and not value.is_coalesced():
        return value.coalesce()
    return value


@contextmanager
def _plainly(model: torch.nn.Module) -> Iterator[list]:
    """Plain forwards of ``model`` beside a pass (checks): its modules locked
    (see :func:`~torch_geometric_lrp.mode._locked`), in eval mode, without
    grad; their training flags and layer caches (``_cached_*``, which a
    ``cached=True`` layer fills) put back after. Yields the modules."""
    modules = list(model.modules())
    with _locked(modules):
        kept = {key: getattr(*key) for key in ((m, k) for m in modules for k in vars(m) if k.startswith("_cached_"))}
        training = [(m, m.training) for m in modules]
        try:
            model.eval()
            with torch.no_grad():
                yield modules
        finally:
            for m, was in training:
                m.training = was
            for (m, k), v in kept.items():
                object.__setattr__(m, k, v)


def coalesced_adjacency(model: torch.nn.Module, x, edge_index, kwargs: dict) -> tuple:
    """``edge_index`` and ``kwargs`` with each ``torch.sparse`` COO tensor
    that is not coalesced replaced by its coalesced copy (duplicates summed,
    as a sparse product sums them): the pass runs message passing through
    PyG's ``collect``, which reads ``adj.indices()``, and torch refuses that
    on an uncoalesced tensor (the model's fused sparse product does not).
    The copy must give the model's output: one plain forward on each, in
    eval mode, only where there is such a tensor; a model that reads the
    duplicates themselves (``adj._indices()``) is refused. Nothing of the
    user's is changed."""
    edges, given = _coalesced(edge_index), {k: _coalesced(v) for k, v in kwargs.items()}
    if edges is edge_index and all(given[k] is kwargs[k] for k in kwargs):
        return edge_index, kwargs
    model = unwrap(model)
    with _plainly(model):
        before, after = model(x, edge_index, **kwargs), model(x, edges, **given)
    if isinstance(before, Tensor) and isinstance(after, Tensor) and not same_output(before, after):
        raise ValueError(
            "edge_index: the model's output on this uncoalesced sparse adjacency differs from its output on the "
            "coalesced copy (its duplicate entries summed), which the relevance pass needs (PyG's message "
            "passing reads adj.indices(), which torch refuses on an uncoalesced tensor): the model reads the "
            "duplicates themselves (adj._indices()). Pass the edges as a [2, E] edge_index, duplicates included "
            "(a multigraph).")
    return edges, given


def check_layer_state(model: torch.nn.Module, call: Callable[[], object]) -> None:
    """Refuse a model whose layers hold state that changes what it computes
    on this input.

    A pass never reads two kinds of layer state (it may run on a subgraph,
    and it explains the model itself): caches (``cached=True``: the layer
    reads its cache instead of the graph it is given, SGConv even instead of
    the features) and PyG's explain edge masks (``set_masks``, which scale
    every message). Where the model's own output ``call()`` differs from its
    output without them (a cache of another input, masks that are not all
    ones), an explanation would be of something the model did not compute.
    One plain forward with the state and one without decide, in eval mode,
    only where such state is held; nothing is changed."""
    model = unwrap(model)
    held = _layer_state(model)
    if not held:
        return
    with _plainly(model) as modules:
        try:
            given, failed = call(), None
        except Exception as error:  # noqa: BLE001 (decided below, by the forward without the state)
            given, failed = None, error
        with _prepared(model, modules):
            try:
                fresh = call()
            except Exception:  # noqa: BLE001 (the pass itself will say why the model fails)
                return
    if failed is None and (not isinstance(given, Tensor) or not isinstance(fresh, Tensor)
                           or same_output(given, fresh)):
        return
    how = (f"fails with them ({type(failed).__name__}: {failed})" if failed is not None else
           f"differs from the output without them (largest difference "
           f"{(given - fresh).abs().nan_to_num().max().item():.3g})" if given.shape == fresh.shape else
           f"has shape {tuple(given.shape)} with them and {tuple(fresh.shape)} without")
    names = {m: name for name, m in model.named_modules()}
    caches = [m for m, k in held if k != "_edge_mask"]
    masks = [m for m, k in held if k == "_edge_mask"]
    parts, fixes = [], []
    if caches:
        layers = list(dict.fromkeys(f'{names[m]!r} ({type(m).__name__})' for m in caches))
        parts.append(f"{', '.join(layers)} {'hold' if len(layers) > 1 else 'holds'} a cache (cached=True)")
        fixes.append(f"clear the caches (set {', '.join(sorted({k for m, k in held if k != '_edge_mask'}))} of "
                     f"those layers to None) or build the layers with cached=False")
    if masks:
        parts.append(f"{', '.join(dict.fromkeys(f'{names[m]!r} ({type(m).__name__})' for m in masks))} have PyG's "
                     f"explain edge masks on (set_masks), which scale their messages")
        fixes.append("clear the masks (torch_geometric.explain.algorithm.utils.clear_masks(model))")
    raise ValueError(f"model: {' and '.join(parts)}: the model's output on this input {how}. LRP explains what the "
                     f"layers compute from the input given (a pass reads neither caches nor explain masks), which is "
                     f"not what the model computes here. First {', and '.join(fixes)}.") from failed


def explain_rows(model: torch.nn.Module, x: Tensor, edge_index, kwargs: dict, rows: Optional[Tensor],
                 target: Optional[Tensor], settings: Settings) -> Relevance:
    """Relevance of the outputs ``rows`` of ``model(x, edge_index, **kwargs)``
    (all rows for ``None``), for ``target`` (default: the prediction), placed
    on the input graph. Node-level rows are explained on their computation
    subgraph where that proves itself. A residual beyond float error is
    reported (``warn_if_not_conserved``)."""
    result = _explain_rows(model, x, edge_index, kwargs, rows, target, settings)
    if settings.strict:  # strict=False warns about what it let through already
        total = input_total(result.node, result.edge_attr) if result.total is None else result.total
        warn_if_not_conserved(model, result.score, total, result.absorbed, result.lost, dtype=_dtype_of(result.node))
    return result


#: A residual above this share of the relevance involved (score, inputs,
#: absorbed, lost) is reported: float error stays orders of magnitude below.
#: In half precision the share is 16 rounding steps of the dtype (bfloat16:
#: 0.125), which rounding alone reaches in a long sum.
RESIDUAL_WARNING = 1e-3


def residual_tolerance(dtype: Optional[torch.dtype]) -> float:
    """The share of the relevance involved above which a residual is reported."""
    if dtype is None or not dtype.is_floating_point:
        return RESIDUAL_WARNING
    return max(RESIDUAL_WARNING, 16 * torch.finfo(dtype).eps)


def warn_if_not_conserved(model: torch.nn.Module, score: float, total: float, absorbed: float, lost: float,
                          what: str = "", magnitude: float = 0.0, dtype: Optional[torch.dtype] = None) -> bool:
    """Warn (and return ``True``) where the accounting does not add up:
    every op that takes relevance reports what it keeps, so a residual
    ``score - inputs - absorbed - lost`` beyond float error means that some
    op changed relevance unseen. (An output that does not depend on the
    inputs has been warned about where the pass found it, and so has
    relevance that is not finite.) ``magnitude``: the scale of the relevance
    involved where the amounts are sums that may cancel (a batch's targets:
    the sum of their ``|score|``); ``dtype``: the relevance's (see
    :func:`residual_tolerance`)."""
    if total == 0 and absorbed == 0 and lost == 0:
        return False
    if not math.isfinite(total) and math.isfinite(score):  # told by the pass, with where it came from
        return False
    residual = score - total - absorbed - lost
    scale = abs(score) + abs(total) + abs(absorbed) + abs(lost) + magnitude
    if abs(residual) <= residual_tolerance(dtype) * scale + 1e-9:
        return False
    if math.isfinite(total) and not (math.isfinite(absorbed) and math.isfinite(lost)):
        # NaN in what biases, constants or stabilisers kept, finite inputs: the forward made NaN
        # values that the model then replaced (attention over an empty set, PyG's nan_to_num), and
        # the backward multiplied them by 0 relevance. The inputs' relevance is not touched by it.
        warnings.warn(f"LRP: the relevance of {type(unwrap(model)).__name__}{what} cannot be accounted for: "
                      f"absorbed {absorbed:.6g} and lost {lost:.6g} are not finite while the inputs' relevance "
                      f"({total:.6g} for a score of {score:.6g}) is. The forward computed NaN or inf values that "
                      f"it then replaced (attention over an empty set, such as a node without incoming edges, "
                      f"replaced by nan_to_num), and those entries take part in the accounting. The masks are "
                      f"finite, but conservation cannot be checked: give every node an incoming edge (a "
                      f"self-loop) to check it.", RuntimeWarning, stacklevel=4)
        return True
    warnings.warn(f"LRP: the relevance of {type(unwrap(model)).__name__}{what} does not add up: score {score:.6g} = "
                  f"inputs {total:.6g} + absorbed {absorbed:.6g} + lost {lost:.6g} leaves a residual of "
                  f"{residual:.3g}, so some op changed relevance without a rule seeing it (a gradient hook on a "
                  f"tensor of the forward, for example). lrp.check_conservation(model, ...) shows which module it "
                  f"happens in.", RuntimeWarning, stacklevel=4)
    return True


def _explain_rows(model: torch.nn.Module, x: Tensor, edge_index, kwargs: dict, rows: Optional[Tensor],
                  target: Optional[Tensor], settings: Settings) -> Relevance:
    _materialize(model, x, edge_index, kwargs)
    if not isinstance(edge_index, dict):
        edge_index, kwargs = coalesced_adjacency(model, x, edge_index, kwargs)
    check_layer_state(model, lambda: unwrap(model)(x, edge_index, **kwargs))
    if rows is not None:  # given as a list or int, made on the CPU: where the graph is
        rows = rows.to(next(iter(x.values())).device if isinstance(x, dict) else x.device)
    if isinstance(x, dict):
        # A heterogeneous graph is explained as a whole: the cut is made on one
        # node and edge numbering (a per-type cut is not built yet).
        return on_graph(model, x, edge_index, kwargs, rows, target, settings)
    n = x.shape[0]
    if settings.subgraph and rows is not None and not is_sparse(edge_index) \
            and settings.task_level in (None, ModelTaskLevel.node) and "edge_label_index" not in kwargs \
            and (not rows.numel() or int(rows.max()) < n):
        e = edge_index.shape[1]
        hops = count_hops(model)
        c = cut(rows, hops, edge_index, n, message_flow(model))
        if pays_off(c, n, e) and not slice_inputs(kwargs, c, n, e)[1]:
            result = on_cut(model, x, edge_index, kwargs, c, rows, target, settings, num_hops=hops)
            if result is not None:
                return replace(result, total=input_total(result.node, result.edge_attr),
                               node=_spread(result.node, c.nodes, n), edge=_spread(result.edge, c.edge_id, e),
                               self_loops=_spread(result.self_loops, c.nodes, n),
                               edge_attr=_spread(result.edge_attr, c.edge_id, e),
                               embedding=_spread(result.embedding, c.nodes, n))
    return on_graph(model, x, edge_index, kwargs, rows, target, settings)


def on_graph(model: torch.nn.Module, x: Tensor, edge_index, kwargs: dict, rows: Optional[Tensor],
             target: Optional[Tensor], settings: Settings) -> Relevance:
    """The pass on the whole input."""
    with Pass(model, settings) as p:
        out = p.forward(x, edge_index, kwargs)
        level, mode, return_type = resolve_task(p, settings, num_nodes_of(x), edge_index, kwargs)
        check_mask_rows(settings.index_mask_rows, out.shape[0])
        if rows is None:
            rows = torch.arange(out.shape[0], device=out.device)
        elif rows.numel() and int(rows.max()) >= out.shape[0]:
            nodes = num_nodes_of(x)
            hint = (f" The model gives {out.shape[0]} rows for the graph's {nodes} nodes, and node-level "
                    f"explanations read the row of each explained node: explain a graph- or edge-level model with "
                    f"lrp.explain or PyG's Explainer (task_level='graph')."
                    if level == ModelTaskLevel.node and isinstance(nodes, int) and out.shape[0] < nodes else "")
            raise ValueError(f"index: row {int(rows.max())} is out of range for an output of "
                             f"{out.shape[0]} rows.{hint}")
        target = check_target(target, mode)
        return _relevance_at(p, out, rows, rows, None if settings.target_per_row else out.shape[0], target, level,
                             mode, return_type)


def full_output(model: torch.nn.Module, x: Tensor, edge_index: Tensor, kwargs: dict,
                settings: Settings) -> Optional[Tensor]:
    """The model's plain output on the whole input, the reference a cut is
    checked against (:func:`on_cut`'s ``reference``); ``None`` where the
    model fails on it (each cut is then checked on its own)."""
    with Pass(model, settings) as p:
        try:
            return p.plain(x, edge_index, kwargs)
        except Exception:  # noqa: BLE001 (no reference: the cuts' own checks decide, and report)
            return None


def on_cut(model: torch.nn.Module, x: Tensor, edge_index: Tensor, kwargs: dict, c: Cut, rows: Tensor,
           target: Optional[Tensor], settings: Settings, each: bool = False, reference: Optional[Tensor] = None,
           num_hops: Optional[int] = None, lean_cut: bool = False, copies: bool = False
           ) -> Union[None, Relevance, list[Relevance], "InFull"]:
    """The pass on the cut ``c`` (whose targets ``c.index`` are the input's
    nodes ``rows``), with relevance on the cut's nodes and edges; ``None``
    where the model is not node-level, or (with a :class:`SubgraphWarning`)
    where the cut does not prove itself.

    ``each=True``: one forward, then one backward per row (the forward
    retained in between), so each row's relevance is its own; a list with one
    :class:`Relevance` per row, each with its own ``lost`` and ``absorbed``.
    The ring check is then the caller's, on each row's own cut.

    ``reference``: the full graph's output (:func:`full_output`), where the
    caller has it already (``explain_nodes``, computed once for all its
    batches): the check compares against it, whatever the graph's size.

    ``num_hops``: the hops ``c`` was cut for (default: :func:`count_hops`).

    The pass first runs on the lean cut
    (:func:`~torch_geometric_lrp.explainers.subgraph.lean`) with its layers
    trimmed to the messages the targets read
    (:mod:`~torch_geometric_lrp.explainers.trim`), and the check
    (on the full graph, or on the whole cut with unrelated nodes added)
    compares its outputs too; a model that fails it there (one that reads
    out-degrees, or propagates more often than counted) gets the cut in
    full, and so do the later cuts of the same call.

    ``lean_cut=True``: ``c`` is lean already (``cut(..., lean=True)``), for
    a caller whose check is the full graph's output (``reference``, or a
    graph of at most ``FULL_CHECK_EDGES`` edges; :func:`proves_lean_cuts`):
    where it fails, :class:`InFull`, and the caller cuts in full.

    ``copies=True``: ``c`` holds several targets' subgraphs side by side
    (``explain_nodes``), which together can hold what a statistic of the
    whole graph reads (a maximum over all nodes), so that the full graph's
    output proves nothing about one copy reading another: the check with
    unrelated nodes added, which changes such statistics, runs as well, on
    the first such batch of a call that passes it (``Settings.copies_checked``;
    the nodes it adds have features beyond the range of ``x``, so a maximum,
    a minimum, a sum or a mean over all nodes changes in every batch)."""
    hops = count_hops(model) if num_hops is None else num_hops
    if lean_cut and not proves_lean_cuts(reference, edge_index.shape[1]):
        raise ValueError("lean_cut: a lean cut needs the full graph's output as its check (a check on the cut "
                         "itself cannot see the edges it leaves out).")
    result = _on_cut(model, x, edge_index, kwargs, c, rows, target, settings, each, reference, hops, lean_cut,
                     copies)
    if isinstance(result, InFull):
        settings.lean = False
        if lean_cut:
            return result
        result = _on_cut(model, x, edge_index, kwargs, c, rows, target, settings, each, result.reference, hops,
                         False, copies)
    return result


def proves_lean_cuts(reference: Optional[Tensor], num_edges: int) -> bool:
    """Whether a cut's check is the full graph's output (``reference``, or
    the graph is small enough to run), which proves a cut built lean: a
    check on the cut itself runs without the edges it leaves out."""
    return reference is not None or num_edges <= FULL_CHECK_EDGES


@dataclass
class InFull:
    """The answer of a pass on a cut whose lean cut or trimmed layers did
    not prove themselves: the cut runs again in full (``_on_cut`` to
    :func:`on_cut`), or, for a cut made lean (``lean_cut=True``), the
    caller cuts in full and runs :func:`on_cut` again (``reference``: the
    full graph's output, where the check computed it)."""

    reference: Optional[Tensor]


#: Cuts with fewer edges run untrimmed: trimming costs a fixed amount per
#: pass (the hop of every node, a hook per layer, edge routing by search)
#: that fewer messages do not repay below about this size.
TRIM_MIN_EDGES = 4_000


def _on_cut(model: torch.nn.Module, x: Tensor, edge_index: Tensor, kwargs: dict, c: Cut, rows: Tensor,
            target: Optional[Tensor], settings: Settings, each: bool, reference: Optional[Tensor], num_hops: int,
            lean_cut: bool, copies: bool = False):
    """:func:`on_cut`, once; :class:`InFull` where its lean, trimmed pass failed."""
    bound = layout_bound(model)
    if bound:
        fall_back(model, f"{', '.join(bound)} reads its edges' layout (four neighbours per edge, in order), "
                         f"which a subgraph changes")
        return None
    n, e = x.shape[0], edge_index.shape[1]
    # The check: on a graph of up to FULL_CHECK_EDGES edges, the full graph's
    # output itself (a proof that the cut gives the targets' outputs); above,
    # the cut with unrelated nodes added, which costs about what the cut costs
    # (a model that saturates on both could still read the graph as a whole).
    context = None if reference is not None or e <= FULL_CHECK_EDGES else \
        with_context(c, n, edge_index, message_flow(model))
    # several targets' copies side by side: the full graph's output is no proof (see on_cut's copies)
    also = with_context(c, n, edge_index, message_flow(model)) \
        if copies and context is None and not settings.copies_checked else None
    # The pass runs without the messages into the ring (about half of the
    # cut's edges; they only count out-degrees). Both checks run the model on
    # the whole cut or more, so a model that reads out-degrees fails them, and
    # the cut is then run in full.
    flow = message_flow(model)
    slim = lean(c, flow) if settings.lean and not lean_cut else None
    run, keep = (c, None) if slim is None else slim
    with Pass(model, settings) as p:
        def with_unrelated(ctx):  # the model's output on the cut with unrelated nodes added
            return p.plain(context_features(x, ctx), ctx.edge_index, context_inputs(kwargs, ctx, n, e))
        try:
            check = reference if reference is not None else p.plain(x, edge_index, kwargs) if context is None \
                else with_unrelated(context)
        except Exception as error:  # the model cannot run on the check's input: no proof
            check = error
        try:
            check_also = None if also is None else with_unrelated(also)
        except Exception as error:  # noqa: BLE001 (no proof: decided below)
            check_also = error
        inputs = slice_inputs(kwargs, run, n, e)[0]
        trimming = p.trim(hop_distance(run.edge_index, c.index, c.num_nodes, num_hops, flow), num_hops) \
            if settings.lean and run.edge_id.numel() >= TRIM_MIN_EDGES else None

        def slimmed() -> bool:  # the pass left messages out: a lean cut, or trimmed layers
            return lean_cut or keep is not None or (trimming is not None and trimming.dropped)
        try:
            with Propagations(model) as propagations:
                out = p.forward(x[c.nodes], run.edge_index, inputs)
        except UnsupportedOpError:
            raise  # an op without a rule: the full graph has it too
        except Exception as error:  # e.g. a parameter with one row per node of the graph
            if context is None and isinstance(check, Exception):
                raise  # the full graph fails too: the model's own error
            if slimmed():
                return InFull(check if context is None else None)
            if not run.edge_index.shape[1]:  # a layer that cannot run without edges (isolated targets): no news
                return None
            fall_back(model, f"its forward failed on the subgraph ({type(error).__name__}: {error})")
            return None
        # a graph-level output of a one-node cut also has one row per node:
        # the check's output (on more nodes) tells them apart
        rows_per_node = out.shape[0] == c.num_nodes and (
            isinstance(check, Exception) or check.shape[0] == (n if context is None else context.num_nodes))
        if not rows_per_node:
            # not one row per node of the cut: a graph-level output, the first rows only (out[:batch_size],
            # as NeighborLoader models return), a parameter per node of the graph: the full graph decides
            return None
        level, mode, return_type = resolve_task(p, settings, c.num_nodes, run.edge_index, inputs)
        if level != ModelTaskLevel.node:
            return None
        beyond = propagations.beyond()
        if beyond:  # the cut holds fewer hops than the model reads (a check with context nodes cannot see it)
            fall_back(model, f"its message passing reaches further than the hops counted for the subgraph: "
                             f"{', '.join(beyond)}")
            return None
        check_mask_rows(settings.index_mask_rows, n)
        target = check_target(target, mode)
        seed, target = seed_of(p.logits, c.index, rows, None if settings.target_per_row else n, target, mode,
                               joint=not each)
        if isinstance(check, Exception):
            fall_back(model, f"its forward failed on the full graph ({check})" if context is None else
                      f"its forward failed with unrelated nodes added to the subgraph ({check})")
            return None
        if context is not None and not bool(torch.isfinite(check[context.index]).all()):
            # NaN equals NaN in same_output, as the full graph's check may well give it too; this
            # check is a test only, and a NaN target on the subgraph proves nothing (an isolated
            # target of a model that divides by the number of edges)
            fall_back(model, "the targets' outputs with unrelated nodes added are not finite, which the check "
                             "cannot compare")
            return None
        if not same_output(out.detach()[c.index], check[rows] if context is None else check[context.index]):
            if slimmed():  # perhaps only what the lean, trimmed pass leaves out
                return InFull(check if context is None else None)
            fall_back(model, ("the targets' outputs on the subgraph differ from the full graph's, so the model reads "
                              "further than its message-passing layers count (a layer applied more often than it "
                              "appears) or reads the graph as a whole (a statistic over all nodes, node positions "
                              "or the number of nodes)" if context is None else
                              "the targets' outputs change when unrelated nodes and edges are present, so the model "
                              "reads the graph as a whole (a statistic over all nodes or edges, node positions, the "
                              "number of nodes or edges) or computes features from edges further out than its "
                              "layers count (a neighbour's degree, a random-walk encoding)") +
                      _naming_hint(kwargs, n, e))
            return None
        # (a forward that fails on the unrelated nodes, as a lookup of ids read from x does on features
        # beyond its range, leaves the full graph's proof as the check: nothing to tell either way)
        if also is not None and not isinstance(check_also, Exception) and not same_output(
                out.detach()[c.index], check_also[also.index]):
            if slimmed():
                return InFull(check)
            fall_back(model, "the targets' outputs change when unrelated nodes and edges are present, so the model "
                             "reads the graph as a whole (a statistic over all nodes or edges), which the subgraphs of "
                             "several targets side by side can reproduce together" + _naming_hint(kwargs, n, e))
            return None
        if also is not None:
            settings.copies_checked = True
        if each:
            return [_on_edges_of(_relevance_at(p, out, c.index[k:k + 1], rows[k:k + 1], n, target[k:k + 1], level,
                                               mode, return_type, retain=k + 1 < rows.numel()), keep)
                    for k in range(rows.numel())]
        node, edge_attr, lost, absorbed = p.relevance(seed)
        edge, self_loops, embedding = p.edge, p.self_loops, p.embedding
    edge, edge_attr = _widen(edge, keep), _widen(edge_attr, keep)
    if reaches_ring(c, node, edge, edge_attr, self_loops):
        fall_back(model, "relevance reached nodes beyond the hops its message-passing layers count (a layer "
                          "applied more often than it appears, or a pooling fed back to the nodes)")
        return None
    return Relevance(output=out.detach()[c.index], seed=seed, target=target, node=node, edge=edge,
                     self_loops=self_loops, edge_attr=edge_attr, lost=lost, absorbed=absorbed,
                     task_level=level, mode=mode, return_type=return_type, embedding=embedding)


def _widen(values: Optional[Tensor], keep: Optional[Tensor]) -> Optional[Tensor]:
    """Per-edge ``values`` of a lean cut on all the edges of its cut (0 on
    the messages into the ring it left out)."""
    if values is None or keep is None:
        return values
    return _spread(values, keep.nonzero().view(-1), keep.numel())


def _on_edges_of(r: Relevance, keep: Optional[Tensor]) -> Relevance:
    return r if keep is None else replace(r, edge=_widen(r.edge, keep), edge_attr=_widen(r.edge_attr, keep))


def _relevance_at(p: Pass, out: Tensor, place: Tensor, rows: Tensor, num_rows: int, target: Optional[Tensor],
                  level, mode, return_type, retain: bool = False) -> Relevance:
    """The backward over the forward of ``p`` for the explained ``rows``
    (at the output's rows ``place``; see :func:`seed_of`)."""
    seed, target = seed_of(p.logits, place, rows, num_rows, target, mode)
    node, edge_attr, lost, absorbed = p.relevance(seed, retain=retain)
    return Relevance(output=out.detach()[place], seed=seed, target=target, node=node, edge=p.edge,
                     self_loops=p.self_loops, edge_attr=edge_attr, lost=lost, absorbed=absorbed,
                     task_level=level, mode=mode, return_type=return_type, embedding=p.embedding)


def _node_mask(relevance: Tensor, mask_type: Optional[MaskType]) -> Optional[Tensor]:
    if mask_type is None:
        return None
    if mask_type == MaskType.attributes:
        return relevance
    if mask_type == MaskType.object:
        return relevance.sum(dim=-1, keepdim=True)
    return relevance.sum(dim=0, keepdim=True)  # common_attributes


def _total(value) -> float:
    if value is None:
        return 0.0
    if isinstance(value, dict):
        return sum(_total(v) for v in value.values())
    return float(value.sum(dtype=torch.float64))


def _hetero_explanation(node: dict, edge: Optional[dict], self_loops: Optional[dict], edge_attr: Optional[dict],
                        node_mask_type: Optional[MaskType], edge_mask_type: Optional[MaskType],
                        show) -> HeteroExplanation:
    """The masks of a heterogeneous graph: ``node_mask`` per node type,
    ``edge_mask`` and ``edge_attr_mask`` per edge type, ``self_loop_relevance``
    per node type."""
    explanation = HeteroExplanation()
    if node_mask_type is not None:
        explanation.set_value_dict("node_mask", {k: show(_node_mask(r, node_mask_type)).detach()
                                                 for k, r in node.items()})
    if edge_mask_type is not None and edge is not None:
        explanation.set_value_dict("edge_mask", {k: show(r).detach() for k, r in edge.items()})
    if edge_attr is not None:
        explanation.set_value_dict("edge_attr_mask", {k: show(r).detach() for k, r in edge_attr.items()})
    if self_loops is not None:
        explanation.set_value_dict("self_loop_relevance", {k: r.detach() for k, r in self_loops.items()})
    return explanation


def input_total(node, edge_attr) -> float:
    """Relevance on the inputs, ``x`` and ``edge_attr`` (summed over types
    for a heterogeneous graph), in float64."""
    return _total(node) + _total(edge_attr)


def explanation_of(node: Tensor, edge: Optional[Tensor], self_loops: Optional[Tensor], edge_attr: Optional[Tensor],
                   score: float, accounting: Optional[tuple[float, float]], node_mask_type: Optional[MaskType],
                   edge_mask_type: Optional[MaskType], view: str, total: Optional[float] = None,
                   embedding: Optional[Tensor] = None, flow: str = "source_to_target") -> Explanation:
    """An ``Explanation`` with masks built from relevance, and its accounting:
    ``score``, ``relevance_total`` and, where ``accounting = (absorbed, lost)``
    was measured for it, ``absorbed``, ``lost`` and ``residual`` (else
    ``unassigned = score - relevance_total``). For integer ``x``, ``node``
    is the relevance per categorical column and ``embedding`` (where given)
    that per embedding dimension, kept as ``embedding_relevance``. A
    model's ``flow="target_to_source"`` is kept as ``flow`` (pictures find a
    target's neighbourhood along it)."""
    show = MASK_VIEWS[view]
    if isinstance(node, dict):
        explanation = _hetero_explanation(node, edge, self_loops, edge_attr, node_mask_type, edge_mask_type, show)
    else:
        node_mask = _node_mask(node, node_mask_type)
        explanation = Explanation(
            node_mask=None if node_mask is None else show(node_mask).detach(),
            edge_mask=None if edge_mask_type is None or edge is None else show(edge).detach(),
        )
        if edge_attr is not None:
            explanation.edge_attr_mask = show(edge_attr).detach()
        if self_loops is not None:
            explanation.self_loop_relevance = self_loops.detach()
    if embedding is not None:
        explanation.embedding_relevance = show(embedding).detach()
    if flow != "source_to_target":
        explanation.flow = flow
    explanation.score = score
    explanation.relevance_total = input_total(node, edge_attr) if total is None else total
    if accounting is None:
        explanation.unassigned = score - explanation.relevance_total
    else:
        explanation.absorbed, explanation.lost = accounting
        explanation.residual = score - explanation.relevance_total - explanation.absorbed - explanation.lost
    return explanation
