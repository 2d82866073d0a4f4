"""Explain a graph classifier on a BA-2Motifs-style data set.

Each graph is a small Barabasi-Albert graph with one motif attached: a house
(class 0) or a 5-cycle (class 1). Node features are constant, so only the
motif's shape tells the classes apart, and its edges are the ground truth
(Luo et al., PGExplainer, 2020, built the original set; this script makes a
small one locally with PyG's ``ExplainerDataset``).

The script trains a GIN graph classifier (``global_mean_pool`` readout),
explains one test graph's prediction with ``lrp.explain`` on a mini-batch of
test graphs (graph level, with ``batch``), prints the edges that got the most
relevance and which fraction of them lies in the motif, and the same fraction
averaged over the test graphs.

Run: ``python examples/graph_classification_motifs.py``.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.data import Batch, Data
from torch_geometric.datasets import ExplainerDataset
from torch_geometric.datasets.graph_generator import BAGraph
from torch_geometric.datasets.motif_generator import CycleMotif
from torch_geometric.loader import DataLoader
from torch_geometric.nn import GINConv, global_mean_pool

import torch_geometric_lrp as lrp

CLASSES = ["house", "5-cycle"]


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--graphs", type=int, default=200, help="graphs per class")
    parser.add_argument("--base-nodes", type=int, default=20, help="nodes of each Barabasi-Albert graph")
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--graph", type=int, default=0, help="which graph of the explained test batch")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (graphs this small run fastest on one)")
    return parser.parse_args(argv)


def make_dataset(graphs_per_class: int, base_nodes: int) -> list[Data]:
    """BA graphs (one new node attaches with one edge) with a house or a 5-cycle."""
    dataset = []
    for label, motif in enumerate(["house", CycleMotif(5)]):
        generated = ExplainerDataset(graph_generator=BAGraph(base_nodes, 1), motif_generator=motif,
                                     num_motifs=1, num_graphs=graphs_per_class)
        for g in generated:
            dataset.append(Data(x=torch.ones(g.num_nodes, 10), edge_index=g.edge_index,
                                y=torch.tensor([label]), motif_edges=g.edge_mask.bool()))
    return [dataset[i] for i in torch.randperm(len(dataset)).tolist()]


class GIN(nn.Module):
    """GIN layers (MLPs with batch norm), a mean readout and an MLP head: a
    model as a user writes it, with nothing LRP-specific in it."""

    def __init__(self, in_channels: int, hidden: int, layers: int, classes: int):
        super().__init__()
        self.convs = nn.ModuleList()
        for i in range(layers):
            mlp = nn.Sequential(nn.Linear(in_channels if i == 0 else hidden, hidden), nn.BatchNorm1d(hidden),
                                nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
            self.convs.append(GINConv(mlp))
        self.head = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, classes))

    def forward(self, x: Tensor, edge_index: Tensor, batch: Tensor) -> Tensor:
        for conv in self.convs:
            x = conv(x, edge_index)
        return self.head(global_mean_pool(x, batch))


def main(argv=None) -> None:
    args = parse_args(argv)
    start = time.perf_counter()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)  # PyG's Barabasi-Albert generator draws from numpy
    dataset = make_dataset(args.graphs, args.base_nodes)
    split = int(0.8 * len(dataset))
    train_set, test_set = dataset[:split], dataset[split:]

    model = GIN(10, args.hidden, args.layers, len(CLASSES))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(args.epochs):
        model.train()
        for batch in DataLoader(train_set, batch_size=32, shuffle=True):
            optimizer.zero_grad()
            F.cross_entropy(model(batch.x, batch.edge_index, batch.batch), batch.y).backward()
            optimizer.step()
    model.eval()
    test = Batch.from_data_list(test_set)
    with torch.no_grad():
        pred = model(test.x, test.edge_index, test.batch).argmax(dim=1)
    print(f"{len(dataset)} graphs ({len(train_set)} train); GIN test accuracy "
          f"{(pred == test.y).float().mean().item():.3f} (trained in {time.perf_counter() - start:.1f} s)")

    # Explain one graph of a mini-batch: the relevance stays inside that graph.
    explained = Batch.from_data_list(test_set[:16])
    g = args.graph
    explanation = lrp.explain(model, explained.x, explained.edge_index, batch=explained.batch, index=g)
    edges = (explained.batch[explained.edge_index[0]] == g).nonzero().view(-1)
    relevance = explanation.edge_mask[edges]
    in_motif = explained.motif_edges[edges]
    offset = int(explained.ptr[g])
    print(f"graph {g}: {int((explained.batch == g).sum())} nodes, {edges.numel()} edges, motif "
          f"{CLASSES[int(explained.y[g])]}; predicted {CLASSES[int(explanation.target[0])]}, "
          f"logit {explanation.score:.4f}")
    outside = explanation.edge_mask[explained.batch[explained.edge_index[0]] != g].abs().sum().item()
    print(f"relevance on the other {explained.num_graphs - 1} graphs of the batch: {outside:.2e}")
    print("edges with most relevance (messages, all layers; node ids within the graph):")
    k = int(in_motif.sum())  # as many as the motif has (directed) edges
    top = relevance.argsort(descending=True)[:k]
    for e in top.tolist():
        src, dst = (explained.edge_index[:, edges[e]] - offset).tolist()
        print(f"  {src:3d} -> {dst:3d}  {relevance[e].item():+.4f}  ({'motif' if in_motif[e] else 'base'})")
    fraction = in_motif[top].float().mean().item()
    print(f"fraction of the top {k} edges in the motif: {fraction:.3f}")
    share = (relevance[in_motif].sum() / relevance.sum()).item()
    print(f"share of edge relevance on motif edges: {share:.3f} "
          f"({int(in_motif.sum())} of {edges.numel()} edges)")
    print(f"score {explanation.score:+.6f}: input {explanation.relevance_total:+.6f}, absorbed "
          f"{explanation.absorbed:+.6f}, lost {explanation.lost:+.6f}, residual {explanation.residual:+.2e}")

    # The same precision for every correctly classified test graph.
    fractions = []
    for i, data in enumerate(test_set):
        if pred[i] != data.y:
            continue
        ex = lrp.explain(model, data.x, data.edge_index, batch=torch.zeros(data.num_nodes, dtype=torch.long))
        k = int(data.motif_edges.sum())
        fractions.append(data.motif_edges[ex.edge_mask.argsort(descending=True)[:k]].float().mean().item())
    print(f"mean fraction of the top edges in the motif over {len(fractions)} correctly classified "
          f"test graphs: {np.mean(fractions):.3f}")
    print(f"done in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
