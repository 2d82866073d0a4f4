"""Explanations from relevance: PyG ``ExplainerAlgorithm`` and one-call helpers."""
from .algorithm import LRP
from .api import NodeRelevance, explain, explain_nodes
from .core import SubgraphWarning

__all__ = ["LRP", "explain", "explain_nodes", "NodeRelevance", "SubgraphWarning"]
