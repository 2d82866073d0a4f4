r"""Which LRP rule, and which default composite: layer-level rules against
gradient explainers on ground-truth datasets, over several training seeds.

For each dataset of ``common.py`` (BA-Shapes, Tree-Cycles, Tree-Grid,
Infection, BA-2Motifs), each model kind (GCN, GIN: 3 message-passing layers
``convs.0``-``convs.2`` and a ``head``) and each training seed in ``--seeds``,
a model is trained, ``--instances`` predictions are explained and every
explanation is scored against the ground truth:

* **LRP, one rule everywhere** (a bare ``Rule``: it governs every linear map
  of the model, messages and aggregation included): ``Epsilon(1e-6)``,
  ``Gamma(0.25)``, ``Gamma(1)``, ``AlphaBeta(2, 1)``, ``ZPlus()``, ``Flat()``.
* **LRP, candidate default composites** (by qualified layer name; a conv's
  rule also covers its children, e.g. the MLP of a ``GINConv``; the head and
  any pooling get ``Epsilon(1e-6)``):

  - ``old default``: ``Gamma(0.25)`` on ``convs.0`` and ``convs.1``,
    ``Epsilon(1e-6)`` on ``convs.2`` (the op-level default before layer-level
    rules);
  - ``gamma by depth (3, 1, 0)``: ``Gamma(3)``, ``Gamma(1)``, ``Gamma(0)`` =
    ``Epsilon`` (GNN-LRP's choice: gamma decreasing with depth);
  - ``eps input, gamma (1, 0)``: ``Epsilon(1e-6)``, ``Gamma(1)``,
    ``Epsilon``: the input layer sign-aware (Gamma is meant for non-negative
    inputs; the first layer often sees signed features);
  - ``z+ input, gamma (1, 0)``: ``ZPlus()``, ``Gamma(1)``, ``Epsilon``: the
    input layer sign-aware through positive *contributions*;
  - ``eps input, gamma (1, 1)`` and ``z+ input, gamma (1, 1)``: the same
    input rules with ``Gamma(1)`` on the last conv as well.

  ``eps input, gamma (1, 0)`` was the library's default composite before
  this comparison.
* **LRP default** (``rules=None``): the library's default composite as it
  resolves it for the model: ``ZPlus()`` on ``convs.0``, ``Gamma(1)`` on the
  hidden convs, ``Epsilon`` on the head; on the last conv ``Gamma(1)`` where
  a head follows it (it is a hidden layer: ``z+ input, gamma (1, 1)``) and
  ``Epsilon`` where it outputs the class scores (``--no-head``: ``z+ input,
  gamma (1, 0)``).

  LRP runs through the low-level API: ``relevance_pass(model, rules=...)``
  on the full graph, seeded with the logit of the predicted class, and
  ``EdgeRelevance`` for the relevance through each input edge's messages
  (summed over layers).
* **Gradient baselines** through PyG's ``CaptumExplainer`` (``common.py``'s
  ``make_methods(include=['Captum'])``): Saliency, InputXGradient,
  IntegratedGradients, GuidedBackprop, on the same instances and model.

Scores: the **magnitude view** (|relevance|; |attribution| for the signed
Captum methods; Saliency is a magnitude already) against the instance's ground
truth on its computation subgraph: edge AUROC (edge mask) and node AUROC (node
mask, |.| per feature, summed over features), exactly as ``faithfulness.py``
computes them. The signed Captum views are listed too (``(signed)`` rows):
they count as "other explainers" in the comparison, so the bar below is
against the best view of each gradient method.

Per (dataset, model) a cell is the mean over seeds of the per-seed mean over
instances, ``±`` the sample standard deviation over seeds of those per-seed
means. A model "did not learn" when its mean test accuracy over seeds is below
``CHANCE`` (0.6, as in ``faithfulness.py``); averages and the bar are taken
over learned models only.

The dataset and the explained instances are fixed (``--data-seed``); only the
training seed varies, so the spread is the spread of training.

Usage::

    python benchmarks/rules.py                                  # full run
    python benchmarks/rules.py --seeds 0 --instances 5 --datasets BA-Shapes   # smoke run
    python benchmarks/rules.py --no-head   # the last conv outputs the class scores (PyG's BasicGNN layout)

With ``--no-head`` the models have the layout of PyG's ``BasicGNN`` models:
the last conv outputs the class scores (no ReLU after it, no ``Linear``
head), so the rule of the last conv is the rule of the logits; this checks
that the default composite, chosen on models with a head, holds there.

Writes ``benchmarks/results/rules.md`` (``--no-head``:
``benchmarks/results/rules_no_head.md``; ``--out``), rewritten after every
trained model, so a partial run leaves the finished models in it.
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
import warnings
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
from common import (  # noqa: E402
    DATASETS, MODELS, NUM_LAYERS, RESULTS, auroc, explain, fmt, make_instances, make_methods, make_task, nanmean,
    masks_of, table, train,
)

from torch_geometric_lrp.mode import relevance_pass  # noqa: E402
from torch_geometric_lrp.rules import AlphaBeta, Epsilon, Flat, Gamma, Rule, ZPlus  # noqa: E402

from torch_geometric_lrp.explainers.edges import EdgeRelevance  # noqa: E402

CHANCE = 0.6  # a model below this mean test accuracy has not learned the task (as faithfulness.py)
EPS = Epsilon(1e-6)


def composite(first: Rule, middle: Rule, last: Rule, rest: Rule = EPS) -> dict:
    """A composite by depth for ``common.GNN``: ``first`` on ``convs.0`` (and
    its children), ``middle`` on the convs between, ``last`` on the last conv,
    ``rest`` on everything else (head, pooling, the model's own forward)."""
    rules: dict = {torch.nn.Module: rest}
    for layer in range(NUM_LAYERS):
        rule = first if layer == 0 else last if layer == NUM_LAYERS - 1 else middle
        rules[f"convs.{layer}*"] = rule
    return rules


#: name -> rules argument of ``relevance_pass`` (a bare Rule or a composite)
LRP_CONFIGS: dict[str, object] = {
    "LRP ε (1e-6)": EPS,
    "LRP γ (0.25)": Gamma(0.25),
    "LRP αβ (2, 1)": AlphaBeta(2, 1),
    "LRP z+": ZPlus(),
    "LRP flat": Flat(),
    "LRP old default (γ 0.25, 0.25, ε)": composite(Gamma(0.25), Gamma(0.25), EPS),
    "LRP γ by depth (3, 1, 0)": composite(Gamma(3.0), Gamma(1.0), Gamma(0.0)),
    "LRP ε input, γ (1, 0)": composite(EPS, Gamma(1.0), EPS),
    "LRP z+ input, γ (1, 0)": composite(ZPlus(), Gamma(1.0), EPS),
    "LRP ε input, γ (1, 1)": composite(EPS, Gamma(1.0), Gamma(1.0)),
    "LRP z+ input, γ (1, 1)": composite(ZPlus(), Gamma(1.0), Gamma(1.0)),
    "LRP γ (1) everywhere": Gamma(1.0),
    "LRP default (rules=None)": None,
}
COMPOSITES = [n for n, r in LRP_CONFIGS.items() if isinstance(r, dict)]


def lrp_relevance(model: torch.nn.Module, inst: common.Instance, rules) -> tuple[torch.Tensor, torch.Tensor, float]:
    """(node relevance ``[N, F]``, edge relevance ``[E]``, explained logit)
    of one instance under ``rules``, on the full graph."""
    x, edge_index = inst.x, inst.edge_index
    with EdgeRelevance(model, edge_index, x.shape[0]) as edges:
        with relevance_pass(model, rules=rules) as mode:
            x_ = mode.watch(x)
            out = model(x_, edge_index, **inst.kwargs)
            row, cls = inst.index, int(inst.target[inst.index])
            seed = torch.zeros_like(out)
            seed[row, cls] = out[row, cls].detach()
            (node_rel,) = mode.backward(out, seed, [x_])
    return node_rel.detach(), edges.edge.detach().clone(), float(out[row, cls])


def score(inst: common.Instance, node: torch.Tensor, edge: torch.Tensor) -> tuple[float, float]:
    """(edge AUROC, node AUROC) on the instance's computation subgraph;
    ``node`` is a per-node score ``[N]``, ``edge`` a per-edge score ``[E]``."""
    se, sn = inst.sub_edge, inst.sub_node
    return auroc(edge[se], inst.gt_edge[se]), auroc(node[sn], inst.gt_node[sn])


class Results:
    """Per (dataset, kind): per-seed means of each method, test accuracies,
    and LRP diagnostics over all instances."""

    def __init__(self):
        self.edge = defaultdict(lambda: defaultdict(list))   # (dataset, kind) -> method -> [per-seed mean]
        self.node = defaultdict(lambda: defaultdict(list))
        self.ms = defaultdict(list)                          # method -> [ms per explanation]
        self.acc = defaultdict(list)                         # (dataset, kind) -> [(seed, train, test)]
        self.ratio = defaultdict(list)                       # LRP config -> [sum|R_node| / |logit|]
        self.conserved = defaultdict(list)                   # LRP config -> [sum R_node / logit]
        self.nonfinite = defaultdict(int)                    # LRP config -> instances with NaN/inf
        self.failures = defaultdict(list)                    # method -> [message]
        self.methods: list[str] = []

    def add_method(self, name: str) -> None:
        if name not in self.methods:
            self.methods.append(name)

    def learned(self, key) -> bool:
        return statistics.fmean(t for _, _, t in self.acc[key]) >= CHANCE

    @staticmethod
    def cell(v: list) -> str:
        v = [a for a in v if not math.isnan(a)]
        if not v:
            return "n/a"
        spread = statistics.stdev(v) if len(v) > 1 else 0.0
        return f"{statistics.fmean(v):.3f} ± {spread:.3f}"

    def mean(self, table_, key, method) -> float:
        return nanmean(table_[key].get(method, []))


def run_model(res: Results, dataset: str, kind: str, seed: int, task, n_instances: int, data_seed: int, log,
              head: bool = True) -> None:
    trained = train(task, kind, seed=seed, head=head)
    res.acc[(dataset, kind)].append((seed, trained.train_acc, trained.test_acc))
    log(f"{dataset} / {kind} / seed {seed}: train acc {trained.train_acc:.3f}, test acc {trained.test_acc:.3f} "
        f"({trained.seconds:.1f} s)")
    model = trained.model
    instances = make_instances(trained, n_instances, seed=data_seed)
    key = (dataset, kind)

    for name, rules in LRP_CONFIGS.items():
        res.add_method(name)
        edges, nodes, start = [], [], time.perf_counter()
        for inst in instances:
            try:
                node_rel, edge_rel, logit = lrp_relevance(model, inst, rules)
            except Exception as exc:  # noqa: BLE001: a rule that fails is a finding, not a crash
                res.failures[name].append(f"{dataset}/{kind}/seed {seed}: {type(exc).__name__}: {exc}")
                edges.append(float("nan"))
                nodes.append(float("nan"))
                continue
            if not (torch.isfinite(node_rel).all() and torch.isfinite(edge_rel).all()):
                res.nonfinite[name] += 1
            if logit != 0:
                res.ratio[name].append(node_rel.abs().sum().item() / abs(logit))
                res.conserved[name].append(node_rel.sum().item() / logit)
            e, n = score(inst, node_rel.abs().sum(-1).float(), edge_rel.abs().float())
            edges.append(e)
            nodes.append(n)
        res.ms[name].append(1000 * (time.perf_counter() - start) / len(instances))
        res.edge[key][name].append(nanmean(edges))
        res.node[key][name].append(nanmean(nodes))

    methods = make_methods(trained, instances, include=["Captum"], seed=seed)
    cache: dict = {}
    for m in methods:
        if m.base is not None:
            continue  # the abs views are computed below, from the same explanation
        start = time.perf_counter()
        cache[m.name] = [explain(m, inst, seed=data_seed + i) for i, inst in enumerate(instances)]
        name = m.name if m.name == "Saliency" else f"{m.name} (signed)"
        res.ms[name].append(1000 * (time.perf_counter() - start) / len(instances))
    for m in methods:
        name = m.name if (m.abs_view or m.name == "Saliency") else f"{m.name} (signed)"
        res.add_method(name)
        edges, nodes = [], []
        for inst, ex in zip(instances, cache[m.base or m.name]):
            node, edge = masks_of(m, ex)
            e, n = score(inst, node, edge)
            edges.append(e)
            nodes.append(n)
        res.edge[key][name].append(nanmean(edges))
        res.node[key][name].append(nanmean(nodes))
    summary = ", ".join(f"{n.removeprefix('LRP ')} {res.edge[key][n][-1]:.3f}" for n in res.methods)
    log(f"    edge AUROC: {summary}")


def is_lrp(name: str) -> bool:
    return name.startswith("LRP")


def render(res: Results, args, argv, runtime: float, done: bool) -> str:
    keys = list(res.acc)
    learned = [k for k in keys if res.learned(k)]
    others = [m for m in res.methods if not is_lrp(m)]
    lrps = [m for m in res.methods if is_lrp(m)]

    def best_other(table_, key) -> tuple[str, float]:
        vals = {m: res.mean(table_, key, m) for m in others}
        vals = {m: v for m, v in vals.items() if not math.isnan(v)}
        if not vals:
            return "n/a", float("nan")
        m = max(vals, key=vals.get)
        return m, vals[m]

    out = []
    # accuracies
    acc_rows = []
    for k in keys:
        accs = res.acc[k]
        acc_rows.append([k[0], k[1], ", ".join(f"{t:.3f}" for _, _, t in accs),
                         fmt(statistics.fmean(t for _, _, t in accs)),
                         "yes" if res.learned(k) else "**no (at chance)**"])
    out += ["## Trained models", "",
            table(["dataset", "model", "test acc per seed", "mean test acc", "learned"], acc_rows)]

    # one table per dataset
    for dataset in dict.fromkeys(k[0] for k in keys):
        kinds = [k for k in keys if k[0] == dataset]
        cols = ["method"]
        for k in kinds:
            flag = "" if res.learned(k) else " (not learned)"
            cols += [f"{k[1]} edge{flag}", f"{k[1]} node{flag}"]
        rows = []
        for m in res.methods:
            row = [m]
            for k in kinds:
                row += [res.cell(res.edge[k].get(m, [])), res.cell(res.node[k].get(m, []))]
            rows.append(row)
        best = []
        for k in kinds:
            be, ve = best_other(res.edge, k)
            bn, vn = best_other(res.node, k)
            le = max(lrps, key=lambda m: _nz(res.mean(res.edge, k, m)))
            ln = max(lrps, key=lambda m: _nz(res.mean(res.node, k, m)))
            best.append(f"- {k[1]}: best other explainer edge {be} {ve:.3f}, node {bn} {vn:.3f}; best LRP edge "
                        f"{le} {res.mean(res.edge, k, le):.3f}, node {ln} {res.mean(res.node, k, ln):.3f}")
        out += [f"## {dataset}", "", table(cols, rows), *best, ""]

    # summary over learned models
    sum_rows, scores = [], {}
    for m in res.methods:
        e = [res.mean(res.edge, k, m) for k in learned]
        n = [res.mean(res.node, k, m) for k in learned]
        row = [m, fmt(nanmean(e)), fmt(nanmean(n)), fmt(nanmean(e + n))]
        if is_lrp(m):
            gaps_e = [res.mean(res.edge, k, m) - best_other(res.edge, k)[1] for k in learned]
            gaps_n = [res.mean(res.node, k, m) - best_other(res.node, k)[1] for k in learned]
            ok_e = sum(g >= -0.01 for g in gaps_e)
            ok_n = sum(g >= -0.01 for g in gaps_n)
            row += [fmt(min(gaps_e, default=float("nan"))), fmt(min(gaps_n, default=float("nan"))),
                    f"{ok_e}/{len(learned)}", f"{ok_n}/{len(learned)}"]
            scores[m] = (nanmean(e + n), nanmean(e), nanmean(n), ok_e + ok_n, min(gaps_e + gaps_n, default=0))
        else:
            row += ["", "", "", ""]
        ms = res.ms.get(m) or res.ms.get(m.replace(" (abs)", " (signed)"))
        row.append(fmt(statistics.fmean(ms), 1) if ms else "n/a")
        sum_rows.append(row)
    out += ["## Average over learned models", "",
            f"Learned models: {', '.join(f'{d} / {k}' for d, k in learned) or 'none'}. 'gap' is the LRP row minus the "
            "best other explainer (any Captum row, signed or magnitude view) on the same model, per metric; "
            "'within 0.01' counts the learned models where the gap is >= -0.01.", "",
            table(["method", "edge AUROC", "node AUROC", "edge + node", "worst edge gap", "worst node gap",
                   "edge within 0.01", "node within 0.01", "ms/expl."], sum_rows)]
    if scores:
        best = max(scores, key=lambda m: scores[m][0])
        best_c = max((m for m in scores if m in COMPOSITES), key=lambda m: scores[m][0], default=None)
        most = max(scores, key=lambda m: (scores[m][3], scores[m][0]))
        out += [f"**Best LRP configuration overall** (mean of edge and node AUROC over learned models): "
                f"{best} ({scores[best][0]:.3f}; edge {scores[best][1]:.3f}, node {scores[best][2]:.3f})."]
        if best_c:
            out += ["", f"Best composite: {best_c} ({scores[best_c][0]:.3f}; edge {scores[best_c][1]:.3f}, "
                        f"node {scores[best_c][2]:.3f}; within 0.01 of the best other explainer on "
                        f"{scores[best_c][3]}/{2 * len(learned)} (model, metric) pairs, worst gap "
                        f"{scores[best_c][4]:+.3f})."]
        out += ["", f"Most often within 0.01 of the best other explainer: {most} ({scores[most][3]}/"
                    f"{2 * len(learned)} (model, metric) pairs)."]
        out += [""]

    out += [NOTES, ""]

    # diagnostics
    diag = []
    for m in lrps:
        r, c = res.ratio.get(m, []), res.conserved.get(m, [])
        diag.append([m, fmt(statistics.median(r), 2) if r else "n/a", fmt(max(r), 1) if r else "n/a",
                     fmt(statistics.median(c), 3) if c else "n/a", str(res.nonfinite.get(m, 0)),
                     str(len(res.failures.get(m, [])))])
    out += ["## LRP diagnostics (all models, all instances)", "",
            "`Σ abs(R) / abs(logit)`: total magnitude of the node relevance relative to the explained logit (a "
            "relevance explosion shows as a large value); `ΣR / logit`: conservation (1 = all of the logit reached the "
            "input; the rest is absorbed by biases and stabilisers, or lost).", "",
            table(["config", "Σ abs(R) / abs(logit) median", "Σ abs(R) / abs(logit) max", "ΣR / logit median",
                   "instances with NaN/inf", "failed instances"], diag)]
    failures = [f"- {m}: {msg}" for m, msgs in res.failures.items() for msg in msgs[:3]]
    if failures:
        out += ["Failures (first 3 per config):", "", *failures, ""]

    extra = [f"- training seeds: {' '.join(map(str, args.seeds))}; instances per model: {args.instances}; "
             f"datasets: {', '.join(args.datasets)}; models: {', '.join(args.models)}",
             "- layout: " + ("the last conv outputs the class scores (PyG's `BasicGNN` layout: no ReLU after it, "
                             "no `Linear` head)" if args.no_head else "3 x (conv -> ReLU), then a `Linear` head"),
             f"- runtime: {runtime / 60:.1f} min{'' if done else ' so far (PARTIAL: run still in progress or stopped)'}",
             "", "Method and metrics: see the docstring of `benchmarks/rules.py`. Cells: mean over training seeds "
             "± standard deviation over seeds of the per-seed mean AUROC (magnitude view). Every row explains the "
             "same instances of the same trained model.", ""]
    return common.header("Rules and composites: layer-level LRP rules vs gradient explainers", argv,
                         args.data_seed, extra) + "\n" + "\n".join(out)


NOTES = """\
Reading the rows (true by construction, whatever the numbers):

* **`LRP flat` does not look at the model's weights or inputs**: inputs and
  weights set to 1, biases to 0, only the frozen gates (GCN normalisation,
  GIN's sum) are kept, so its relevance is a count of weighted walks to the
  explained node. Where it scores well, the ground truth is recoverable from
  the graph structure around the node alone; that is not faithfulness to the
  model, and Flat is no candidate for a default.
* **BA-Shapes, Tree-Cycles, Tree-Grid and BA-2Motifs have constant node
  features** (10 ones). The first layer then sees the same input on every
  node, and its rule barely changes the ranking of edges or nodes (the share
  of an edge is a_ij x_j W~ / (sum_j a_ij x_j W~ + b~), about a_ij / sum_j a_ij
  for every rule when the bias is small). Only Infection (one-hot features)
  tells input-layer rules apart; none of these datasets has signed features.
* **`LRP ε (1e-6)` equals gradient x input** on these ReLU models, so its
  magnitude view equals `InputXGradient (abs)`, and (inputs being 0/1) its
  edge view equals `Saliency`.
"""


def _nz(v: float) -> float:
    return -math.inf if math.isnan(v) else v


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="training seeds")
    parser.add_argument("--instances", type=int, default=30, help="instances per model (default 30)")
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--data-seed", type=int, default=0, help="seed of the datasets and the instance sample")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1: shared machine)")
    parser.add_argument("--no-head", action="store_true",
                        help="PyG's BasicGNN layout: the last conv outputs the class scores (no ReLU, no Linear head)")
    parser.add_argument("--out", type=Path, default=None,
                        help="default results/rules.md (--no-head: results/rules_no_head.md)")
    args = parser.parse_args(argv)
    if args.out is None:
        args.out = RESULTS / ("rules_no_head.md" if args.no_head else "rules.md")
    argv = sys.argv[1:] if argv is None else argv
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", category=UserWarning)
    log = lambda s: print(s, flush=True)  # noqa: E731

    res, t0 = Results(), time.perf_counter()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for dataset in args.datasets:
        task = make_task(dataset, args.data_seed)
        for kind in args.models:
            for seed in args.seeds:
                run_model(res, dataset, kind, seed, task, args.instances, args.data_seed, log, head=not args.no_head)
                args.out.write_text(render(res, args, argv, time.perf_counter() - t0, done=False))
    runtime = time.perf_counter() - t0
    doc = render(res, args, argv, runtime, done=True)
    args.out.write_text(doc)
    print(doc)
    log(f"wrote {args.out} in {runtime / 60:.1f} min")


if __name__ == "__main__":
    main()
