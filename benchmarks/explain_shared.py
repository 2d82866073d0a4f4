"""``explain_nodes``: disjoint copies against one shared forward, and a loop.

Random graphs (``E = 10 N``, 32 features) and a 3-layer GCN (hidden 64).
For ``--targets`` random nodes, in one process and one run:

* ``loop``: one ``Explainer(model, algorithm=lrp.LRP())`` call per target
  (``explanation_type='model'``), timed on ``--loop`` targets and scaled;
* ``copies``: ``lrp.explain_nodes(..., strategy='copies')``, the targets'
  subgraphs as disjoint copies, one forward and backward per batch;
* ``shared``: ``strategy='shared'``, one forward on the union of a batch's
  subgraphs and one backward per target;
* ``auto``: the default, which picks one of the two per batch from the
  sizes of the subgraphs and runs large copies in passes of at most
  ``COPIES_BUDGET`` nodes and edges (see ``explain_nodes``), and checks the
  batches' subgraphs against one plain forward of the whole graph where the
  batches' own checks would cost more (``api._shares_reference``);
* ``auto-own-checks``: ``auto`` with every batch checked on its own (that
  rule switched off inside the script), the alternative to the shared
  check; its relevance must equal ``auto``'s exactly;
* ``auto-sparse``: ``auto`` with ``output='sparse'`` (the relevance as
  sparse target x node and target x edge matrices, no ``Explanation`` per
  target, and lean cuts made directly where the full graph checks them);
  its node and edge relevance must equal ``auto``'s exactly;
* ``floor``: what any explanation of one target needs at least, as the
  issue defines it: PyG's ``k_hop_subgraph`` (4 hops: the 3 the model reads
  and the degrees of the outermost), one plain forward and one backward on
  it; the median over ``--loop`` targets.

``--device cuda`` puts the model and graph on the GPU (the targets stay a
CPU tensor, as users pass them) and synchronises around every timing. The
other ways' relevance must equal ``auto``'s exactly on the CPU; on CUDA,
whose atomic adds sum in no fixed order, the largest difference (relative
to the largest value) is reported in the last column.

``--ways`` picks the ``explain_nodes`` strategies run (``copies``,
``shared`` and ``auto`` by default; a cell of a strategy not run reads
n/a).

Also per size: the mean size of a target's own subgraph and of a batch's
union (nodes + edges), which ``auto`` compares, and the largest difference
between the ``copies`` and ``shared`` node relevance (the same numbers up
to rounding). Run: ``python benchmarks/explain_shared.py`` (a few minutes on
2 CPU cores); writes ``benchmarks/results/explain_shared.md``. The issue's
setting (200 targets, up to 300k nodes, ``auto`` only):
``python benchmarks/explain_shared.py --sizes 10000 100000 300000 --targets 200 --ways auto auto-own-checks
auto-sparse --loop 8 --out benchmarks/results/explain_nodes_200.md``.
"""
from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import sys
import time
import warnings
from datetime import datetime, timezone
from pathlib import Path

import torch
import torch_geometric
from torch import Tensor
from torch_geometric.explain import Explainer
from torch_geometric.nn import GCN
from torch_geometric.utils import k_hop_subgraph

import torch_geometric_lrp as lrp
from torch_geometric_lrp.explainers import api as explainers_api
from torch_geometric_lrp.explainers.subgraph import Incidence, count_hops, cut, cut_each

RESULTS = Path(__file__).resolve().parent / "results"
shares_reference = explainers_api._shares_reference


def synchronize() -> None:
    """Wait for queued CUDA work (timings on a GPU), nothing on the CPU."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def seconds(fn) -> float:
    synchronize()
    start = time.perf_counter()
    fn()
    synchronize()
    return time.perf_counter() - start


def relevance(result, num_targets: int, n: int, e: int) -> tuple[Tensor, ...]:
    """Node and edge relevance of every target, as the nonzero entries of
    ``[targets, n]`` and ``[targets, e]`` matrices (indices ``[2, m]``,
    values ``[m]``, row-major), from either output of ``explain_nodes``."""
    if isinstance(result, lrp.NodeRelevance):
        matrices = result.node_relevance, result.edge_relevance
    else:
        def matrix(columns, values, size):
            rows = torch.cat([torch.full_like(c, k) for k, c in enumerate(columns)])
            return torch.sparse_coo_tensor(torch.stack([rows, torch.cat(columns)]), torch.cat(values), size)
        matrices = (matrix([ex.node_index for ex in result], [ex.node_mask.sum(dim=-1) for ex in result],
                           (num_targets, n)),
                    matrix([ex.edge_id for ex in result], [ex.edge_mask for ex in result], (num_targets, e)))
    entries = []
    for m in matrices:
        m = m.coalesce()
        keep = m.values() != 0
        entries += [m.indices()[:, keep], m.values()[keep]]
    return tuple(entries)


def difference(a: tuple[Tensor, ...], b: tuple[Tensor, ...]) -> float:
    """The largest difference between two runs' relevance entries
    (:func:`relevance`), relative to the largest value of each matrix."""
    worst = 0.0
    for (i, v), (j, w) in ((a[:2], b[:2]), (a[2:], b[2:])):
        if not (i.numel() and j.numel()):
            worst = max(worst, 0.0 if i.numel() == j.numel() else float("inf"))
            continue
        size = torch.Size(torch.maximum(i.amax(1), j.amax(1)).add(1).tolist())
        diff = (torch.sparse_coo_tensor(i, v, size) - torch.sparse_coo_tensor(j, w, size)).coalesce().values()
        worst = max(worst, float(diff.abs().max() / v.abs().max()) if diff.numel() else 0.0)
    return worst


def floor(model, x, edge_index, targets) -> float:
    """Median seconds of the least one explanation needs: the 4-hop subgraph,
    a plain forward and a backward, per target."""
    times = []
    for t in targets.tolist():
        synchronize()
        start = time.perf_counter()
        subset, sub_edge_index, mapping, _ = k_hop_subgraph(t, 4, edge_index, relabel_nodes=True,
                                                            num_nodes=x.shape[0])
        out = model(x[subset].requires_grad_(), sub_edge_index)
        out[mapping, out[mapping].argmax()].sum().backward()
        synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def sizes(targets, edge_index, n, batch_size, hops) -> tuple[float, float]:
    """Mean nodes + edges of a target's own subgraph, and of a batch's union."""
    graph = Incidence(edge_index, n)
    own, union = [], []
    for start in range(0, targets.numel(), batch_size):
        chunk = targets[start:start + batch_size]
        copies, _, _ = cut_each(chunk, hops, edge_index, n, incidence=graph)
        own.append((copies.num_nodes + copies.edge_id.numel()) / chunk.numel())
        u = cut(chunk, hops, edge_index, n, incidence=graph)
        union.append(u.num_nodes + u.edge_id.numel())
    return sum(own) / len(own), sum(union) / len(union)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--targets", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--loop", type=int, default=8, help="targets timed in the loop (then scaled)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--ways", nargs="+", choices=["copies", "shared", "auto", "auto-own-checks", "auto-sparse"],
                        default=["copies", "shared", "auto"])
    parser.add_argument("--device", default="cpu", help="where the model and graph live: cpu, cuda")
    parser.add_argument("--out", type=Path, default=RESULTS / "explain_shared.md")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", category=UserWarning)
    started = time.perf_counter()
    rows = []
    for n in args.sizes:
        torch.manual_seed(0)
        x = torch.randn(n, 32)
        edge_index = torch.randint(0, n, (2, 10 * n))
        model = GCN(32, 64, num_layers=3, out_channels=8).eval()
        targets = torch.randperm(n)[:args.targets]  # on the CPU, as users pass them
        model, x, edge_index = model.to(device), x.to(device), edge_index.to(device)
        explainer = Explainer(model, algorithm=lrp.LRP(), explanation_type="model", node_mask_type="attributes",
                              edge_mask_type="object",
                              model_config=dict(mode="multiclass_classification", task_level="node",
                                                return_type="raw"))
        explainer(x, edge_index, index=int(targets[0]))  # warm-up
        lrp.explain_nodes(model, x, edge_index, targets[:2], batch_size=2)
        loop = seconds(lambda: [explainer(x, edge_index, index=int(t)) for t in targets[:args.loop]])
        loop *= targets.numel() / args.loop
        base = floor(model, x, edge_index, targets[:args.loop])
        times, results = {}, {}
        for way in args.ways:
            own_checks = way == "auto-own-checks"
            if own_checks:  # the alternative to the shared check: every batch checked on its own
                explainers_api._shares_reference = lambda *a: False
            try:
                times[way] = seconds(lambda: results.__setitem__(way, lrp.explain_nodes(
                    model, x, edge_index, targets, batch_size=args.batch_size,
                    strategy="auto" if way.startswith("auto") else way,
                    output="sparse" if way == "auto-sparse" else "list")))
            finally:
                explainers_api._shares_reference = shares_reference
            # kept as relevance only: a run that follows a run whose explanations
            # (with x of every subgraph, about 1 GiB at 100k nodes) are still held
            # is slowed by the memory they hold
            results[way] = relevance(results[way], targets.numel(), n, edge_index.shape[1])
            gc.collect()
        # the other ways must give auto's relevance: exactly on the CPU; on CUDA,
        # whose atomic adds sum in no fixed order, up to float32 rounding
        # (reported in the last column, relative to the largest value)
        rounding = 0.0
        for other in ("auto-own-checks", "auto-sparse"):
            if {"auto", other} <= set(results):
                if device.type == "cpu":
                    assert all(torch.equal(a, b) for a, b in zip(results["auto"], results[other])), other
                rounding = max(rounding, difference(results["auto"], results[other]))
        diff = float((torch.sparse_coo_tensor(*results["copies"][:2], (targets.numel(), n))
                      - torch.sparse_coo_tensor(*results["shared"][:2], (targets.numel(), n))).coalesce().values()
                     .abs().max()) if {"copies", "shared"} <= set(times) else None
        own, union = sizes(targets, edge_index, n, args.batch_size, count_hops(model))
        ms = {way: 1000 * t / targets.numel() for way, t in times.items()}
        best = min(ms["copies"], ms["shared"]) if {"copies", "shared"} <= set(ms) else None

        def over(a, b) -> str:  # a ratio, where both sides were run
            return "n/a" if a is None or b is None else f"{a / b:.2f}x"

        rows.append([f"{n:,} / {10 * n:,}", f"{own:,.0f}", f"{union:,.0f}", f"{1000 * base:.1f}",
                     f"{1000 * loop / targets.numel():.1f}",
                     *(f"{ms[w]:.1f}" if w in ms else "n/a"
                       for w in ("copies", "shared", "auto", "auto-own-checks", "auto-sparse")),
                     over(ms.get("auto-own-checks"), ms.get("auto")),
                     over(ms.get("copies"), ms.get("shared")), over(ms.get("auto"), best),
                     over(ms.get("auto"), 1000 * base), over(1000 * loop / targets.numel(), ms.get("auto")),
                     over(1000 * loop / targets.numel(), ms.get("auto-sparse")),
                     "n/a" if diff is None else f"{diff:.1e}", f"{rounding:.1e}"])
        print(" | ".join(rows[-1]), flush=True)
    header = ["nodes / edges", "own subgraph (nodes + edges)", "batch union", "floor ms/target", "loop ms/target",
              "copies ms/target", "shared ms/target", "auto ms/target", "auto, one check per batch ms/target",
              "auto, sparse output ms/target", "that / auto", "copies / shared", "auto / best",
              "auto / floor", "loop / auto", "loop / auto (sparse)", "max abs(copies - shared)",
              "largest difference to auto (relative)"]
    lines = [
        "# explain_nodes: disjoint copies, shared forward, and a loop",
        "",
        f"- command: `python {' '.join(['benchmarks/explain_shared.py'] + (sys.argv[1:] if argv is None else argv))}`",
        f"- date: {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- torch {torch.__version__}, torch_geometric {torch_geometric.__version__}, Python "
        f"{platform.python_version()}, {os.cpu_count()} CPU cores, torch threads {args.threads}; device "
        f"{torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu'}",
        f"- {args.targets} random targets per graph, batch_size {args.batch_size}; the loop timed on {args.loop} "
        f"targets and scaled, the floor the median over the same {args.loop}; 3-layer GCN, hidden 64, 32 features; "
        f"runtime {(time.perf_counter() - started) / 60:.1f} min",
        "",
        "What is measured: see the docstring of `benchmarks/explain_shared.py`. One timing per cell: compare "
        "within a row.",
        "",
        "| " + " | ".join(header) + " |",
        "| " + " | ".join(["---"] + ["---:"] * (len(header) - 1)) + " |",
        *("| " + " | ".join(r) + " |" for r in rows),
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
