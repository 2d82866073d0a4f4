"""Explaining many nodes of a large graph: the batched cut and ``explain_nodes``' throughput.

A random graph of ``N`` nodes and ``E = 10 N`` edges (default 100k / 1M, 32
features) and a 3-layer GCN (hidden 64). Measured in one run, so compare the
ratios:

1. **Cutting** the targets' computation subgraphs (``count_hops = 3``):
   ``scan``, the cut as ``explain_nodes`` made it before: PyG's
   ``k_hop_subgraph`` and a mask over the whole edge list, per target, with
   every outside node in the cut; against ``cut_each``, the cuts of
   ``--batch-size`` targets at once from one ``Incidence`` (the edges sorted
   once per call, its cost counted in), with ring slots (each cut, spelled
   out, must equal the scan's). Alternately, median of ``--repeats``;
   milliseconds per target; nodes per cut with ring slots and spelled out.
   Then ``cut_each`` against ``cut_each(..., lean=True)`` (the lean cuts
   ``explain_nodes`` makes where the full graph checks them: only the
   edges the subgraph reads), alternately.
2. **explain_nodes** on ``--targets`` targets (``--explain-batch`` per pass):
   with the ``scan`` cut patched in (what the previous versions did: a scan
   per target, every outside node in the pass), and as it
   is now with ``output='list'`` and ``output='sparse'``, alternately, median
   of ``--explain-repeats``; targets per second, the peak extra resident
   memory of a call (VmHWM), the memory the result holds (views of the
   inputs not counted), and a check that all three give the same relevance.
   The time for every node of the graph is extrapolated from the throughput.

Writes ``benchmarks/results/explain_all.md`` (``--out``). One torch thread by
default (``--threads``): on a shared two-core machine, two threads contend.

    python benchmarks/explain_all.py [--nodes 100000] [--targets 64]
"""
from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import torch
import torch_geometric
from torch_geometric.nn import GCN
from torch_geometric.utils import k_hop_subgraph

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
import peak_memory  # noqa: E402
from explain_scale import timed_pair  # noqa: E402  (both sides run alternately)

import torch_geometric_lrp as lrp  # noqa: E402
from torch_geometric_lrp.explainers import api, subgraph  # noqa: E402

MIB = 2 ** 20


def scan_cut(index, num_hops, edge_index, num_nodes, flow="source_to_target"):
    """The cut as it was made before ``Incidence``: ``k_hop_subgraph`` and
    one mask over the edge list (``O(E)`` per call)."""
    reads = torch.zeros(num_nodes, dtype=torch.bool)
    reads[k_hop_subgraph(index, num_hops, edge_index, num_nodes=num_nodes, flow=flow)[0]] = True
    edge_id = (reads[edge_index[0]] | reads[edge_index[1]]).nonzero().view(-1)
    keep = reads.clone()
    keep[edge_index[:, edge_id].reshape(-1)] = True
    nodes = keep.nonzero().view(-1)
    relabel = torch.full((num_nodes,), -1)
    relabel[nodes] = torch.arange(nodes.numel())
    return subgraph.Cut(nodes=nodes, edge_id=edge_id, edge_index=relabel[edge_index[:, edge_id]],
                        index=relabel[index], ring=~reads[nodes])


def scan_cut_each(index, num_hops, edge_index, num_nodes, flow="source_to_target", incidence=None, lean=False):
    """``cut_each`` by one scan per target (the previous ``explain_nodes``):
    in full even where ``lean`` asks for lean cuts, which it did not have."""
    return subgraph.disjoint_union([scan_cut(t.view(1), num_hops, edge_index, num_nodes, flow) for t in index])


def with_scan_cut(fn):
    """``fn()`` with ``explain_nodes`` cutting by one scan per target."""
    real = api.cut_each
    api.cut_each = scan_cut_each
    try:
        return fn()
    finally:
        api.cut_each = real


def batched_cuts(targets, edge_index, n, batch_size, lean=False):
    incidence = subgraph.Incidence(edge_index, n)
    return [subgraph.cut_each(targets[s:s + batch_size], 3, edge_index, n, incidence=incidence, lean=lean)
            for s in range(0, targets.numel(), batch_size)]


def measured(fn):
    """(seconds, peak extra MiB or None, result) of one call."""
    gc.collect()
    base = peak_memory.reset() if TRACK else None
    start = time.perf_counter()
    result = fn()
    seconds = time.perf_counter() - start
    return seconds, None if base is None else (peak_memory.peak() - base) / MIB, result


def held_mib(result) -> float:
    """The memory the result's tensors hold (views of the inputs not counted)."""
    def nbytes(t):
        if t.layout == torch.sparse_coo:
            return nbytes(t._indices()) + nbytes(t._values())
        return t.untyped_storage().nbytes()

    seen, total = set(), 0
    tensors = ([v for ex in result for v in ex.to_dict().values() if isinstance(v, torch.Tensor)]
               if isinstance(result, list) else [v for v in vars(result).values() if isinstance(v, torch.Tensor)])
    for t in tensors:
        if t.layout == torch.sparse_coo:
            total += nbytes(t)
            continue
        key = t.untyped_storage().data_ptr()
        if key not in seen and key not in INPUTS:  # views of one storage count once
            seen.add(key)
            total += nbytes(t)
    return total / MIB


def main() -> None:
    global TRACK, INPUTS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--cut-targets", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--targets", type=int, default=64)
    parser.add_argument("--explain-batch", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--explain-repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "explain_all.md")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    TRACK = peak_memory.can_track()
    started = time.perf_counter()
    torch.manual_seed(0)
    n = args.nodes
    x = torch.randn(n, 32)
    edge_index = torch.randint(0, n, (2, 10 * n))
    INPUTS = {x.untyped_storage().data_ptr(), edge_index.untyped_storage().data_ptr()}
    model = GCN(32, 64, num_layers=3, out_channels=8).eval()
    targets = torch.randperm(n)[:max(args.cut_targets, args.targets)]

    # 1. cutting
    cut_targets = targets[:args.cut_targets]
    union, node_starts, edge_starts = batched_cuts(cut_targets[:args.batch_size], edge_index, n, args.batch_size)[0]
    spelled = 0
    for t, c in zip(cut_targets[:args.batch_size], subgraph.split(union, node_starts, edge_starts)):
        full, _, _ = subgraph.spelled_out(c, edge_index, n)
        scanned = scan_cut(t.view(1), 3, edge_index, n)
        for name in ("nodes", "edge_id", "edge_index", "index", "ring"):
            assert torch.equal(getattr(full, name), getattr(scanned, name)), name
        spelled += full.num_nodes
    t_scan, t_batched = timed_pair(lambda: [scan_cut(t.view(1), 3, edge_index, n) for t in cut_targets],
                                    lambda: batched_cuts(cut_targets, edge_index, n, args.batch_size), args.repeats)
    # the lean cuts explain_nodes makes where the full graph checks them
    lean_union = batched_cuts(cut_targets[:args.batch_size], edge_index, n, args.batch_size, lean=True)[0][0]
    t_full, t_lean = timed_pair(lambda: batched_cuts(cut_targets, edge_index, n, args.batch_size),
                                lambda: batched_cuts(cut_targets, edge_index, n, args.batch_size, lean=True),
                                args.repeats)
    t_incidence = statistics.median(
        [measured(lambda: subgraph.Incidence(edge_index, n))[0] for _ in range(args.repeats)])
    per = args.cut_targets
    cut_rows = [[f"{n:,} / {10 * n:,}", f"{per}", f"{union.num_nodes / args.batch_size:,.0f}",
                 f"{spelled / args.batch_size:,.0f}",
                 f"{union.edge_id.numel() / args.batch_size:,.0f}", f"{1e3 * t_scan / per:.2f}",
                 f"{1e3 * t_batched / per:.2f}", f"{t_scan / t_batched:.1f}x", f"{1e3 * t_incidence:.0f}",
                 f"{t_scan / per * n / 60:.1f} / {(t_batched / per * n) / 60:.1f}",
                 f"{lean_union.edge_id.numel() / args.batch_size:,.0f}", f"{1e3 * t_lean / per:.2f}",
                 f"{t_full / t_lean:.1f}x"]]

    # 2. explain_nodes
    chosen = targets[:args.targets]
    run = dict(batch_size=args.explain_batch, progress=False)
    runs = {"before (scan cut per target, ring spelled out), list": lambda: with_scan_cut(
                lambda: lrp.explain_nodes(model, x, edge_index, chosen, **run)),
            "list": lambda: lrp.explain_nodes(model, x, edge_index, chosen, **run),
            "sparse": lambda: lrp.explain_nodes(model, x, edge_index, chosen, output="sparse", **run)}
    times, peaks, results = {name: [] for name in runs}, {}, {}
    for _ in range(args.explain_repeats):  # alternately, so that all see the same machine
        for name, fn in runs.items():
            seconds, peaks[name], results[name] = measured(fn)
            times[name].append(seconds)
    before, listed, sparse = (results[name] for name in runs)
    same_before = all(torch.equal(a.node_mask, b.node_mask) and torch.equal(a.edge_mask, b.edge_mask)
                      for a, b in zip(before, listed))
    dense = torch.zeros(args.targets, n)
    for k, ex in enumerate(listed):
        dense[k, ex.node_index] = ex.node_mask.sum(dim=-1)
    same_sparse = torch.equal(sparse.node_relevance.to_dense(), dense)
    explain_rows = []
    for name in runs:
        seconds = statistics.median(times[name])
        rate = args.targets / seconds
        explain_rows.append([name, f"{seconds:.1f}", f"{1e3 / rate:.0f}", f"{rate:.2f}",
                             "n/a" if peaks[name] is None else f"{peaks[name]:,.0f}",
                             f"{held_mib(results[name]):,.1f}", f"{n / rate / 3600:.2f}"])

    lines = [
        "# Explaining many nodes: batched cut and explain_nodes throughput", "",
        f"- command: `python {' '.join([os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:])}`",
        f"- date: {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- torch {torch.__version__}, torch_geometric {torch_geometric.__version__}, torch_geometric_lrp "
        f"{lrp.__version__}, Python {platform.python_version()}, {os.cpu_count()} CPU cores, torch threads "
        f"{torch.get_num_threads()}",
        f"- graph: random, {n:,} nodes, {10 * n:,} edges, 32 features; model: 3-layer GCN, hidden 64; seed 0",
        f"- runtime of this run: {(time.perf_counter() - started) / 60:.1f} min", "",
        "What is measured: see the docstring of `benchmarks/explain_all.py`.", "",
        f"## Cutting the computation subgraphs ({args.cut_targets} targets, batches of {args.batch_size}, "
        f"median of {args.repeats}, run alternately)", "",
        "| nodes / edges | targets | nodes per cut | nodes per cut, ring spelled out | edges per cut "
        "| scan ms/target | cut_each ms/target | speed-up | Incidence ms (once per call) "
        "| every node: scan / cut_each (min) | edges per lean cut | cut_each lean ms/target "
        "| lean speed-up (against cut_each, run alternately) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        *["| " + " | ".join(r) + " |" for r in cut_rows], "",
        f"## explain_nodes ({args.targets} targets, batch_size={args.explain_batch}, median of "
        f"{args.explain_repeats}, run alternately)", "",
        f"Same relevance: before = now (list) {'yes' if same_before else 'NO'}; sparse = list "
        f"{'yes' if same_sparse else 'NO'}.", "",
        "| run | seconds | ms/target | targets/s | peak extra MiB | result MiB | every node (h, extrapolated) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
        *["| " + " | ".join(r) + " |" for r in explain_rows], "",
    ]
    doc = "\n".join(lines)
    print(doc)
    args.out.write_text(doc)


if __name__ == "__main__":
    main()
