"""``lrp.LRP``: Layer-wise Relevance Propagation as a PyG ``ExplainerAlgorithm``."""
from __future__ import annotations

import weakref
from contextlib import nullcontext
from dataclasses import dataclass, replace
from typing import Optional, Union

import torch
from torch import Tensor
from torch_geometric.explain import Explanation
from torch_geometric.explain.algorithm import ExplainerAlgorithm
from torch_geometric.explain.config import MaskType, ModelMode, ModelTaskLevel

from ..audit import LostRelevance
from ..convert import convert
from ..mode import relevance_pass
from .edges import EdgeRelevance
from .subgraph import (Subgraph, count_hops, message_flow, prepare_for_subgraphs, reaches_ring, receptive_field,
                       slice_inputs)

__all__ = ["LRP", "RelevanceResult", "run_relevance", "make_seed", "MASK_VIEWS"]

#: How the signed relevance is shown in the masks.
MASK_VIEWS = {
    "signed": lambda r: r,
    "abs": lambda r: r.abs(),
    "positive": lambda r: r.clamp(min=0),
}


def make_seed(out: Tensor, logits: Tensor, target: Optional[Tensor], index: Optional[Tensor],
              mode: ModelMode) -> tuple[Tensor, Optional[Tensor]]:
    """Relevance to seed on ``out``: the score of the target at the explained
    rows, taken from the logits (the input of a final softmax / log-softmax /
    sigmoid), zero elsewhere.

    * multiclass: the target class's logit;
    * binary: the logit for target 1, its negative for target 0;
    * regression: the output itself.

    ``target`` holds one entry per output row or per explained row; without
    it, the prediction (argmax of the logits, or logit > 0) is explained.
    Returns the seed and the target of each explained row.
    """
    rows = torch.arange(out.shape[0], device=out.device)
    if index is not None:
        rows = rows[index].view(-1)
    seed = torch.zeros_like(out)
    logits = logits.detach()
    if mode == ModelMode.regression:
        seed[rows] = logits[rows]
        return seed, None
    if target is None:  # the model's own prediction
        target = logits.argmax(dim=-1) if mode == ModelMode.multiclass_classification \
            else (logits.view(out.shape[0], -1)[:, 0] > 0).long()
    target = target.view(-1)
    if target.numel() == out.shape[0]:
        target = target[rows]
    elif target.numel() != rows.numel():
        raise ValueError(f"LRP: target has {target.numel()} entries; expected one per output row "
                         f"({out.shape[0]}) or one per explained index ({rows.numel()}).")
    target = target.to(out.device).long()
    if mode == ModelMode.binary_classification:
        flat_seed, flat_logits = seed.view(out.shape[0], -1), logits.view(out.shape[0], -1)
        flat_seed[rows, 0] = torch.where(target == 1, 1.0, -1.0).to(out.dtype) * flat_logits[rows, 0]
        return seed, target
    seed[rows, target] = logits[rows, target]
    return seed, target


@dataclass
class RelevanceResult:
    """The raw outcome of one relevance pass."""

    output: Tensor
    seed: Tensor
    node: Tensor                      # relevance of x, [N, F]
    edge: Optional[Tensor]            # per input edge, [E]
    self_loops: Optional[Tensor]      # per node, messages of self-loops added by layers
    edge_attr: Optional[Tensor]       # relevance of edge_attr, [E, F_e]
    target: Optional[Tensor]          # the explained class of each explained row
    lost: float
    absorbed: float

    @property
    def score(self) -> float:
        return self.seed.sum().item()


def run_relevance(lrp_model: torch.nn.Module, x: Tensor, edge_index: Tensor, *, target: Optional[Tensor],
                  index: Optional[Tensor], mode: ModelMode, track_edges: bool = True, strict: bool = True,
                  **kwargs) -> RelevanceResult:
    """One relevance pass of an LRP-ready model, seeded at ``index`` / ``target``."""
    x = x.detach().clone().requires_grad_()
    edge_attr = kwargs.get("edge_attr")
    if isinstance(edge_attr, Tensor) and edge_attr.is_floating_point():
        edge_attr = kwargs["edge_attr"] = edge_attr.detach().clone().requires_grad_()
    else:
        edge_attr = None
    track_edges = track_edges and isinstance(edge_index, Tensor) and edge_index.layout == torch.strided
    edges = EdgeRelevance(lrp_model, edge_index, x.shape[0]) if track_edges else nullcontext()
    with LostRelevance() as audit, edges:
        with relevance_pass(lrp_model, strict=strict) as pass_:
            out = lrp_model(x, edge_index, **kwargs)
            if not isinstance(out, Tensor):
                raise TypeError(f"LRP: the model must return one tensor, got {type(out).__name__}.")
            logits = pass_.logits_of(out)
        # The backward needs no routing (the graph already holds the relevance
        # Functions): outside the mode, its ops skip the dispatch.
        seed, target = make_seed(out, logits, target, index, mode)
        out.backward(seed)
    node = x.grad if x.grad is not None else torch.zeros_like(x)
    if edge_attr is not None:
        edge_attr = edge_attr.grad if edge_attr.grad is not None else torch.zeros_like(edge_attr)
    # Whatever did not reach the inputs and was not lost was absorbed (by
    # biases, stabilisers, constants; with strict=False, also by ops without
    # a rule): one subtraction instead of a sum over every op's relevance.
    total = node.sum(dtype=torch.float64) + (0 if edge_attr is None else edge_attr.sum(dtype=torch.float64))
    absorbed = (seed.sum(dtype=torch.float64) - total).item() - audit.lost
    return RelevanceResult(
        output=out.detach(),
        seed=seed,
        node=node,
        edge=edges.edge.to(x.dtype) if track_edges else None,
        self_loops=edges.self_loops.to(x.dtype) if track_edges else None,
        edge_attr=edge_attr,
        target=target,
        lost=audit.lost,
        absorbed=absorbed,
    )


def node_mask_from(relevance: Tensor, mask_type: Optional[MaskType]) -> Optional[Tensor]:
    if mask_type is None:
        return None
    if mask_type == MaskType.attributes:
        return relevance
    if mask_type == MaskType.object:
        return relevance.sum(dim=-1, keepdim=True)
    return relevance.sum(dim=0, keepdim=True)  # common_attributes


def explanation_from(result: RelevanceResult, node_mask_type, edge_mask_type, view: str) -> Explanation:
    """An ``Explanation`` with masks built from the relevance of ``result``."""
    show = MASK_VIEWS[view]
    node_mask = node_mask_from(result.node, node_mask_type)
    explanation = Explanation(
        node_mask=None if node_mask is None else show(node_mask).detach(),
        edge_mask=None if edge_mask_type is None or result.edge is None else show(result.edge).detach(),
    )
    if result.edge_attr is not None:
        explanation.edge_attr_mask = show(result.edge_attr).detach()
    if result.self_loops is not None:
        explanation.self_loop_relevance = result.self_loops.detach()
    explanation.score = result.score
    explanation.relevance_total = result.node.sum().item() + (
        0.0 if result.edge_attr is None else result.edge_attr.sum().item())
    explanation.lost = result.lost
    explanation.absorbed = result.absorbed
    return explanation


_PLAIN = (bool, int, float, str, type(None))


def _structure(model: torch.nn.Module) -> tuple:
    """What a converted copy was made from: every module, parameter and buffer
    object of ``model`` (weakly, by identity) and the plain settings of every
    module (numbers, strings, flags; not ``training``, which the pass sets).
    A cached copy keeps the old objects, so replacing any of them (module
    assignment, ``load_state_dict(assign=True)``, a new ``Parameter``)
    must reconvert, or explanations silently use the old weights."""
    objects = [*model.modules(), *model.parameters(), *model.buffers()]
    settings = tuple(tuple((k, v) for k, v in vars(m).items() if k != "training" and isinstance(v, _PLAIN))
                     for m in model.modules())
    return [weakref.ref(o) for o in objects], settings


def _same_structure(old: tuple, new: tuple) -> bool:
    return len(old[0]) == len(new[0]) and all(a() is b() for a, b in zip(old[0], new[0])) and old[1] == new[1]


@dataclass
class _Converted:
    """A model's cached LRP-ready copy and what is known about it."""

    lrp_model: torch.nn.Module
    structure: tuple
    hops: int
    flow: str
    local: bool = True  # False once relevance left its computation subgraph


def _to_full(result: RelevanceResult, sub: Subgraph, num_nodes: int, num_edges: int) -> RelevanceResult:
    """``result`` of a pass on ``sub`` with its per-node and per-edge
    relevance placed in zeros of the input graph's size."""
    def spread(values: Optional[Tensor], positions: Tensor, size: int) -> Optional[Tensor]:
        if values is None:
            return None
        full = values.new_zeros((size, *values.shape[1:]))
        full[positions] = values
        return full

    return replace(
        result,
        node=spread(result.node, sub.nodes, num_nodes),
        edge=spread(result.edge, sub.edge_id, num_edges),
        self_loops=spread(result.self_loops, sub.nodes, num_nodes),
        edge_attr=spread(result.edge_attr, sub.edge_id, num_edges),
    )


class LRP(ExplainerAlgorithm):
    r"""Layer-wise Relevance Propagation for PyG's :class:`~torch_geometric.explain.Explainer`.

    One forward and one backward pass per explanation. The model is converted
    once (:func:`torch_geometric_lrp.convert`, cached per model; it shares the
    model's parameters) and is never modified.

    The returned :class:`~torch_geometric.explain.Explanation` has

    * ``node_mask``: relevance of ``x`` (``attributes``: ``[N, F]``;
      ``object``: summed over features, ``[N, 1]``; ``common_attributes``:
      summed over nodes, ``[1, F]``);
    * ``edge_mask``: relevance that flowed through each input edge's
      messages, summed over layers, ``[E]``;
    * ``edge_attr_mask``: relevance of ``edge_attr`` when the model reads it;
    * ``self_loop_relevance``: per node, relevance through self-loops the layers
      added (not input edges);
    * ``score`` (the seeded target score: the target's logit), ``relevance_total``
      (relevance on the inputs), ``lost`` (reached outputs equal to 0) and
      ``absorbed`` (kept by biases, stabilisers and constants; with
      ``strict=False`` also by ops without a rule):
      ``score = relevance_total + absorbed + lost``.

    Parameters
    ----------
    rules : dict, optional
        A composite for :func:`torch_geometric_lrp.convert` (default: its
        default composite).
    mask : {'signed', 'abs', 'positive'}
        How relevance appears in the masks. Relevance is signed (negative:
        evidence against the target); ``'abs'`` and ``'positive'`` are views
        for PyG's thresholds and visualisers, which read larger as more important.
    strict : bool
        Raise on ops without a relevance rule (default) instead of only
        counting them.
    subgraph : bool
        Node-level tasks with an ``index``: run the pass on the targets'
        computation subgraph (``L + 1`` hops for ``L`` message-passing hops,
        :func:`~torch_geometric_lrp.explain.subgraph.count_hops`) and report zeros
        elsewhere (default). The relevance is the same as on the full graph
        for a model whose outputs depend on ``L`` hops only, as PyG's own
        explainers assume; a pass whose relevance reaches beyond that
        proves the model is not local, and it is explained on the full graph
        from then on. ``False`` always uses the full graph.
    """

    def __init__(self, rules: Optional[dict] = None, mask: str = "signed", strict: bool = True,
                 subgraph: bool = True):
        super().__init__()
        if mask not in MASK_VIEWS:
            raise ValueError(f"LRP: mask must be one of {list(MASK_VIEWS)}, got {mask!r}.")
        self.rules = rules
        self.mask = mask
        self.strict = strict
        self.subgraph = subgraph
        self._converted: "weakref.WeakKeyDictionary[torch.nn.Module, _Converted]" = weakref.WeakKeyDictionary()

    def lrp_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """The LRP-ready version of ``model`` (converted on first use, and
        again when the model's modules, parameters, buffers or settings were
        replaced since: the copy holds the objects it was made from)."""
        return self._entry(model).lrp_model

    def _entry(self, model: torch.nn.Module) -> "_Converted":
        cached = self._converted.get(model)
        structure = _structure(model)
        if cached is None or not _same_structure(cached.structure, structure):
            lrp_model = convert(model, self.rules)
            prepare_for_subgraphs(lrp_model)
            cached = self._converted[model] = _Converted(lrp_model, structure, count_hops(lrp_model),
                                                         message_flow(lrp_model))
        return cached

    def forward(self, model: torch.nn.Module, x: Tensor, edge_index: Tensor, *, target: Tensor,
                index: Optional[Union[int, Tensor]] = None, **kwargs) -> Explanation:
        if isinstance(x, dict) or isinstance(edge_index, dict):
            raise ValueError("LRP: heterogeneous graphs (dict inputs) are not supported yet.")
        if isinstance(index, int):
            index = torch.tensor([index])
        entry = self._entry(model)
        settings = dict(mode=self.model_config.mode, strict=self.strict,
                        track_edges=self.explainer_config.edge_mask_type is not None)
        result = None
        if self.subgraph and entry.local and self.model_config.task_level == ModelTaskLevel.node:
            result = self._on_subgraph(entry, x, edge_index, target, index, settings, kwargs)
        if result is None:
            result = run_relevance(entry.lrp_model, x, edge_index, target=target, index=index, **settings, **kwargs)
        return explanation_from(result, self.explainer_config.node_mask_type,
                                self.explainer_config.edge_mask_type, self.mask)

    def _on_subgraph(self, entry: "_Converted", x: Tensor, edge_index: Tensor, target: Optional[Tensor],
                     index: Optional[Tensor], settings: dict, kwargs: dict) -> Optional[RelevanceResult]:
        """The relevance pass on the targets' computation subgraph, put back
        into full-size results; ``None`` where it cannot be used (no index,
        a sparse adjacency, an input it cannot cut, a subgraph that is the
        whole graph) or the model proved not local (see
        :mod:`~torch_geometric_lrp.explain.subgraph`)."""
        if index is None or not isinstance(x, Tensor) or not isinstance(edge_index, Tensor) \
                or edge_index.layout != torch.strided:
            return None
        n, e = x.shape[0], edge_index.shape[1]
        positions = torch.arange(n, device=x.device)[index].view(-1)
        sub = receptive_field(positions, entry.hops, edge_index, n, entry.flow)
        if sub.nodes.numel() == n:
            return None
        sub_kwargs, unknown = slice_inputs(kwargs, sub, n, e)
        if unknown:
            return None
        if isinstance(target, Tensor) and target.dim() > 0 and target.shape[0] == n:
            target = target[sub.nodes]
        result = run_relevance(entry.lrp_model, x[sub.nodes], sub.edge_index, target=target, index=sub.index,
                               **settings, **sub_kwargs)
        if reaches_ring(sub, result.node, result.edge, result.edge_attr, result.self_loops):
            entry.local = False  # from now on, this model is explained on the full graph
            return None
        return _to_full(result, sub, n, e)

    def supports(self) -> bool:
        node_mask_type = self.explainer_config.node_mask_type
        edge_mask_type = self.explainer_config.edge_mask_type
        if edge_mask_type not in (None, MaskType.object):
            raise ValueError(f"LRP: edge_mask_type must be 'object' or None, got '{edge_mask_type.value}' "
                             f"(edge relevance is one value per edge).")
        if node_mask_type not in (None, MaskType.attributes, MaskType.object, MaskType.common_attributes):
            raise ValueError(f"LRP: unsupported node_mask_type '{node_mask_type}'.")
        return True
