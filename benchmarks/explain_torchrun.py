"""``explain_nodes`` under ``torchrun``: two processes against one, same numbers.

A random graph (``E = 10 N``, default 100k nodes, 32 features) and a 3-layer
GCN (hidden 64), ``--targets`` random targets, ``batch_size`` 16,
``output='sparse'``. Measured in one run, one after the other:

* one process with 1 torch thread, and with 2 (all cores of this machine);
* ``torchrun --standalone --nproc_per_node=2`` (gloo), 1 thread per rank:
  the time on rank 0 from a barrier to the gathered result (both ranks
  hold all targets' relevance then).

Every configuration explains the same targets after a warm-up; the
throughput is targets per second. The two-process result is compared with
the one-process result field by field (``torch.equal``: the same batches
give the same numbers).

    python benchmarks/explain_torchrun.py [--nodes 100000] [--targets 128]

Writes ``benchmarks/results/explain_torchrun.md`` (``--out``).
"""
from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
import warnings
from datetime import datetime, timezone
from pathlib import Path

import torch
import torch.distributed as dist
import torch_geometric
from torch_geometric.nn import GCN

import torch_geometric_lrp as lrp

RESULTS = Path(__file__).resolve().parent / "results"
FIELDS = ("index", "target", "score", "relevance_total", "node_relevance", "edge_relevance")


def problem(nodes: int, targets: int):
    """The graph, model and targets: the same in every process (seeded)."""
    torch.manual_seed(0)
    x = torch.randn(nodes, 32)
    edge_index = torch.randint(0, nodes, (2, 10 * nodes))
    model = GCN(32, 64, num_layers=3, out_channels=8).eval()
    return model, x, edge_index, torch.randperm(nodes)[:targets]


def explain(model, x, edge_index, index, batch_size: int, distributed: bool):
    return lrp.explain_nodes(model, x, edge_index, index, batch_size=batch_size, output="sparse",
                             distributed=distributed, progress=False)


def worker(args) -> None:
    """One rank under torchrun: time the call, rank 0 saves result and time."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    try:
        model, x, edge_index, index = problem(args.nodes, args.targets)
        explain(model, x, edge_index, index[:2 * args.batch_size], args.batch_size, True)  # warm-up
        dist.barrier()
        start = time.perf_counter()
        result = explain(model, x, edge_index, index, args.batch_size, True)
        seconds = time.perf_counter() - start
        if dist.get_rank() == 0:
            torch.save(dict(seconds=seconds, **{k: getattr(result, k) for k in FIELDS}), args.worker)
    finally:
        dist.destroy_process_group()


def single(args, threads: int):
    torch.set_num_threads(threads)
    model, x, edge_index, index = problem(args.nodes, args.targets)
    explain(model, x, edge_index, index[:2 * args.batch_size], args.batch_size, False)  # warm-up
    start = time.perf_counter()
    result = explain(model, x, edge_index, index, args.batch_size, False)
    return time.perf_counter() - start, result


def parse(parser: argparse.ArgumentParser) -> argparse.Namespace:
    """The arguments, with ``--worker FILE`` (set by :func:`under_torchrun`
    for the ranks), and PyG's user warnings silenced."""
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    warnings.filterwarnings("ignore", category=UserWarning)
    return args


def under_torchrun(script: str, argv: list[str], nproc: int = 2) -> dict:
    """Run ``script argv --worker FILE`` under ``torchrun --standalone
    --nproc_per_node=nproc`` (one thread per rank) and return what rank 0
    saved in ``FILE``."""
    with tempfile.TemporaryDirectory() as tmp:
        saved = Path(tmp) / "rank0.pt"
        env = dict(os.environ, OMP_NUM_THREADS="1")
        subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
                        script, *argv, "--worker", str(saved)], check=True, env=env)
        return torch.load(saved)


def same(a, b) -> bool:
    if a.layout == torch.sparse_coo:
        a, b = a.coalesce(), b.coalesce()
        return torch.equal(a.indices(), b.indices()) and torch.equal(a.values(), b.values())
    return torch.equal(a, b)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--targets", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--out", type=Path, default=RESULTS / "explain_torchrun.md")
    args = parse(parser)
    if args.worker:
        return worker(args)
    started = time.perf_counter()
    one_thread, reference = single(args, 1)
    two_threads, _ = single(args, 2)
    two = under_torchrun(__file__, ["--nodes", str(args.nodes), "--targets", str(args.targets),
                                    "--batch-size", str(args.batch_size)])
    equal = all(same(two[k], getattr(reference, k)) for k in FIELDS)
    t = args.targets
    rows = [("1 process, 1 thread", one_thread), ("1 process, 2 threads", two_threads),
            ("torchrun, 2 processes x 1 thread", two["seconds"])]
    lines = [
        "# explain_nodes under torchrun: two processes against one",
        "",
        f"- command: `python {' '.join(['benchmarks/explain_torchrun.py', *sys.argv[1:]])}`",
        f"- date: {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- torch {torch.__version__}, torch_geometric {torch_geometric.__version__}, Python "
        f"{platform.python_version()}, {os.cpu_count()} CPU cores",
        f"- random graph, {args.nodes:,} nodes, {10 * args.nodes:,} edges, 32 features; 3-layer GCN, hidden 64; "
        f"{t} random targets, batch_size {args.batch_size}, output='sparse'; runtime "
        f"{(time.perf_counter() - started) / 60:.1f} min",
        "",
        "What is measured: see the docstring of `benchmarks/explain_torchrun.py`. One timing per row.",
        "",
        f"Two processes return the same relevance as one (every field equal): **{'yes' if equal else 'NO'}**.",
        "",
        "| run | seconds | targets/s | throughput vs 1 process, 1 thread | vs 1 process, 2 threads |",
        "| --- | ---: | ---: | ---: | ---: |",
        *(f"| {name} | {s:.1f} | {t / s:.2f} | {one_thread / s:.2f}x | {two_threads / s:.2f}x |" for name, s in rows),
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    if not equal:
        sys.exit(1)


if __name__ == "__main__":
    main()
