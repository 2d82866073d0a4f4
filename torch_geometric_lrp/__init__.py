"""torch-geometric-lrp: Layer-wise Relevance Propagation for PyTorch Geometric."""
from . import functional, nn, rules
from .audit import RelevanceAudit
from .check import ConservationReport, check_conservation
from .convert import UnsupportedModuleError, convert, register
from .explainers import LRP, NodeRelevance, SubgraphWarning, explain, explain_loader, explain_nodes
from .mode import RelevanceMode, UnsupportedOpError, relevance_pass
from .visualize import visualize_features, visualize_graph, visualize_walks
from .higher_order import Walks, subgraph_relevance, walks

__version__ = "0.1.0"

__all__ = [
    "functional", "nn", "rules",
    "RelevanceAudit", "RelevanceMode", "UnsupportedOpError", "relevance_pass",
    "convert", "register", "UnsupportedModuleError",
    "check_conservation", "ConservationReport",
    "LRP", "explain", "explain_nodes", "explain_loader", "NodeRelevance", "SubgraphWarning",
    "walks", "subgraph_relevance", "Walks",
    "visualize_graph", "visualize_features", "visualize_walks",
    "__version__",
]
