"""Who infected whom? Relevance on node and edge features of a graph network.

A toy epidemic: people are nodes, contacts are edges. A person is sick,
healthy or immune (one-hot node features); a contact has a virulence in
[0, 1] and a quarantine flag (edge features). One step later a person is sick
if they were sick already, or if they were healthy and had at least one
contact with a sick person that was not quarantined and had virulence above
0.5. Immune people stay healthy.

The model is a graph network (Battaglia et al., 2018) in PyG: an encoder for
nodes and edges, a ``MetaLayer`` core (an edge model that reads both
endpoints and the edge, a node model that sums the new edge messages), and a
decoder to two logits (healthy / sick next step). Nothing in it knows about
LRP.

The script trains it briefly, explains the prediction "sick" for a person who
was healthy, with relevance on the node features *and* the edge features (a
relevance pass by hand, with ``x`` and ``edge_attr`` marked by
``requires_grad_()``), prints the contacts by edge-feature relevance, checks
the result against ``lrp.explain`` and prints the conservation report.

Run: ``python examples/infection_graph_network.py``.
"""
from __future__ import annotations

import argparse
import time
from itertools import pairwise

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.data import Data
from torch_geometric.nn import MetaLayer
from torch_geometric.utils import scatter, to_undirected

import torch_geometric_lrp as lrp

STATES = ["sick", "healthy", "immune"]
EDGE_FEATURES = ["virulence", "quarantine"]


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--people", type=int, default=1000, help="nodes of the training graph")
    parser.add_argument("--contacts", type=float, default=2.0, help="mean contacts a person starts")
    parser.add_argument("--hidden", type=int, default=16)
    parser.add_argument("--epochs", type=int, default=300)
    parser.add_argument("--node", type=int, default=None,
                        help="person to explain in the test graph (default: one who was healthy and is "
                             "predicted sick, with the most contacts)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (graphs this small run fastest on one)")
    return parser.parse_args(argv)


def make_graph(people: int, contacts: float) -> Data:
    """Random contacts with features, and who is sick one step later."""
    state = torch.multinomial(torch.tensor([0.2, 0.6, 0.2]), people, replacement=True)
    x = F.one_hot(state, 3).float()
    src = torch.arange(people).repeat_interleave(torch.poisson(torch.full((people,), contacts)).long())
    dst = torch.randint(0, people, (src.numel(),))
    keep = src != dst
    pairs = torch.stack([src[keep], dst[keep]])
    virulence = torch.rand(pairs.shape[1])
    quarantine = (torch.rand(pairs.shape[1]) < 0.3).float()
    # Both directions of a contact share its features.
    edge_index, edge_attr = to_undirected(pairs, torch.stack([virulence, quarantine], dim=1), people,
                                          reduce="max")
    sender_sick = state[edge_index[0]] == 0
    transmits = sender_sick & (edge_attr[:, 1] == 0) & (edge_attr[:, 0] > 0.5)
    exposed = scatter(transmits.float(), edge_index[1], dim=0, dim_size=people, reduce="max") > 0
    y = ((state == 0) | ((state == 1) & exposed)).long()
    return Data(x=x, edge_index=edge_index, edge_attr=edge_attr, y=y, state=state, transmits=transmits)


def mlp(*sizes: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    for a, b in pairwise(sizes):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers)


class EdgeModel(nn.Module):
    """e' = mlp([x_sender, x_receiver, e])."""

    def __init__(self, hidden: int):
        super().__init__()
        self.mlp = mlp(3 * hidden, hidden, hidden)

    def forward(self, src: Tensor, dst: Tensor, edge_attr: Tensor, u, batch) -> Tensor:
        return self.mlp(torch.cat([src, dst, edge_attr], dim=1))


class NodeModel(nn.Module):
    """x' = mlp([x, sum of incoming e'])."""

    def __init__(self, hidden: int):
        super().__init__()
        self.mlp = mlp(2 * hidden, hidden, hidden)

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor, u, batch) -> Tensor:
        incoming = scatter(edge_attr, edge_index[1], dim=0, dim_size=x.shape[0], reduce="sum")
        return self.mlp(torch.cat([x, incoming], dim=1))


class InfectionGN(nn.Module):
    """Encoder - core (``MetaLayer``) - decoder."""

    def __init__(self, hidden: int):
        super().__init__()
        self.node_encoder = mlp(len(STATES), hidden)
        self.edge_encoder = mlp(len(EDGE_FEATURES), hidden)
        self.core = MetaLayer(EdgeModel(hidden), NodeModel(hidden))
        self.decoder = nn.Linear(hidden, 2)

    def forward(self, x: Tensor, edge_index: Tensor, edge_attr: Tensor) -> Tensor:
        h, e = self.node_encoder(x), self.edge_encoder(edge_attr)
        h, e, _ = self.core(h, edge_index, e)
        return self.decoder(h)


def main(argv=None) -> None:
    args = parse_args(argv)
    start = time.perf_counter()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    train_graph = make_graph(args.people, args.contacts)
    test_graph = make_graph(max(args.people // 4, 50), args.contacts)

    model = InfectionGN(args.hidden)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    model.train()
    for _ in range(args.epochs):
        optimizer.zero_grad()
        out = model(train_graph.x, train_graph.edge_index, train_graph.edge_attr)
        F.cross_entropy(out, train_graph.y).backward()
        optimizer.step()
    model.eval()
    data = test_graph
    x, edge_index, edge_attr = data.x, data.edge_index, data.edge_attr
    with torch.no_grad():
        logits = model(x, edge_index, edge_attr)
    pred = logits.argmax(dim=1)
    newly = data.state == 1
    print(f"test graph: {data.num_nodes} people, {data.num_edges // 2} contacts; accuracy "
          f"{(pred == data.y).float().mean().item():.3f}, on people who were healthy "
          f"{(pred[newly] == data.y[newly]).float().mean().item():.3f} "
          f"(trained in {time.perf_counter() - start:.1f} s)")

    node = args.node
    if node is None:  # a healthy person rightly predicted to fall sick, with the most contacts
        candidates = (newly & (pred == 1) & (data.y == 1)).nonzero().view(-1)
        if candidates.numel() == 0:
            candidates = newly.nonzero().view(-1)
        degree = scatter(torch.ones(data.num_edges), edge_index[1], dim=0, dim_size=data.num_nodes)
        node = int(candidates[degree[candidates].argmax()])
    target = int(pred[node])
    seed = torch.zeros_like(logits)
    seed[node, target] = logits[node, target]

    # The relevance pass by hand: every input we want relevance for requires grad.
    lrp_model = lrp.convert(model)
    x_in = x.clone().requires_grad_()
    edge_attr_in = edge_attr.clone().requires_grad_()
    with lrp.relevance_pass(lrp_model):
        out = lrp_model(x_in, edge_index, edge_attr_in)
        out.backward(seed)
    node_rel, edge_rel = x_in.grad, edge_attr_in.grad
    print(f"person {node} was {STATES[int(data.state[node])]}; predicted "
          f"{['healthy', 'sick'][target]} next step (truth: {['healthy', 'sick'][int(data.y[node])]}), "
          f"logit {seed.sum().item():.4f}")

    incoming = (edge_index[1] == node).nonzero().view(-1)
    print(f"their {incoming.numel()} contacts (incoming edges), by edge-feature relevance:")
    print(f"  {'contact':>8} {'state':>8} {'virulence':>10} {'quarantine':>11} {'transmits':>10} "
          f"{'R(virulence)':>13} {'R(quarantine)':>14} {'R(contact node)':>16}")
    per_edge = edge_rel.sum(dim=1)
    for e in incoming[per_edge[incoming].argsort(descending=True)].tolist():
        j = int(edge_index[0, e])
        print(f"  {j:>8d} {STATES[int(data.state[j])]:>8} {edge_attr[e, 0].item():>10.2f} "
              f"{int(edge_attr[e, 1]):>11d} {bool(data.transmits[e])!s:>10} {edge_rel[e, 0].item():>+13.4f} "
              f"{edge_rel[e, 1].item():>+14.4f} {node_rel[j].sum().item():>+16.4f}")
    print("  (LRP multiplies by the input, so a quarantine flag of 0 gets no relevance: an open contact\n"
          "   shows through the relevance of its virulence instead)")
    top = int(per_edge.argmax())
    print(f"most relevant edge: {int(edge_index[0, top])} -> {int(edge_index[1, top])}, "
          f"transmits the infection: {bool(data.transmits[top])}")
    outside = per_edge[edge_index[1] != node].abs().sum().item()
    print(f"edge-feature relevance outside the person's incoming edges: {outside:.2e}")
    print("relevance of the person's own state: "
          + ", ".join(f"{s} {node_rel[node, k].item():+.4f}" for k, s in enumerate(STATES)))

    total_in = node_rel.sum().item() + edge_rel.sum().item()
    print(f"input relevance: nodes {node_rel.sum().item():+.6f}, edges {edge_rel.sum().item():+.6f}")

    # No message-passing layer here, so the default composite is LRP-epsilon
    # with a tiny epsilon everywhere: on a ReLU network that is gradient x input.
    x_g, edge_attr_g = x.clone().requires_grad_(), edge_attr.clone().requires_grad_()
    grad_x, grad_e = torch.autograd.grad(model(x_g, edge_index, edge_attr_g)[node, target], (x_g, edge_attr_g))
    deviation = max((node_rel - grad_x * x).abs().max().item(), (edge_rel - grad_e * edge_attr).abs().max().item())
    print(f"relevance vs gradient x input: max difference {deviation:.1e} (the stabiliser epsilon = 1e-6 "
          f"against pre-activations near 0)")

    # The same through PyG's Explainer: edge_attr_mask holds the edge-feature relevance.
    explanation = lrp.explain(model, x, edge_index, edge_attr=edge_attr, index=node)
    agree = (torch.allclose(explanation.edge_attr_mask, edge_rel, atol=1e-6)
             and torch.allclose(explanation.node_mask, node_rel, atol=1e-6))
    print(f"lrp.explain gives the same node and edge-feature relevance: {agree}")

    report = lrp.check_conservation(lrp_model, x, edge_index, edge_attr=edge_attr, seed=seed)
    print("conservation report:")
    print(report)
    print(f"score {report.seed:+.6f}: input {total_in:+.6f}, absorbed {report.absorbed:+.6f}, "
          f"lost {report.lost:+.6f}, residual {report.seed - total_in - report.absorbed - report.lost:+.2e}")
    print(f"done in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
