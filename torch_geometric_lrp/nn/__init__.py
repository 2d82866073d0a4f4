"""LRP versions of PyG layers.

Each class subclasses the PyG layer of the same name: same constructor,
parameter names and ``state_dict`` keys, same forward output. Outside a
relevance pass they *are* the PyG layer (trainable as usual). Inside one
(:func:`torch_geometric_lrp.relevance_pass`), the relevance mode gives their
``message`` / ``aggregate`` / ``update`` ops relevance rules, the
attention layers (and ``SGFormerAttention``) treat their attention
coefficients as constants.
"""
from .conv import (
    APPNP,
    ChebConv,
    EdgeConv,
    GATConv,
    GATv2Conv,
    GCN2Conv,
    GCNConv,
    GeneralConv,
    GINConv,
    GINEConv,
    GraphConv,
    SAGEConv,
    SGConv,
    SGFormerAttention,
    TransformerConv,
)

__all__ = [
    "APPNP", "ChebConv", "EdgeConv", "GATConv", "GATv2Conv", "GCN2Conv", "GCNConv", "GeneralConv",
    "GINConv", "GINEConv", "GraphConv", "SAGEConv", "SGConv", "SGFormerAttention", "TransformerConv",
]
