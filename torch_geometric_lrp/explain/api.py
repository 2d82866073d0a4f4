"""One-call explanations: ``lrp.explain`` and ``lrp.explain_nodes``."""
from __future__ import annotations

from typing import Optional, Union

import torch
from torch import Tensor
from torch_geometric.explain import Explainer, Explanation
from torch_geometric.explain.config import ModelMode
from tqdm.auto import tqdm

from ..convert import convert
from ..mode import relevance_pass
from .algorithm import LRP, MASK_VIEWS, run_relevance
from .subgraph import (Subgraph, count_hops, message_flow, prepare_for_subgraphs, reaches_ring, receptive_field,
                       slice_inputs)

__all__ = ["explain", "explain_nodes", "infer_task_level", "infer_mode", "infer_return_type"]


def infer_task_level(out: Tensor, x: Tensor, edge_index: Tensor, index, kwargs: dict) -> str:
    """``'node'``, ``'edge'`` or ``'graph'`` from the shape of the model output."""
    batch = kwargs.get("batch")
    label_index = kwargs.get("edge_label_index")
    # edge_label_index first: with as many label pairs as nodes, the node
    # check below would otherwise call a link predictor node-level.
    if isinstance(label_index, Tensor) and label_index.dim() == 2 and out.shape[0] == label_index.shape[1]:
        return "edge"
    if out.shape[0] == x.shape[0]:
        return "node"
    if isinstance(batch, Tensor) and batch.numel() and out.shape[0] == int(batch.max()) + 1:
        return "graph"
    if isinstance(edge_index, Tensor) and edge_index.dim() == 2 and out.shape[0] == edge_index.shape[1]:
        return "edge"
    if out.shape[0] == 1:
        return "graph"
    raise ValueError(
        f"explain: cannot tell the task level from an output of shape {tuple(out.shape)} for "
        f"{x.shape[0]} nodes; pass task_level='node', 'edge' or 'graph'."
    )


def infer_mode(out: Tensor, target: Optional[Tensor]) -> str:
    """Multiclass for several outputs per row, regression for a float target."""
    if target is not None and target.is_floating_point():
        return "regression"
    if out.dim() == 2 and out.shape[1] > 1:
        return "multiclass_classification"
    raise ValueError(
        f"explain: the model has one output per row (shape {tuple(out.shape)}), which can be binary "
        f"classification or regression; pass mode='binary_classification' or mode='regression'."
    )


def infer_return_type(out: Tensor, mode: str, activated: Optional[bool] = None) -> str:
    """``'log_probs'`` / ``'probs'`` when the output rows look like them, else ``'raw'``.

    ``activated`` says whether the output came out of a final softmax /
    log-softmax / sigmoid, where that is known.
    """
    if mode == "regression" or activated is False and mode == "binary_classification":
        # Values cannot tell raw binary logits that all lie in [0, 1] from
        # probabilities (a "probs" guess made PyG threshold them at 0.5 and
        # explain the wrong class), so without a final sigmoid it is raw.
        return "raw"
    if mode == "binary_classification":
        return "probs" if bool(((out >= 0) & (out <= 1)).all()) else "raw"
    if bool((out <= 0).all()) and torch.allclose(out.logsumexp(-1), torch.zeros(()), atol=1e-4):
        return "log_probs"
    if bool((out >= 0).all()) and torch.allclose(out.sum(-1), torch.ones(()), atol=1e-4):
        return "probs"
    return "raw"


def _probe(model: torch.nn.Module, x: Tensor, edge_index, kwargs) -> tuple[Tensor, bool]:
    """The model's output, and whether it comes out of a final softmax /
    log-softmax / sigmoid: one forward in a relevance pass of an LRP-ready
    copy (the model itself is not touched), read with
    :meth:`~torch_geometric_lrp.RelevanceMode.logits_of`."""
    lrp_model = convert(model)
    with relevance_pass(lrp_model) as pass_:
        out = lrp_model(x.detach().clone().requires_grad_(), edge_index, **kwargs)
        if not isinstance(out, Tensor):
            raise TypeError(f"explain: the model must return one tensor, got {type(out).__name__}.")
        activated = pass_.logits_of(out) is not out
    return out.detach(), activated


def explain(
    model: torch.nn.Module,
    x: Tensor,
    edge_index: Tensor,
    *,
    index: Optional[Union[int, Tensor]] = None,
    target: Optional[Tensor] = None,
    rules: Optional[dict] = None,
    node_mask_type: Optional[str] = "attributes",
    edge_mask_type: Optional[str] = "object",
    mask: str = "signed",
    subgraph: bool = True,
    task_level: Optional[str] = None,
    mode: Optional[str] = None,
    return_type: Optional[str] = None,
    **kwargs,
) -> Explanation:
    """Explain ``model(x, edge_index, **kwargs)`` with LRP in one call.

    Runs PyG's :class:`~torch_geometric.explain.Explainer` with
    :class:`~torch_geometric_lrp.LRP`. What is not given is inferred:
    the task level from the output's shape and ``index`` / ``batch``, the mode
    (multiclass for several outputs per row; regression for a float
    ``target``; a one-output model must say ``mode=``), the return type from
    whether the model ends in a softmax / log-softmax / sigmoid and the
    output values (a one-output model without a final sigmoid is raw).
    With ``target=None`` the model's own prediction is explained
    (``explanation_type='model'``), else that target (``'phenomenon'``).
    ``rules``, ``mask`` and ``subgraph`` are :class:`~torch_geometric_lrp.LRP`'s.
    """
    out, activated = _probe(model, x, edge_index, kwargs)
    task_level = task_level or infer_task_level(out, x, edge_index, index, kwargs)
    mode = mode or infer_mode(out, target)
    return_type = return_type or infer_return_type(out, mode, activated)
    explainer = Explainer(
        model,
        algorithm=LRP(rules=rules, mask=mask, subgraph=subgraph),
        explanation_type="model" if target is None else "phenomenon",
        node_mask_type=node_mask_type,
        edge_mask_type=edge_mask_type,
        model_config=dict(mode=mode, task_level=task_level, return_type=return_type),
    )
    # PyG's Explainer restores only the root's training flag (model.train(flag)
    # overwrites submodules left in eval mode), and nothing when the
    # explanation raises (e.g. an op without a relevance rule): do it here.
    training = [(module, module.training) for module in model.modules()]
    try:
        return explainer(x, edge_index, target=target, index=index, **kwargs)
    finally:
        for module, flag in training:
            module.training = flag


def explain_nodes(
    model: torch.nn.Module,
    x: Tensor,
    edge_index: Tensor,
    index: Tensor,
    *,
    target: Optional[Tensor] = None,
    rules: Optional[dict] = None,
    mode: Optional[str] = None,
    mask: str = "signed",
    batch_size: int = 64,
    num_hops: Optional[int] = None,
    progress: Optional[bool] = None,
    **kwargs,
) -> list[Explanation]:
    """One explanation per target node, many targets per relevance pass.

    Each target gets its own copy of its computation subgraph (``num_hops + 1``
    hops, so that degrees and neighbourhood sizes of every node that reaches
    the target are complete); ``batch_size`` disjoint copies run in one
    forward and backward pass, and each copy's relevance belongs to its
    target alone. The result equals explaining the targets one by one on the
    full graph, at a fraction of the cost, for a model whose outputs depend on
    ``num_hops`` hops only; relevance that reaches further proves otherwise
    and raises a ``ValueError`` (see :mod:`torch_geometric_lrp.explain.subgraph`).

    Parameters
    ----------
    index : LongTensor
        The target nodes.
    target : Tensor, optional
        Class (or value) per target node; default: the model's prediction.
    mode : str, optional
        ``'multiclass_classification'`` (default for several outputs per
        node), ``'binary_classification'`` or ``'regression'``.
    batch_size : int
        Targets per pass.
    num_hops : int, optional
        Receptive field of the model (default:
        :func:`~torch_geometric_lrp.explain.subgraph.count_hops`).
    progress : bool, optional
        Show a progress bar (default: when there is more than one batch and
        the output is a terminal).
    **kwargs
        Further model inputs: tensors whose first dimension is the number of
        nodes, or (for names starting with ``edge``) of edges, are sliced to
        each subgraph.

    Returns
    -------
    list of Explanation
        Per target, on its subgraph: ``x``, ``edge_index`` (relabelled),
        ``node_index`` and ``edge_id`` (positions in the input graph),
        ``index`` (the target's position in the subgraph), ``node_mask``
        ``[n, F]``, ``edge_mask`` ``[e]``, ``edge_attr_mask`` where the model
        reads ``edge_attr``, ``target``, ``score``, ``relevance_total`` and
        ``unassigned`` (= score - relevance_total: absorbed plus lost).
    """
    index = torch.as_tensor(index, dtype=torch.long).view(-1)
    lrp_model = convert(model, rules)
    prepare_for_subgraphs(lrp_model)
    hops = count_hops(lrp_model) if num_hops is None else num_hops
    flow = message_flow(lrp_model)
    n, e = x.shape[0], edge_index.shape[1]
    model_mode = ModelMode(mode) if mode is not None else None
    if target is not None:
        target = torch.as_tensor(target).view(index.numel(), -1).squeeze(-1)
    starts = range(0, index.numel(), batch_size)
    show = progress if progress is not None else (None if len(starts) > 1 else False)
    explanations: list[Explanation] = []
    for start in tqdm(starts, desc="LRP", unit="batch", disable=None if show is None else not show):
        chunk = index[start:start + batch_size]
        pieces = [receptive_field(t.view(1), hops, edge_index, n, flow) for t in chunk]
        node_offsets = _offsets([p.nodes.numel() for p in pieces])
        edge_offsets = _offsets([p.edge_id.numel() for p in pieces])
        # the pieces side by side: one graph of disjoint copies
        batch = Subgraph(
            nodes=torch.cat([p.nodes for p in pieces]),
            edge_id=torch.cat([p.edge_id for p in pieces]),
            edge_index=torch.cat([p.edge_index + o for p, o in zip(pieces, node_offsets)], dim=1),
            index=torch.cat([p.index + o for p, o in zip(pieces, node_offsets)]),
            ring=torch.cat([p.ring for p in pieces]),
        )
        batch_kwargs, _ = slice_inputs(kwargs, batch, n, e)
        if model_mode is None:
            out, _ = _probe(lrp_model, x[batch.nodes], batch.edge_index, batch_kwargs)
            model_mode = ModelMode(infer_mode(out, target))
        result = run_relevance(lrp_model, x[batch.nodes], batch.edge_index, index=batch.index, mode=model_mode,
                               target=None if target is None else target[start:start + batch_size],
                               **batch_kwargs)
        if reaches_ring(batch, result.node, result.edge, result.edge_attr, result.self_loops):
            raise ValueError(
                f"explain_nodes: relevance reached nodes more than num_hops={hops} hops away from the "
                f"targets, so the model is not local in {hops} hops (a global pooling fed back to the "
                f"nodes, a layer applied more often than it appears, ...) and explaining each target on "
                f"its subgraph would be wrong. Pass the model's real num_hops, or explain on the full "
                f"graph with lrp.explain(..., subgraph=False)."
            )
        for k, piece in enumerate(pieces):
            rows = slice(node_offsets[k], node_offsets[k] + piece.nodes.numel())
            cols = slice(edge_offsets[k], edge_offsets[k] + piece.edge_id.numel())
            ex = Explanation(
                x=x[piece.nodes], edge_index=piece.edge_index, node_index=piece.nodes, edge_id=piece.edge_id,
                index=int(piece.index), node_mask=_view(result.node[rows], mask),
                edge_mask=_view(result.edge[cols], mask),
            )
            total = result.node[rows].sum().item()
            if result.edge_attr is not None:
                ex.edge_attr_mask = _view(result.edge_attr[cols], mask)
                total += result.edge_attr[cols].sum().item()
            score = result.seed[batch.index[k]].sum().item()
            ex.target = result.target[k]
            ex.score, ex.relevance_total, ex.unassigned = score, total, score - total
            explanations.append(ex)
    return explanations


def _offsets(sizes: list[int]) -> list[int]:
    """Start of each piece in a concatenation of pieces of the given sizes."""
    starts, total = [], 0
    for size in sizes:
        starts.append(total)
        total += size
    return starts


def _view(relevance: Tensor, mask: str) -> Tensor:
    return MASK_VIEWS[mask](relevance).detach()
