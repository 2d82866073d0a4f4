"""torch-geometric-lrp: Layer-wise Relevance Propagation for PyTorch Geometric."""
from . import functional, rules
from .audit import RelevanceAudit

__version__ = "0.1.0"

__all__ = ["functional", "rules", "RelevanceAudit", "__version__"]
