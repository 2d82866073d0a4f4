"""Trimmed layers against untrimmed ones, one explanation at a time, by the size of the pass.

Random directed graphs of 20,000 nodes with 3 to 10 edges per node (16
features) and a 3-layer GCN and GIN (hidden 32), so that a target's lean
cut has from about a hundred to about thirty thousand edges. For 10 random
targets, ``lrp.explain(model, x, edge_index, index=t)`` with every cut
trimmed (``core.TRIM_MIN_EDGES = 0``) and with none trimmed, alternately,
best of ``--repeats``; milliseconds per explanation and the ratio. Both give
the same explanation (checked). ``core.TRIM_MIN_EDGES``, below which a pass
runs untrimmed, is read off this table: trimming costs a fixed amount per
pass (the hop of every node, a hook per layer, matching the kept messages to
their edges) that only a larger pass repays.

    python benchmarks/trim_threshold.py

Writes ``benchmarks/results/trim_threshold.md`` (``--out``). One torch thread.
"""
from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import torch
from torch_geometric.nn import GCN, GIN

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import header, table  # noqa: E402

import torch_geometric_lrp as lrp  # noqa: E402
from torch_geometric_lrp.explainers import core  # noqa: E402
from torch_geometric_lrp.explainers.subgraph import count_hops, cut, lean  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
NEVER = 10 ** 12


def per_explanation(model, x, edge_index, targets: list[int], threshold: int) -> tuple[float, list]:
    core.TRIM_MIN_EDGES = threshold
    start = time.perf_counter()
    out = [lrp.explain(model, x, edge_index, index=t) for t in targets]
    return (time.perf_counter() - start) / len(targets), out


def pass_edges(c) -> int:
    """The edges of the pass on the cut ``c``: its lean cut's, where it has one."""
    slim = lean(c)
    return (c if slim is None else slim[0]).edge_id.numel()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=20_000)
    parser.add_argument("--degrees", type=int, nargs="+", default=[3, 5, 6, 7, 8, 10])
    parser.add_argument("--targets", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS / "trim_threshold.md")
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", category=UserWarning)
    default = core.TRIM_MIN_EDGES
    started = time.perf_counter()
    rows = []
    for degree in args.degrees:
        torch.manual_seed(0)
        n = args.nodes
        x, edge_index = torch.randn(n, 16), torch.randint(0, n, (2, degree * n))
        targets = torch.randperm(n)[:args.targets].tolist()
        for kind in (GCN, GIN):
            model = kind(16, 32, num_layers=3, out_channels=4).eval()
            per_explanation(model, x, edge_index, targets[:2], 0)  # warm-up
            times = {0: [], NEVER: []}
            for _ in range(args.repeats):  # alternately
                for threshold in times:
                    seconds, out = per_explanation(model, x, edge_index, targets, threshold)
                    times[threshold].append(seconds)
                    if threshold == 0:
                        trimmed = out
            for a, b in zip(trimmed, out):
                torch.testing.assert_close(a.node_mask, b.node_mask, rtol=1e-4, atol=1e-6)
                torch.testing.assert_close(a.edge_mask, b.edge_mask, rtol=1e-4, atol=1e-6)
            cuts = [cut(torch.tensor([t]), count_hops(model), edge_index, n) for t in targets]
            edges = sum(pass_edges(c) for c in cuts) / len(cuts)
            on, off = min(times[0]), min(times[NEVER])
            rows.append([f"{degree}", kind.__name__, f"{edges:,.0f}", f"{1e3 * on:.2f}", f"{1e3 * off:.2f}",
                         f"{on / off:.2f}", "yes" if edges >= default else "no"])
            print(*rows[-1], flush=True)
    core.TRIM_MIN_EDGES = default
    text = header("Trimmed layers by the size of the pass", sys.argv[1:], 0, [
        f"- random graphs of {args.nodes:,} nodes, {args.targets} targets each; best of {args.repeats}, "
        f"run alternately; runtime {(time.perf_counter() - started) / 60:.1f} min",
        f"- `core.TRIM_MIN_EDGES` = {default:,}",
        "",
        "What is measured: see the docstring of `benchmarks/trim_threshold.py`. A ratio below 1: trimming "
        "is faster.",
        "",
    ], seeded="`torch.manual_seed(0)` before each graph: its features, edges and targets, then the GCN's "
              "and the GIN's initialisation; no training")
    text += "\n" + table(["edges per node", "model", "edges per pass (mean)", "trimmed ms", "untrimmed ms",
                          "trimmed / untrimmed", "trimmed by default"], rows) + "\n"
    args.out.write_text(text)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
