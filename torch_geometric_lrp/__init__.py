"""torch-geometric-lrp: Layer-wise Relevance Propagation for PyTorch Geometric."""
from . import functional, nn, rules
from .audit import RelevanceAudit
from .mode import RelevanceMode, UnsupportedOpError, relevance_pass

__version__ = "0.1.0"

__all__ = [
    "functional", "nn", "rules",
    "RelevanceAudit", "RelevanceMode", "UnsupportedOpError", "relevance_pass",
    "__version__",
]
