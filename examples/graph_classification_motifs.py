"""Graph classification on BA graphs with a house or a 5-cycle attached.

Generates a small BA-2Motifs-style data set (label = which motif is
attached), trains a GIN graph classifier with ``global_add_pool``, explains
one test graph's prediction with ``lrp.explain`` (graph level) and reports
which edges carry the most relevance and how much of it lies in the motif.
Run: ``python examples/graph_classification_motifs.py``.
"""
import argparse

import torch
import torch.nn.functional as F
from torch_geometric.data import Batch, Data
from torch_geometric.nn import GINConv, MLP, global_add_pool
from torch_geometric.utils import barabasi_albert_graph, to_undirected

import torch_geometric_lrp as lrp

HOUSE = [(0, 1), (1, 2), (2, 3), (3, 0), (0, 4), (1, 4)]
CYCLE = [(0, 1), (1, 2), (2, 3), (3, 4), (4, 0)]


def motif_graph(label: int, base_nodes: int, generator: torch.Generator) -> Data:
    """A BA graph with a house (label 0) or a 5-cycle (label 1) attached to
    one random node; ``edge_in_motif`` marks the motif's edges."""
    base = barabasi_albert_graph(base_nodes, 1)
    motif = torch.tensor(HOUSE if label == 0 else CYCLE).t() + base_nodes
    anchor = torch.randint(0, base_nodes, (1,), generator=generator)
    bridge = torch.stack([anchor, torch.tensor([base_nodes])])
    edge_index = torch.cat([base, to_undirected(motif), to_undirected(bridge)], dim=1)
    in_motif = torch.cat([torch.zeros(base.shape[1]), torch.ones(2 * motif.shape[1]), torch.zeros(2)]).bool()
    n = base_nodes + 5
    return Data(x=torch.ones(n, 1), edge_index=edge_index, y=torch.tensor([label]), edge_in_motif=in_motif)


class GIN(torch.nn.Module):
    def __init__(self, hidden: int = 32):
        super().__init__()
        self.conv1 = GINConv(MLP([1, hidden, hidden]))
        self.conv2 = GINConv(MLP([hidden, hidden, hidden]))
        self.conv3 = GINConv(MLP([hidden, hidden, hidden]))
        self.head = torch.nn.Linear(hidden, 2)

    def forward(self, x, edge_index, batch):
        x = self.conv1(x, edge_index).relu()
        x = self.conv2(x, edge_index).relu()
        x = self.conv3(x, edge_index).relu()
        return self.head(global_add_pool(x, batch))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--graphs", type=int, default=200)
    parser.add_argument("--epochs", type=int, default=60)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    graphs = [motif_graph(i % 2, 20, generator) for i in range(args.graphs)]
    train, test = graphs[: int(0.8 * len(graphs))], graphs[int(0.8 * len(graphs)):]

    model = GIN()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.005)
    batches = [Batch.from_data_list(train[i:i + 32]) for i in range(0, len(train), 32)]
    for _ in range(args.epochs):
        model.train()
        for batch in batches:
            optimizer.zero_grad()
            F.cross_entropy(model(batch.x, batch.edge_index, batch.batch), batch.y).backward()
            optimizer.step()
    model.eval()
    test_batch = Batch.from_data_list(test)
    accuracy = (model(test_batch.x, test_batch.edge_index, test_batch.batch).argmax(1) == test_batch.y)
    print(f"test accuracy {accuracy.float().mean().item():.2f} on {len(test)} graphs")

    graph = test[0]
    batch = torch.zeros(graph.num_nodes, dtype=torch.long)
    explanation = lrp.explain(model, graph.x, graph.edge_index, batch=batch, mask="abs")
    edge_mask = explanation.edge_mask
    share = (edge_mask[graph.edge_in_motif].sum() / edge_mask.sum()).item()
    motif_edges = int(graph.edge_in_motif.sum())
    top = edge_mask.argsort(descending=True)[:motif_edges]
    hits = int(graph.edge_in_motif[top].sum())
    print(f"graph with a {'house' if graph.y.item() == 0 else '5-cycle'}: predicted class "
          f"{int(explanation.target[0])}, logit {explanation.score:.4f}")
    print(f"motif edges: {motif_edges} of {graph.num_edges}; share of |edge relevance| in the motif {share:.2f}; "
          f"top-{motif_edges} edges in the motif: {hits}/{motif_edges}")
    total = explanation.relevance_total + explanation.absorbed + explanation.lost
    print(f"input {explanation.relevance_total:+.6f} + absorbed {explanation.absorbed:+.6f} + lost "
          f"{explanation.lost:+.6f} = sum {total:+.6f} vs score {explanation.score:+.6f}")


if __name__ == "__main__":
    main()
