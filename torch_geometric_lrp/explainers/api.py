"""One-call explanations: ``lrp.explain`` and ``lrp.explain_nodes``."""
from __future__ import annotations

from typing import Optional, Union

import torch
from torch import Tensor
from torch_geometric.explain import Explanation
from torch_geometric.explain.config import MaskType, ModelConfig, ModelMode, ModelReturnType, ModelTaskLevel
from tqdm.auto import tqdm

from ..rules import Rule
from .core import Relevance, Settings, explain_rows, explanation_of, on_cut, on_graph
from .subgraph import count_hops, cut, disjoint_union, message_flow, slice_inputs
from .targets import check_batch_size, check_edge_index, check_rows, check_rules, check_target, check_view, check_x

__all__ = ["explain", "explain_nodes"]


def _enum(cls, value, name: str):
    if value is None:
        return None
    try:
        return cls(value)
    except ValueError:
        raise ValueError(f"{name}: must be one of {[v.value for v in cls]}, got {value!r}.") from None


def _edge_mask_type(value) -> Optional[MaskType]:
    value = _enum(MaskType, value, "edge_mask_type")
    if value not in (None, MaskType.object):
        raise ValueError(f"edge_mask_type: must be 'object' or None, got {value.value!r} (edge relevance is one "
                         f"value per edge).")
    return value


def explain(
    model: torch.nn.Module,
    x: Tensor,
    edge_index: Tensor,
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

    Parameters
    ----------
    index : int, LongTensor or BoolTensor, optional
        The output rows to explain (a boolean mask selects its ``True``
        rows); all rows by default.
    target : Tensor, optional
        The class (multiclass) or the 0/1 labels (binary) to explain, one
        entry per output row or per explained row; default: the prediction.
        A regression output is explained as it is, so it takes no target.
    rules, mask, subgraph, strict
        As for :class:`~torch_geometric_lrp.LRP`.
    node_mask_type, edge_mask_type
        As for PyG's ``Explainer``; an edge mask needs ``edge_index`` as a
        ``[2, E]`` tensor.

    Returns
    -------
    Explanation
        The masks and accounting of :class:`~torch_geometric_lrp.LRP`, the
        model's inputs, ``index`` (the explained rows) and ``target`` (the
        explained class, labels or value of each explained row).
    """
    check_x(x)
    edge_mask_type = _edge_mask_type(edge_mask_type)
    node_mask_type = _enum(MaskType, node_mask_type, "node_mask_type")
    check_edge_index(edge_index, edge_mask_type)
    rows = check_rows(index, None)
    check_rules(rules)
    check_view(mask)
    settings = Settings(task_level=_enum(ModelTaskLevel, task_level, "task_level"),
                        mode=_enum(ModelMode, mode, "mode"),
                        return_type=_enum(ModelReturnType, return_type, "return_type"),
                        rules=rules, strict=strict, subgraph=subgraph, track_edges=edge_mask_type is not None)
    target = check_target(target, settings.mode)
    result = explain_rows(model, x, edge_index, kwargs, rows, target, settings)
    explanation = explanation_of(result.node, result.edge, result.self_loops, result.edge_attr, result.score,
                                 (result.absorbed, result.lost), node_mask_type, edge_mask_type, mask,
                                 total=result.total)
    explanation._model_config = ModelConfig(mode=result.mode, task_level=result.task_level,
                                            return_type=result.return_type)
    explanation.index = rows
    explanation.target = result.target
    explanation._model_args = list(kwargs)
    explanation.x, explanation.edge_index = x, edge_index
    for key, value in kwargs.items():
        explanation[key] = value
    return explanation


def explain_nodes(
    model: torch.nn.Module,
    x: Tensor,
    edge_index: Tensor,
    index: Tensor,
    *,
    target: Optional[Tensor] = None,
    rules: Union[None, Rule, dict] = None,
    mode: Optional[str] = None,
    mask: str = "signed",
    batch_size: int = 64,
    num_hops: Optional[int] = None,
    strict: bool = True,
    progress: Optional[bool] = None,
    **kwargs,
) -> list[Explanation]:
    """One explanation per target node, many targets per relevance pass.

    Each target gets its own copy of its computation subgraph (see
    :mod:`torch_geometric_lrp.explainers.subgraph`); ``batch_size`` disjoint
    copies run in one forward and backward pass, and each copy's relevance
    belongs to its target alone. A batch whose subgraphs do not prove
    themselves (the model reads the graph as a whole, or further than
    ``num_hops``) is explained target by target on the full graph instead,
    with a :class:`~torch_geometric_lrp.explainers.SubgraphWarning`.

    Parameters
    ----------
    index : LongTensor or BoolTensor
        The target nodes (positions, or a mask over the nodes).
    target : Tensor, optional
        Class (or 0/1 labels) per target, or per node; default: the prediction.
    mode : str, optional
        ``'multiclass_classification'``, ``'binary_classification'`` or
        ``'regression'``; read off the output where it tells.
    batch_size : int
        Targets per pass.
    num_hops : int, optional
        Hops of the model's message passing (default:
        :func:`~torch_geometric_lrp.explainers.subgraph.count_hops`).
    progress : bool, optional
        Show a progress bar (default: when there is more than one batch and
        the output is a terminal).
    **kwargs
        Further model inputs: tensors whose first dimension is the number of
        nodes, or (for names starting with ``edge``) of edges, are cut with
        each subgraph.

    Returns
    -------
    list of Explanation
        Per target, on the nodes ``node_index`` and input edges ``edge_id``
        it was explained on (its subgraph, or the whole graph after a
        fallback): ``x``, ``edge_index`` (relabelled), ``index`` (the
        target's position in ``node_index``), ``node_mask`` ``[n, F]``,
        ``edge_mask`` ``[e]``, ``edge_attr_mask`` where the model reads
        ``edge_attr``, ``self_loop_relevance``, ``target``, ``score`` and
        ``relevance_total``. A target explained in a pass of its own
        (``batch_size=1``, or after a fallback) has the measured ``absorbed``,
        ``lost`` and ``residual``; in a shared pass, ``unassigned`` (= score
        - relevance_total) holds its share of them.
    """
    check_x(x)
    if not isinstance(edge_index, Tensor) or edge_index.layout != torch.strided:
        raise ValueError("edge_index: explain_nodes cuts each target's subgraph out of a [2, E] edge_index; pass "
                         "the edges (torch_geometric.utils.to_edge_index(adj)), or explain each node with "
                         "lrp.explain(..., edge_mask_type=None).")
    check_edge_index(edge_index, None)
    n, e = x.shape[0], edge_index.shape[1]
    index = check_rows(index, n)
    check_batch_size(batch_size)
    check_view(mask)
    check_rules(rules)
    if num_hops is not None and (isinstance(num_hops, bool) or not isinstance(num_hops, int) or num_hops < 0):
        raise ValueError(f"num_hops: expected an int >= 0, got {num_hops!r}.")
    unknown = [k for k, v in kwargs.items() if isinstance(v, Tensor) and v.dim() > 0
               and not (k.startswith("edge") and v.shape[0] == e)
               and not (v.shape[0] == n and not (v.dim() > 1 and v.shape[1] == n))]
    if unknown:
        raise ValueError(f"{unknown[0]}: explain_nodes cuts every model input to each target's subgraph; this "
                         f"tensor has neither one row per node ({n}) nor, named edge*, one per edge ({e}). "
                         f"Explain with lrp.explain(..., subgraph=False) instead.")
    settings = Settings(task_level=ModelTaskLevel.node, mode=_enum(ModelMode, mode, "mode"), rules=rules,
                        strict=strict)
    target = check_target(target, settings.mode)
    per_target = target is not None and target.dim() > 0 and target.shape[0] == index.numel()
    hops = count_hops(model) if num_hops is None else num_hops
    flow = message_flow(model)
    starts = range(0, index.numel(), batch_size)
    show = progress if progress is not None else (None if len(starts) > 1 else False)
    explanations: list[Explanation] = []
    for start in tqdm(starts, desc="LRP", unit="batch", disable=None if show is None else not show):
        chunk = index[start:start + batch_size]
        chunk_target = target[start:start + batch_size] if per_target else target
        cuts = [cut(t.view(1), hops, edge_index, n, flow) for t in chunk]
        union, node_starts, edge_starts = disjoint_union(cuts)
        result = on_cut(model, x, edge_index, kwargs, union, chunk, chunk_target, settings)
        if result is not None and settings.mode is None:
            settings.mode = result.mode  # read off the first batch: the same for all
        for k, (t, c) in enumerate(zip(chunk, cuts)):
            if result is None:  # no proof: this target on the full graph
                one = on_graph(model, x, edge_index, kwargs, t.view(1),
                               chunk_target if not per_target else chunk_target[k:k + 1], settings)
                ex = _on(one, slice(None), slice(None), (one.absorbed, one.lost), mask)
                ex.node_index, ex.edge_id = torch.arange(n), torch.arange(e)
                ex.x, ex.edge_index, ex.index = x, edge_index, int(t)
            else:
                rows = slice(node_starts[k], node_starts[k] + c.num_nodes)
                cols = slice(edge_starts[k], edge_starts[k] + c.edge_id.numel())
                ex = _on(result, rows, cols, (result.absorbed, result.lost) if len(cuts) == 1 else None, mask,
                         seed=result.seed.reshape(result.seed.shape[0], -1)[rows].sum(dtype=torch.float64).item())
                ex.node_index, ex.edge_id = c.nodes, c.edge_id
                ex.x, ex.edge_index, ex.index = x[c.nodes], c.edge_index, int(c.index)
            ex.target = (one if result is None else result).target[0 if result is None else k]
            explanations.append(ex)
    return explanations


def _on(result: Relevance, rows: slice, cols: slice, accounting, mask: str, seed: Optional[float] = None
        ) -> Explanation:
    """The explanation of ``result`` restricted to its nodes ``rows`` and edges ``cols``."""
    def part(values, where):
        return None if values is None else values[where]

    return explanation_of(result.node[rows], part(result.edge, cols), part(result.self_loops, rows),
                          part(result.edge_attr, cols), result.score if seed is None else seed, accounting,
                          MaskType.attributes, MaskType.object, mask)
