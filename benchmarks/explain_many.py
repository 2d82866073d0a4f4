"""Many target nodes: batched ``lrp.explain_nodes`` vs one explanation per target.

A 2-layer GCN on a Barabasi-Albert graph (default 10,000 nodes, 3 edges per
new node, 32 features); 200 target nodes. Measured in the same run:

* ``one by one (Explainer, full graph)``: ``Explainer(model,
  algorithm=lrp.LRP(subgraph=False), ...)`` called once per target on the
  full graph (each call is a prediction forward plus one relevance forward
  and backward);
* ``one by one (Explainer)``: the same with ``lrp.LRP()``, whose default
  runs each pass on the target's computation subgraph;
* ``one by one (relevance pass)``: one full-graph relevance pass per target,
  no prediction forward;
* ``batched``: ``lrp.explain_nodes(..., batch_size=B)``: disjoint copies of
  the targets' computation subgraphs, B targets per pass.

Prints seconds and the speed-up of batching over each baseline, and checks
that the batched and the subgraph relevance equal the full-graph relevance.

    python benchmarks/explain_many.py [--nodes 10000] [--targets 200] [--batch-size 64] [--out PATH]

``--out`` also writes the table, with the standard header, to a Markdown
file. One torch thread by default (``--threads``).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch_geometric.explain import Explainer
from torch_geometric.explain.config import ModelMode
from torch_geometric.nn import GCNConv
from torch_geometric.utils import barabasi_albert_graph

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import torch_geometric_lrp as lrp  # noqa: E402
from torch_geometric_lrp.explainers.core import Settings, on_graph  # noqa: E402


class GCN(torch.nn.Module):
    def __init__(self, features: int, hidden: int, classes: int):
        super().__init__()
        self.conv1 = GCNConv(features, hidden)
        self.conv2 = GCNConv(hidden, classes)

    def forward(self, x, edge_index):
        return self.conv2(F.relu(self.conv1(x, edge_index)), edge_index)


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--targets", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--features", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None, help="also write the table here (Markdown)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    started = time.perf_counter()

    torch.manual_seed(0)
    np.random.seed(0)  # barabasi_albert_graph draws from numpy
    edge_index = barabasi_albert_graph(args.nodes, 3)
    x = torch.randn(args.nodes, args.features)
    model = GCN(args.features, 64, 4).eval()
    targets = torch.randperm(args.nodes)[: args.targets]

    def explainer(subgraph: bool) -> Explainer:
        explainer = Explainer(model, algorithm=lrp.LRP(subgraph=subgraph), explanation_type="model",
                              node_mask_type="attributes", edge_mask_type="object",
                              model_config=dict(mode="multiclass_classification", task_level="node",
                                                return_type="raw"))
        explainer(x, edge_index, index=int(targets[0]))  # warm-up (and conversion)
        return explainer

    full, on_subgraph = explainer(False), explainer(True)
    t_full, _ = timed(lambda: [full(x, edge_index, index=int(t)) for t in targets])
    t_explainer, by_explainer = timed(lambda: [on_subgraph(x, edge_index, index=int(t)) for t in targets])

    settings = Settings(mode=ModelMode.multiclass_classification)
    t_pass, by_pass = timed(lambda: [on_graph(model, x, edge_index, {}, t.view(1), None, settings) for t in targets])
    t_batched, batched = timed(lambda: lrp.explain_nodes(model, x, edge_index, targets,
                                                         batch_size=args.batch_size, progress=False))

    worst = max((b.node_mask - p.node[b.node_index]).abs().max().item() for b, p in zip(batched, by_pass))
    worst_explainer = max((e.node_mask - p.node).abs().max().item() for e, p in zip(by_explainer, by_pass))
    print(f"graph: {args.nodes} nodes, {edge_index.shape[1]} edges; {args.targets} targets; "
          f"batch size {args.batch_size}; torch threads {torch.get_num_threads()}")
    print(f"{'method':<36} {'seconds':>10} {'per target (ms)':>16} {'batched speed-up':>17}")
    for name, seconds in [("one by one (Explainer, full graph)", t_full), ("one by one (Explainer)", t_explainer),
                          ("one by one (relevance pass)", t_pass), ("batched (explain_nodes)", t_batched)]:
        print(f"{name:<36} {seconds:>10.2f} {1000 * seconds / args.targets:>16.1f} {seconds / t_batched:>16.1f}x")
    print(f"max |x - full-graph pass| node relevance: {worst:.2e} (batched), {worst_explainer:.2e} "
          f"(Explainer on subgraphs)")
    if args.out is not None:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from common import header, table

        rows = [[name, f"{seconds:.2f}", f"{1000 * seconds / args.targets:.1f}", f"{seconds / t_batched:.1f}x"]
                for name, seconds in [("one by one (Explainer, full graph)", t_full),
                                      ("one by one (Explainer)", t_explainer),
                                      ("one by one (relevance pass)", t_pass),
                                      ("batched (explain_nodes)", t_batched)]]
        text = header("Many targets: batched explain_nodes against one explanation per target", sys.argv[1:], 0, [
            f"- Barabasi-Albert graph, {args.nodes:,} nodes, {edge_index.shape[1]:,} edges, {args.features} "
            f"features; 2-layer GCN, hidden 64; {args.targets} random targets, batch size {args.batch_size}; "
            f"one timing per row; runtime {time.perf_counter() - started:.0f} s",
            "",
            "What is measured: see the docstring of `benchmarks/explain_many.py`.",
            "",
        ], seeded="`torch.manual_seed(0)` and `np.random.seed(0)`: graph, features, model initialisation, "
                  "targets; no training")
        text += "\n" + table(["method", "seconds", "ms per target", "batched speed-up"], rows)
        text += (f"\nLargest difference to the full-graph pass (node relevance): {worst:.2e} batched, "
                 f"{worst_explainer:.2e} through `Explainer` on subgraphs.\n")
        args.out.write_text(text)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
