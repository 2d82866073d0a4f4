r"""Relevance backward vs plain autograd backward of the same torch op (CPU).

What is measured
----------------
For each row the script builds the same forward twice, once with the
relevance op of :mod:`torch_geometric_lrp.functional` and once with the
plain torch op that computes the same output, and times only
``out.backward(R)`` (the forward runs outside the timed region; every
repetition builds a fresh graph). Both variants run alternately in the same
process, after one warm-up run each, and the median over ``--repeat``
repetitions is reported.

* ``linear``: ``x`` ``[100_000, 256]`` -> 256 outputs, weight ``[256, 256]``
  and bias, relevance rule :class:`~torch_geometric_lrp.rules.Epsilon`.
  Plain is ``F.linear`` with only ``x`` requiring grad (like for like: both
  produce only the input's grad / relevance); a second row has weight and
  bias requiring grad too, as in a training step.
* ``scatter``: ``src`` ``[1_000_000, 64]``, a 1-D ``index`` of random ints in
  ``[0, 50_000)`` along dim 0, ``dim_size=50_000``, ``reduce`` in sum, mean,
  max, min. Plain is ``torch_geometric.utils.scatter``, which on CPU is
  native torch whether or not ``torch_scatter`` is installed:
  ``scatter_add_`` for sum, ``scatter_add_`` divided by the group sizes for
  mean, ``scatter_reduce_('amax'/'amin', include_self=False)`` for max/min
  (named in the last column). One extra mean row uses torch's own
  ``Tensor.scatter_reduce('mean', include_self=False)`` as plain, whose
  backward is much slower than PyG's. If ``torch_scatter`` imports, the
  relevance op is measured again with ``backend='torch_scatter'`` (only its
  forward changes; the plain reference stays the same).

``--small`` divides the row counts (``x`` rows, edges, groups) by 100 and
keeps the feature widths: a quick check that the script runs, not a benchmark.

Peak memory
-----------
On Linux, after the forward the script writes ``5`` to
``/proc/self/clear_refs`` (which resets the peak resident set size, VmHWM, to
the current one), reads the current VmRSS as the base, runs the backward and
reads VmHWM. "peak MiB" is VmHWM - base: the most extra memory the backward
held at once, including the gradient / relevance it leaves in ``x.grad``.
Small tensors come from malloc's heap and may reuse pages already resident, so
peaks of the ``--small`` run are noisy; ``n/a`` where /proc is not available.

Reading the ratios
------------------
``time ratio`` = relevance time / plain time and ``mem ratio`` = relevance
peak / plain peak. 1.0 means the relevance pass costs what a gradient costs;
2.0 means twice as much. The ``linear`` row with weight grads is what a
training backward pays for that layer, for comparison; its ratio is expected
to be lower than the like-for-like row. Timings depend on the machine and on
anything else running on it: compare ratios within one run, not absolute
times across machines.
"""
from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch_geometric.utils import scatter as pyg_scatter

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))
from torch_geometric_lrp import functional as lrp  # noqa: E402

import peak_memory  # noqa: E402  (beside this script)

try:
    import torch_scatter  # noqa: F401
    HAVE_TORCH_SCATTER = True
except ImportError:
    HAVE_TORCH_SCATTER = False

MIB = 2**20
REDUCES = ("sum", "mean", "max", "min")

# A forward: builds a fresh graph, returns (output, seed relevance, leaves whose .grad to clear).
Forward = Callable[[], tuple]


@dataclass
class Case:
    op: str
    variant: str
    plain_name: str
    plain: Forward
    relevance: Forward


@dataclass
class Result:
    case: Case
    plain_s: float
    relevance_s: float
    plain_peak: Optional[float]
    relevance_peak: Optional[float]


# ----------------------------------------------------------------------------
# timing
# ----------------------------------------------------------------------------
def measure_backward(forward: Forward, track_peak: bool) -> tuple[float, Optional[int]]:
    """Run ``forward`` (untimed), then time ``out.backward(seed)``; return
    (seconds, peak extra bytes or None)."""
    out, seed, leaves = forward()
    gc.collect()
    base = peak_memory.reset() if track_peak else 0
    start = time.perf_counter()
    out.backward(seed)
    seconds = time.perf_counter() - start
    peak = peak_memory.peak() - base if track_peak else None
    for leaf in leaves:
        leaf.grad = None
    return seconds, peak


def run_case(case: Case, repeat: int, track_peak: bool) -> Result:
    """Alternate plain and relevance backward: 1 warm-up each, then ``repeat``."""
    samples = {"plain": [], "relevance": []}
    for i in range(1 + repeat):
        for name in ("plain", "relevance"):
            sample = measure_backward(getattr(case, name), track_peak)
            if i > 0:
                samples[name].append(sample)

    def median(name, k):
        values = [s[k] for s in samples[name]]
        return None if values[0] is None else statistics.median(values)

    return Result(
        case,
        plain_s=median("plain", 0),
        relevance_s=median("relevance", 0),
        plain_peak=median("plain", 1),
        relevance_peak=median("relevance", 1),
    )


# ----------------------------------------------------------------------------
# cases
# ----------------------------------------------------------------------------
def linear_cases(rows: int, width: int) -> list[Case]:
    x = torch.randn(rows, width)
    weight = torch.randn(width, width) / width**0.5
    bias = torch.randn(width)
    seed = torch.randn(rows, width)
    weight_g = weight.clone().requires_grad_()
    bias_g = bias.clone().requires_grad_()

    def leaf():
        return x.detach().requires_grad_()

    def plain_x_only():
        xl = leaf()
        return F.linear(xl, weight, bias), seed, [xl]

    def plain_with_weight():
        xl = leaf()
        return F.linear(xl, weight_g, bias_g), seed, [xl, weight_g, bias_g]

    def relevance():
        xl = leaf()
        return lrp.linear(xl, weight, bias), seed, [xl]

    return [
        Case("linear", "Epsilon", "F.linear, grad of x only", plain_x_only, relevance),
        Case("linear", "Epsilon", "F.linear, grads of x, W, b", plain_with_weight, relevance),
    ]


def _plain_scatter(src, index, groups, reduce, path):
    """The native-torch scatter with autograd: PyG's ``utils.scatter`` (pure
    torch on CPU), or ``Tensor.scatter_reduce`` for the extra mean row."""
    if path == "pyg":
        return pyg_scatter(src, index, 0, groups, reduce=reduce)
    full = index.view(-1, 1).expand_as(src)
    return src.new_zeros(groups, src.shape[1]).scatter_reduce(0, full, src, reduce, include_self=False)


# What pyg_scatter runs on CPU for each reduce, shown in the table.
PYG_NATIVE = {
    "sum": "pyg scatter = scatter_add_",
    "mean": "pyg scatter = scatter_add_ / count",
    "max": "pyg scatter = scatter_reduce_('amax', include_self=False)",
    "min": "pyg scatter = scatter_reduce_('amin', include_self=False)",
}


def scatter_cases(edges: int, width: int, groups: int, with_torch_scatter: bool) -> list[Case]:
    src = torch.randn(edges, width)
    index = torch.randint(0, groups, (edges,))
    seed = torch.randn(groups, width)

    def case(reduce, backend, path="pyg"):
        def plain():
            s = src.detach().requires_grad_()
            return _plain_scatter(s, index, groups, reduce, path), seed, [s]

        def relevance():
            s = src.detach().requires_grad_()
            out = lrp.scatter(s, index, 0, groups, reduce=reduce, backend=backend)
            return out, seed, [s]

        variant = reduce if backend == "torch" else f"{reduce} [{backend}]"
        name = PYG_NATIVE[reduce] if path == "pyg" else f"Tensor.scatter_reduce({reduce!r}, include_self=False)"
        return Case("scatter", variant, name, plain, relevance)

    cases = [case(reduce, "torch") for reduce in REDUCES]
    # torch's own scatter_reduce('mean') has a much slower backward than PyG's sum / count
    cases.append(case("mean", "torch", path="scatter_reduce"))
    if with_torch_scatter:
        cases += [case(reduce, "torch_scatter") for reduce in REDUCES]
    return cases


# ----------------------------------------------------------------------------
# output
# ----------------------------------------------------------------------------
def _ratio(a, b) -> str:
    if a is None or b is None or b <= 0:
        return "n/a"
    return f"{a / b:.2f}"


def _mib(v) -> str:
    return "n/a" if v is None else f"{v / MIB:.1f}"


def format_table(results: list[Result]) -> str:
    header = (
        "op", "reduce/rule", "plain ms", "relevance ms", "time ratio",
        "plain peak MiB", "relevance peak MiB", "mem ratio", "plain reference",
    )
    rows = [header]
    for r in results:
        rows.append((
            r.case.op,
            r.case.variant,
            f"{r.plain_s * 1e3:.1f}",
            f"{r.relevance_s * 1e3:.1f}",
            _ratio(r.relevance_s, r.plain_s),
            _mib(r.plain_peak),
            _mib(r.relevance_peak),
            _ratio(r.relevance_peak, r.plain_peak),
            r.case.plain_name,
        ))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    left = {0, 1, len(header) - 1}  # text columns; numbers are right-aligned

    def line(row):
        cells = [c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))]
        return "  ".join(cells).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(rows[0]), rule] + [line(row) for row in rows[1:]])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeat", type=int, default=5, help="timed repetitions per variant (default 5)")
    parser.add_argument("--small", action="store_true", help="row counts / 100, for a quick check")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--out", default=None,
                        help="also write the table as markdown there (e.g. benchmarks/results/functional_backward.md)")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be >= 1")

    torch.manual_seed(args.seed)
    scale = 100 if args.small else 1
    rows, edges, groups = 100_000 // scale, 1_000_000 // scale, 50_000 // scale
    track_peak = peak_memory.can_track()

    setup = [
        f"torch {torch.__version__}, {platform.machine()}, {torch.get_num_threads()} threads, "
        f"float32, CPU, median of {args.repeat} (+1 warm-up), backward only",
        f"linear: x [{rows}, 256] -> 256 (bias); scatter: src [{edges}, 64], {groups} groups along dim 0",
        "torch_scatter: " + ("installed" if HAVE_TORCH_SCATTER else "not installed, its rows skipped"),
    ]
    if not track_peak:
        setup.append("peak memory: /proc/self/clear_refs not usable here, reported as n/a")
    print("\n".join(setup) + "\n")

    cases = linear_cases(rows, 256) + scatter_cases(edges, 64, groups, HAVE_TORCH_SCATTER)
    results = [run_case(case, args.repeat, track_peak) for case in cases]
    table = format_table(results)
    print(table)
    if args.out:
        command = " ".join(["python benchmarks/functional_backward.py"] + list(sys.argv[1:] if argv is None else argv))
        date = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        text = (f"# Relevance backward of functional ops against the plain backward\n\n- command: `{command}`\n"
                f"- date: {date}\n- Python {platform.python_version()}, {os.cpu_count()} CPU cores\n"
                + "".join(f"- {line}\n" for line in setup) + f"\n```text\n{table}\n```\n")
        with open(args.out, "w") as f:
            f.write(text)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
