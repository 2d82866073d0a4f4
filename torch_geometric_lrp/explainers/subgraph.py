r"""The computation subgraph of node-level targets, and how it proves itself.

A message-passing model with ``L`` hops computes the output of a node ``t``
from the nodes ``S_L`` within ``L`` hops of ``t`` (PyG's ``k_hop_subgraph``).
A layer also reads *degrees*: the in-degree (GCN, mean aggregation, softmax
over incoming edges) or the out-degree (``ChebConv``'s Laplacian) of the nodes
whose messages it passes. Both are complete when the cut keeps every edge that
touches ``S_L``:

.. math::

    E_{cut} = \{(j, i) \in E : j \in S_L \text{ or } i \in S_L\}, \qquad
    V_{cut} = S_L \cup \{\text{ends of } E_{cut}\}.

On an undirected graph this is the ``L + 1``-hop subgraph without the edges
among the outermost nodes. The nodes of ``V_cut`` outside ``S_L`` (the *ring*)
are there for the degrees only: a model that is local in ``L`` hops gives them
no relevance.

Two things a cut cannot see, so the callers check both:

* relevance on the ring proves the model reaches further than ``L`` hops (a
  layer applied more often than :func:`count_hops` counts, a pooling fed back
  to the nodes);
* a model that reads the graph as a whole (``F.normalize(h, dim=0)``, a
  per-node parameter indexed by ``arange(N)``, the number of nodes) gives the
  targets another output when unrelated nodes are present. :func:`with_context`
  builds that input: the cut with isolated copies of other nodes in front,
  which shifts every position, changes the size and every statistic over
  nodes, and changes nothing for a local model.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor
from torch_geometric.explain.algorithm import ExplainerAlgorithm
from torch_geometric.nn import APPNP, ChebConv, MessagePassing, SGConv
from torch_geometric.utils import k_hop_subgraph

__all__ = ["Cut", "cut", "disjoint_union", "with_context", "slice_inputs", "reaches_ring", "count_hops",
           "message_flow"]


def count_hops(model: torch.nn.Module) -> int:
    """How many hops the model's message passing reaches: one per
    ``MessagePassing`` module, ``K`` for ``APPNP`` and ``SGConv``, ``K - 1``
    for ``ChebConv``. A layer applied several times is counted once; the
    ring check catches that."""
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
    """The ``flow`` of the model's message passing, as PyG's explainers read it."""
    return ExplainerAlgorithm._flow(model)


@dataclass
class Cut:
    """Some nodes of a graph and the edges among them, as a graph of its own.

    ``nodes`` are positions in the input graph (a position may repeat when
    the cut holds several copies of a node), ``edge_id`` the input edges kept,
    ``edge_index`` those edges relabelled to positions in ``nodes``, ``index``
    the targets' positions in ``nodes`` and ``ring`` marks the nodes that are
    there for the degrees only.
    """

    nodes: Tensor
    edge_id: Tensor
    edge_index: Tensor
    index: Tensor
    ring: Tensor

    @property
    def num_nodes(self) -> int:
        return self.nodes.numel()


def cut(index: Tensor, num_hops: int, edge_index: Tensor, num_nodes: int,
        flow: str = "source_to_target") -> Cut:
    """The :class:`Cut` for targets ``index`` (1-D positions) of a model with
    ``num_hops`` hops along ``flow``: ``S_L`` from ``k_hop_subgraph`` and every
    edge touching it."""
    inner = k_hop_subgraph(index, num_hops, edge_index, num_nodes=num_nodes, flow=flow)[0]
    reads = torch.zeros(num_nodes, dtype=torch.bool, device=edge_index.device)
    reads[inner] = True
    edge_id = (reads[edge_index[0]] | reads[edge_index[1]]).nonzero().view(-1)
    kept = edge_index[:, edge_id]
    keep = reads.clone()
    keep[kept.reshape(-1)] = True
    nodes = keep.nonzero().view(-1)
    relabel = torch.full((num_nodes,), -1, dtype=torch.long, device=edge_index.device)
    relabel[nodes] = torch.arange(nodes.numel(), device=edge_index.device)
    return Cut(nodes=nodes, edge_id=edge_id, edge_index=relabel[kept], index=relabel[index], ring=~reads[nodes])


def disjoint_union(cuts: list[Cut]) -> tuple[Cut, list[int], list[int]]:
    """The cuts side by side as one graph of disjoint copies, with the first
    node and first edge of each copy."""
    node_starts = _starts([c.num_nodes for c in cuts])
    edge_starts = _starts([c.edge_id.numel() for c in cuts])
    union = Cut(
        nodes=torch.cat([c.nodes for c in cuts]),
        edge_id=torch.cat([c.edge_id for c in cuts]),
        edge_index=torch.cat([c.edge_index + s for c, s in zip(cuts, node_starts)], dim=1),
        index=torch.cat([c.index + s for c, s in zip(cuts, node_starts)]),
        ring=torch.cat([c.ring for c in cuts]),
    )
    return union, node_starts, edge_starts


def _starts(sizes: list[int]) -> list[int]:
    starts, total = [], 0
    for size in sizes:
        starts.append(total)
        total += size
    return starts


def with_context(c: Cut, num_nodes: int) -> Cut:
    """``c`` with isolated copies of ``k = ceil(|c| / 8)`` other input nodes
    in front (no edges of their own, no targets): nodes outside ``c`` first,
    then, where there are too few, nodes of ``c`` again. An eighth more
    nodes, at shifted positions, moves any statistic over all nodes (a norm,
    a mean, a per-position parameter) far beyond float tolerance, at an
    eighth of a forward's extra cost."""
    inside = torch.zeros(num_nodes, dtype=torch.bool, device=c.nodes.device)
    inside[c.nodes] = True
    order = torch.cat([(~inside).nonzero().view(-1), inside.nonzero().view(-1)])
    extra = order[:max(1, -(-c.num_nodes // 8))]
    k = extra.numel()
    return Cut(nodes=torch.cat([extra, c.nodes]), edge_id=c.edge_id, edge_index=c.edge_index + k,
               index=c.index + k, ring=torch.cat([torch.ones_like(extra, dtype=torch.bool), c.ring]))


def slice_inputs(kwargs: dict, c: Cut, num_nodes: int, num_edges: int) -> tuple[dict, list[str]]:
    """Model inputs cut to ``c``: tensors named ``edge*`` with one row per
    edge follow its edges, other tensors with one row per node (and not a
    square ``[N, N]`` matrix) its nodes. Returns the inputs and the names of
    the tensors that were neither (passed on as they are)."""
    out, unknown = {}, []
    for key, value in kwargs.items():
        if not isinstance(value, Tensor) or value.dim() == 0:
            out[key] = value
        elif key.startswith("edge") and value.shape[0] == num_edges:
            out[key] = value[c.edge_id]
        elif value.shape[0] == num_nodes and not (value.dim() > 1 and value.shape[1] == num_nodes):
            out[key] = value[c.nodes]
        else:
            out[key] = value
            unknown.append(key)
    return out, unknown


def reaches_ring(c: Cut, node: Tensor, edge: Optional[Tensor] = None, edge_attr: Optional[Tensor] = None,
                 self_loops: Optional[Tensor] = None) -> bool:
    """Whether any relevance (of nodes, of self-loops, of edges touching the
    ring or of their features) reached the ring of ``c``."""
    if bool(node[c.ring].any()) or (self_loops is not None and bool(self_loops[c.ring].any())):
        return True
    touching = c.ring[c.edge_index[0]] | c.ring[c.edge_index[1]]
    return any(r is not None and bool(r[touching].any()) for r in (edge, edge_attr))
