r"""Where the time of one LRP explanation goes, next to Saliency's.

``cost.py`` measures LRP against Saliency through the same ``Explainer``
call. This script splits LRP's time into the parts of that call, on the
same datasets and models (``common.py``; quick training: cost does not
depend on the weights), one instance each (the first of ``faithfulness.py``'s
sample). The calls alternate call by call for ``--rounds`` rounds after one
warm-up each, so that all see the same state of the machine; the table shows
medians.

* ``Saliency``: Captum's Saliency through PyG's ``Explainer``, the
  reference of the cost bar;
* ``LRP``: ``lrp.LRP()`` through the same ``Explainer`` call;
* ``LRP, no Explainer``: ``explainers.core.explain_rows``, what
  ``LRP.forward`` runs (node level: the target's computation subgraph, the
  check forward on the full graph, the relevance pass on the subgraph);
* ``pass``: one relevance pass (``explainers.core.Pass``) on the whole
  input, seeded at the target: opening it, the relevance forward, the
  relevance backward with its accounting;
* ``pass, forward only``: the pass opened and its relevance forward;
* ``pass, opened only``: the pass opened and closed (rules resolved, model
  prepared, module hooks set and removed);
* ``plain fwd+bwd``: the model with gradients on the same input, seeded at
  the target;
* ``plain fwd``: the model under ``torch.no_grad()``;
* ``fwd, do-nothing mode``: the model with gradients on, under a
  ``TorchFunctionMode`` whose ``__torch_function__`` only calls the function:
  the least any design that routes the forward's torch calls through Python
  can cost.

Two ratios estimate what the relevance pass costs over the plain model:
``relevance fwd / plain fwd`` = (``pass, forward only`` - ``pass, opened
only``) / ``plain fwd``, and ``relevance bwd / plain bwd`` = (``pass`` -
``pass, forward only``) / (``plain fwd+bwd`` - ``plain fwd``); the
relevance backward includes its accounting (absorbed, lost, edge relevance).

``fwd allowed by the bar``: the relevance forward that would bring ``LRP``
to 1.3x ``Saliency`` with everything else unchanged, 1.3 ``Saliency`` -
(``LRP`` - relevance fwd). Where it is below ``fwd, do-nothing mode``, no
routing of the forward through ``__torch_function__`` can meet the bar; the
forward would have to be captured once and replayed without the mode. The
column is exact for graph-level tasks (LRP's pass runs on the same input as
``pass``); for node-level ones LRP runs on the target's subgraph while
``pass`` runs on the full graph, so it only indicates.

``torch calls``: the torch functions one relevance forward calls while the
mode is active, and how many of them get tensors that carry relevance (the
rest are bookkeeping: shapes, degrees, indices). Every one of them runs
through the mode's Python ``__torch_function__``.

Usage::

    python benchmarks/cost_parts.py           # all datasets and models (~3 min)
    python benchmarks/cost_parts.py --quick   # BA-Shapes and BA-2Motifs, GCN and GIN, fewer rounds

Writes ``benchmarks/results/cost_parts.md`` (``--out`` to change).
"""
from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
from common import DATASETS, MODELS, RESULTS, fmt, make_instances, make_task, model_config, table, train  # noqa: E402
from cost import plain_fwd_bwd, seconds_per_call  # noqa: E402
from torch.overrides import TorchFunctionMode  # noqa: E402
from torch_geometric.explain import Explainer  # noqa: E402
from torch_geometric.explain.algorithm import CaptumExplainer  # noqa: E402

import torch_geometric_lrp as lrp  # noqa: E402
from torch_geometric_lrp import mode as relevance_mode  # noqa: E402
from torch_geometric_lrp.explainers.core import Pass, Settings, explain_rows  # noqa: E402
from torch_geometric_lrp.explainers.targets import check_target  # noqa: E402

PARTS = ("Saliency", "LRP", "LRP, no Explainer", "pass", "pass, forward only", "pass, opened only",
         "plain fwd+bwd", "plain fwd", "fwd, do-nothing mode")


class DoNothingMode(TorchFunctionMode):
    """Routes every torch call through Python and does nothing else."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def calls_of(trained, inst) -> dict:
    """The timed calls of one instance, by part."""
    model, task = trained.model, trained.task
    cfg = model_config(task)

    def explainer(algorithm):
        return Explainer(model, algorithm=algorithm, explanation_type="phenomenon",
                         node_mask_type="attributes", edge_mask_type="object", model_config=cfg)

    saliency, lrp_explainer = explainer(CaptumExplainer("Saliency")), explainer(lrp.LRP())
    x, edge_index, kwargs, index = inst.x, inst.edge_index, inst.kwargs, inst.index
    target = inst.target
    klass = int(target[index])
    config = lrp_explainer.model_config
    settings = Settings(task_level=config.task_level, mode=config.mode, return_type=config.return_type)
    rows = torch.tensor([index])

    def through(e):
        return lambda: e(x, edge_index, target=target, index=index, **kwargs)

    def pass_(stop: str):
        def run():
            with Pass(model, settings) as p:
                if stop == "opened":
                    return
                p.forward(x, edge_index, kwargs)
                if stop == "forward":
                    return
                seed = torch.zeros_like(p.logits)
                seed[index, klass] = p.logits.detach()[index, klass]
                p.relevance(seed)
        return run

    def plain_fwd():
        with torch.no_grad():
            model(x, edge_index, **kwargs)

    def do_nothing_fwd():
        with DoNothingMode():
            model(x.detach().requires_grad_(), edge_index, **kwargs)

    return {
        "Saliency": through(saliency),
        "LRP": through(lrp_explainer),
        "LRP, no Explainer": lambda: explain_rows(model, x, edge_index, kwargs, rows,
                                                  check_target(target, config.mode), settings),
        "pass": pass_("all"),
        "pass, forward only": pass_("forward"),
        "pass, opened only": pass_("opened"),
        "plain fwd+bwd": plain_fwd_bwd(model, inst),
        "plain fwd": plain_fwd,
        "fwd, do-nothing mode": do_nothing_fwd,
    }


def torch_calls(model, inst) -> tuple[int, int]:
    """(all, relevance-carrying) torch calls of one relevance forward."""
    counts = [0, 0]
    route = relevance_mode.RelevanceMode.__torch_function__

    def counted(self, func, types, args=(), kwargs=None):
        counts[0] += 1
        carries = relevance_mode._scan(args) == 2 or relevance_mode._scan((kwargs or {}).values()) == 2
        counts[1] += carries
        return route(self, func, types, args, kwargs)

    relevance_mode.RelevanceMode.__torch_function__ = counted
    try:
        with Pass(model, Settings()) as p:
            p.forward(inst.x, inst.edge_index, inst.kwargs)
    finally:
        relevance_mode.RelevanceMode.__torch_function__ = route
    return counts[0], counts[1]


def measure(calls: dict, rounds: int) -> dict:
    """Median seconds per call of each part, the parts alternating (after one warm-up each)."""
    for fn in calls.values():
        fn()  # warm-up
    return dict(zip(calls, seconds_per_call([[fn] for fn in calls.values()], rounds)))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="BA-Shapes and BA-2Motifs only, 50 rounds")
    parser.add_argument("--rounds", type=int, default=None, help="alternating rounds (default 200)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=RESULTS / "cost_parts.md")
    args = parser.parse_args(argv)
    argv = sys.argv[1:] if argv is None else argv
    rounds = args.rounds or (50 if args.quick else 200)
    datasets = ("BA-Shapes", "BA-2Motifs") if args.quick else DATASETS
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", category=UserWarning)
    started = time.perf_counter()
    lines, calls_lines = [], []
    for dataset in datasets:
        task = make_task(dataset, args.seed)
        for kind in MODELS:
            trained = train(task, kind, seed=args.seed, quick=True)
            inst = make_instances(trained, 1, seed=args.seed)[0]
            t = measure(calls_of(trained, inst), rounds)
            sal = t["Saliency"]
            forward = t["pass, forward only"] - t["pass, opened only"]
            backward = t["pass"] - t["pass, forward only"]
            allowed = 1.3 * sal - (t["LRP"] - forward)
            lines.append([dataset, kind] + [fmt(1000 * t[k], 2) for k in PARTS] +
                         [fmt(t["LRP"] / sal, 2), fmt(forward / t["plain fwd"], 1),
                          fmt(backward / (t["plain fwd+bwd"] - t["plain fwd"]), 1), fmt(1000 * allowed, 2)])
            total, carrying = torch_calls(trained.model, inst)
            calls_lines.append([dataset, kind, str(total), str(carrying)])
            print(f"{dataset} / {kind}: " + ", ".join(f"{k} {1000 * v:.2f} ms" for k, v in t.items()), flush=True)
    doc = common.header("Cost: where the time of one explanation goes", argv, args.seed,
                        [f"- {rounds} alternating rounds per model, one instance; runtime "
                         f"{(time.perf_counter() - started) / 60:.1f} min", "",
                         "What is measured: see the docstring of `benchmarks/cost_parts.py`. Milliseconds per "
                         "call (medians); node-level `pass` rows run on the full graph.", "",
                         "## Parts of one explanation", ""])
    doc += "\n" + table(["dataset", "model", *(f"{k} ms" for k in PARTS), "LRP / Saliency",
                         "relevance fwd / plain fwd", "relevance bwd / plain bwd", "fwd allowed by the bar ms"], lines)
    doc += "\n\n## Torch calls of one relevance forward\n\n" + table(
        ["dataset", "model", "torch calls through the mode", "of which carry relevance"], calls_lines) + "\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(doc)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
