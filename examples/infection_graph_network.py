"""Relevance on node AND edge features of a graph network (seed 002's setting).

An infection graph: some nodes are infected; an infection passes along an
edge unless the edge is quarantined (edge feature 0); a node ends up
infected if it is infected or an unquarantined neighbour is. A graph network
(PyG ``MetaLayer``: edge model over ``[x_src, x_dst, e]``, node model over
aggregated edges; encoder, a core applied twice, decoder) learns it. For one
node predicted infected, ``lrp.explain`` returns the relevance of every node
feature and every edge feature; the quarantine flags of the edges that
matter should stand out.
Run: ``python examples/infection_graph_network.py``.
"""
import argparse

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.nn import MetaLayer
from torch_geometric.utils import erdos_renyi_graph, scatter

import torch_geometric_lrp as lrp


def infection_graph(nodes: int, generator: torch.Generator):
    """Node features ``[infected, noise]``, edge features ``[open, noise]``
    (``open = 0``: quarantined), label: infected after one step."""
    edge_index = erdos_renyi_graph(nodes, 3.0 / nodes)
    infected = (torch.rand(nodes, generator=generator) < 0.15).float()
    open_edge = (torch.rand(edge_index.shape[1], generator=generator) < 0.6).float()
    x = torch.stack([infected, torch.rand(nodes, generator=generator)], dim=1)
    edge_attr = torch.stack([open_edge, torch.rand(edge_index.shape[1], generator=generator)], dim=1)
    reached = scatter(infected[edge_index[0]] * open_edge, edge_index[1], dim_size=nodes, reduce="max")
    y = ((infected + reached) > 0).long()
    return x, edge_index, edge_attr, y


def mlp(i: int, o: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(i, 32), nn.ReLU(), nn.Linear(32, o))


class EdgeModel(nn.Module):
    def __init__(self, node: int, edge: int, out: int):
        super().__init__()
        self.net = mlp(2 * node + edge, out)

    def forward(self, src, dst, edge_attr, u, batch):
        return F.relu(self.net(torch.cat([src, dst, edge_attr], dim=-1)))


class NodeModel(nn.Module):
    def __init__(self, node: int, edge: int, out: int):
        super().__init__()
        self.net = mlp(node + edge, out)

    def forward(self, x, edge_index, edge_attr, u, batch):
        incoming = scatter(edge_attr, edge_index[1], dim=0, dim_size=x.shape[0], reduce="sum")
        return F.relu(self.net(torch.cat([x, incoming], dim=-1)))


class InfectionNet(nn.Module):
    """Encoder, core (twice, shared weights), decoder."""

    def __init__(self, hidden: int = 16):
        super().__init__()
        self.encoder = MetaLayer(EdgeModel(2, 2, hidden), NodeModel(2, hidden, hidden))
        self.core = MetaLayer(EdgeModel(hidden, hidden, hidden), NodeModel(hidden, hidden, hidden))
        self.decoder = nn.Linear(hidden, 2)

    def forward(self, x, edge_index, edge_attr):
        x, edge_attr, _ = self.encoder(x, edge_index, edge_attr)
        for _ in range(2):
            x, edge_attr, _ = self.core(x, edge_index, edge_attr)
        return self.decoder(x)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=300)
    parser.add_argument("--epochs", type=int, default=300)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    x, edge_index, edge_attr, y = infection_graph(args.nodes, generator)

    model = InfectionNet()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(args.epochs):
        optimizer.zero_grad()
        F.cross_entropy(model(x, edge_index, edge_attr), y).backward()
        optimizer.step()
    model.eval()
    prediction = model(x, edge_index, edge_attr).argmax(1)
    print(f"accuracy {(prediction == y).float().mean().item():.3f}; {int(y.sum())} of {args.nodes} infected")

    # a node infected through an open edge (not infected itself)
    candidates = ((prediction == 1) & (y == 1) & (x[:, 0] == 0)).nonzero().view(-1)
    node = int(candidates[0])
    explanation = lrp.explain(model, x, edge_index, index=node, edge_attr=edge_attr)
    edge_relevance = explanation.edge_attr_mask              # [E, 2]: open flag, noise
    print(f"node {node}: predicted infected, logit {explanation.score:.4f}")
    print("edges into the node (source infected?, open?) -> relevance of [open flag, noise]:")
    for e in (edge_index[1] == node).nonzero().view(-1).tolist():
        src = int(edge_index[0, e])
        print(f"  {src:3d} -> {node:3d}  infected={int(x[src, 0])} open={int(edge_attr[e, 0])}  "
              f"[{edge_relevance[e, 0].item():+.4f}, {edge_relevance[e, 1].item():+.4f}]")
    node_relevance = explanation.node_mask
    print(f"relevance of the infected flags {node_relevance[:, 0].sum().item():+.4f}, "
          f"of node noise {node_relevance[:, 1].sum().item():+.4f}, of the open flags "
          f"{edge_relevance[:, 0].sum().item():+.4f}, of edge noise {edge_relevance[:, 1].sum().item():+.4f}")
    total = explanation.relevance_total + explanation.absorbed + explanation.lost
    print(f"input {explanation.relevance_total:+.6f} + absorbed {explanation.absorbed:+.6f} + lost "
          f"{explanation.lost:+.6f} = sum {total:+.6f} vs score {explanation.score:+.6f}")


if __name__ == "__main__":
    main()
