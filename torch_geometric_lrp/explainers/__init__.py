"""Explanations from relevance: PyG ``ExplainerAlgorithm`` and one-call helpers."""
from .algorithm import LRP
from .api import NodeRelevance, explain, explain_nodes
from .core import SubgraphWarning
from .loader import explain_loader

__all__ = ["LRP", "explain", "explain_nodes", "explain_loader", "NodeRelevance", "SubgraphWarning"]
