"""Draw every picture of the docs and the README into docs/assets/pictures/.

Trains the BA-Shapes GCN of ``examples/node_classification_ba_shapes.py``
(its own functions, imported) and the karate-club GCN of the README, explains
one node of each (and of a small heterogeneous graph) with ``lrp.explain`` and draws the explanations with
``lrp.visualize_graph``, ``lrp.visualize_features`` and
``lrp.visualize_walks``. Fixed seeds, one thread: the same pictures on every
run. About 10 s here (2 CPU cores, imports included).

Run: ``python scripts/make_pictures.py [--out DIR]``.
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch_geometric.datasets import KarateClub
from torch_geometric.nn import GCN

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout, also when the package is not installed

import torch_geometric_lrp as lrp  # noqa: E402


def load_example(name: str):
    """A script of examples/ as a module (examples/ is not a package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def ba_shapes(out: Path) -> None:
    """The house picture (README, docs) and the same node under the default rules."""
    ba = load_example("node_classification_ba_shapes")
    torch.manual_seed(0)
    np.random.seed(0)  # PyG's Barabasi-Albert generator draws from numpy
    data = ba.make_data(base_nodes=300, motifs=80)
    model = GCN(data.num_features, 20, num_layers=3, out_channels=4)
    ba.train(model, data, epochs=1000)
    pred = model(data.x, data.edge_index).argmax(dim=1)
    correct = (data.y > 0) & (pred == data.y) & data.test_mask
    node = int(correct.nonzero()[0])  # the example's default node
    print(f"BA-Shapes: node {node} ({ba.CLASSES[int(data.y[node])]}), predicted {int(pred[node])}")

    # z+ (positive contributions only): where the evidence for the class comes from.
    positive = lrp.explain(model, data.x, data.edge_index, index=node, rules=lrp.rules.ZPlus())
    lrp.visualize_graph(positive, out / "ba_shapes.png", k_hop=2)
    # The default composite, signed: the same node in red and blue.
    signed = lrp.explain(model, data.x, data.edge_index, index=node)
    lrp.visualize_graph(signed, out / "ba_shapes_signed.png", k_hop=2)
    print(f"  z+: input {positive.relevance_total:+.2f}, absorbed {positive.absorbed:+.2f}; "
          f"default: input {signed.relevance_total:+.2f}, absorbed {signed.absorbed:+.2f} (score {signed.score:+.2f})")

    # the model's top 10 walks into the node, z+ as above
    top = lrp.walks(model, data.x, data.edge_index, node, top_k=10, rules=lrp.rules.ZPlus())
    lrp.visualize_walks(top, data.edge_index, out / "walks.png")


def karate(out: Path) -> None:
    """Feature relevance of the README's karate-club model (features: one-hot node ids)."""
    ba = load_example("node_classification_ba_shapes")
    torch.manual_seed(0)
    data = KarateClub()[0]
    model = GCN(data.num_features, 16, num_layers=2, out_channels=4)
    ba.train(model, data, epochs=200)
    explanation = lrp.explain(model, data.x, data.edge_index, index=5)
    names = [f"is node {j}" for j in range(data.num_features)]
    lrp.visualize_features(explanation, top_k=10, path=out / "features.png", feature_names=names)
    lrp.visualize_graph(explanation, out / "karate.png")


def hetero(out: Path) -> None:
    """A paper of a small random paper / author graph under a two-layer
    ``to_hetero`` SAGE model with random weights (the Heterogeneous graphs page)."""
    from torch_geometric.data import HeteroData
    from torch_geometric.nn import SAGEConv, to_hetero

    class GNN(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = SAGEConv((-1, -1), 16)
            self.conv2 = SAGEConv((-1, -1), 16)

        def forward(self, x, edge_index):
            x = self.conv1(x, edge_index).relu()
            return self.conv2(x, edge_index)

    class Classifier(torch.nn.Module):
        def __init__(self, metadata):
            super().__init__()
            self.gnn = to_hetero(GNN(), metadata, aggr="sum")
            self.head = torch.nn.Linear(16, 3)

        def forward(self, x_dict, edge_index_dict):
            return self.head(self.gnn(x_dict, edge_index_dict)["paper"])

    g = torch.Generator().manual_seed(0)
    data = HeteroData()
    data["paper"].x = torch.randn(12, 8, generator=g)
    data["author"].x = torch.randn(8, 4, generator=g)
    data["paper", "cites", "paper"].edge_index = torch.randint(12, (2, 18), generator=g)
    writes = torch.stack([torch.randint(8, (20,), generator=g), torch.randint(12, (20,), generator=g)])
    data["author", "writes", "paper"].edge_index = writes
    data["paper", "written_by", "author"].edge_index = writes.flip(0)
    torch.manual_seed(0)
    model = Classifier(data.metadata())
    explanation = lrp.explain(model, data, index=0)
    explanation.index = {"paper": explanation.index}  # the explained rows are papers: ring them
    lrp.visualize_graph(explanation, out / "hetero.png")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "assets" / "pictures"))
    args = parser.parse_args(argv)
    start = time.perf_counter()
    torch.set_num_threads(1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ba_shapes(out)
    karate(out)
    hetero(out)
    print(f"wrote {', '.join(sorted(p.name for p in out.glob('*.png')))} to {out} "
          f"in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
