"""Bring an existing trained PyG model to LRP without changing it.

Trains and saves a small GraphSAGE model the usual way, reloads it from its
checkpoint, converts it with ``lrp.convert`` (sharing its parameters), prints
the per-layer conservation report, explains a node with a custom composite,
and shows that the original model is untouched.
Run: ``python examples/convert_trained_model.py``.
"""
import argparse
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F
from torch_geometric.datasets import KarateClub
from torch_geometric.nn import SAGEConv

import torch_geometric_lrp as lrp


class SAGE(torch.nn.Module):
    """A model as a user writes it: stock layers, functional ops in forward."""

    def __init__(self, features: int, hidden: int, classes: int):
        super().__init__()
        self.conv1 = SAGEConv(features, hidden)
        self.conv2 = SAGEConv(hidden, hidden, aggr="max")
        self.head = torch.nn.Linear(2 * hidden, classes)

    def forward(self, x, edge_index):
        h1 = F.relu(self.conv1(x, edge_index))
        h2 = F.relu(self.conv2(h1, edge_index))
        return self.head(torch.cat([h1, h2], dim=-1))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--node", type=int, default=0)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    data = KarateClub()[0]

    model = SAGE(data.num_features, 16, 4)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(100):
        optimizer.zero_grad()
        F.cross_entropy(model(data.x, data.edge_index)[data.train_mask], data.y[data.train_mask]).backward()
        optimizer.step()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "sage.pt"
        torch.save(model.state_dict(), path)
        model = SAGE(data.num_features, 16, 4)
        model.load_state_dict(torch.load(path))
    model.eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    expected = model(data.x, data.edge_index)

    lrp_model = lrp.convert(model)  # same Parameter objects, PyG layers swapped for LRP layers
    shared = {id(p) for p in lrp_model.parameters()} == {id(p) for p in model.parameters()}
    print(f"converted: parameters shared {shared}; output equal "
          f"{torch.allclose(lrp_model(data.x, data.edge_index), expected)}")

    report = lrp.check_conservation(model, data.x, data.edge_index)
    print(report)
    print(f"conserved: {report.conserved()}")

    composite = {SAGEConv: lrp.rules.Gamma(0.5), "head": lrp.rules.Epsilon(0.01)}
    explanation = lrp.explain(model, data.x, data.edge_index, index=args.node, rules=composite)
    total = explanation.relevance_total + explanation.absorbed + explanation.lost
    print(f"node {args.node}: score {explanation.score:.6f}, input {explanation.relevance_total:.6f} "
          f"+ absorbed {explanation.absorbed:.6f} + lost {explanation.lost:.6f} = {total:.6f}")

    untouched = all(torch.equal(before[k], v) for k, v in model.state_dict().items()) and \
        torch.equal(model(data.x, data.edge_index), expected) and type(model.conv1) is SAGEConv
    print(f"original model untouched: {untouched}")


if __name__ == "__main__":
    main()
