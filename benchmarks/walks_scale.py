r"""Cost of relevant walks as depth and graph size grow.

Random graphs with ``E = 10 N`` edges (``N`` = 2k and 20k), a PyG ``GCN``
with 2, 3 and 4 layers (hidden 64, 16 input features, 4 classes, float32),
5 target nodes each (the same for every column). Per target, side by side
in one run:

* ``lrp.walks(top_k=10)``: the 10 most relevant walks;
* ``lrp.walks(top_k=None)``: every walk (where there are at most 1,000,000);
* ``lrp.explain``: first-order relevance, for scale;
* **one backward per walk**, the way GNN-LRP is usually computed (DIG's
  ``GNN_LRP``): the relevance pass run once, then one backward per walk with
  the relevance masked to the walk's node after every layer. Timed on the
  first 30 walks of the target and extrapolated to all its walks (labelled
  as such); its relevance is checked against ``lrp.walks`` on those 30.

Reported: medians over the targets, in seconds, and the ratio of the
one-backward-per-walk cost to ``lrp.walks``.

Run: ``python benchmarks/walks_scale.py [--quick]`` (writes
``benchmarks/results/walks_scale.md``).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import torch
from torch_geometric.nn import GCN, MessagePassing

import torch_geometric_lrp as lrp
from torch_geometric_lrp.explainers.targets import seed_of

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
from torch_geometric.explain.config import ModelMode

RESULTS = Path(__file__).resolve().parent / "results"


def per_walk_backward(model, x, edge_index, index, walks: torch.Tensor) -> tuple[list[float], float]:
    """Relevance of each walk by its own masked backward (one pass each);
    returns the relevances and the seconds per walk."""
    layers = [m for m in model.modules() if isinstance(m, MessagePassing)]
    masks: list = []
    with lrp.relevance_pass(model) as mode:
        xw = mode.watch(x)

        def hook(module, args, out):
            alias = mode.alias(out)
            level = len(masks)
            masks.append(None)
            with mode.paused():  # the pass refuses gradient hooks that a forward registers
                for t in mode.streams_of(alias):
                    t.register_hook(lambda g, level=level: g * masks[level][:, None])
            return alias

        handles = [layer.register_forward_hook(hook) for layer in layers]
        try:
            out = model(xw, edge_index)
        finally:
            for h in handles:
                h.remove()
        rows = torch.tensor([index])
        seed, _ = seed_of(out.detach(), rows, rows, out.shape[0], None, ModelMode.multiclass_classification)
        values = []
        start = time.perf_counter()
        for walk in walks.tolist():
            for level, node in enumerate(walk[1:]):
                masks[level] = torch.zeros(x.shape[0], dtype=x.dtype)
                masks[level][node] = 1
            (grad,) = torch.autograd.grad(out, [xw], seed, retain_graph=True)
            values.append(float(grad[walk[0]].sum()))
        seconds = (time.perf_counter() - start) / max(1, len(values))
    return values, seconds


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2k nodes, depth 2 and 3, 2 targets")
    args = parser.parse_args(argv)
    torch.set_num_threads(2)
    sizes = [2_000] if args.quick else [2_000, 20_000]
    depths = [2, 3] if args.quick else [2, 3, 4]
    targets = 2 if args.quick else 5
    rows = []
    begin = time.perf_counter()
    for n in sizes:
        g = torch.Generator().manual_seed(n)
        edge_index = torch.randint(0, n, (2, 10 * n), generator=g)
        x = torch.randn(n, 16, generator=g)
        nodes = torch.randperm(n, generator=g)[:targets].tolist()
        for depth in depths:
            torch.manual_seed(depth)
            model = GCN(16, 64, depth, 4).eval()
            cols: dict = {k: [] for k in ("top10", "all", "explain", "naive", "walks", "checked")}
            for v in nodes:
                top, t_top = timed(lambda: lrp.walks(model, x, edge_index, v, top_k=10))
                _, t_explain = timed(lambda: lrp.explain(model, x, edge_index, index=v))
                cols["top10"].append(t_top)
                cols["explain"].append(t_explain)
                cols["walks"].append(top.num_walks)
                if top.num_walks <= lrp.higher_order.MAX_WALKS:
                    every, t_all = timed(lambda: lrp.walks(model, x, edge_index, v))
                    cols["all"].append(t_all)
                    sample = every.walks[:30]
                    values, per_walk = per_walk_backward(model, x, edge_index, v, sample)
                    error = max(abs(a - float(b)) for a, b in zip(values, every.relevance[:30]))
                    scale = max(float(every.relevance.abs().max()), 1e-12)
                    cols["checked"].append(error / scale)
                    cols["naive"].append(per_walk * every.num_walks)
            med = {k: statistics.median(v) if v else float("nan") for k, v in cols.items()}
            med["checked"] = max(cols["checked"]) if cols["checked"] else float("nan")
            rows.append((n, depth, med))
            print(f"N={n} L={depth}: walks {med['walks']:.0f}, top10 {med['top10']:.3f}s, all {med['all']:.3f}s, "
                  f"explain {med['explain']:.3f}s, one backward per walk {med['naive']:.1f}s (extrapolated), "
                  f"max relative difference {med['checked']:.1e}", flush=True)
    runtime = time.perf_counter() - begin
    lines = [
        "# Relevant walks: cost against depth and graph size",
        "",
        f"- command: `python benchmarks/walks_scale.py{' --quick' if args.quick else ''}`",
        f"- date: {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}; runtime {runtime:.0f} s",
        "- seeds: each graph and its targets from `torch.Generator().manual_seed(N)`, each model's "
        "initialisation from `torch.manual_seed(layers)`; no training",
        f"- {common.machine()}, torch threads {torch.get_num_threads()}",
        "",
        "A shared machine, so times are rough: compare "
        f"within a row. Random graphs with E = 10 N, PyG `GCN` (hidden 64, float32), {targets} target nodes, "
        f"medians in seconds. \"one backward per walk\" is timed on 30 walks and extrapolated to all of "
        f"them; its walk relevances agree with `lrp.walks` to the relative difference shown.",
        "",
        "| nodes / edges | layers | walks into a node | `walks(top_k=10)` | `walks()` (all) | `lrp.explain` "
        "| one backward per walk (extrapolated) | that / `walks()` | max relative difference |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for n, depth, med in rows:
        ratio = med["naive"] / med["all"] if med["all"] == med["all"] else float("nan")
        lines.append(f"| {n:,} / {10 * n:,} | {depth} | {med['walks']:,.0f} | {med['top10']:.3f} | {med['all']:.3f} "
                     f"| {med['explain']:.3f} | {med['naive']:.1f} | {ratio:.0f}x | {med['checked']:.0e} |")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "walks_scale.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
