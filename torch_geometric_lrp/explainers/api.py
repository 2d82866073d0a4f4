"""One-call explanations: ``lrp.explain`` and ``lrp.explain_nodes``."""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from itertools import accumulate
from typing import Iterator, Optional, Union

import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData
from torch_geometric.explain import Explanation
from torch_geometric.explain.config import MaskType, ModelConfig, ModelMode, ModelReturnType, ModelTaskLevel
from tqdm.auto import tqdm

from ..rules import Rule
from . import distributed as shard
from . import core
from ..mode import unwrap
from .core import (InFull, Relevance, Settings, _materialize, _spread, check_layer_state, explain_rows,
                   explanation_of, fall_back, full_output, input_total, on_cut, on_graph, proves_lean_cuts,
                   warn_if_not_conserved)
from .subgraph import (Cut, Incidence, count_hops, cut, cut_each, disjoint_union, message_flow, reaches_ring,
                       spelled_out_each, split)
from .targets import (MASK_VIEWS, check_batch_size, check_edge_index, check_flags, check_graph_inputs, check_rows,
                      check_rules, check_target, check_view, check_x, enum_of, mask_rows)

__all__ = ["explain", "explain_nodes", "NodeRelevance"]


def _edge_mask_type(value) -> Optional[MaskType]:
    value = enum_of(MaskType, value, "edge_mask_type")
    if value not in (None, MaskType.object):
        raise ValueError(f"edge_mask_type: must be 'object' or None, got {value.value!r} (edge relevance is one "
                         f"value per edge).")
    return value


def explain(
    model: torch.nn.Module,
    x: Union[Tensor, dict, Data, HeteroData],
    edge_index: Union[None, Tensor, dict] = None,
    *,
    index: Optional[Union[int, Tensor]] = None,
    target: Optional[Tensor] = None,
    rules: Union[None, Rule, dict] = None,
    node_mask_type: Optional[str] = "attributes",
    edge_mask_type: Optional[str] = "object",
    mask: str = "signed",
    subgraph: bool = True,
    strict: bool = True,
    task_level: Optional[str] = None,
    mode: Optional[str] = None,
    return_type: Optional[str] = None,
    **kwargs,
) -> Explanation:
    """Explain ``model(x, edge_index, **kwargs)`` with LRP in one call.

    One forward and one backward pass of ``model`` itself: on the targets'
    computation subgraph for node-level outputs (where it proves itself, see
    :class:`~torch_geometric_lrp.LRP`), else on the whole input. What is not
    given is read off that forward's output: the task level from its shape
    (and ``edge_label_index`` / ``batch``), the mode (multiclass after a
    final softmax / log-softmax or with several raw outputs per row, binary
    after a final sigmoid, with one label or several; a single raw output
    per row must say ``mode=``) and the return type (raw without a final
    activation).

    A heterogeneous graph is given as ``x_dict`` and ``edge_index_dict``
    (or as one ``HeteroData``) and gets a ``HeteroExplanation``: the masks
    per node type and edge type, the accounting summed over types.

    Parameters
    ----------
    x : Tensor, dict, Data or HeteroData
        Node features (``{node_type: features}`` for a heterogeneous graph),
        or the whole graph: ``x`` and ``edge_index`` (``x_dict`` and
        ``edge_index_dict``) are then taken from it, and ``edge_index``
        stays ``None``; so are the attributes that the model's ``forward``
        takes by name (``edge_attr``, ``batch``, ...; ``edge_attr_dict``
        collected per type), unless given in ``kwargs``.
    edge_index : Tensor or dict
        The edges (``{edge_type: [2, E_t]}`` for a heterogeneous graph).
    index : int, LongTensor or BoolTensor, optional
        The output rows to explain (a boolean mask selects its ``True``
        rows); all rows by default.
    target : Tensor, optional
        The class (multiclass) or the 0/1 labels (binary) to explain, one
        entry per output row or per explained row; default: the prediction.
        A regression output is explained as it is (at its logit where a
        final sigmoid squashes it): a target (the observed value) does not
        change the relevance.
    rules, mask, subgraph, strict
        As for :class:`~torch_geometric_lrp.LRP`.
    node_mask_type, edge_mask_type
        As for PyG's ``Explainer``; an edge mask needs ``edge_index`` as a
        ``[2, E]`` tensor.
    task_level, mode, return_type : str, optional
        As in PyG's ``ModelConfig`` (``'node'`` / ``'edge'`` / ``'graph'``;
        ``'multiclass_classification'`` / ``'binary_classification'`` /
        ``'regression'``; ``'raw'`` / ``'probs'`` / ``'log_probs'``); read
        off the output where not given.

    Returns
    -------
    Explanation or HeteroExplanation
        The masks and accounting of :class:`~torch_geometric_lrp.LRP`, the
        model's inputs, ``index`` (the explained rows) and ``target`` (the
        explained class, labels or value of each explained row).
    """
    _check_signature(model)
    kwargs = {**_graph_kwargs(model, x, kwargs), **kwargs}
    x, edge_index = _graph_inputs(x, edge_index)
    check_x(x, categorical=True, hetero=True)
    edge_mask_type = _edge_mask_type(edge_mask_type)
    node_mask_type = enum_of(MaskType, node_mask_type, "node_mask_type")
    edge_index = check_edge_index(edge_index, edge_mask_type, x)
    check_graph_inputs(x, edge_index, kwargs)
    rows = check_rows(index, None, allow_empty=False)
    check_rules(rules)
    check_view(mask)
    check_flags(strict=strict, subgraph=subgraph)
    settings = Settings(task_level=enum_of(ModelTaskLevel, task_level, "task_level"),
                        mode=enum_of(ModelMode, mode, "mode"),
                        return_type=enum_of(ModelReturnType, return_type, "return_type"),
                        rules=rules, strict=strict, subgraph=subgraph, track_edges=edge_mask_type is not None,
                        index_mask_rows=mask_rows(index))
    target = check_target(target, settings.mode)
    result = explain_rows(model, x, edge_index, kwargs, rows, target, settings)
    explanation = explanation_of(result.node, result.edge, result.self_loops, result.edge_attr, result.score,
                                 (result.absorbed, result.lost), node_mask_type, edge_mask_type, mask,
                                 total=result.total, embedding=result.embedding, flow=message_flow(model))
    explanation._model_config = ModelConfig(mode=result.mode, task_level=result.task_level,
                                            return_type=result.return_type)
    explanation.index = rows
    explanation.target = result.target
    explanation._model_args = list(kwargs)
    hetero = isinstance(x, dict)
    if hetero:  # as PyG's Explainer stores a heterogeneous graph's inputs: per type
        explanation.set_value_dict("x", x)
        explanation.set_value_dict("edge_index", edge_index)
    else:
        explanation.x, explanation.edge_index = x, edge_index
    for key, value in kwargs.items():
        if hetero and isinstance(value, dict):
            explanation.set_value_dict(key[:-5] if key.endswith("_dict") else key, value)
        else:
            explanation[key] = value
    return explanation


def _graph_kwargs(model: torch.nn.Module, data, given: dict) -> dict:
    """The attributes of a ``Data`` given as ``x`` that ``model``'s forward
    takes by name (``edge_attr``, ``edge_weight``, ``batch``, ...; for a
    ``HeteroData``, ``edge_attr_dict`` and the like, collected per type),
    except those given as keyword arguments: the model runs on the graph as
    given. Nothing for tensors, or a forward that takes only ``**kwargs``."""
    if not isinstance(data, (Data, HeteroData)):
        return {}
    try:
        parameters = inspect.signature(unwrap(model).forward).parameters
    except (TypeError, ValueError):  # no signature to read
        return {}
    positional = [p for p in parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    taken = {p.name for p in positional[:2]}  # x and edge_index go there
    found = {}
    for name, p in parameters.items():
        if name in taken or name in given or p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            continue
        if isinstance(data, HeteroData):
            if name.endswith("_dict") and name[:-5] in data.keys():
                found[name] = data.collect(name[:-5])
        elif name in data.keys():
            found[name] = data[name]
    return found


def _check_signature(model: torch.nn.Module) -> None:
    """The forward takes ``(x, edge_index, ...)``: a ``forward(data)`` would
    fail inside the pass with its own ``TypeError`` about arguments."""
    try:
        parameters = inspect.signature(unwrap(model).forward).parameters.values()
    except (TypeError, ValueError):  # no signature to read
        return
    if any(p.kind == p.VAR_POSITIONAL for p in parameters):
        return
    positional = [p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) < 2:
        raise TypeError(f"model: {type(unwrap(model)).__name__}.forward takes {len(positional)} positional "
                        f"argument(s) ({', '.join(positional) or 'none'}); LRP calls model(x, edge_index, "
                        f"**kwargs), as PyG's Explainer does. Give it a forward(x, edge_index, ...), or wrap it in "
                        f"a module whose forward(x, edge_index, batch=None) builds the Data and calls it.")


def _graph_inputs(x, edge_index) -> tuple:
    """``(x, edge_index)``, taken out of a ``Data`` / ``HeteroData`` given as ``x``."""
    if isinstance(x, (Data, HeteroData)):
        if edge_index is not None:
            raise ValueError(f"edge_index: the edges are taken from the {type(x).__name__} given as x; pass "
                             f"edge_index=None, or pass x and edge_index as tensors (dicts).")
        if isinstance(x, HeteroData):
            return x.x_dict, x.edge_index_dict
        return x.x, x.edge_index
    if edge_index is None:
        raise TypeError("edge_index: missing; pass the edges, or the whole graph (Data / HeteroData) as x.")
    return x, edge_index


@dataclass
class NodeRelevance:
    r"""The relevance of many node-level targets as sparse matrices, what
    :func:`explain_nodes` returns with ``output='sparse'``.

    Row ``k`` belongs to the target ``index[k]``. With ``R_k`` the relevance
    of the input for that target (``x``: ``[N, F]``), and the mask view
    ``show`` (``'signed'``, ``'abs'`` or ``'positive'``):

    .. math::

        \text{node\_relevance}_{k, v} = \text{show}\Big(\sum_f R_{k, v f}\Big), \qquad
        \text{edge\_relevance}_{k, j} = \text{show}(R_{k, j}),

    where ``R_{k, j}`` is the relevance that flowed through the messages of
    input edge ``j``. Entries that are exactly 0 are not stored (the nodes
    and edges outside the target's computation subgraph among them).

    Attributes
    ----------
    index : LongTensor ``[T]``
        The target nodes.
    target : Tensor ``[T]`` (or ``[T, C]`` for several binary labels)
        The explained class, labels or value of each target.
    score, relevance_total : Tensor ``[T]``, float64
        The target's score and the relevance of its inputs (``x`` and
        ``edge_attr``); their difference is what biases and stabilisers
        absorbed and what was lost.
    node_relevance : sparse COO ``[T, N]``
        Node relevance summed over features.
    edge_relevance : sparse COO ``[T, E]``
        Edge relevance.
    edge_attr_relevance : sparse COO ``[T, E]``, optional
        Relevance of ``edge_attr`` summed over features, where the model
        reads ``edge_attr``.
    """

    index: Tensor
    target: Tensor
    score: Tensor
    relevance_total: Tensor
    node_relevance: Tensor
    edge_relevance: Tensor
    edge_attr_relevance: Optional[Tensor] = None


OUTPUTS = ("list", "sparse")
STRATEGIES = ("auto", "copies", "shared")
#: For ``strategy='auto'``, measured with ``benchmarks/explain_shared.py``
#: (3-layer GCN, 2 CPU cores): a node or edge of the disjoint copies costs
#: about 4x (3-5x; cuts with ring slots, mostly edges) what it costs in one
#: backward over the union, and a backward pass has a fixed cost (hooks,
#: Python) of about as much as 2000 nodes and edges.
COPIES_WEIGHT = 4
BACKWARD_OVERHEAD = 2000
#: For ``strategy='auto'``: the most nodes and edges one pass of disjoint
#: copies holds. Past about this size (hidden width 64) the pass's tensors
#: leave the CPU caches and each node and edge costs 2-3x more, so a batch
#: of large subgraphs runs as several passes of this size
#: (``benchmarks/explain_shared.py``: at 100k nodes one target per pass took
#: 118 ms per target, 16 per pass 267 ms).
COPIES_BUDGET = 100_000
#: The same for passes whose layers are trimmed (:mod:`.trim`, the default):
#: they propagate about a tenth of a cut's messages, and at 100k nodes
#: 64 targets per pass cost about 0.9x of 4 per pass.
TRIMMED_BUDGET = 400_000
#: Both budgets are multiplied by this where the graph is on a GPU. There no
#: cache cliff shows at these sizes and a pass costs mostly its fixed part
#: (Python, kernel launches): on an H100 at 100k nodes, 256 targets a batch
#: took 1.36 ms per target in passes of 400k nodes and edges, 0.77 in passes
#: 8x larger and 0.62 in passes 32x larger (``benchmarks/explain_shared.py
#: --device cuda``), with 1.2 GiB of GPU memory at most.
GPU_BUDGET_FACTOR = 32


def explain_nodes(
    model: torch.nn.Module,
    x: Union[Tensor, Data],
    edge_index: Optional[Tensor] = None,
    index: Optional[Tensor] = None,
    *,
    target: Optional[Tensor] = None,
    rules: Union[None, Rule, dict] = None,
    mode: Optional[str] = None,
    mask: str = "signed",
    batch_size: int = 64,
    num_hops: Optional[int] = None,
    strict: bool = True,
    progress: Optional[bool] = None,
    output: str = "list",
    distributed: Optional[bool] = None,
    strategy: str = "auto",
    **kwargs,
) -> Union[list[Explanation], NodeRelevance]:
    """One explanation per target node, many targets per relevance pass.

    Each target gets its own copy of its computation subgraph (see
    :mod:`torch_geometric_lrp.explainers.subgraph`); ``batch_size`` disjoint
    copies run in one forward and backward pass, and each copy's relevance
    belongs to its target alone. Where the subgraphs of a batch overlap,
    one forward on their union followed by one backward per target (the
    forward retained) costs less: ``strategy`` picks between the two, and
    both give each target the relevance of its own subgraph. A batch whose subgraphs do not prove
    themselves (the model reads the graph as a whole, or further than
    ``num_hops``) is explained target by target on the full graph instead,
    with a :class:`~torch_geometric_lrp.explainers.SubgraphWarning`.

    The subgraphs of a batch are cut together, from the edges sorted once per
    call (:func:`~torch_geometric_lrp.explainers.subgraph.cut_each`): the cost
    of cutting is that of the subgraphs, not of the graph per target.

    Parameters
    ----------
    x, edge_index : Tensor
        The graph's node features and edges, or the whole graph as a
        ``Data`` in ``x`` (its attributes that the forward takes by name go
        with it, as for :func:`explain`).
    index : LongTensor or BoolTensor, optional
        The target nodes (positions, or a mask over the nodes); every node
        by default.
    target : Tensor, optional
        Class (or 0/1 labels) per node, or per target; default: the
        prediction. One entry per node is read per node (as
        ``lrp.explain`` reads it), also where ``index`` lists every node.
    rules, mask, strict
        As for :class:`~torch_geometric_lrp.LRP`.
    mode : str, optional
        ``'multiclass_classification'``, ``'binary_classification'`` or
        ``'regression'``; read off the output where it tells.
    batch_size : int
        Targets per pass.
    num_hops : int, optional
        Hops of the model's message passing (default:
        :func:`~torch_geometric_lrp.explainers.subgraph.count_hops`).
    progress : bool, optional
        Show a progress bar with the time left (default: when there is more
        than one batch and the output is a terminal; on rank 0 only).
    output : str
        ``'list'``: one ``Explanation`` per target. ``'sparse'``: one
        :class:`NodeRelevance` with the node and edge relevance of all
        targets as sparse matrices, and no ``Explanation`` (the memory of
        the relevance itself, for explaining every node of a large graph).
    distributed : bool, optional
        Split the targets over the processes of ``torch.distributed``'s
        default group in contiguous blocks; every process returns the
        results of all targets, as one process would (see
        :mod:`torch_geometric_lrp.explainers.distributed`). Default: when a
        group of more than one process is initialised; ``False`` ignores it.
    strategy : str
        ``'copies'``: disjoint copies of the subgraphs, one forward and one
        backward per batch. ``'shared'``: one forward on the union of the
        batch's subgraphs, then one backward per target. ``'auto'``
        (default): per batch, the cheaper by the sizes of its subgraphs
        (copies cost about :math:`4 \\sum_k |G_k|`, shared about
        :math:`(K + 1) |\\bigcup_k G_k|` for :math:`K` targets, counting
        nodes and edges, plus a fixed cost per backward); copies then run
        in passes of at most ``api.TRIMMED_BUDGET`` nodes and edges
        (``api.COPIES_BUDGET`` where the layers cannot be trimmed; a large
        subgraph alone; both ``api.GPU_BUDGET_FACTOR`` times larger on a
        GPU), which keeps their tensors small enough to stay fast. All give
        the same relevance up to float rounding.
    **kwargs
        Further model inputs: tensors whose first dimension is the number of
        nodes, or (for names starting with ``edge``) of edges, are cut with
        each subgraph.

    Returns
    -------
    list of Explanation, or NodeRelevance
        With ``output='list'``, per target, on the nodes ``node_index`` and
        input edges ``edge_id`` it was explained on (its subgraph, or the
        whole graph after a fallback): ``x``, ``edge_index`` (relabelled),
        ``index`` (the target's position in ``node_index``), ``node_mask``
        ``[n, F]``, ``edge_mask`` ``[e]``, ``edge_attr_mask`` where the model
        reads ``edge_attr``, ``self_loop_relevance``, ``target``, ``score``
        and ``relevance_total``. A target explained in a pass or backward of
        its own (``batch_size=1``, after a fallback, or in a batch run as the
        union of its subgraphs, ``strategy='shared'``) has the measured
        ``absorbed``, ``lost`` and ``residual``; where copies shared a
        backward, ``unassigned`` (= score - relevance_total) holds its share
        of them.
        With ``output='sparse'``, one :class:`NodeRelevance` holding the same
        numbers.
    """
    kwargs = {**_graph_kwargs(model, x, kwargs), **kwargs}
    x, edge_index = _graph_inputs(x, edge_index)
    check_x(x, categorical=True)
    if isinstance(edge_index, dict):
        raise ValueError("edge_index: got a dict of edge types; explain_nodes explains homogeneous graphs. Explain "
                         "a heterogeneous graph's nodes with lrp.explain or lrp.LRP (x and edge_index as dicts).")
    if not isinstance(edge_index, Tensor) or edge_index.layout != torch.strided:
        raise ValueError("edge_index: explain_nodes cuts each target's subgraph out of a [2, E] edge_index; pass "
                         "the edges (torch_geometric.utils.to_edge_index(adj)), or explain each node with "
                         "lrp.explain(..., edge_mask_type=None).")
    edge_index = check_edge_index(edge_index, None)
    check_graph_inputs(x, edge_index, kwargs)
    n, e = x.shape[0], edge_index.shape[1]
    index = torch.arange(n, device=x.device) if index is None else check_rows(index, n).to(x.device)
    batch_size = check_batch_size(batch_size)
    check_view(mask)
    check_rules(rules)
    check_flags(strict=strict)
    if output not in OUTPUTS:
        raise ValueError(f"output: must be one of {list(OUTPUTS)}, got {output!r}.")
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy: must be one of {list(STRATEGIES)}, got {strategy!r}.")
    if num_hops is not None and (isinstance(num_hops, bool) or not isinstance(num_hops, int) or num_hops < 0):
        raise ValueError(f"num_hops: expected an int >= 0, got {num_hops!r}.")
    unknown = [k for k, v in kwargs.items() if isinstance(v, Tensor) and v.dim() > 0
               and not (k.startswith("edge") and v.shape[0] == e)
               and not (v.shape[0] == n and not (v.dim() > 1 and v.shape[1] == n))]
    if unknown:
        raise ValueError(f"{unknown[0]}: explain_nodes cuts every model input to each target's subgraph; this "
                         f"tensor has neither one row per node ({n}) nor, named edge*, one per edge ({e}). "
                         f"Explain with lrp.explain(..., subgraph=False) instead.")
    settings = Settings(task_level=ModelTaskLevel.node, mode=enum_of(ModelMode, mode, "mode"), rules=rules,
                        strict=strict)
    target = check_target(target, settings.mode)
    # one entry per node is read per node first, as lrp.explain reads it (also
    # where index lists every node, in another order, so that both sizes fit)
    per_target = target is not None and target.dim() > 0 and target.shape[0] == index.numel() and \
        target.shape[0] != n
    settings.target_per_row = per_target  # decided once: a batch of n rows is no per-node target
    if target is not None and target.dim() > 0 and target.shape[0] not in (n, index.numel()):
        # checked here for the whole call: a batch would read a target as long as itself as its own
        raise ValueError(f"target: expected one entry per node ({n}) or per target ({index.numel()}); got shape "
                         f"{tuple(target.shape)}.")
    _materialize(model, x, edge_index, kwargs)
    check_layer_state(model, lambda: unwrap(model)(x, edge_index, **kwargs))
    rank, world_size = shard.world(distributed)
    if world_size > 1:
        shard.check_same((n, e, batch_size, output, per_target, shard.fingerprint(index), shard.fingerprint(target),
                          shard.fingerprint(edge_index)))
    mine = shard.block(index.numel(), batch_size, rank, world_size)

    def run() -> Union[list[Explanation], NodeRelevance]:
        graph, flow = Incidence(edge_index, n), message_flow(model)  # the one pass over the edge list
        batches = _parts(model, x, edge_index, kwargs, index[mine], target[mine] if per_target else target,
                         per_target, count_hops(model) if num_hops is None else num_hops, flow,
                         settings, batch_size, progress if rank == 0 else False, strategy, graph)
        if output == "list":
            return [ex for parts in batches for ex in _explanations(parts, x, edge_index, graph, flow, mask)]
        return _sparse((part for parts in batches for part in parts), index[mine], n, e, mask)

    if world_size == 1:
        return run()
    blocks = shard.gather(run)
    if output == "list":
        return [ex for block in blocks for ex in block]
    return _cat(blocks, n, e)


@dataclass
class _Part:
    """One target's relevance, on the nodes and edges it was explained on:
    its subgraph ``cut``, or the whole graph (``cut = None``)."""

    position: int                 # the target's node in the input graph
    cut: Optional[Cut]
    relevance: Tensor             # of x, [n, F]
    edge: Optional[Tensor]        # [e]
    self_loops: Optional[Tensor]  # [n]
    edge_attr: Optional[Tensor]   # [e, D]
    score: float
    accounting: Optional[tuple[float, float]]  # (absorbed, lost), where measured for this target alone
    target: Tensor
    embedding: Optional[Tensor] = None  # integer x: relevance per embedding dimension, [n, D]


def _parts(model, x: Tensor, edge_index: Tensor, kwargs: dict, index: Tensor, target: Optional[Tensor],
           per_target: bool, hops: int, flow: str, settings: Settings, batch_size: int,
           progress: Optional[bool], strategy: str, graph: Incidence) -> Iterator[list[_Part]]:
    """The relevance of each target of ``index``, in order, one list of parts
    per batch. A batch's cuts are lean where the full graph's output checks
    them (:func:`~.core.proves_lean_cuts`); ``graph``: the edges at each node."""
    n, e = x.shape[0], edge_index.shape[1]
    starts = range(0, index.numel(), batch_size)
    show = progress if progress is not None else (None if len(starts) > 1 else False)
    reference = None  # the full graph's output, where the batches share it (see _shares_reference)
    for start in tqdm(starts, desc="LRP", unit="batch", disable=None if show is None else not show):
        chunk = index[start:start + batch_size]
        chunk_target = target[start:start + batch_size] if per_target else target
        lean_cut = settings.lean and proves_lean_cuts(reference, e)
        b = _cut_batch(chunk, hops, edge_index, n, flow, graph, strategy, settings, lean_cut)
        if start == 0 and _shares_reference(b.union if b.union is not None else b.copies, n, e, len(starts)):
            reference = full_output(model, x, edge_index, kwargs, settings)
        run = dict(model=model, x=x, edge_index=edge_index, kwargs=kwargs, chunk=chunk, chunk_target=chunk_target,
                   per_target=per_target, settings=settings, hops=hops)
        parts = _run_batch(b, reference=reference, **run)
        if isinstance(parts, InFull):  # a lean cut failed its check: the batch again, cut in full
            reference = reference if reference is not None else parts.reference
            b = _cut_batch(chunk, hops, edge_index, n, flow, graph, strategy, settings, False)
            parts = _run_batch(b, reference=reference, **run)
        if settings.strict and not settings.residual_warned:  # one warning per call, at the first target
            settings.residual_warned = any(
                warn_if_not_conserved(model, p.score, input_total(p.relevance, p.edge_attr), *p.accounting,
                                      what=f" at target node {p.position}", dtype=p.relevance.dtype)
                for p in parts if p.accounting is not None)
        yield parts


@dataclass
class _Batch:
    """A batch's cuts and how it runs: the copies of its targets' subgraphs
    (``own``, one each, starting at ``node_starts`` / ``edge_starts``), its
    ``runs`` of targets, and the union where it runs ``shared``."""

    copies: Cut
    node_starts: list[int]
    edge_starts: list[int]
    own: list[Cut]
    runs: list[tuple[int, int]]
    union: Optional[Cut]
    lean_cut: bool


def _cut_batch(chunk: Tensor, hops: int, edge_index: Tensor, n: int, flow: str, graph: Incidence, strategy: str,
               settings: Settings, lean_cut: bool) -> _Batch:
    copies, node_starts, edge_starts = cut_each(chunk, hops, edge_index, n, flow, incidence=graph, lean=lean_cut)
    own = split(copies, node_starts, edge_starts)
    budget = TRIMMED_BUDGET if settings.lean else COPIES_BUDGET
    runs = _runs(own, strategy, budget * (GPU_BUDGET_FACTOR if edge_index.device.type == "cuda" else 1))
    way = _way(strategy, copies, None if strategy == "copies" else _union_size(copies, n), chunk.numel(), len(runs))
    union = None
    if way == "shared":
        runs = [(0, chunk.numel())]
        # the targets' subgraphs together, each node and edge once (one target's is its own)
        union = own[0] if chunk.numel() == 1 else cut(chunk, hops, edge_index, n, flow, incidence=graph,
                                                      lean=lean_cut)
    return _Batch(copies, node_starts, edge_starts, own, runs, union, lean_cut)


def _run_batch(b: _Batch, model, x: Tensor, edge_index: Tensor, kwargs: dict, chunk: Tensor,
               chunk_target: Optional[Tensor], per_target: bool, settings: Settings, hops: int,
               reference: Optional[Tensor]) -> Union[list[_Part], InFull]:
    """The parts of the batch ``b`` of targets ``chunk``, in order;
    :class:`~.core.InFull` where its lean cuts failed their check."""
    parts = []
    for a, z in b.runs:
        run_target = chunk_target[a:z] if per_target else chunk_target
        if b.union is not None:
            found = _on_union(model, x, edge_index, kwargs, b.union, b.own, chunk, run_target, settings, reference,
                              hops, b.lean_cut)
        else:
            # a run of the batch is the disjoint union of its targets' own cuts
            run, run_nodes, run_edges = (b.copies, b.node_starts, b.edge_starts) if z - a == chunk.numel() else \
                disjoint_union(b.own[a:z])
            found = _on_copies(model, x, edge_index, kwargs, run, b.own[a:z], run_nodes, run_edges, chunk[a:z],
                               run_target, settings, reference, hops, b.lean_cut)
        if isinstance(found, InFull):
            return found
        for k, t in enumerate(chunk[a:z].tolist()):
            if found is None:  # no proof: this target on the full graph
                one = on_graph(model, x, edge_index, kwargs, chunk[a + k:a + k + 1],
                               run_target if not per_target else run_target[k:k + 1], settings)
                parts.append(_Part(t, None, one.node, one.edge, one.self_loops, one.edge_attr, one.score,
                                   (one.absorbed, one.lost), one.target[0], one.embedding))
            else:
                parts.append(found[k])
    return parts


#: Cost of one forward of the whole graph per node and edge, against a
#: check of a cut (measured on a 3-layer GCN: 2x at 10k nodes, 6x at 300k;
#: a large pass leaves the CPU caches).
FULL_FORWARD_WEIGHT = 4
#: Graphs with more nodes plus edges keep one check per batch: a forward of
#: the whole graph would set the call's peak memory (about 2.5 GiB of
#: float32 messages at hidden width 64 here), where the batches' passes are
#: bounded by their own size.
FULL_FORWARD_MAX = 10_000_000


def _shares_reference(first: Cut, n: int, e: int, num_batches: int) -> bool:
    """Whether the batches check their cuts against the full graph's output,
    computed once (:func:`~.core.full_output`), rather than each on its own:
    where there are several batches and either every batch would run the
    full graph anyway (at most ``FULL_CHECK_EDGES`` edges) or their checks,
    each about the size of the first batch's cut, cost more than one forward
    of the graph (:data:`FULL_FORWARD_WEIGHT` times its nodes and edges),
    up to :data:`FULL_FORWARD_MAX` nodes and edges. The choice depends on
    the graph and the targets, never on timings."""
    if num_batches < 2 or n + e > FULL_FORWARD_MAX:
        return False
    return e <= core.FULL_CHECK_EDGES or \
        num_batches * (first.num_nodes + first.edge_id.numel()) > FULL_FORWARD_WEIGHT * (n + e)


def _runs(own: list[Cut], strategy: str, budget: int = COPIES_BUDGET) -> list[tuple[int, int]]:
    """The passes of a batch as disjoint copies: ``[(start, stop)]`` runs of
    its targets. One run, except under ``'auto'``, where each run holds at
    most ``budget`` nodes and edges of the cuts (and at least one target)."""
    if strategy != "auto":
        return [(0, len(own))]
    runs, start, size = [], 0, 0
    for k, c in enumerate(own):
        grows = c.num_nodes + c.edge_id.numel()
        if k > start and size + grows > budget:
            runs.append((start, k))
            start, size = k, 0
        size += grows
    return runs + [(start, len(own))]


def _union_size(copies: Cut, num_nodes: int) -> int:
    """Nodes plus edges of the union of the targets' subgraphs, without its
    ring slots (a few dozen), counted from the copies without building it:
    the union's edges are the copies' edges, its nodes inside their nodes
    inside (a mark per node and edge of the graph, no sort)."""
    inner = torch.zeros(num_nodes, dtype=torch.bool, device=copies.nodes.device)
    inner[copies.nodes[~copies.ring]] = True
    edges = torch.zeros(int(copies.edge_id.max()) + 1 if copies.edge_id.numel() else 0, dtype=torch.bool,
                        device=copies.edge_id.device)
    edges[copies.edge_id] = True
    return int(inner.sum()) + int(edges.sum())


def _way(strategy: str, copies: Cut, union_size: Optional[int], num_targets: int, num_runs: int = 1) -> str:
    """How a batch runs (``explain_nodes``' ``strategy``): ``'copies'`` or
    ``'shared'``; for ``'auto'``, the cheaper by the batch's measured sizes.
    Disjoint copies cost :math:`w \\sum_k |G_k|` (a relevance forward and
    backward of every target's subgraph, :data:`COPIES_WEIGHT` = w) in
    ``num_runs`` passes, the union :math:`(K + 1) |U|` (one forward, then
    one backward per target from a one-hot seed), each backward also a fixed
    :data:`BACKWARD_OVERHEAD`; sizes count nodes and edges. The choice
    depends on the graph only, never on timings, so a call gives the same
    numbers every time."""
    if strategy != "auto":
        return strategy
    if num_targets == 1:
        return "copies"  # one target: its subgraph is the union
    copies_cost = COPIES_WEIGHT * (copies.num_nodes + copies.edge_id.numel()) + num_runs * BACKWARD_OVERHEAD
    shared_cost = (num_targets + 1) * union_size + num_targets * BACKWARD_OVERHEAD
    return "shared" if shared_cost < copies_cost else "copies"


def _on_copies(model, x: Tensor, edge_index: Tensor, kwargs: dict, copies: Cut, own: list[Cut],
               node_starts: list[int], edge_starts: list[int], chunk: Tensor, chunk_target: Optional[Tensor],
               settings: Settings, reference: Optional[Tensor] = None, hops: Optional[int] = None,
               lean_cut: bool = False) -> Union[None, list[_Part], InFull]:
    """The batch as disjoint copies, one forward and one backward; ``None``
    where the copies do not prove themselves (against ``reference``, the
    full graph's output, where given). ``hops``: those of the cuts;
    ``lean_cut``: they are lean (:class:`~.core.InFull` where that fails)."""
    result = on_cut(model, x, edge_index, kwargs, copies, chunk, chunk_target, settings, reference=reference,
                    num_hops=hops, lean_cut=lean_cut, copies=chunk.numel() > 1)
    if result is None or isinstance(result, InFull):
        return result
    if settings.mode is None:
        settings.mode = result.mode  # read off the first batch: the same for all
    if chunk.numel() > 1 and settings.strict and not settings.residual_warned:
        # the targets' accounting is measured for the batch as a whole
        settings.residual_warned = warn_if_not_conserved(
            model, result.score, input_total(result.node, result.edge_attr), result.absorbed, result.lost,
            what=f" in the batch of target nodes {chunk[0].item()} to {chunk[-1].item()}",
            magnitude=result.seed.abs().sum(dtype=torch.float64).item(),  # the targets' scores may cancel
            dtype=result.node.dtype)
    parts = []
    for k, (t, c) in enumerate(zip(chunk.tolist(), own)):
        rows = slice(node_starts[k], node_starts[k] + c.num_nodes)
        cols = slice(edge_starts[k], edge_starts[k] + c.edge_id.numel())
        seed = result.seed.reshape(result.seed.shape[0], -1)[rows].sum(dtype=torch.float64).item()
        parts.append(_Part(t, c, result.node[rows], _rows(result.edge, cols), _rows(result.self_loops, rows),
                           _rows(result.edge_attr, cols), seed,
                           (result.absorbed, result.lost) if chunk.numel() == 1 else None, result.target[k],
                           _rows(result.embedding, rows)))
    return parts


def _on_union(model, x: Tensor, edge_index: Tensor, kwargs: dict, union: Cut, own: list[Cut], chunk: Tensor,
              chunk_target: Optional[Tensor], settings: Settings, reference: Optional[Tensor] = None,
              hops: Optional[int] = None, lean_cut: bool = False) -> Union[None, list[_Part], InFull]:
    """The batch on the union of its subgraphs: one forward, one backward per
    target. Each target's relevance is taken on its own subgraph, and must
    not reach beyond it nor its ring (the proof the copies give); ``None``
    where that fails. ``hops`` and ``lean_cut``: as for :func:`_on_copies`."""
    results = on_cut(model, x, edge_index, kwargs, union, chunk, chunk_target, settings, each=True,
                     reference=reference, num_hops=hops, lean_cut=lean_cut)
    if results is None or isinstance(results, InFull):
        return results
    if settings.mode is None:
        settings.mode = results[0].mode
    parts = []
    union_inner = (~union.ring).nonzero().view(-1)  # the nodes of S_L, ascending (as a cut's edges are)
    for t, c, r in zip(chunk.tolist(), own, results):
        inner = (~c.ring).nonzero().view(-1)
        # a target's own ring stands for other outside nodes than the union's:
        # its relevance is taken on its own inner nodes, the ring's is 0
        nodes = union_inner[torch.searchsorted(union.nodes[union_inner], c.nodes[inner])]
        edges = torch.searchsorted(union.edge_id, c.edge_id)
        node, self_loops, embedding = (_spread(_rows(v, nodes), inner, c.num_nodes)
                                       for v in (r.node, r.self_loops, r.embedding))
        part = _Part(t, c, node, _rows(r.edge, edges), self_loops, _rows(r.edge_attr, edges), r.score,
                     (r.absorbed, r.lost), r.target[0], embedding)
        if _outside(r, nodes, edges) or reaches_ring(c, part.relevance, part.edge, part.edge_attr, part.self_loops):
            fall_back(model, "relevance reached nodes beyond the hops its message-passing layers count (a layer "
                             "applied more often than it appears, or a pooling fed back to the nodes)")
            return None
        parts.append(part)
    return parts


def _outside(r: Relevance, nodes: Tensor, edges: Tensor) -> bool:
    """Whether relevance of ``r`` lies on nodes or edges other than
    ``nodes`` / ``edges`` (positions in the union)."""
    def beyond(values: Optional[Tensor], keep: Tensor) -> bool:
        if values is None:
            return False
        rest = torch.ones(values.shape[0], dtype=torch.bool, device=values.device)
        rest[keep] = False
        return bool(values[rest].any())
    return beyond(r.node, nodes) or beyond(r.self_loops, nodes) or beyond(r.edge, edges) \
        or beyond(r.edge_attr, edges)


def _rows(values: Optional[Tensor], where: Union[slice, Tensor]) -> Optional[Tensor]:
    return None if values is None else values[where]


def _explanations(parts: list[_Part], x: Tensor, edge_index: Tensor, graph: Incidence, flow: str,
                  mask: str) -> list[Explanation]:
    """The ``Explanation`` of each part of a batch, on its subgraph as the
    input has it (or on the whole graph): each ring slot of a cut stands for
    several outside nodes, which the explanation lists one by one, and a
    lean cut's subgraph gets back the edges its pass left out, with 0."""
    spelled = iter(spelled_out_each([p.cut for p in parts if p.cut is not None], graph, flow))
    return [_explanation(part, x, edge_index, None if part.cut is None else next(spelled), mask, flow)
            for part in parts]


def _explanation(part: _Part, x: Tensor, edge_index: Tensor, spelled: Optional[tuple[Cut, Tensor, Tensor]],
                 mask: str, flow: str) -> Explanation:
    """The ``Explanation`` of one target, on the subgraph ``spelled`` (the
    output of :func:`~.subgraph.spelled_out_each` for its cut), or the whole graph."""
    relevance, edge, self_loops, edge_attr, embedding = \
        part.relevance, part.edge, part.self_loops, part.edge_attr, part.embedding
    if spelled is not None:
        c, inner, edges = spelled
        kept = ~part.cut.ring
        relevance, self_loops, embedding = (_spread(_rows(v, kept), inner, c.num_nodes)
                                            for v in (relevance, self_loops, embedding))
        edge, edge_attr = (_spread(v, edges, c.edge_id.numel()) for v in (edge, edge_attr))
    ex = explanation_of(relevance, edge, self_loops, edge_attr, part.score, part.accounting,
                        MaskType.attributes, MaskType.object, mask, embedding=embedding, flow=flow)
    if spelled is None:
        ex.node_index = torch.arange(x.shape[0], device=x.device)
        ex.edge_id = torch.arange(edge_index.shape[1], device=edge_index.device)
        ex.x, ex.edge_index, ex.index = x, edge_index, part.position
    else:
        # (copies: the cut's tensors are views of the whole batch's, which a saved or kept explanation holds)
        ex.node_index, ex.edge_id = c.nodes.clone(), c.edge_id.clone()
        ex.x, ex.edge_index, ex.index = x[c.nodes], c.edge_index.clone(), int(c.index)
    ex.target = part.target if part.target is None else part.target.clone()
    return ex


def _sparse(parts: Iterator[_Part], index: Tensor, num_nodes: int, num_edges: int, mask: str) -> NodeRelevance:
    """The parts' relevance as :class:`NodeRelevance`: per target, the
    nonzero entries of its row, columns ascending."""
    show = MASK_VIEWS[mask]
    nodes, edges, edge_attrs = _Coo(), _Coo(), _Coo()
    targets, scores, totals = [], [], []
    dtype = torch.get_default_dtype()  # of the relevance (for integer x, of its embeddings)
    for part in parts:
        dtype = part.relevance.dtype
        c = part.cut
        device = part.relevance.device
        # the cut's inner nodes, ascending (its ring has no relevance: checked)
        node_ids = torch.arange(num_nodes, device=device) if c is None else c.nodes[~c.ring]
        edge_ids = torch.arange(num_edges, device=device) if c is None else c.edge_id
        nodes.add(node_ids, show(part.relevance.sum(dim=-1) if c is None else part.relevance[~c.ring].sum(dim=-1)))
        edges.add(edge_ids, None if part.edge is None else show(part.edge))
        edge_attrs.add(edge_ids, None if part.edge_attr is None else show(part.edge_attr.sum(dim=-1)))
        targets.append(part.target)
        scores.append(part.score)
        totals.append(input_total(part.relevance, part.edge_attr))
    t = index.numel()
    return NodeRelevance(
        index=index.clone(),
        target=torch.stack(targets) if targets else torch.empty(0, dtype=torch.long, device=index.device),
        score=torch.tensor(scores, dtype=torch.float64, device=index.device),
        relevance_total=torch.tensor(totals, dtype=torch.float64, device=index.device),
        node_relevance=nodes.matrix(t, num_nodes, dtype, index.device),
        edge_relevance=edges.matrix(t, num_edges, dtype, index.device),
        edge_attr_relevance=edge_attrs.matrix(t, num_edges, dtype, index.device) if edge_attrs.seen else None,
    )


class _Coo:
    """The nonzero entries of a sparse matrix, added one row at a time in
    row order, with ascending columns (so the matrix is coalesced as built)."""

    def __init__(self):
        self.cols, self.values, self.counts, self.seen = [], [], [], False

    def add(self, cols: Tensor, values: Optional[Tensor]) -> None:
        if values is None:
            self.counts.append(0)
            return
        self.seen = True
        keep = values != 0
        self.cols.append(cols[keep])
        self.values.append(values.detach()[keep])
        self.counts.append(self.cols[-1].numel())

    def matrix(self, num_rows: int, num_cols: int, dtype: torch.dtype, device=None) -> Tensor:
        cols = torch.cat(self.cols) if self.cols else torch.empty(0, dtype=torch.long, device=device)
        values = torch.cat(self.values) if self.values else torch.empty(0, dtype=dtype, device=device)
        rows = torch.repeat_interleave(torch.tensor(self.counts, dtype=torch.long, device=cols.device))
        return _coo(torch.stack([rows, cols]), values, (num_rows, num_cols))


def _coo(indices: Tensor, values: Tensor, size: tuple[int, int]) -> Tensor:
    # indices are in row-major order without repeats by construction
    return torch.sparse_coo_tensor(indices, values, size, is_coalesced=True, check_invariants=False)


def _cat(blocks: list[NodeRelevance], num_nodes: int, num_edges: int) -> NodeRelevance:
    """The :class:`NodeRelevance` of consecutive blocks of targets, as one."""
    blocks = [b for b in blocks if b.index.numel()] or blocks[:1]
    offsets = [0, *accumulate(b.index.numel() for b in blocks)]

    def stacked(name: str, num_cols: int) -> Optional[Tensor]:
        parts = [getattr(b, name) for b in blocks]
        if any(p is None for p in parts):
            return None
        indices = torch.cat([p._indices() + torch.tensor([[o], [0]], device=p.device)
                             for p, o in zip(parts, offsets)], dim=1)
        return _coo(indices, torch.cat([p._values() for p in parts]), (offsets[-1], num_cols))

    return NodeRelevance(
        index=torch.cat([b.index for b in blocks]),
        target=torch.cat([b.target for b in blocks]),
        score=torch.cat([b.score for b in blocks]),
        relevance_total=torch.cat([b.relevance_total for b in blocks]),
        node_relevance=stacked("node_relevance", num_nodes),
        edge_relevance=stacked("edge_relevance", num_edges),
        edge_attr_relevance=stacked("edge_attr_relevance", num_edges),
    )
