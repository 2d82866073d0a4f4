"""Every node of a 1M-edge graph explained, under ``torchrun`` on this machine.

A random graph (``E = 10 N``, default 100k nodes, 32 features) and a 3-layer
GCN (hidden 64), as in ``explain_torchrun.py``. ``torchrun --standalone
--nproc_per_node=2`` (gloo, one torch thread per rank) runs
``lrp.explain_nodes(..., output='sparse', distributed=True)`` over every
node, in chunks of ``--chunk`` targets, as a user who stores the results
chunk by chunk would: each call splits its chunk over the ranks and hands
every rank all of the chunk's relevance (node x node and node x edge sparse
matrices). The script keeps each chunk's number of stored entries and drops
the matrices (writing them out is not timed).

``--device cuda`` runs one rank on the GPU instead (``--nproc_per_node=1``,
NCCL), with the model and graph there; then the peak is also the GPU's
(``torch.cuda.max_memory_allocated``).

Reported: the wall time of all the calls on rank 0 (from a barrier before
the first to the end of the last), the slowest chunk, the peak resident
memory of each rank (VmHWM, whole process), and the stored entries. Then,
in one process, ``--check`` targets drawn from the graph are explained
alone (``batch_size=1``) and their rows compared with the run's (float32:
the largest difference relative to the row's largest value, at most 1e-4).

    python benchmarks/explain_every_node.py [--nodes 100000] [--chunk 25000] [--batch-size 64] [--device cuda]

Writes ``benchmarks/results/explain_every_node.md`` (``--out``).
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import torch
import torch.distributed as dist
import torch_geometric

import torch_geometric_lrp as lrp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from explain_torchrun import parse, problem, under_torchrun  # noqa: E402  (the same graph, model and seed)

RESULTS = Path(__file__).resolve().parent / "results"


def peak_mib() -> float:
    """VmHWM of this process in MiB (Linux), or nan."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def on_device(args, model, x, edge_index):
    """The problem moved to ``--device``: under NCCL each rank on its own GPU."""
    if args.device == "cpu":
        return model, x, edge_index
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    torch.cuda.set_device(device)
    return model.to(device), x.to(device), edge_index.to(device)


def worker(args) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo" if args.device == "cpu" else "nccl")
    try:
        model, x, edge_index = on_device(args, *problem(args.nodes, 1)[:3])
        everything = torch.arange(args.nodes)
        keep = torch.randperm(args.nodes, generator=torch.Generator().manual_seed(1))[:args.check]
        lrp.explain_nodes(model, x, edge_index, everything[:args.batch_size], batch_size=args.batch_size,
                          output="sparse", distributed=True, progress=False)  # warm-up
        dist.barrier()
        start = time.perf_counter()
        chunks, entries, rows = [], [0, 0], {}
        for first in range(0, args.nodes, args.chunk):
            t = time.perf_counter()
            chunk = everything[first:first + args.chunk]
            result = lrp.explain_nodes(model, x, edge_index, chunk, batch_size=args.batch_size, output="sparse",
                                       distributed=True, progress=False)
            if args.device == "cuda":
                torch.cuda.synchronize()
            chunks.append(time.perf_counter() - t)
            entries[0] += result.node_relevance._nnz()
            entries[1] += result.edge_relevance._nnz()
            mine = keep[(keep >= first) & (keep < first + args.chunk)]
            for v in mine.tolist():  # the rows the check compares, kept
                rows[v] = (result.node_relevance[v - first].to_dense(), result.edge_relevance[v - first].to_dense())
            del result
        seconds = time.perf_counter() - start
        gpu = torch.cuda.max_memory_allocated() / 2**20 if args.device != "cpu" else float("nan")
        peaks = [None] * dist.get_world_size()
        dist.all_gather_object(peaks, (peak_mib(), gpu))
        if dist.get_rank() == 0:
            rows = {v: (a.cpu(), b.cpu()) for v, (a, b) in rows.items()}
            torch.save(dict(seconds=seconds, chunks=chunks, entries=entries, rows=rows, peaks=peaks), args.worker)
    finally:
        dist.destroy_process_group()


def peaks(per_rank: list, device: str) -> str:
    """Each rank's peak memory in MiB: the process's, and the GPU's on CUDA."""
    if device == "cpu":
        return " / ".join(f"{rss:,.0f}" for rss, _ in per_rank)
    return " / ".join(f"{rss:,.0f}, {gpu:,.0f}" for rss, gpu in per_rank)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--chunk", type=int, default=25_000)
    parser.add_argument("--check", type=int, default=16, help="targets compared with one-by-one explanations")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                        help="cpu: 2 gloo ranks; cuda: 1 NCCL rank on the GPU")
    parser.add_argument("--out", type=Path, default=RESULTS / "explain_every_node.md")
    args = parse(parser)
    if args.worker:
        return worker(args)
    started = time.perf_counter()
    nproc = 2 if args.device == "cpu" else 1
    run = under_torchrun(__file__, ["--nodes", str(args.nodes), "--chunk", str(args.chunk), "--check",
                                    str(args.check), "--device", args.device, "--batch-size", str(args.batch_size)],
                         nproc=nproc)
    model, x, edge_index = on_device(args, *problem(args.nodes, 1)[:3])
    worst = 0.0  # largest difference to the target explained alone, relative to the row's largest value
    for v, (node_row, edge_row) in run["rows"].items():
        alone = lrp.explain_nodes(model, x, edge_index, torch.tensor([v]), batch_size=1, output="sparse",
                                  progress=False)
        for a, b in ((alone.node_relevance.to_dense()[0].cpu(), node_row),
                     (alone.edge_relevance.to_dense()[0].cpu(), edge_row)):
            worst = max(worst, float((a - b).abs().max() / b.abs().max().clamp_min(1e-30)))
    n = args.nodes
    lines = [
        "# Every node of a 1M-edge graph: explain_nodes under torchrun",
        "",
        f"- command: `python {' '.join(['benchmarks/explain_every_node.py', *sys.argv[1:]])}`",
        f"- date: {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- torch {torch.__version__}, torch_geometric {torch_geometric.__version__}, Python "
        f"{platform.python_version()}, {os.cpu_count()} CPU cores; device "
        f"{torch.cuda.get_device_name() if args.device == 'cuda' else 'cpu'}",
        f"- random graph, {n:,} nodes, {10 * n:,} edges, 32 features; 3-layer GCN, hidden 64; every node a target, "
        f"in chunks of {args.chunk:,}, batch_size {args.batch_size}; `torchrun --nproc_per_node={nproc}` "
        f"({'gloo' if args.device == 'cpu' else 'NCCL'}), 1 thread per rank; output='sparse'; "
        f"runtime {(time.perf_counter() - started) / 60:.1f} min",
        "",
        "What is measured: see the docstring of `benchmarks/explain_every_node.py`.",
        "",
        "| nodes explained | wall time (min) | targets/s | slowest chunk (s) | peak MiB per rank "
        f"{'' if args.device == 'cpu' else '(process / GPU) '}| node x node entries | node x edge entries |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        f"| {n:,} | {run['seconds'] / 60:.1f} | {n / run['seconds']:.1f} | {max(run['chunks']):.1f} "
        f"| {peaks(run['peaks'], args.device)} | {run['entries'][0]:,} | {run['entries'][1]:,} |",
        "",
        f"{len(run['rows'])} random targets explained alone (`batch_size=1`, one process) against their rows of "
        f"the run: largest difference {worst:.1e} of the row's largest value.",
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    if worst > 1e-4:
        sys.exit(1)


if __name__ == "__main__":
    main()
