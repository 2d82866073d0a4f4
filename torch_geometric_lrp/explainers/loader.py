r"""``lrp.explain_loader``: the seed nodes of every mini-batch a PyG
``NeighborLoader`` yields, explained on that mini-batch.

A ``NeighborLoader`` mini-batch is a ``Data`` whose first ``batch_size``
nodes are the seeds, with ``n_id`` (each node's id in the loader's graph)
and ``e_id`` (each edge's). The model runs on the mini-batch as in the
user's own inference loop, and :func:`~torch_geometric_lrp.explain_nodes`
explains its seeds there; the node and edge ids of each explanation are
then mapped back to the loader's graph. So this is one more caller of
``explain_nodes``, not a second relevance path.

**What is explained** is the model's output on the mini-batch. It equals
the output on the whole graph, and so does the relevance, when the
mini-batch holds each seed's computation subgraph: every in-neighbour up to
the model's depth :math:`L` (``num_neighbors=[-1] * L``), and one hop more
for layers that read their sources' degrees (``GCNConv``'s normalisation:
``[-1] * (L + 1)``). With sampled neighbourhoods (``num_neighbors=[10, 5]``)
the relevance explains the prediction the model makes on the sample, which
is what mini-batch inference reports; it conserves that prediction.
"""
from __future__ import annotations

from typing import Iterator, Optional, Sequence, Union

import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData
from torch_geometric.explain import Explanation

from .api import OUTPUTS, NodeRelevance, _coo, explain_nodes

__all__ = ["explain_loader"]


def explain_loader(
    model: torch.nn.Module,
    loader,
    *,
    inputs: Sequence[str] = (),
    target: Optional[str] = None,
    output: str = "list",
    **options,
) -> Iterator[Union[list[Explanation], NodeRelevance]]:
    """Explain the seed nodes of each mini-batch of ``loader``, one mini-batch at a time.

    Parameters
    ----------
    loader : iterable of Data
        A ``torch_geometric.loader.NeighborLoader`` (or anything that yields
        ``Data`` with ``x``, ``edge_index``, ``batch_size``, ``n_id`` and
        ``e_id``, seeds first).
    inputs : sequence of str
        Mini-batch attributes passed to the model as keyword arguments, as
        in ``model(batch.x, batch.edge_index, edge_attr=batch.edge_attr)``:
        ``inputs=["edge_attr"]``.
    target : str, optional
        A mini-batch attribute holding one target per node (``"y"`` explains
        the labels); default: the prediction.
    output : str
        ``'list'``: one ``Explanation`` per seed. ``'sparse'``: one
        :class:`~torch_geometric_lrp.NodeRelevance` per mini-batch, its
        columns the nodes and edges of the loader's graph.
    **options
        As for :func:`~torch_geometric_lrp.explain_nodes` (``rules``,
        ``mode``, ``mask``, ``batch_size``, ``num_hops``, ``strict``).

    Yields
    ------
    list of Explanation, or NodeRelevance
        Per mini-batch, its seeds in order. An ``Explanation`` is on the
        seed's subgraph of the mini-batch: ``node_index`` and ``edge_id``
        are ids in the loader's graph (``n_id`` / ``e_id``),
        ``x[index]`` is the seed, the rest as from ``explain_nodes``.
    """
    for name in ("progress", "distributed", "index"):
        if name in options:
            raise TypeError(f"{name}: explain_loader sets it (the seeds of each mini-batch, explained in this "
                            f"process, no progress bar per mini-batch); leave it out.")
    if output not in OUTPUTS:
        raise ValueError(f"output: must be one of {list(OUTPUTS)}, got {output!r}.")
    if isinstance(getattr(loader, "data", None), HeteroData):
        raise ValueError("loader: its graph is a HeteroData; explain_loader explains the seeds of homogeneous "
                         "mini-batches (Data). Explain a HeteroData graph with lrp.explain or lrp.LRP.")
    if output == "sparse" and not isinstance(getattr(loader, "data", None), Data):
        # without the graph, each matrix could only be as wide as its own mini-batch's largest id
        raise ValueError(f"output='sparse': the matrices' columns are the nodes and edges of the loader's graph, "
                         f"read from loader.data (a NeighborLoader over a Data has it); "
                         f"{type(loader).__name__} has none. Pass the NeighborLoader itself, or output='list'.")
    # checked here, at the call; the mini-batches are explained as they are drawn
    return _stream(model, loader, [inputs] if isinstance(inputs, str) else list(inputs), target, output, options)


def _stream(model, loader, inputs: list[str], target: Optional[str], output: str,
            options: dict) -> Iterator[Union[list[Explanation], NodeRelevance]]:
    graph = getattr(loader, "data", None)
    for batch in loader:
        _check_batch(batch, inputs, target, graph)
        seeds = int(batch.batch_size)
        kwargs = {name: batch[name] for name in inputs}
        seed_target = None if target is None else batch[target][:seeds]
        result = explain_nodes(model, batch.x, batch.edge_index, torch.arange(seeds, device=batch.x.device),
                               target=seed_target, output=output, progress=False, distributed=False,
                               **options, **kwargs)
        if output == "list":
            for ex in result:
                ex.node_index = _once(batch.n_id[ex.node_index], "node", "n_id")
                ex.edge_id = _once(batch.e_id[ex.edge_id], "edge", "e_id")
            yield result
        else:
            yield _to_graph(result, batch, graph)


def _check_batch(batch, inputs: Sequence[str], target: Optional[str], graph) -> None:
    if not isinstance(batch, Data):
        raise TypeError(f"loader: expected mini-batches of torch_geometric.data.Data (a NeighborLoader over a "
                        f"Data), got {type(batch).__name__}; explain a HeteroData graph with lrp.explain.")
    missing = [k for k in ("x", "edge_index", "batch_size", "n_id", "e_id") if batch.get(k) is None]
    if missing:
        raise ValueError(f"loader: a mini-batch has no {missing[0]!r}; explain_loader takes NeighborLoader "
                         f"mini-batches (seed nodes first, batch_size, n_id and e_id).")
    for name in (*inputs, *([target] if target is not None else [])):
        if batch.get(name) is None:
            raise ValueError(f"{'target' if name == target else 'inputs'}: the mini-batch has no attribute "
                             f"{name!r} (it has {sorted(batch.keys())}).")
    # each edge's id must name it (each node's: checked per explanation, _check_once)
    edges = graph.get("edge_index") if isinstance(graph, Data) else None
    if isinstance(edges, Tensor) and batch.e_id.numel():
        ends, named = batch.n_id[batch.edge_index], edges[:, batch.e_id]
        wrong = (ends != named).any(dim=0).nonzero()
        if wrong.numel():
            k = int(wrong[0])
            raise ValueError(f"loader: mini-batch edge {k} runs {int(ends[0, k])} -> {int(ends[1, k])} in the "
                             f"loader's graph, but its e_id names edge {int(batch.e_id[k])}, "
                             f"{int(named[0, k])} -> {int(named[1, k])}, so its relevance would land there. "
                             f"NeighborLoader(subgraph_type='bidirectional') adds such reversed copies of edges; "
                             f"explain with subgraph_type='directional' (the default) or 'induced'.")


def _once(ids: Tensor, what: str, name: str, keys: Optional[Tensor] = None) -> Tensor:
    """``ids`` of one explanation's nodes (or edges) in the loader's graph,
    each once: a mini-batch that holds one node of the graph twice where a
    seed's subgraph reaches both copies (a seed listed twice in
    ``input_nodes``) would split its relevance over two entries. (Copies in
    the subgraphs of different seeds, as ``disjoint=True`` makes, are fine.)
    ``keys``: what must be unique, where it is not ``ids`` (a sparse
    block's row and column)."""
    keys = ids if keys is None else keys
    found, inverse, counts = torch.unique(keys, return_inverse=True, return_counts=True)
    if bool((counts > 1).any()):
        twice = int(ids[(counts[inverse] > 1).nonzero()[0]])
        raise ValueError(f"loader: a seed's subgraph in a mini-batch holds {what} {twice} of the loader's graph "
                         f"({name}) more than once, so its relevance would be split over two entries. A seed "
                         f"listed twice in input_nodes does this (give each seed once: "
                         f"input_nodes=input_nodes.unique()), and so does sampling with replacement, which can "
                         f"list one edge twice (NeighborLoader(replace=True): sample without it, or take all "
                         f"neighbours with num_neighbors=[-1] * num_layers). For edges, so does "
                         f"subgraph_type='bidirectional', whose reversed copies carry the e_id of the edge they "
                         f"reverse (sample with 'directional', the default, or 'induced').")
    return ids


def _to_graph(block: NodeRelevance, batch: Data, graph) -> NodeRelevance:
    """``block``'s rows and columns as ids of the loader's graph."""
    n, e = graph.num_nodes, graph.num_edges  # (explain_loader checked that there is one)

    def mapped(matrix: Optional[Tensor], ids: Tensor, size: int) -> Optional[Tensor]:
        if matrix is None:
            return None
        rows, cols = matrix._indices()
        cols = ids[cols]
        _once(cols, "node" if ids is batch.n_id else "edge", "n_id" if ids is batch.n_id else "e_id",
              keys=rows * size + cols)
        order = torch.argsort(rows * size + cols)  # row-major again, as the columns moved
        return _coo(torch.stack([rows[order], cols[order]]), matrix._values()[order], (matrix.shape[0], size))

    return NodeRelevance(
        index=batch.n_id[block.index], target=block.target, score=block.score,
        relevance_total=block.relevance_total,
        node_relevance=mapped(block.node_relevance, batch.n_id, n),
        edge_relevance=mapped(block.edge_relevance, batch.e_id, e),
        edge_attr_relevance=mapped(block.edge_attr_relevance, batch.e_id, e),
    )
