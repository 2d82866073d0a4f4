"""The computation subgraph of node-level targets.

A message-passing model with ``L`` hops computes a node's output from the
nodes within ``L`` hops; with the degrees of those nodes complete (GCN's
normalisation, mean aggregation), that is the ``L + 1``-hop subgraph. Explaining
a node there instead of on the whole graph gives the same relevance at a cost
that does not grow with the graph. This is the assumption PyG's own explainers
make for node-level tasks (their hard masks are the ``L``-hop subgraph).

The nodes at exactly ``L + 1`` hops (the *ring*) are only there for the
degrees: a local ``L``-hop model hands them no relevance. Relevance on the ring
therefore proves that the model is not local in ``L`` hops (a global pooling
fed back to the nodes, a layer applied more often than it is counted), and the
callers explain on the full graph or raise instead.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor
from torch_geometric.nn import APPNP, ChebConv, MessagePassing, SGConv

__all__ = ["Subgraph", "receptive_field", "slice_inputs", "reaches_ring", "count_hops", "message_flow", "prepare_for_subgraphs"]


def count_hops(model: torch.nn.Module) -> int:
    """How many hops the model's message passing reaches (``APPNP`` and
    ``SGConv`` propagate ``K`` times, ``ChebConv`` ``K - 1`` times)."""
    hops = 0
    for module in model.modules():
        if isinstance(module, (APPNP, SGConv)):
            hops += module.K
        elif isinstance(module, ChebConv):
            hops += len(module.lins) - 1
        elif isinstance(module, MessagePassing):
            hops += 1
    return hops


def message_flow(model: torch.nn.Module) -> str:
    """The ``flow`` of the model's message passing (of its first layer)."""
    return next((m.flow for m in model.modules() if isinstance(m, MessagePassing)), "source_to_target")


def prepare_for_subgraphs(lrp_model: torch.nn.Module) -> None:
    """Every subgraph is a new graph: layers that cache their normalised
    graph (``GCNConv``, ``SGConv``, ``APPNP`` with ``cached=True``) must not
    reuse the input graph's or an earlier subgraph's. Call on a converted copy
    only (the user's model keeps its cache)."""
    for module in lrp_model.modules():
        if getattr(module, "cached", None) is True:
            module.cached = False
            for key in [k for k in vars(module) if k.startswith("_cached_")]:
                setattr(module, key, None)


@dataclass
class Subgraph:
    """Nodes within ``num_hops + 1`` hops of some targets, and the edges
    among them.

    ``nodes`` and ``edge_id`` are positions in the input graph (ascending);
    ``edge_index`` is relabelled to positions in ``nodes``; ``index`` holds
    the targets' positions in ``nodes``; ``ring`` marks the nodes at exactly
    ``num_hops + 1`` hops.
    """

    nodes: Tensor
    edge_id: Tensor
    edge_index: Tensor
    index: Tensor
    ring: Tensor


def receptive_field(index: Tensor, num_hops: int, edge_index: Tensor, num_nodes: int,
                    flow: str = "source_to_target") -> Subgraph:
    """The :class:`Subgraph` of the nodes ``index`` (1-D positions) for a
    model that passes messages ``num_hops`` times along ``flow``."""
    source, target = edge_index if flow == "source_to_target" else edge_index.flip(0)
    reached = torch.zeros(num_nodes, dtype=torch.bool, device=edge_index.device)
    reached[index] = True
    inner = reached
    for _ in range(num_hops + 1):
        inner = reached
        reached = reached.clone()
        reached[source[inner[target]]] = True  # everything that sends to a reached node
    nodes = reached.nonzero().view(-1)
    edge_id = (reached[edge_index[0]] & reached[edge_index[1]]).nonzero().view(-1)
    relabel = torch.full((num_nodes,), -1, dtype=torch.long, device=edge_index.device)
    relabel[nodes] = torch.arange(nodes.numel(), device=edge_index.device)
    return Subgraph(nodes=nodes, edge_id=edge_id, edge_index=relabel[edge_index[:, edge_id]],
                    index=relabel[index], ring=~inner[nodes])


def slice_inputs(kwargs: dict, sub: Subgraph, num_nodes: int, num_edges: int) -> tuple[dict, list[str]]:
    """Model inputs cut to ``sub``: tensors named ``edge*`` with one row per
    edge follow its edges, other tensors with one row per node (not a square
    ``[N, N]`` matrix) its nodes. Returns the inputs and the names of the
    tensors that were neither (passed on as they are)."""
    out, unknown = {}, []
    for key, value in kwargs.items():
        if not isinstance(value, Tensor) or value.dim() == 0:
            out[key] = value
        elif key.startswith("edge") and value.shape[0] == num_edges:
            out[key] = value[sub.edge_id]
        elif value.shape[0] == num_nodes and not (value.dim() > 1 and value.shape[1] == num_nodes):
            out[key] = value[sub.nodes]
        else:
            out[key] = value
            unknown.append(key)
    return out, unknown


def reaches_ring(sub: Subgraph, node: Tensor, edge: Optional[Tensor] = None, edge_attr: Optional[Tensor] = None,
                 self_loops: Optional[Tensor] = None) -> bool:
    """Whether any relevance (of nodes, edges touching the ring, edge
    features of those edges, self-loops) reached the ring of ``sub``."""
    if bool(node[sub.ring].any()) or (self_loops is not None and bool(self_loops[sub.ring].any())):
        return True
    touching = sub.ring[sub.edge_index[0]] | sub.ring[sub.edge_index[1]]
    return any(r is not None and bool(r[touching].any()) for r in (edge, edge_attr))
