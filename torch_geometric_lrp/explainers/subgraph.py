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
are there for the degrees only: a model that is local in ``L`` hops reads
neither their features nor their outputs, and gives them no relevance.

So the ring is kept small. The outside neighbours of each node ``k`` of
``S_L`` are numbered ``0, 1, ...`` in ascending order, and the edges between
``k`` and its ``s``-th one, either way, end at *ring slot* ``s``: one ring
node per slot, standing for every outside node that has that number for some
``k`` (at the position of the smallest). Every node of ``S_L`` keeps its
edges, and so its in- and out-degrees, no two edges become parallel, and the
ring has as many nodes as the most outside neighbours of one node of
``S_L``, not as many as all of them: on a graph with 10 edges per node and a
3-layer model, about 1,100 nodes instead of 19,000. In a cut, the nodes of
``S_L`` come first (ascending), then the slots; :func:`spelled_out_each`
lists the subgraph with every outside node, as the explanations show it.

Two things a cut cannot see, so the callers check both:

* relevance on the ring proves the model reaches further than ``L`` hops (a
  layer applied more often than :func:`count_hops` counts, a pooling fed back
  to the nodes);
* a model that reads the graph as a whole (``F.normalize(h, dim=0)``, a
  per-node parameter indexed by ``arange(N)``, the number of nodes) gives the
  targets another output when unrelated nodes are present. :func:`with_context`
  builds that input: the cut with copies of other nodes in front, two of
  them with features beyond the range of ``x`` (:func:`context_features`),
  which shifts every position, changes the size and sums, means, norms,
  maxima and minima over the nodes, and changes nothing for a local model.
  Their edges (into and out of the ring slots, and more into one of them than
  any node of the graph has, two with edge features beyond the inputs' range:
  :func:`context_inputs`) change the number of edges, the largest degree,
  statistics over the edge features, and the degrees of the ring, which a
  model that computes features from the edges further out than its layers
  count (a neighbour's degree, a random-walk encoding) reads.

Many cuts cost time in proportion to the cuts, not to the graph:
:class:`Incidence` sorts the edges once by each end (two CSRs, built once per
call), and :func:`cut_each` then grows the cuts of a whole batch of
targets at once by breadth-first search over ``(target, node)`` pairs. One
cut (:func:`cut`, as ``lrp.explain`` makes it) runs the same search with the
edges looked up by ``L + 2`` passes over the edge list, cheaper than a sort.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

import torch
from torch import Tensor
from torch_geometric.explain.algorithm import ExplainerAlgorithm
from torch_geometric.nn import (APPNP, AntiSymmetricConv, ARMAConv, ChebConv, GatedGraphConv, MessagePassing,
                                MeshCNNConv, MixHopConv, PANConv, SGConv, SSGConv, TAGConv)
from torch_geometric.utils import cumsum

__all__ = ["Cut", "Incidence", "cut", "cut_each", "disjoint_union", "split", "with_context", "context_features",
           "context_inputs", "slice_inputs",
           "reaches_ring", "count_hops", "hops_of", "layer_hops", "layout_bound", "message_flow", "pays_off", "spelled_out",
           "spelled_out_each", "lean"]


def count_hops(model: torch.nn.Module) -> int:
    """How many hops the model's message passing reaches: one per
    ``MessagePassing`` module, more for the layers that propagate several
    times in one call (:func:`hops_of`), times the iterations of an
    ``AntiSymmetricConv`` for the layers it runs. A layer applied several
    times is counted once; the cut's checks catch that (and
    :class:`~torch_geometric_lrp.explainers.trim.Propagations`, where the
    layer propagates more often than counted)."""
    return sum(layer_hops(model).values())


def hops_of(module: torch.nn.Module) -> int:
    """The hops of one module alone (0 for one that is no ``MessagePassing``):
    ``K`` for ``APPNP``, ``SGConv``, ``TAGConv`` and ``SSGConv``, ``K - 1``
    for ``ChebConv``, ``num_layers`` for ``GatedGraphConv`` and ``ARMAConv``,
    the largest power for ``MixHopConv``, ``2 filter_size`` for ``PANConv``
    (paths of up to ``filter_size`` hops, scaled by each path's end's count of
    such paths, which reads as far again), 1 for any other."""
    if isinstance(module, (APPNP, SGConv, TAGConv, SSGConv)):
        return module.K
    if isinstance(module, ChebConv):
        return len(module.lins) - 1
    if isinstance(module, (GatedGraphConv, ARMAConv)):
        return module.num_layers
    if isinstance(module, MixHopConv):
        return max(module.powers)
    if isinstance(module, PANConv):  # its path counts' degrees read as far again
        return 2 * module.filter_size
    return int(isinstance(module, MessagePassing))


def layout_bound(model: torch.nn.Module) -> list[str]:
    """The layers of ``model`` whose output depends on the layout of their
    edge list, not only on its edges: ``MeshCNNConv`` reads each edge's four
    neighbours from four consecutive entries, in order, which a cut (fewer
    neighbours at its border, other positions) changes. A cut cannot explain
    them, and on a large graph no check sees it."""
    return sorted({type(m).__name__ for m in model.modules() if isinstance(m, MeshCNNConv)})


def layer_hops(model: torch.nn.Module) -> dict[int, int]:
    """``{id(layer): hops}`` for every message-passing module of ``model``:
    :func:`hops_of`, times ``num_iters`` for the layers an
    ``AntiSymmetricConv`` runs (its ``phi``, once per iteration)."""
    hops, repeated = {}, []
    for module in model.modules():
        if isinstance(module, MessagePassing):
            hops[id(module)] = hops_of(module)
        elif isinstance(module, AntiSymmetricConv):
            repeated.append(module)
    for module in repeated:
        for inner in module.phi.modules():
            if id(inner) in hops:
                hops[id(inner)] *= module.num_iters
    return hops


def message_flow(model: torch.nn.Module) -> str:
    """The ``flow`` of the model's message passing, as PyG's explainers read it."""
    return ExplainerAlgorithm._flow(model)


@dataclass
class Cut:
    """Some nodes of a graph and the edges among them, as a graph of its own.

    ``nodes`` are positions in the input graph (a position may repeat when
    the cut holds several copies of a node; a ring slot has the position of
    one of the outside nodes it stands for), ``edge_id`` the input edges kept,
    ``edge_index`` those edges relabelled to positions in ``nodes`` (the end
    of an edge outside ``S_L`` at its ring slot), ``index`` the targets'
    positions in ``nodes`` and ``ring`` marks the ring slots, there for the
    degrees only.
    """

    nodes: Tensor
    edge_id: Tensor
    edge_index: Tensor
    index: Tensor
    ring: Tensor
    added_edges: int = 0  # edges of the context check's own, in front (with_context)

    @property
    def num_nodes(self) -> int:
        return self.nodes.numel()


class Incidence:
    """The edges at each node of a graph, along both ends: the edge ids
    sorted by source and by target, with pointers (a CSR each way).

    Built once per graph (two sorts of the edge list); then the edges at
    ``k`` nodes cost ``O(k + their number)``, not ``O(E)``.
    """

    def __init__(self, edge_index: Tensor, num_nodes: int):
        _check_edges(edge_index, num_nodes)
        self.edge_index = edge_index
        self.num_nodes = num_nodes
        self._csr = [_csr(edge_index[end], num_nodes) for end in (0, 1)]

    def edges(self, nodes: Tensor, end: int) -> tuple[Tensor, Tensor]:
        """The edges whose end ``end`` (0: source, 1: target) is one of
        ``nodes``: for each, its node's position in ``nodes`` and its edge id."""
        ptr, order = self._csr[end]
        start = ptr[nodes]
        count = ptr[nodes + 1] - start
        owner = torch.repeat_interleave(count)
        offset = torch.arange(owner.numel(), device=nodes.device) - cumsum(count)[owner]
        return owner, order[start[owner] + offset]


class _Scan:
    """The edges at distinct nodes, by one pass over the edge list per call:
    for a single cut, cheaper than sorting the edges (:class:`Incidence`)."""

    def __init__(self, edge_index: Tensor, num_nodes: int):
        _check_edges(edge_index, num_nodes)
        self.edge_index = edge_index
        self.num_nodes = num_nodes

    def edges(self, nodes: Tensor, end: int) -> tuple[Tensor, Tensor]:
        """As :meth:`Incidence.edges`, for ``nodes`` without repeats."""
        at = torch.zeros(self.num_nodes, dtype=torch.bool, device=nodes.device)
        at[nodes] = True
        edge = at[self.edge_index[end]].nonzero().view(-1)
        where = torch.empty(self.num_nodes, dtype=torch.long, device=nodes.device)
        where[nodes] = torch.arange(nodes.numel(), device=nodes.device)
        return where[self.edge_index[end, edge]], edge


def _check_edges(edge_index: Tensor, num_nodes: int) -> None:
    if edge_index.numel() and (int(edge_index.min()) < 0 or int(edge_index.max()) >= num_nodes):
        raise ValueError(f"edge_index: node ids must be in 0 .. {num_nodes - 1} (the rows of x), got "
                         f"{int(edge_index.min())} .. {int(edge_index.max())}.")


def _csr(end: Tensor, num_nodes: int) -> tuple[Tensor, Tensor]:
    """Pointers ``ptr`` (``[N + 1]``) and the edge ids sorted by ``end``: the
    edges at node ``v`` are ``order[ptr[v]:ptr[v + 1]]``."""
    key = end.int() if num_nodes < 2 ** 31 else end  # 32-bit keys sort about twice as fast
    order = torch.sort(key, stable=True).indices
    return cumsum(torch.bincount(end, minlength=num_nodes)), order


def cut(index: Tensor, num_hops: int, edge_index: Tensor, num_nodes: int, flow: str = "source_to_target",
        incidence: Optional[Incidence] = None, lean: bool = False) -> Cut:
    """The :class:`Cut` of the targets ``index`` (1-D positions) together,
    for a model with ``num_hops`` hops along ``flow``: ``S_L``, the nodes
    within ``L`` hops of any target (PyG's ``k_hop_subgraph``), and every
    edge touching it. From ``incidence`` (:class:`Incidence` of
    ``edge_index``) where the caller has one, else by ``L + 2`` passes over
    the edge list (for one cut, cheaper than sorting it).

    ``lean=True``: only the edges that ``S_L`` reads (its incoming messages
    under ``flow``), with the ring slots numbered over the outside nodes
    ``S_L`` reads: the pass of :func:`lean`, built without the rest, about
    half the work. A check on the cut itself (:func:`with_context`) would
    run without the edges it leaves out, so only the full graph's output
    proves it. ``index`` may be on any device: the cut is where the graph is."""
    index = index.to(edge_index.device)
    group = torch.zeros_like(index)
    return _cuts(index, group, 1, num_hops, incidence or _Scan(edge_index, num_nodes), flow, lean)[0]


def cut_each(index: Tensor, num_hops: int, edge_index: Tensor, num_nodes: int, flow: str = "source_to_target",
             incidence: Optional[Incidence] = None, lean: bool = False) -> tuple[Cut, list[int], list[int]]:
    """The cut of each target alone, for all of ``index`` at once: what
    ``disjoint_union([cut(t.view(1), ...) for t in index])`` returns (the
    union of the copies, with the first node and first edge of each), in
    time proportional to the cuts' sizes once ``incidence`` is built.
    Duplicate targets get a copy each. ``lean``: as for :func:`cut`."""
    index = index.to(edge_index.device)
    group = torch.arange(index.numel(), device=index.device)
    return _cuts(index, group, index.numel(), num_hops, incidence or Incidence(edge_index, num_nodes), flow, lean)


def _cuts(index: Tensor, group: Tensor, num_groups: int, num_hops: int, graph: Union[Incidence, _Scan],
          flow: str, lean: bool = False) -> tuple[Cut, list[int], list[int]]:
    """The cut of each group of targets (``group[k]`` is the group of
    ``index[k]``), side by side in group order (``_Scan`` for one group only).

    A node ``v`` of group ``g`` is the key ``g * N + v``, an edge ``e`` the
    key ``g * E + e``; sorting keys sorts by group, then by position, so the
    sorted keys are the disjoint union and a key's rank is its position in it.
    """
    if flow not in ("source_to_target", "target_to_source"):
        raise ValueError(f"flow: must be 'source_to_target' or 'target_to_source', got {flow!r}.")
    if index.numel() and (int(index.min()) < 0 or int(index.max()) >= graph.num_nodes):
        raise ValueError(f"index: targets must be in 0 .. {graph.num_nodes - 1}, got {index.tolist()}.")
    n, e = max(graph.num_nodes, 1), max(graph.edge_index.shape[1], 1)
    reader = 1 if flow == "source_to_target" else 0  # an edge's end that reads its other end
    reads = frontier = torch.unique(group * n + index)  # S_0, then S_1, ..., S_L
    for _ in range(num_hops):
        owner, edge = graph.edges(frontier % n, reader)
        found = _unique(frontier[owner] // n * n + graph.edge_index[1 - reader, edge], num_groups * n)
        frontier = found[~_isin(found, reads, num_groups * n)]
        reads = torch.sort(torch.cat([reads, frontier])).values
    if lean:
        # the edges S_L reads, each found once, at its reading end; its
        # other end is in the ring where it is not in S_L
        owner, edge = graph.edges(reads % n, reader)
        edges = torch.sort(reads[owner] // n * e + edge).values
        edge_group, edge_id = edges // e, edges % e
        ends = edge_group * n + graph.edge_index[:, edge_id]
        source = ends[1 - reader]
        ring_ends = torch.zeros_like(ends, dtype=torch.bool)
        ring_ends[1 - reader] = ~_isin(source, reads, num_groups * n)
    else:
        # the edges touching S_L, found at their source (tag 0) and at their
        # target (tag 1): an edge found once has its other end outside S_L
        touching = [(reads[owner] // n * e + edge) * 2 + end
                    for end, (owner, edge) in enumerate(graph.edges(reads % n, end) for end in (0, 1))]
        tagged = torch.sort(torch.cat(touching)).values
        first = torch.ones_like(tagged, dtype=torch.bool)
        first[1:] = tagged[1:] // 2 != tagged[:-1] // 2
        starts = first.nonzero().view(-1)
        once = torch.diff(starts, append=starts.new_tensor([tagged.numel()])) == 1
        edges, found_at = tagged[starts] // 2, tagged[starts] % 2
        edge_group, edge_id = edges // e, edges % e
        ends = edge_group * n + graph.edge_index[:, edge_id]
        ring_ends = torch.stack([once & (found_at == 1), once & (found_at == 0)])
    # Re-keyed with room for the ring slots: node v of group g is g * b + v,
    # ring slot s of group g is g * b + n + s (after the group's nodes).
    slot = _ring_slots(ends, ring_ends, n)
    b = n + (int(slot.max()) + 1 if slot.numel() else 0)
    keys = ends // n * b + torch.where(ring_ends, n + slot, ends % n)
    nodes, position = _unique(torch.cat([group * b + index, keys.view(-1), reads // n * b + reads % n]),
                              num_groups * b, return_inverse=True)
    edge_index = position[index.numel():index.numel() + ends.numel()].view_as(ends)
    local = nodes % b
    ring = local >= n
    # a ring slot's position: the smallest outside node it stands for (a
    # model local in L hops never reads its features: the checks prove it)
    stands_for = torch.full_like(nodes, n).scatter_reduce_(0, edge_index[ring_ends], ends[ring_ends] % n,
                                                           reduce="amin")
    union = Cut(nodes=torch.where(ring, stands_for, local), edge_id=edge_id, edge_index=edge_index,
                index=position[:index.numel()], ring=ring)
    return union, _first(nodes // b, num_groups), _first(edge_group, num_groups)


def _unique(keys: Tensor, bound: int, return_inverse: bool = False):
    """``torch.unique`` of keys in ``0 .. bound - 1``. Where there are no
    more possible keys than keys (the overlapping subgraphs of a small
    graph), a mark per possible key and a running count find them without
    sorting, about 4x faster; elsewhere marks would cost more than the sort."""
    if bound > keys.numel():
        return torch.unique(keys, return_inverse=return_inverse)
    mark = torch.zeros(bound, dtype=torch.bool, device=keys.device)
    mark[keys] = True
    found = mark.nonzero().view(-1)
    return (found, (torch.cumsum(mark, 0) - 1)[keys]) if return_inverse else found


def _isin(keys: Tensor, members: Tensor, bound: int) -> Tensor:
    """Whether each of ``keys`` is one of the ascending ``members`` (keys in
    ``0 .. bound - 1``): by marks where there are no more possible keys than
    keys (as :func:`_unique`), else by binary search."""
    if not members.numel():
        return torch.zeros_like(keys, dtype=torch.bool)
    if bound > keys.numel():
        at = torch.searchsorted(members, keys).clamp_(max=members.numel() - 1)
        return members[at] == keys
    mark = torch.zeros(bound, dtype=torch.bool, device=keys.device)
    mark[members] = True
    return mark[keys]


def _ring_slots(ends: Tensor, outside: Tensor, n: int) -> Tensor:
    """The ring slot of each edge end outside ``S_L`` (``outside``; ends are
    node keys ``group * n + v``): the outside neighbours of each node ``k``
    of ``S_L`` are numbered 0, 1, ... in ascending order, and the edges
    between ``k`` and its ``s``-th outside neighbour, either way, get slot
    ``s``. Returns the slots, ``[2, m]`` like ``ends`` (0 at the ends inside)."""
    slot = torch.zeros_like(ends)
    ring_edge = outside.any(dim=0)  # an edge touches S_L: at most one end is outside
    if not bool(ring_edge.any()):
        return slot
    out_first = outside[0, ring_edge]
    inner = torch.where(out_first, ends[1, ring_edge], ends[0, ring_edge])
    neighbour = torch.where(out_first, ends[0, ring_edge], ends[1, ring_edge]) % n
    if int(inner.max()) >= (2 ** 63 - 1) // n:  # keys k * n + neighbour would overflow: rank k instead
        inner = torch.unique(inner, return_inverse=True)[1]
    key, order = torch.sort(inner * n + neighbour)  # by k, then by neighbour
    start = torch.ones_like(key, dtype=torch.bool)  # the first edge of a k
    new = torch.ones_like(start)  # the first edge of a (k, neighbour) pair
    start[1:] = key[1:] // n != key[:-1] // n
    new[1:] = key[1:] != key[:-1]
    pairs = torch.cumsum(new, 0)  # pairs so far, this one included
    firsts = start.nonzero().view(-1)
    before = (pairs[firsts] - 1).repeat_interleave(torch.diff(firsts, append=firsts.new_tensor([key.numel()])))
    slots = torch.empty_like(key)
    slots[order] = pairs - 1 - before
    slot[:, ring_edge] = slots * outside[:, ring_edge]
    return slot


def _first(group: Tensor, num_groups: int) -> list[int]:
    """The first position of each group in a sorted ``group``."""
    return cumsum(torch.bincount(group, minlength=num_groups))[:-1].tolist()


def pays_off(c: Cut, num_nodes: int, num_edges: int) -> bool:
    """Whether explaining on the cut ``c`` is worth it: its pass costs about
    its size in nodes and edges, and the check beside it (on a large graph,
    the cut with an eighth more nodes; on a small one, a plain forward of the
    graph) about as much again, so up to half the graph's nodes and edges it
    costs less than one pass on the whole graph, which needs no check."""
    return 2 * (c.num_nodes + c.edge_id.numel()) <= num_nodes + num_edges


def spelled_out(c: Cut, edge_index: Tensor, num_nodes: int, flow: str = "source_to_target") \
        -> tuple[Cut, Tensor, Tensor]:
    """The subgraph of the input that the one-copy cut ``c`` stands for
    (:func:`spelled_out_each` of ``c`` alone, its edges found by passes over
    ``edge_index``)."""
    return spelled_out_each([c], _Scan(edge_index, num_nodes), flow)[0]


def spelled_out_each(cuts: list[Cut], graph: Union[Incidence, _Scan], flow: str = "source_to_target") \
        -> list[tuple[Cut, Tensor, Tensor]]:
    """The subgraph of the input that each one-copy cut stands for, as the
    explanations list it: the cut's inner nodes ``S_L``, every edge of
    ``graph`` touching them and those edges' other ends, one ring node per
    outside node (nodes and edges ascending). Full and lean cuts give the
    same subgraph: it is found from ``S_L`` alone. All cuts at once, by the
    keys of ``_cuts`` (``_Scan`` for one cut only). ``cuts`` are made
    by :func:`cut_each` or :func:`cut` under ``flow``, in full or lean.

    Returns per cut the subgraph, the positions of the cut's inner nodes in
    it and the positions of the cut's edges among its edges."""
    if not cuts:
        return []
    n, e = max(graph.num_nodes, 1), max(graph.edge_index.shape[1], 1)
    device = graph.edge_index.device
    inners = [c.nodes[~c.ring] for c in cuts]  # ascending
    sizes = torch.tensor([v.numel() for v in inners], device=device)
    group = torch.repeat_interleave(torch.arange(len(cuts), device=device), sizes)
    inner = torch.cat(inners)
    reads = group * n + inner  # ascending: by cut, then by node
    touching = [group[owner] * e + edge for owner, edge in (graph.edges(inner, end) for end in (0, 1))]
    edges = _unique(torch.cat(touching), len(cuts) * e)  # an edge inside S_L is found at both ends
    edge_group, edge_id = edges // e, edges % e
    ends = edge_group * n + graph.edge_index[:, edge_id]
    nodes, position = _unique(torch.cat([reads, ends.reshape(-1)]), len(cuts) * n, return_inverse=True)
    at_inner = position[:reads.numel()]
    ring = torch.ones_like(nodes, dtype=torch.bool)
    ring[at_inner] = False
    targets = torch.cat([k * n + c.nodes[c.index] for k, c in enumerate(cuts)])
    union = Cut(nodes=nodes % n, edge_id=edge_id, edge_index=position[reads.numel():].view_as(ends),
                index=torch.searchsorted(nodes, targets), ring=ring)
    node_starts, edge_starts = _first(nodes // n, len(cuts)), _first(edge_group, len(cuts))
    # a full cut has every edge of its subgraph, a lean one those S_L reads
    reader = 1 if flow == "source_to_target" else 0
    read = ~ring[union.edge_index[reader]]
    spelled = []
    for c, full, at, node_start, edge_start in zip(cuts, split(union, node_starts, edge_starts),
                                                   at_inner.split(sizes.tolist()), node_starts, edge_starts):
        edges = torch.arange(full.edge_id.numel(), device=device)
        if c.edge_id.numel() < edges.numel():
            edges = read[edge_start:edge_start + edges.numel()].nonzero().view(-1)
        if not torch.equal(full.edge_id[edges], c.edge_id):
            raise ValueError(f"cuts: a cut with {c.edge_id.numel()} edges is neither the full cut "
                             f"({full.edge_id.numel()} edges) nor the lean cut of its nodes under flow={flow!r}; "
                             f"pass the flow it was cut with.")
        spelled.append((full, at - node_start, edges))
    return spelled


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


def split(union: Cut, node_starts: list[int], edge_starts: list[int]) -> list[Cut]:
    """The copies of a disjoint union as cuts of their own (the inverse of
    :func:`disjoint_union`)."""
    node_sizes = _sizes(node_starts, union.num_nodes)
    edge_sizes = _sizes(edge_starts, union.edge_id.numel())
    owner = torch.bucketize(union.index, torch.tensor(node_starts, dtype=torch.long, device=union.index.device),
                            right=True) - 1
    index_sizes = torch.bincount(owner, minlength=len(node_starts)).tolist()
    return [Cut(nodes=nodes, edge_id=edge_id, edge_index=edge_index - start, index=index - start, ring=ring)
            for nodes, edge_id, edge_index, index, ring, start in zip(
                union.nodes.split(node_sizes), union.edge_id.split(edge_sizes),
                union.edge_index.split(edge_sizes, dim=1), union.index.split(index_sizes),
                union.ring.split(node_sizes), node_starts)]


def _sizes(starts: list[int], total: int) -> list[int]:
    return [b - a for a, b in zip(starts, starts[1:] + [total])]


def _starts(sizes: list[int]) -> list[int]:
    starts, total = [], 0
    for size in sizes:
        starts.append(total)
        total += size
    return starts


#: The context check's first rows that :func:`context_features` sets beyond
#: the range of ``x``: one above every feature, one below.
EXTREMES = 2


def with_context(c: Cut, num_nodes: int, edge_index: Optional[Tensor] = None,
                 flow: str = "source_to_target") -> Cut:
    """``c`` with copies of ``k = max(ceil(|c| / 8), 3)`` other input nodes
    in front (no targets): nodes outside ``c`` first, then, where there are
    too few, nodes of ``c`` again. An eighth more nodes, at shifted
    positions, moves any sum, mean or norm over all nodes and any
    per-position parameter far beyond float tolerance, at an eighth of a
    forward's extra cost; the first ``EXTREMES`` of them get features beyond
    the range of ``x`` (:func:`context_features`), which moves maxima and
    minima over the nodes too.

    With the graph's ``edge_index``, the added nodes get edges of their own,
    in front of the cut's and copies of its edges (their features too:
    :func:`context_inputs`): one into and one out of each ring slot, and
    into the first added node more than the largest in-degree of the graph
    (in-degrees under ``flow``). No message of them reaches ``S_L`` and
    no node of ``S_L`` gets another degree, so a local model gives the
    targets the same outputs; the number of edges, the largest in-degree and
    the ring's degrees change."""
    k = max(EXTREMES + 1, -(-c.num_nodes // 8))
    # the first k + |c| positions hold k nodes outside c, unless the graph is smaller
    candidates = torch.arange(min(num_nodes, k + c.num_nodes), device=c.nodes.device)
    inside = torch.isin(candidates, c.nodes)
    extra = torch.cat([candidates[~inside], candidates[inside]])[:k]
    if extra.numel() < k:  # a graph of fewer than k nodes: some copied twice
        extra = extra.repeat(-(-k // max(extra.numel(), 1)))[:k]
    edge_id, pairs, added = c.edge_id, c.edge_index + k, 0
    if edge_index is not None and edge_index.numel():
        device = c.nodes.device
        ring = c.ring.nonzero().view(-1) + k
        into = edge_index[1 if flow == "source_to_target" else 0]
        largest = int(torch.bincount(into).max()) if into.numel() else 0
        helpers = torch.arange(ring.numel(), device=device) % k
        senders = torch.cat([helpers, ring, 1 + torch.arange(largest + 1, device=device) % (k - 1)])
        receivers = torch.cat([ring, helpers, torch.zeros(largest + 1, dtype=torch.long, device=device)])
        front = torch.stack([senders, receivers] if flow == "source_to_target" else [receivers, senders])
        pool = c.edge_id if c.edge_id.numel() else torch.arange(edge_index.shape[1], device=device)
        copies = pool[torch.arange(front.shape[1], device=device) % pool.numel()]
        edge_id, pairs = torch.cat([copies, edge_id]), torch.cat([front, pairs], dim=1)
        added = front.shape[1]
    return Cut(nodes=torch.cat([extra, c.nodes]), edge_id=edge_id, edge_index=pairs, index=c.index + k,
               ring=torch.cat([torch.ones_like(extra, dtype=torch.bool), c.ring]), added_edges=added)


def context_features(x: Tensor, context: Cut) -> Tensor:
    r"""The node features of the check on ``context`` (:func:`with_context`):
    ``x`` at its nodes, except that the first ``EXTREMES`` rows, nodes that
    a local model does not read, lie beyond the range of ``x`` in every
    feature, :math:`\max x + s` and :math:`\min x - s` with
    :math:`s = \max x - \min x + 1` (over the whole graph; half the
    minimum where it is positive, half the maximum where it is negative, so
    that a feature of one sign keeps it). Added copies of
    other nodes alone leave a maximum or minimum over the nodes as it is
    whenever they lie inside the cut's range; these do not. Integer features
    (categories) are copied as they are."""
    return _beyond(x, x[context.nodes])


def _beyond(values: Tensor, rows: Tensor) -> Tensor:
    """``rows`` (rows of ``values``) with the first ``EXTREMES`` set above and
    below the range of ``values``; integer values as they are. A feature of
    one sign keeps it where it can (``low / 2`` below a positive minimum,
    ``high / 2`` above a negative maximum): an edge weight made negative
    gives a model's degree normalisation (``ChebConv``'s
    :math:`d^{-1/2}`) NaN, and the check would fail for no fault of the
    model."""
    if not values.is_floating_point() or not values.numel() or rows.shape[0] < EXTREMES:
        return rows
    low, high = values.amin(dim=0), values.amax(dim=0)
    span = high - low + 1
    rows[0] = torch.where(high < 0, high / 2, high + span)
    rows[1] = torch.where(low > 0, low / 2, low - span)
    return rows


def context_inputs(kwargs: dict, context: Cut, num_nodes: int, num_edges: int) -> dict:
    """The model's other inputs for the check on ``context``
    (:func:`slice_inputs`), the first ``EXTREMES`` added edges with edge
    features beyond the range of the inputs' (as :func:`context_features`
    does for ``x``), so that a maximum or minimum over the edges moves."""
    inputs = slice_inputs(kwargs, context, num_nodes, num_edges)[0]
    if context.added_edges >= EXTREMES:
        for key, value in kwargs.items():
            if isinstance(value, Tensor) and value.dim() > 0 and key.startswith("edge") and \
                    value.shape[0] == num_edges:
                inputs[key] = _beyond(value, inputs[key])
    return inputs


def lean(c: Cut, flow: str = "source_to_target") -> Optional[tuple[Cut, Tensor]]:
    """``c`` without the edges that a ring slot reads (its incoming messages
    under ``flow``), and the mask of the edges kept; ``None`` where there
    are none.

    A local model never reads a ring slot's output, so these edges only
    give the nodes of ``S_L`` their out-degrees (every node keeps its
    in-degree). On a graph with as many edges out of a node as into it
    they are half of a cut's edges. A model that reads out-degrees
    (``ChebConv``'s Laplacian, a user's ``degree(edge_index[0])``) gives
    the targets other outputs without them: the cut's check, which runs the
    model on the whole cut or more, compares the lean cut's outputs too
    (see :func:`~torch_geometric_lrp.explainers.core.on_cut`)."""
    reader = 1 if flow == "source_to_target" else 0
    keep = ~c.ring[c.edge_index[reader]]
    if bool(keep.all()):
        return None
    return Cut(nodes=c.nodes, edge_id=c.edge_id[keep], edge_index=c.edge_index[:, keep], index=c.index,
               ring=c.ring), keep


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


def per_node_guesses(kwargs: dict, num_nodes: int, num_edges: int) -> list[str]:
    """The names of the tensors that :func:`slice_inputs` cuts as one row per
    node though they may hold one per edge: not named ``edge*``, on a graph
    with as many edges as nodes."""
    if num_nodes != num_edges:
        return []
    return [key for key, value in kwargs.items() if isinstance(value, Tensor) and value.dim() > 0 and
            not key.startswith("edge") and value.shape[0] == num_nodes]


def reaches_ring(c: Cut, node: Tensor, edge: Optional[Tensor] = None, edge_attr: Optional[Tensor] = None,
                 self_loops: Optional[Tensor] = None) -> bool:
    """Whether any relevance (of nodes, of self-loops, of edges touching the
    ring or of their features) reached the ring of ``c``."""
    if bool(node[c.ring].any()) or (self_loops is not None and bool(self_loops[c.ring].any())):
        return True
    touching = c.ring[c.edge_index[0]] | c.ring[c.edge_index[1]]
    return any(r is not None and bool(r[touching].any()) for r in (edge, edge_attr))
