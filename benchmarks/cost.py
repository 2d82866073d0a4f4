r"""Cost of an explanation: seconds and peak memory, LRP vs PyG's explainers,
and LRP's scaling with graph size next to one plain forward + backward.

Part 1: per explanation, on the trained models of ``faithfulness.py``
-------------------------------------------------------------------
The datasets, models, seeded training and instance sample of
``common.py`` (the same code and seed as ``faithfulness.py``, so the same
weights: training is deterministic on CPU with a fixed thread count). For every
dataset x model and method, ``--instances`` explanations (default 10) are
timed through PyG's ``Explainer`` after one untimed warm-up call (which
also converts the model for LRP): ``--rounds`` rounds (default 3) over the
instances, call after call as in a user's loop; the table shows the median
of all these calls.

* ``plain fwd+bwd``: the reference: ``model(x, edge_index)`` and
  ``out[index, class].backward()`` with ``x.requires_grad``: what one gradient
  costs.
* ``LRP default`` / ``epsilon`` / ``gamma`` / ``alpha-beta``: ``lrp.LRP`` with
  that composite (signed masks; the view does not change the cost; node-level
  tasks: the pass runs on the target's computation subgraph, ``LRP``'s
  default, with the same masks as on the full graph).
* ``LRP explain_nodes (batched)``: ``lrp.explain_nodes`` on all the
  instances of ``faithfulness.py``'s sample at once (40 by default; each
  target on its own copy of its computation subgraph, 64 per pass): the
  call's time divided by the number of instances (median of 3 calls). Node
  level only.
* ``GNNExplainer`` (100 epochs), ``PGExplainer`` (30 epochs; the one-off
  training is in ``one-off s``, per-explanation time excludes it), Captum's
  ``Saliency``, ``InputXGradient``, ``IntegratedGradients`` (50 steps,
  ``internal_batch_size=1`` as PyG sets it) and ``GuidedBackprop``.

``x plain`` = method time / plain fwd+bwd time; ``GNNExpl. / method`` =
GNNExplainer time / method time (the speed-up over GNNExplainer).

The summary (LRP against Saliency and GNNExplainer, the issue's cost bars)
is measured apart: ``plain fwd+bwd``, ``LRP default``, ``Saliency`` and
``GNNExplainer`` alternate call by call over the timed instances for
``--pair-rounds`` rounds (default 3), and its ratios are of the medians.
Methods timed one after another differ by up to a third even where they do
the same work (Saliency, InputXGradient and GuidedBackprop are each one
forward and backward; the first LRP row of a model can take half as long
again as the next), so a ratio of two separate rows would be that noisy.

Part 2: LRP's scaling with graph size
-------------------------------------
Barabasi-Albert graphs (``barabasi_albert_graph(n, 5)``: about ``10 n``
directed edges) from 10k to 1M edges, 64 random node features, a 3-layer GCN
(``GCNConv`` 64 -> 64 -> 64 -> 4 with ReLU; random weights: cost does not
depend on training). For each size, alternately and after one warm-up each:

* ``plain fwd+bwd`` as above (one target node);
* ``LRP (Explainer)``: ``Explainer(model, algorithm=lrp.LRP(subgraph=False),
  ...)`` for one target node on the full graph (what a user calls, with the
  pass kept on the full graph: with the default ``subgraph=True`` the pass
  covers only the target's 4-hop neighbourhood, which in these graphs is
  most of the graph for some targets and a small part for others, so its
  cost says little about scaling);
* ``LRP (relevance pass)``: the bare relevance pass of the model on the full
  graph (``explainers.core.on_graph``: one forward and one backward, edge
  relevance tracked),
  without ``Explainer``'s bookkeeping.

Peak memory
-----------
Linux only: before each memory call the script writes ``5`` to
``/proc/self/clear_refs`` (resetting the peak resident set, VmHWM, to the
current one) and reads VmRSS; ``peak MiB`` is VmHWM after the call minus that
base: the most extra memory the call held at once. For the small graphs of
part 1 this is dominated by allocator noise (a few MiB); the ratios of part 2
are the meaningful ones. ``n/a`` where /proc is not available. Time and
memory come from separate calls: timed calls run back to back, with no
garbage collection or page trimming in between (malloc keeps freed pages
and the caches stay warm, as in any steady loop; a collection before each
timed call would add about the same cold-cache time, 1 to 2 ms here, to
every method and make small-graph ratios look closer to 1 than they are);
before each memory call the script collects garbage and returns malloc's
free pages to the system (glibc ``malloc_trim(0)``), so that the call's
peak is not hidden by pages an earlier call left resident.

Timings depend on the machine and on what else runs on it; compare ratios
within one run. Default: one torch thread (``--threads``), so that a busy
second core does not distort the ratios.

Usage::

    python benchmarks/cost.py                  # full run (~15 min on 2 CPU cores)
    python benchmarks/cost.py --quick          # smoke run (~2 min): fewer instances, sizes up to 100k edges
    python benchmarks/cost.py --part scaling --max-edges 3000000

Writes ``benchmarks/results/cost.md`` (``--out`` to change).
"""
from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import gc
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch_geometric.explain import Explainer
from torch_geometric.explain.config import ModelMode
from torch_geometric.nn import GCNConv
from torch_geometric.utils import barabasi_albert_graph

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
from common import (  # noqa: E402
    DATASETS, MODELS, RESULTS, can_track_peak, explain, fmt, make_instances, make_methods, make_task,
    peak, reset_peak, set_seed, table, train,
)
import torch_geometric_lrp as lrp  # noqa: E402
from torch_geometric_lrp.explainers.core import Settings, on_graph  # noqa: E402

LOSES_TEXT = """\
Why: PGExplainer's time per explanation is one forward of its trained MLP and
the model; it excludes its one-off training (`one-off s` above), which LRP
does not need. The gradient methods (Saliency, InputXGradient, GuidedBackprop)
cost one plain forward and backward. LRP routes every torch op of the forward
through Python (its fixed per-call cost), runs each linear map once more per
stream its rule modifies (the default's `Gamma` layer: one extra forward),
and, on a node's computation subgraph, runs one check forward without
gradients that proves the subgraph gives the full graph's answer. The
`LRP / plain fwd+bwd` column measures the sum. On graph-level tasks with small
graphs (BA-2Motifs) the fixed cost dominates. `lrp.explain_nodes` removes
most of it by explaining many targets per pass."""

MIB = 2 ** 20
TRACK = False


try:
    _LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    if not hasattr(_LIBC, "malloc_trim"):  # glibc only
        _LIBC = None
except OSError:
    _LIBC = None


def seconds_per_call(groups: list[list[Callable[[], object]]], rounds: int) -> list[float]:
    """Seconds per call of each group of calls (one group per method, one call
    per instance): median over ``rounds`` rounds in which the groups
    alternate call by call (instance 1 of every group, then instance 2, ...).
    The calls run back to back, as in a user's loop over instances: a garbage
    collection or a return of free pages before each call would add the same
    cold-cache time to every method and bring their ratios closer to 1."""
    gc.collect()
    times: list[list[float]] = [[] for _ in groups]
    for _ in range(rounds):
        for calls in zip(*groups):
            for k, fn in enumerate(calls):
                start = time.perf_counter()
                fn()
                times[k].append(time.perf_counter() - start)
    return [median(t) for t in times]


def peak_mib(fn: Callable[[], object]) -> Optional[float]:
    """Peak extra MiB of one call of ``fn``, measured after freed pages went
    back to the system (``None`` where peaks cannot be tracked). Separate
    from the timed calls."""
    if not TRACK:
        return None
    gc.collect()
    if _LIBC is not None:
        _LIBC.malloc_trim(0)
    base = reset_peak()
    fn()
    return (peak() - base) / MIB


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def plain_fwd_bwd(model, inst) -> Callable[[], None]:
    def run():
        x = inst.x.detach().clone().requires_grad_()
        out = model(x, inst.edge_index, **inst.kwargs)
        out[inst.index, int(inst.target[inst.index])].backward()
    return run


# ---------------------------------------------------------------------------
# Part 1
# ---------------------------------------------------------------------------

def per_explanation(dataset: str, kind: str, args, log) -> tuple[str, dict]:
    task = make_task(dataset, args.seed)
    trained = train(task, kind, seed=args.seed, quick=args.quick)
    model = trained.model
    # the instances of faithfulness.py (the same seed and count draw the same ones), the first few timed
    instances = make_instances(trained, args.sample, seed=args.seed)
    timed = instances[: args.instances]
    methods = make_methods(trained, instances, gnn_epochs=args.gnn_epochs, pg_epochs=args.pg_epochs,
                           seed=args.seed)
    keep = {"LRP default (signed)": "LRP default", "LRP epsilon (signed)": "LRP epsilon",
            "LRP gamma (signed)": "LRP gamma", "LRP alpha-beta (signed)": "LRP alpha-beta"}
    rows: list[tuple[str, float, Optional[float], float]] = []  # name, seconds, MiB, one-off

    def run_rows(name, make_fn, one_off=0.0):
        calls = [make_fn(inst) for inst in timed]
        calls[0]()  # warm-up
        (seconds,) = seconds_per_call([calls], args.rounds)
        rows.append((name, seconds, median([peak_mib(fn) for fn in calls]), one_off))
        log(f"    {name:<30} {1000 * rows[-1][1]:9.2f} ms")

    run_rows("plain fwd+bwd", lambda inst: plain_fwd_bwd(model, inst))
    for m in methods:
        if m.base is not None or (m.family == "LRP" and m.name not in keep):
            continue
        name = keep.get(m.name, m.name)
        run_rows(name, lambda inst, m=m: (lambda: explain(m, inst, seed=args.seed)), m.setup_seconds)
        if name == "LRP default" and task.level == "node":
            nodes = torch.tensor([i.index for i in instances])
            d = task.data
            call = lambda: lrp.explain_nodes(model, d.x, d.edge_index, nodes, target=instances[0].target[nodes],  # noqa
                                             batch_size=64, progress=False)
            call()
            rows.append(("LRP explain_nodes (batched)", seconds_per_call([[call]], 3)[0] / len(instances),
                         median([peak_mib(call) for _ in range(3)]), 0.0))
            log(f"    {'LRP explain_nodes (batched)':<30} {1000 * rows[-1][1]:9.2f} ms")
    # The summary (the cost bars: LRP over Saliency and GNNExplainer over LRP)
    # comes from calls that alternate, so that all see the same state of the
    # machine: the rows above are timed one method after another, and
    # equivalent methods differ there by up to a third.
    by_name = {m.name: m for m in methods}
    alternating = None
    if all(name in by_name for name in ("LRP default (signed)", "Saliency", "GNNExplainer")):
        group = {"plain fwd+bwd": [plain_fwd_bwd(model, inst) for inst in timed]}
        for name in ("LRP default (signed)", "Saliency", "GNNExplainer"):
            m = by_name[name]
            group[name] = [lambda inst=inst, m=m: explain(m, inst, seed=args.seed) for inst in timed]
        alternating = dict(zip(group, seconds_per_call(list(group.values()), args.pair_rounds)))
        log("    alternating: " + ", ".join(f"{k} {1000 * v:.2f} ms" for k, v in alternating.items()))
    plain = rows[0][1]
    gnn = next(r[1] for r in rows if r[0] == "GNNExplainer")
    lines = [[name, fmt(1000 * s, 2), fmt(s / plain, 1), fmt(gnn / s, 1),
              fmt(mib, 1) + (" (whole call)" if "batched" in name and mib is not None else ""),
              fmt(one_off, 1) if one_off else ""] for name, s, mib, one_off in rows]
    text = table(["method", "ms/expl.", "x plain", "GNNExpl. / method", "peak MiB", "one-off s"], lines)
    summary = {name: s for name, s, _, _ in rows}
    summary["alternating"] = alternating
    n_nodes = task.data.num_nodes if task.level == "node" else task.graphs[0].num_nodes
    n_edges = task.data.num_edges if task.level == "node" else task.graphs[0].num_edges
    title = (f"### {dataset} / {kind}\n\n{len(timed)} explanations timed; graph: {n_nodes} nodes, {n_edges} edges"
             f"{' (one graph of the set)' if task.level == 'graph' else ''}; test accuracy "
             f"{trained.test_acc:.3f}.\n\n")
    return title + text, summary


# ---------------------------------------------------------------------------
# Part 2
# ---------------------------------------------------------------------------

class GCN3(torch.nn.Module):
    def __init__(self, features: int = 64, hidden: int = 64, classes: int = 4):
        super().__init__()
        self.convs = torch.nn.ModuleList([GCNConv(features, hidden), GCNConv(hidden, hidden),
                                          GCNConv(hidden, classes)])

    def forward(self, x, edge_index):
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index)
            if i < len(self.convs) - 1:
                x = F.relu(x)
        return x


def _ratio(a, b) -> str:
    return "n/a" if a is None or b is None or b == 0 else f"{a / b:.2f}"


def scaling_row(target_edges: int, args, log) -> list[str]:
    """One size: plain fwd+bwd, LRP through Explainer and the bare relevance
    pass, alternately, after one warm-up each; medians of ``args.repeat``."""
    set_seed(args.seed)
    n = max(target_edges // 10, 10)
    edge_index = barabasi_albert_graph(n, 5)
    x = torch.randn(n, 64)
    model = GCN3().eval()
    index = int(torch.randint(0, n, (1,)))
    with torch.no_grad():
        target = model(x, edge_index).argmax(-1)
    explainer = Explainer(model, algorithm=lrp.LRP(subgraph=False), explanation_type="phenomenon",
                          node_mask_type="attributes", edge_mask_type="object",
                          model_config=dict(mode="multiclass_classification", task_level="node", return_type="raw"))
    settings = Settings(mode=ModelMode.multiclass_classification)
    inst = common.Instance(x, edge_index, index, target, {}, None, None, None, None, 0)
    calls = {
        "plain": plain_fwd_bwd(model, inst),
        "explainer": lambda: explainer(x, edge_index, target=target, index=index),
        "pass": lambda: on_graph(model, x, edge_index, {}, torch.tensor([index]), target[index].view(1), settings),
    }
    reps = args.repeat if target_edges <= 300_000 else max(3, args.repeat // 2)
    for fn in calls.values():
        fn()  # warm-up
    t = dict(zip(calls, seconds_per_call([[fn] for fn in calls.values()], reps)))  # alternating
    m = {k: median([peak_mib(fn) for _ in range(reps)]) for k, fn in calls.items()}
    log(f"  {edge_index.shape[1]:>9,} edges: plain {1000 * t['plain']:.1f} ms, Explainer "
        f"{1000 * t['explainer']:.1f} ms, pass {1000 * t['pass']:.1f} ms; peak MiB {m}")
    return [f"{edge_index.shape[1]:,}", f"{n:,}", fmt(1000 * t["plain"], 1), fmt(1000 * t["explainer"], 1),
            fmt(1000 * t["pass"], 1), _ratio(t["explainer"], t["plain"]), _ratio(t["pass"], t["plain"]),
            fmt(m["plain"], 1), fmt(m["explainer"], 1), fmt(m["pass"], 1),
            _ratio(m["explainer"], m["plain"]), _ratio(m["pass"], m["plain"])]


def scaling(args, log) -> str:
    sizes = [s for s in (10_000, 30_000, 100_000, 300_000, 1_000_000, 3_000_000) if s <= args.max_edges]
    lines = [scaling_row(target_edges, args, log) for target_edges in sizes]
    return table(["edges", "nodes", "plain fwd+bwd ms", "LRP Explainer ms", "LRP pass ms", "time ratio Explainer",
                  "time ratio pass", "plain peak MiB", "Explainer peak MiB", "pass peak MiB",
                  "mem ratio Explainer", "mem ratio pass"], lines)


def main(argv=None) -> None:
    global TRACK
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: shorter training, 3 instances, fewer epochs, sizes up to 100k edges")
    parser.add_argument("--part", choices=("all", "methods", "scaling"), default="all")
    parser.add_argument("--instances", type=int, default=None, help="explanations timed per model (default 10)")
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--max-edges", type=int, default=None, help="largest scaling graph (default 1,000,000)")
    parser.add_argument("--repeat", type=int, default=5, help="repetitions per scaling size (median)")
    parser.add_argument("--pair-rounds", type=int, default=3,
                        help="rounds of LRP, Saliency, GNNExplainer and plain alternating, for the summary (medians)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="timed rounds over the instances per method (median of all calls)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=RESULTS / "cost.md")
    args = parser.parse_args(argv)
    argv = sys.argv[1:] if argv is None else argv
    args.instances = args.instances or (3 if args.quick else 10)
    args.sample = 8 if args.quick else 40  # faithfulness.py's instance sample (PGExplainer trains on it)
    args.gnn_epochs, args.pg_epochs = (30, 10) if args.quick else (100, common.PG_EPOCHS)
    args.max_edges = args.max_edges or (100_000 if args.quick else 1_000_000)
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", category=UserWarning)
    TRACK = can_track_peak()
    log = lambda s: print(s, flush=True)  # noqa: E731

    t0 = time.perf_counter()
    sections, speedups = [], []
    losses: list[str] = []
    if args.part in ("all", "methods"):
        sections.append("## Per explanation, on the trained models\n")
        for dataset in args.datasets:
            for kind in args.models:
                log(f"{dataset} / {kind}")
                text, s = per_explanation(dataset, kind, args, log)
                sections.append(text)
                cheaper = [f"{name} {1000 * sec:.2f} ms" for name, sec in s.items() if name != "alternating"
                           and name != "plain fwd+bwd" and not name.startswith("LRP") and sec < s["LRP default"]]
                if cheaper:
                    losses.append(f"- {dataset} / {kind} (LRP default {1000 * s['LRP default']:.2f} ms): "
                                  + ", ".join(cheaper))
                a = s["alternating"]
                if a is not None:
                    lrp_s, gnn_s = a["LRP default (signed)"], a["GNNExplainer"]
                    speedups.append([dataset, kind, fmt(1000 * lrp_s, 2), fmt(1000 * gnn_s, 1), fmt(gnn_s / lrp_s, 1),
                                     fmt(gnn_s / s["LRP explain_nodes (batched)"], 1)
                                     if "LRP explain_nodes (batched)" in s else "n/a",
                                     fmt(lrp_s / a["plain fwd+bwd"], 1), fmt(lrp_s / a["Saliency"], 2)])
    if args.part in ("all", "scaling"):
        log("scaling")
        sections.append("## LRP's scaling with graph size (3-layer GCN, 64 features, one target node)\n\n"
                        "Ratios are LRP / plain forward+backward of the same model in the same run.\n\n"
                        + scaling(args, log))
    runtime = time.perf_counter() - t0
    extra = [f"- runtime of this run: {runtime / 60:.1f} min; peak memory tracking: "
             f"{'VmHWM via /proc/self/clear_refs' if TRACK else 'not available'}",
             f"- per-explanation part: {args.instances} explanations per model, GNNExplainer epochs "
             f"{args.gnn_epochs}, PGExplainer epochs {args.pg_epochs}{'; QUICK smoke run' if args.quick else ''}",
             "", "What is measured: see the docstring of `benchmarks/cost.py`.", ""]
    if speedups:
        extra += ["## Summary: LRP (default composite, one explanation per `Explainer` call) vs GNNExplainer "
                  "and Saliency", "",
                  "`speed-up`: GNNExplainer's time / LRP's; `LRP / Saliency`: LRP's time over Saliency's, "
                  "both through the same `Explainer` call. LRP, Saliency, GNNExplainer and the plain forward and "
                  "backward are timed alternately call by call for this table "
                  f"({args.pair_rounds} rounds over the instances; medians), so that all see the same "
                  "state of the machine; the per-model tables below time one method after another "
                  "(Saliency is one plain forward and backward on the "
                  "full graph; LRP one forward on the targets' subgraph with its check forward, one "
                  "relevance forward and backward there).", "",
                  table(["dataset", "model", "LRP ms/expl.", "GNNExplainer ms/expl.", "speed-up",
                         "speed-up, LRP explain_nodes (batched)", "LRP / plain fwd+bwd", "LRP / Saliency"],
                        speedups)]
    if losses:
        extra += ["## Where LRP is not the cheapest", "",
                  "Methods that took less time per explanation than `LRP default` on the same model "
                  "(regenerated on every run):", "", *losses, "", LOSES_TEXT, ""]
    doc = common.header("Cost: time and memory per explanation", argv, args.seed, extra)
    doc += "\n" + "\n".join(sections)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(doc)
    log(f"wrote {args.out} in {runtime / 60:.1f} min")


if __name__ == "__main__":
    main()
