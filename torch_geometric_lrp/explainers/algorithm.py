"""``lrp.LRP``: Layer-wise Relevance Propagation as a PyG ``ExplainerAlgorithm``."""
from __future__ import annotations

import warnings
from typing import Optional, Union

import torch
from torch import Tensor
from torch_geometric.explain import Explanation, HeteroExplanation
from torch_geometric.explain.algorithm import ExplainerAlgorithm
from torch_geometric.explain.config import MaskType

from ..rules import Rule
from .core import Settings, explain_rows, explanation_of
from .subgraph import message_flow
from .targets import (check_edge_index, check_flags, check_graph_inputs, check_rows, check_rules, check_target,
                      check_view, check_x, mask_rows)

__all__ = ["LRP"]


class LRP(ExplainerAlgorithm):
    r"""Layer-wise Relevance Propagation for PyG's :class:`~torch_geometric.explain.Explainer`.

    One forward and one backward pass of the model itself per explanation
    (the relevance pass changes nothing on it that outlives the call). For
    node-level targets the pass runs on the targets' computation subgraph
    where that gives the full graph's answer (see
    :mod:`torch_geometric_lrp.explainers.subgraph`).

    The returned :class:`~torch_geometric.explain.Explanation` has

    * ``node_mask``: relevance of ``x`` (``attributes``: ``[N, F]``;
      ``object``: summed over features, ``[N, 1]``; ``common_attributes``:
      summed over nodes, ``[1, F]``);
    * ``edge_mask``: relevance that flowed through each input edge's
      messages, summed over layers, ``[E]``;
    * ``edge_attr_mask``: relevance of ``edge_attr`` when the model reads it;
    * ``self_loop_relevance``: per node, relevance through self-loops the
      layers added (not input edges);
    * for a heterogeneous graph (``x`` and ``edge_index`` as dicts), a
      ``HeteroExplanation`` with these masks per node and edge type;
    * ``score`` (the seeded score: the target's logit), ``relevance_total``
      (relevance of the inputs), and what the pass measured on the way:
      ``absorbed`` (biases, stabilisers, constant operands), ``lost``
      (reached outputs equal to 0) and ``residual``
      :math:`= \text{score} - \text{relevance\_total} - \text{absorbed} - \text{lost}`,
      which is 0 up to float error when every op accounts for its relevance.

    Parameters
    ----------
    rules : Rule or dict, optional
        One rule for every layer, or a composite
        ``{module type or qualified name (glob): Rule}`` over the default one.
    mask : {'signed', 'abs', 'positive'}
        How relevance appears in the masks. Relevance is signed (negative:
        evidence against the target); ``'abs'`` and ``'positive'`` are views
        for PyG's thresholds and visualisers, which read larger as more important.
    strict : bool
        Raise on ops without a relevance rule (default). ``False`` runs them
        with their gradient and warns, naming them (a ``RuntimeWarning``).
    subgraph : bool
        Explain node-level targets on their computation subgraph (default)
        where it proves itself, else on the full graph with a
        :class:`~torch_geometric_lrp.explainers.SubgraphWarning`. ``False``
        always uses the full graph.
    """

    # PyG's mask-learning algorithms keep their masks as attributes and reset
    # them to None after each call; LRP learns no mask, so these stay None.
    node_mask = None
    edge_mask = None

    def __init__(self, rules: Union[None, Rule, dict] = None, mask: str = "signed", strict: bool = True,
                 subgraph: bool = True):
        super().__init__()
        check_view(mask)
        check_rules(rules)
        check_flags(strict=strict, subgraph=subgraph)
        self.rules = rules
        self.mask = mask
        self.strict = strict
        self.subgraph = subgraph

    def forward(self, model: torch.nn.Module, x: Union[Tensor, dict], edge_index: Union[Tensor, dict], *,
                target: Optional[Tensor], index: Optional[Union[int, Tensor]] = None,
                **kwargs) -> Union[Explanation, HeteroExplanation]:
        config, explainer = self.model_config, self.explainer_config
        check_x(x, categorical=True, hetero=True)
        edge_index = check_edge_index(edge_index, explainer.edge_mask_type, x)
        check_graph_inputs(x, edge_index, kwargs)
        rows = check_rows(index, None, allow_empty=False)
        target = check_target(target, config.mode)
        settings = Settings(task_level=config.task_level, mode=config.mode, return_type=config.return_type,
                            rules=self.rules, strict=self.strict, subgraph=self.subgraph,
                            track_edges=explainer.edge_mask_type is not None, index_mask_rows=mask_rows(index))
        result = explain_rows(model, x, edge_index, kwargs, rows, target, settings)
        return explanation_of(result.node, result.edge, result.self_loops, result.edge_attr, result.score,
                              (result.absorbed, result.lost), explainer.node_mask_type,
                              explainer.edge_mask_type, self.mask, total=result.total,
                              embedding=result.embedding, flow=message_flow(model))

    def connect(self, explainer_config, model_config) -> None:
        """PyG's :class:`~torch_geometric.explain.Explainer` hands its settings
        to the algorithm when it is built; an algorithm holds one Explainer's
        (PyG's own do too). Connected again with other settings, an earlier
        Explainer built with this ``LRP`` would explain with the new ones (its
        mask types, its mode) without a word: that is warned about."""
        # (a deep copy carries the settings over, but no Explainer was built with the copy)
        connected = getattr(self, "_connected_as", None) == id(self)
        before = (getattr(self, "_explainer_config", None), getattr(self, "_model_config", None))
        super().connect(explainer_config, model_config)
        self._connected_as = id(self)
        if connected and before != (self._explainer_config, self._model_config):
            warnings.warn(
                "LRP: this lrp.LRP() was connected to an Explainer with other settings before. An algorithm holds "
                "the settings of the last Explainer built with it, so an earlier Explainer built with it now "
                "explains with these (mask types, mode, return type). Give each Explainer its own lrp.LRP().",
                RuntimeWarning, stacklevel=3)

    def supports(self) -> bool:
        node_mask_type = self.explainer_config.node_mask_type
        edge_mask_type = self.explainer_config.edge_mask_type
        if edge_mask_type not in (None, MaskType.object):
            raise ValueError(f"edge_mask_type: must be 'object' or None, got '{edge_mask_type.value}' "
                             f"(edge relevance is one value per edge).")
        if node_mask_type not in (None, MaskType.attributes, MaskType.object, MaskType.common_attributes):
            raise ValueError(f"node_mask_type: unsupported value '{node_mask_type}'.")
        return True
