"""Explain one node's prediction of a GCN on Zachary's karate club.

Trains PyG's stock ``GCN`` for a few seconds, explains node 5 with
``lrp.explain`` (PyG's ``Explainer`` with the ``LRP`` algorithm) and prints the
most relevant nodes and edges and how the relevance adds up to the score.
Run: ``python examples/demo.py``.
"""
import torch
import torch.nn.functional as F
from torch_geometric.datasets import KarateClub
from torch_geometric.nn import GCN

import torch_geometric_lrp as lrp


def main(node: int = 5) -> None:
    torch.manual_seed(0)
    data = KarateClub()[0]
    model = GCN(data.num_features, 16, num_layers=2, out_channels=4)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(200):
        optimizer.zero_grad()
        out = model(data.x, data.edge_index)
        F.cross_entropy(out[data.train_mask], data.y[data.train_mask]).backward()
        optimizer.step()
    model.eval()
    accuracy = (model(data.x, data.edge_index).argmax(1) == data.y).float().mean().item()

    explanation = lrp.explain(model, data.x, data.edge_index, index=node)
    target = int(explanation.target[0])  # the target of each explained row
    print(f"trained accuracy {accuracy:.2f}; node {node} predicted class {target}, "
          f"logit {explanation.score:.6f}")

    per_node = explanation.node_mask.sum(dim=1)
    print("most relevant input nodes:")
    for j in per_node.abs().argsort(descending=True)[:5].tolist():
        print(f"  node {j:2d}  relevance {per_node[j].item():+.4f}")
    print("most relevant edges (relevance of their messages, both layers):")
    for e in explanation.edge_mask.abs().argsort(descending=True)[:5].tolist():
        src, dst = data.edge_index[:, e].tolist()
        print(f"  {src:2d} -> {dst:2d}  {explanation.edge_mask[e].item():+.4f}")
    total = explanation.relevance_total
    print(f"input relevance  {total:+.6f}")
    print(f"absorbed         {explanation.absorbed:+.6f}  (biases, stabilisers)")
    print(f"lost             {explanation.lost:+.6f}  (zero outputs)")
    print(f"residual         {explanation.residual:+.2e}  (what no op accounted for)")


if __name__ == "__main__":
    main()
