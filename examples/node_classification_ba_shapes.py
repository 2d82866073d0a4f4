"""Explain a GCN's prediction for a node of a house motif (BA-Shapes).

BA-Shapes (Ying et al., GNNExplainer, 2019): a Barabasi-Albert graph with
"house" motifs attached; a node's class is its place in a house (none, base,
middle, roof). The features are constant, so only the structure around a node
can tell its class, and the edges of its house are the ground truth.

The script builds the graph with PyG's ``ExplainerDataset``, trains PyG's
stock ``GCN`` for a few seconds, explains one motif node with ``lrp.explain``,
scores the edge relevance against the ground-truth edge mask on the node's
computation subgraph (AUROC), does the same for every correctly predicted
motif node at once with ``lrp.explain_nodes``, and draws where the evidence
for the node's class comes from (the z+ rule, positive contributions only)
with ``lrp.visualize_graph``: the node's house glows red.

Run: ``python examples/node_classification_ba_shapes.py [--out PATH]``.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.datasets import ExplainerDataset
from torch_geometric.datasets.graph_generator import BAGraph
from torch_geometric.nn import GCN
from torch_geometric.utils import k_hop_subgraph

import torch_geometric_lrp as lrp

CLASSES = ["base graph", "house middle", "house bottom", "house top"]  # middle: the two nodes under the roof


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="ba_shapes_explanation.png", help="PNG to draw the explanation to")
    parser.add_argument("--base-nodes", type=int, default=300, help="nodes of the Barabasi-Albert graph")
    parser.add_argument("--motifs", type=int, default=80, help="house motifs attached to it")
    parser.add_argument("--layers", type=int, default=3, help="GCN layers (= hops of the computation subgraph)")
    parser.add_argument("--hidden", type=int, default=20)
    parser.add_argument("--epochs", type=int, default=1000)
    parser.add_argument("--node", type=int, default=None,
                        help="node to explain (default: the first correctly predicted motif node of the test split)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (graphs this small run fastest on one)")
    return parser.parse_args(argv)


def make_data(base_nodes: int, motifs: int) -> Data:
    data = ExplainerDataset(graph_generator=BAGraph(base_nodes, 5), motif_generator="house",
                            num_motifs=motifs)[0]
    data.x = torch.ones(data.num_nodes, 10)  # constant features: the structure is all there is
    perm = torch.randperm(data.num_nodes)
    split = int(0.8 * data.num_nodes)
    data.train_mask = torch.zeros(data.num_nodes, dtype=torch.bool)
    data.train_mask[perm[:split]] = True
    data.test_mask = ~data.train_mask
    return data


def train(model: torch.nn.Module, data: Data, epochs: int) -> None:
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    model.train()
    for _ in range(epochs):
        optimizer.zero_grad()
        out = model(data.x, data.edge_index)
        F.cross_entropy(out[data.train_mask], data.y[data.train_mask]).backward()
        optimizer.step()
    model.eval()


def auroc(score: Tensor, label: Tensor) -> float:
    """Area under the ROC curve (Mann-Whitney U; tied scores share their mean rank)."""
    label = label.bool()
    positives, negatives = int(label.sum()), int((~label).sum())
    if positives == 0 or negatives == 0:
        return float("nan")
    order = score.argsort()
    _, inverse, counts = torch.unique_consecutive(score[order], return_inverse=True, return_counts=True)
    mean_rank = counts.cumsum(0).double() - (counts.double() - 1) / 2
    ranks = torch.empty(score.numel(), dtype=torch.double)
    ranks[order] = mean_rank[inverse]
    return ((ranks[label].sum() - positives * (positives + 1) / 2) / (positives * negatives)).item()


def main(argv=None) -> None:
    args = parse_args(argv)
    start = time.perf_counter()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)  # PyG's Barabasi-Albert generator draws from numpy
    data = make_data(args.base_nodes, args.motifs)
    model = GCN(data.num_features, args.hidden, num_layers=args.layers, out_channels=4)
    train(model, data, args.epochs)
    with torch.no_grad():
        pred = model(data.x, data.edge_index).argmax(dim=1)
    test_accuracy = (pred[data.test_mask] == data.y[data.test_mask]).float().mean().item()
    print(f"BA-Shapes: {data.num_nodes} nodes, {data.num_edges} edges; GCN test accuracy {test_accuracy:.3f} "
          f"(trained in {time.perf_counter() - start:.1f} s)")

    correct_motif = ((data.y > 0) & (pred == data.y)).nonzero().view(-1)
    node = args.node
    if node is None:
        candidates = correct_motif[data.test_mask[correct_motif]]
        if candidates.numel() == 0:  # an undertrained model: explain a motif node anyway
            candidates = ((data.y > 0) & data.test_mask).nonzero().view(-1)
        node = int(candidates[0])

    # One node: |relevance| ranks the edges (negative relevance is evidence too).
    explanation = lrp.explain(model, data.x, data.edge_index, index=node, mask="abs")
    subset, _, _, in_subgraph = k_hop_subgraph(node, args.layers, data.edge_index, num_nodes=data.num_nodes)
    score = auroc(explanation.edge_mask[in_subgraph], data.edge_mask[in_subgraph])
    print(f"node {node}: true class {int(data.y[node])} ({CLASSES[int(data.y[node])]}), "
          f"predicted {int(pred[node])}, logit {explanation.score:.4f}")
    print(f"computation subgraph: {subset.numel()} nodes, {int(in_subgraph.sum())} edges, "
          f"{int(data.edge_mask[in_subgraph].sum())} of them in a house")
    print(f"edge AUROC vs ground truth: {score:.4f}")
    print("most relevant edges (|relevance| of their messages, all layers):")
    for e in explanation.edge_mask.argsort(descending=True)[:8].tolist():
        src, dst = data.edge_index[:, e].tolist()
        where = "house" if data.edge_mask[e] > 0 else "base"
        print(f"  {src:4d} -> {dst:4d}  {explanation.edge_mask[e].item():.4f}  ({where})")
    print(f"score {explanation.score:+.6f}: input {explanation.relevance_total:+.6f}, absorbed "
          f"{explanation.absorbed:+.6f}, lost {explanation.lost:+.6f}, residual {explanation.residual:+.2e}")

    # Every correctly predicted motif node, many per relevance pass.
    if correct_motif.numel():
        explanations = lrp.explain_nodes(model, data.x, data.edge_index, correct_motif, mask="abs",
                                         batch_size=128)
        scores = []
        for target, ex in zip(correct_motif.tolist(), explanations):
            _, _, _, hops = k_hop_subgraph(target, args.layers, data.edge_index, num_nodes=data.num_nodes)
            keep = hops[ex.edge_id]  # the subgraph's edges that lie in the computation subgraph
            scores.append(auroc(ex.edge_mask[keep], data.edge_mask[ex.edge_id][keep]))
        scores = torch.tensor(scores)
        print(f"mean edge AUROC over {scores.numel()} correctly predicted motif nodes: "
              f"{scores.nanmean():.4f} (min {scores.nan_to_num(1.0).min():.4f})")

    # The picture: z+ keeps positive contributions only, so it shows where the evidence for the class
    # comes from (red); the 20 edges of largest relevance, their nodes and the explained node.
    positive = lrp.explain(model, data.x, data.edge_index, index=node, rules=lrp.rules.ZPlus())
    lrp.visualize_graph(positive, args.out, top_k=20)
    print(f"wrote {args.out}")
    print(f"done in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
