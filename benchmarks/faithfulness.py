r"""Faithfulness of LRP against PyG's explainers on datasets with known ground
truth, over several training seeds.

For each dataset (BA-Shapes, Tree-Cycles, Tree-Grid, Infection, BA-2Motifs;
see ``common.py``), each model kind (GCN, GIN: 3 message-passing layers and a
linear head) and each training seed in ``--seeds``, a model is trained and the
*same* trained model is explained by

* **LRP** through PyG's ``Explainer`` (``lrp.LRP``):

  - ``LRP default``: ``lrp.LRP()`` with no rules, i.e. the default composite
    (``ZPlus`` on the first message-passing layer, ``Gamma(1)`` on the
    layers after it, ``Epsilon`` on the head), in the
    magnitude view (``mask='abs'``) and in the signed view (``'signed'``,
    the library's default view);
  - every rule as a bare rule on every layer, magnitude view
    (``lrp.LRP(rules=rule, mask='abs')``): ``Epsilon(1e-6)``,
    ``Gamma(0.25)``, ``AlphaBeta(2, 1)``, ``ZPlus()``, ``Flat()``,
    ``WSquare()``;

* ``CaptumExplainer`` with ``Saliency``, ``InputXGradient``,
  ``IntegratedGradients`` (Captum's default of 50 steps from an all-zero
  baseline) and ``GuidedBackprop``; the signed ones also as ``(abs)``;
* PyG's ``GNNExplainer`` (100 epochs, lr 0.01: PyG's defaults);
* PyG's ``PGExplainer`` (30 epochs, lr 0.003), trained as PyG documents on
  the explained instances (node level: ``algorithm.train(epoch, model, x,
  edge_index, target=..., index=i)`` for every epoch and instance) or on the
  training graphs (graph level, batches of 32); it has no node mask;
* a random baseline (uniform random masks).

All are phenomenon explanations of the class the model predicts, with
``node_mask_type='attributes'`` and ``edge_mask_type='object'``.

The datasets and the explained instances are fixed (``--data-seed``); only
the training seed varies (model initialisation, training, PGExplainer's
training, GNNExplainer's initial masks and the random baseline), so the
spread is the spread over training runs. Instances: ``--instances``
(default 40) per dataset, drawn from the motif nodes (BA-Shapes,
Tree-Cycles, Tree-Grid), the nodes at distance 1-3 from an infected node
(Infection) or the graphs (BA-2Motifs); the same instances for every method
and seed.

Metrics
-------
* **edge AUROC / node AUROC**: area under the ROC curve of the mask against
  the instance's ground truth (its own motif; its shortest infection paths),
  on the instance's computation subgraph: the edges that reach the explained
  node within 3 hops (``k_hop_subgraph(v, 3, directed=True)``) and the nodes
  within 3 hops (graph level: the whole graph). Per seed, the mean over
  instances (instances whose subgraph holds one class only are skipped;
  ``n`` counts the rest). Node scores are the node mask summed over
  features. Scores that agree to 1e-5 of the largest |score| count as ties.
  Larger mask values count as more important, so a signed mask ranks strong
  negative evidence last.
* A cell ``m ± s`` is the mean over training seeds of the per-seed means,
  ``s`` the sample standard deviation over seeds of those per-seed means.
* **fid+, fid-, charact, unfaith.** (mean over seeds): PyG's ``fidelity``,
  ``characterization_score`` (of the per-seed mean fid+ / fid-, weights
  0.5 / 0.5) and ``unfaithfulness``, on a *hard* edge mask: the ``k``
  highest-scoring edges of the computation subgraph (ties as above go to the
  lower edge index), ``k`` = the number of directed edges in one ground-truth
  explanation (house and 6-cycle 12, 3x3 grid 24, infection path 3,
  BA-2Motifs 12), no node mask; the same evaluation ``Explainer`` for every
  method. ``--no-fidelity`` skips them.
* **ms/expl.**: mean wall time of one explanation in this run (shared
  machine; see ``cost.py`` for timings measured on their own).

A model has "learned" its task when its mean test accuracy over seeds is at
least ``CHANCE`` (0.6); the comparison with the best other explainer is made
on learned models only. The "other explainers" are every non-LRP row except
the random baseline, signed and magnitude views alike.

Usage::

    python benchmarks/faithfulness.py                  # full run, seeds 0 1 2 (~32 min on 2 CPU cores)
    python benchmarks/faithfulness.py --quick          # smoke run (seed 0, 8 instances, shorter training; ~2 min)
    python benchmarks/faithfulness.py --datasets BA-Shapes --models GCN --seeds 0 1
    python benchmarks/faithfulness.py --raw /tmp/faith.json    # also keep the per-seed numbers as JSON
    python benchmarks/faithfulness.py --render /tmp/faith.json # rewrite the page from them (no run)

Writes ``benchmarks/results/faithfulness.md`` (``--out`` to change),
rewritten after every trained model, so a partial run leaves the finished
models in it.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
import warnings
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

import torch
import torch_geometric

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
from common import (  # noqa: E402
    DATASETS, MODELS, RESULTS, ROOT, Method, auroc, charact, evaluator_for, explain, faithfulness_metrics, fmt,
    hard_topk, make_instances, make_methods, make_task, nanmean, masks_of, model_config, table, train,
)
from torch_geometric.explain import Explainer, Explanation  # noqa: E402

import torch_geometric_lrp as lrp  # noqa: E402

CHANCE = 0.6  # a model below this mean test accuracy has not learned the task
WITHIN = 0.01  # "within 0.01 of the best other explainer, or above it"
IG_STEPS = 50  # Captum's default n_steps for IntegratedGradients

RANDOM = "Random (baseline)"
DEFAULT_ABS = "LRP default (abs)"
DEFAULT_SIGNED = "LRP default (signed)"
#: bare rules, each applied to every layer: name -> rule
RULES = {
    "Epsilon(1e-6)": lrp.rules.Epsilon(1e-6),
    "Gamma(0.25)": lrp.rules.Gamma(0.25),
    "AlphaBeta(2, 1)": lrp.rules.AlphaBeta(2, 1),
    "ZPlus()": lrp.rules.ZPlus(),
    "Flat()": lrp.rules.Flat(),
    "WSquare()": lrp.rules.WSquare(),
}
PERTURBATION = ("GNNExplainer", "PGExplainer")
#: LRP rows whose relevance ignores the inputs (see "Reading the rows")
INPUT_BLIND = ("LRP Flat() (abs)", "LRP WSquare() (abs)")
LL = ["l", "l"]  # table alignment of the dataset and model columns
METRICS = ("edge", "node", "n", "pos", "neg", "charact", "unf", "ms")


def lrp_methods(trained: common.Trained) -> list[Method]:
    """The LRP rows: the default composite (magnitude and signed view) and
    every bare rule (magnitude view), all through PyG's ``Explainer``."""
    cfg = model_config(trained.task)

    def explainer(rules, view):
        return Explainer(trained.model, algorithm=lrp.LRP(rules=rules, mask=view), explanation_type="phenomenon",
                         node_mask_type="attributes", edge_mask_type="object", model_config=cfg)

    methods = [Method(DEFAULT_ABS, "LRP", explainer(None, "abs")),
               Method(DEFAULT_SIGNED, "LRP", explainer(None, "signed"))]
    methods += [Method(f"LRP {name} (abs)", "LRP", explainer(rule, "abs")) for name, rule in RULES.items()]
    return methods


def random_baseline(inst, seed: int) -> Explanation:
    g = torch.Generator().manual_seed(seed)
    return Explanation(node_mask=torch.rand(inst.x.shape, generator=g),
                       edge_mask=torch.rand(inst.edge_index.shape[1], generator=g))


def evaluate(trained, instances, methods, seed: int, fidelity: bool, log, failures) -> tuple[dict, dict]:
    """Per method, the per-seed summary (``METRICS``) over ``instances``; and
    the sign diagnostics of the default's signed view."""
    evaluator = evaluator_for(trained)
    k = trained.task.motif_edges
    rows = [Method(RANDOM, "baseline", None)] + methods
    cache: dict[str, list] = {}
    ms_of: dict[str, float] = {}
    out = {}
    for m in rows:
        start = time.perf_counter()
        edges, nodes, pos, neg, unf, secs, explanations = [], [], [], [], [], [], []
        for i, inst in enumerate(instances):
            ex = None
            if m.family == "baseline":
                ex = random_baseline(inst, 1000 * seed + i)
            elif m.base is not None:
                ex = cache[m.base][i]
            else:
                t = time.perf_counter()
                try:
                    ex = explain(m, inst, seed=1000 * seed + i)
                except Exception as exc:  # noqa: BLE001 (a failing explainer is a finding, not a crash)
                    failures[m.name].append(f"{trained.task.name}/{trained.kind}/seed {seed}/instance {i}: "
                                            f"{type(exc).__name__}: {str(exc)[:200]}")
                secs.append(time.perf_counter() - t)
            explanations.append(ex)
            if ex is None:
                continue
            node, edge = masks_of(m, ex)
            se, sn = inst.sub_edge, inst.sub_node
            edges.append(auroc(edge[se], inst.gt_edge[se]))
            if node is not None:
                nodes.append(auroc(node[sn], inst.gt_node[sn]))
            if fidelity:
                p, q, u = faithfulness_metrics(evaluator, inst, hard_topk(edge, se, k))
                pos.append(p)
                neg.append(q)
                unf.append(u)
        cache[m.name] = explanations
        if secs:
            ms_of[m.name] = 1000 * statistics.fmean(secs)
        p, q = nanmean(pos), nanmean(neg)
        out[m.name] = dict(edge=nanmean(edges), node=nanmean(nodes), n=sum(not math.isnan(a) for a in edges),
                           pos=p, neg=q, charact=charact(p, q) if pos else float("nan"), unf=nanmean(unf),
                           ms=ms_of.get(m.base or m.name, float("nan")))
        log(f"    {m.name:<30} {time.perf_counter() - start:6.1f} s   edge {out[m.name]['edge']:.3f} "
            f"node {out[m.name]['node']:.3f}")
    return out, diagnose(instances, cache.get(DEFAULT_SIGNED))


def diagnose(instances, explanations) -> dict:
    """How the default's signed edge relevance sits on the ground truth: the
    share of ground-truth edges with negative relevance, the share of the
    subgraph's |relevance| on ground-truth edges (median), and the share of
    ground-truth edges among the subgraph's edges."""
    if not explanations:
        return {}
    neg, share, gt_share = [], [], []
    for inst, ex in zip(instances, explanations):
        if ex is None:
            continue
        e, se, gt = ex.edge_mask, inst.sub_edge, inst.gt_edge & inst.sub_edge
        gt_share.append(gt.sum().item() / se.sum().item())
        if gt.any():
            neg.append((e[gt] < 0).float().mean().item())
            total = e[se].abs().sum().item()
            if total:
                share.append(e[gt].abs().sum().item() / total)
    return dict(neg=nanmean(neg), share=statistics.median(share) if share else float("nan"),
                gt_share=nanmean(gt_share))


# ---------------------------------------------------------------------------
# Results and rendering
# ---------------------------------------------------------------------------

class Results:
    """Per (dataset, model kind): per-seed summaries of every method,
    accuracies, sign diagnostics; JSON round trip for ``--raw`` /
    ``--render``."""

    def __init__(self):
        self.per = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))  # key -> method -> metric -> [seed]
        self.seeds = defaultdict(lambda: defaultdict(list))                   # key -> method -> [seed]
        self.acc = defaultdict(list)                                          # key -> [dict]
        self.diag = defaultdict(list)                                         # key -> [dict]
        self.failures = defaultdict(list)                                     # method -> [message]
        self.methods: list[str] = []

    def add(self, key, seed: int, summaries: dict) -> None:
        for name, s in summaries.items():
            if name not in self.methods:
                self.methods.append(name)
            self.seeds[key][name].append(seed)
            for metric in METRICS:
                self.per[key][name][metric].append(s[metric])

    def to_json(self) -> dict:
        def k(key):
            return "|".join(key)
        return dict(per={k(a): {m: dict(v) for m, v in b.items()} for a, b in self.per.items()},
                    seeds={k(a): dict(b) for a, b in self.seeds.items()},
                    acc={k(a): b for a, b in self.acc.items()}, diag={k(a): b for a, b in self.diag.items()},
                    failures=dict(self.failures), methods=self.methods)

    @classmethod
    def from_json(cls, raw: dict) -> "Results":
        res = cls()
        for a, b in raw["per"].items():
            for m, v in b.items():
                res.per[tuple(a.split("|"))][m].update(v)
        for a, b in raw["seeds"].items():
            res.seeds[tuple(a.split("|"))].update(b)
        res.acc.update({tuple(a.split("|")): b for a, b in raw["acc"].items()})
        res.diag.update({tuple(a.split("|")): b for a, b in raw["diag"].items()})
        res.failures.update(raw["failures"])
        res.methods = raw["methods"]
        return res

    def test_acc(self, key) -> float:
        return statistics.fmean(a["test"] for a in self.acc[key])

    def learned(self, key) -> bool:
        return self.test_acc(key) >= CHANCE

    def values(self, key, method, metric) -> list:
        return [v for v in self.per[key].get(method, {}).get(metric, []) if not math.isnan(v)]

    def mean(self, key, method, metric) -> float:
        return nanmean(self.values(key, method, metric))

    def sd(self, key, method, metric) -> float:
        v = self.values(key, method, metric)
        return statistics.stdev(v) if len(v) > 1 else float("nan")

    def cell(self, key, method, metric) -> str:
        v = self.values(key, method, metric)
        if not v:
            return "n/a"
        if len(v) == 1:
            return f"{v[0]:.3f}"
        return f"{statistics.fmean(v):.3f} ± {statistics.stdev(v):.3f}"

    def best_other(self, key, metric) -> tuple[str, float]:
        vals = {m: self.mean(key, m, metric) for m in self.methods if is_other(m)}
        vals = {m: v for m, v in vals.items() if not math.isnan(v)}
        if not vals:
            return "n/a", float("nan")
        # on a tie (to the third digit) the magnitude view wins: it is the view the comparison is about
        m = max(vals, key=lambda m: (round(vals[m], 3), m not in common.CAPTUM_SIGNED))
        return m, vals[m]


def is_lrp(name: str) -> bool:
    return name.startswith("LRP")


def is_other(name: str) -> bool:
    return not is_lrp(name) and name != RANDOM


def gap_ok(gap: float) -> bool:
    return round(gap, 3) >= -WITHIN


def metric_name(metric: str) -> str:
    return {"edge": "edge AUROC", "node": "node AUROC"}[metric]


def summary_table(res: Results, learned: list) -> tuple[str, dict]:
    rows, counts = [], {"edge": 0, "node": 0}
    for key in learned:
        row = [key[0], key[1], fmt(res.test_acc(key))]
        for metric in ("edge", "node"):
            d = res.mean(key, DEFAULT_ABS, metric)
            name, b = res.best_other(key, metric)
            gap = d - b
            ok = gap_ok(gap)
            counts[metric] += ok
            row += [res.cell(key, DEFAULT_ABS, metric), f"{name} {res.cell(key, name, metric)}",
                    f"{gap:+.3f}", ("above" if round(gap, 3) > 0 else "yes") if ok else "**no**"]
        rows.append(row)
    cols = ["dataset", "model", "test acc", "default edge", "best other (edge)", "gap", "within 0.01",
            "default node", "best other (node)", "gap", "within 0.01"]
    return table(cols, rows, LL + ["r", "r", "l", "r", "l", "r", "l", "r", "l"]), counts


def shortfalls(res: Results, learned: list) -> list[dict]:
    out = []
    for key in learned:
        for metric in ("edge", "node"):
            d = res.mean(key, DEFAULT_ABS, metric)
            name, b = res.best_other(key, metric)
            if math.isnan(d) or math.isnan(b) or gap_ok(d - b):
                continue
            # paired per seed: the default against that explainer on the same trained model
            seeds_d = dict(zip(res.seeds[key][DEFAULT_ABS], res.per[key][DEFAULT_ABS][metric]))
            seeds_b = dict(zip(res.seeds[key][name], res.per[key][name][metric]))
            common_seeds = [s for s in seeds_d if s in seeds_b]
            paired = sum(gap_ok(seeds_d[s] - seeds_b[s]) for s in common_seeds)
            lrps = {m: res.mean(key, m, metric) for m in res.methods if is_lrp(m)}
            lrps = {m: v for m, v in lrps.items() if not math.isnan(v)}
            best_lrp = max(lrps, key=lrps.get)
            reading = {m: v for m, v in lrps.items() if m not in INPUT_BLIND}
            best_reading = max(reading, key=reading.get)
            out.append(dict(key=key, metric=metric, d=d, b=b, name=name, gap=d - b,
                            sd_d=res.sd(key, DEFAULT_ABS, metric), sd_b=res.sd(key, name, metric),
                            paired=paired, seeds=len(common_seeds), best_lrp=best_lrp, best_lrp_v=lrps[best_lrp],
                            best_reading=best_reading, best_reading_v=reading[best_reading],
                            eps=res.mean(key, f"LRP {next(iter(RULES))} (abs)", metric),
                            signed=name in common.CAPTUM_SIGNED, d_signed=res.mean(key, DEFAULT_SIGNED, metric)))
    return out


def ms_overall(res: Results, method: str) -> float:
    return nanmean([v for key in res.per for v in res.values(key, method, "ms")])


def why_section(res: Results, learned: list, not_learned: list) -> str:
    items = shortfalls(res, learned)
    lines = ["## Where the default is not within 0.01 of the best other explainer, and why", ""]
    if not_learned:
        lines += ["Models at chance level are left out of the comparison (mean test accuracy below "
                  f"{CHANCE}; agreement with a motif says nothing about a model that did not learn it): "
                  + ", ".join(f"{d} / {k} ({res.test_acc((d, k)):.3f})" for d, k in not_learned) + ".", ""]
    if not items:
        lines += ["On every learned model the default composite (magnitude view) is within 0.01 of the best other "
                  "explainer, or above it, in both edge and node AUROC.", ""]
        return "\n".join(lines)
    lines += ["Every learned (model, metric) where the default (magnitude view) is more than 0.01 below the best "
              "other explainer; 'per seed' counts the training seeds on which the default is within 0.01 of that "
              "same explainer on the same trained model.", ""]
    for it in items:
        d, k = it["key"]
        lines.append(f"- **{d} / {k}, {metric_name(it['metric'])}**: default {it['d']:.3f}{pm(it['sd_d'])}, "
                     f"{it['name']} {it['b']:.3f}{pm(it['sd_b'])} (gap {it['gap']:+.3f}); within 0.01 on "
                     f"{it['paired']}/{it['seeds']} seeds"
                     + (f"; the default's signed view: {it['d_signed']:.3f}" if it["signed"] else "")
                     + f". Best LRP row on this model: {it['best_lrp']} {it['best_lrp_v']:.3f}.")
    lines.append("")

    # reasons, from the numbers above
    n = len(items)
    by_method = defaultdict(list)
    for it in items:
        by_method[it["name"].replace(" (abs)", "").replace(" (signed)", "")].append(it)
    reasons = []
    ig = by_method.get("IntegratedGradients", [])
    if ig:
        where = ", ".join(f"{i['key'][0]} / {i['key'][1]} ({i['metric']})" for i in ig)
        datasets = {i["key"][0] for i in ig}
        ms_ig, ms_d = ms_overall(res, "IntegratedGradients"), ms_overall(res, DEFAULT_ABS)
        text = (f"* **IntegratedGradients** is the better explainer in {len(ig)} of these {n} cases ({where}). It "
                f"averages the gradient at {IG_STEPS} points on the straight line from an all-zero input (zero "
                "features and every edge multiplier 0, i.e. the graph without edges) to the input, and multiplies "
                "by the input: it sees how the prediction builds up as the edges are switched on together. LRP, "
                "Saliency, InputXGradient and GuidedBackprop take one backward pass at the input.")
        if "Infection" in datasets:
            text += (" On Infection the label is the distance to the nearest infected node, which changes in steps "
                     "as whole paths appear: a response that one linearisation at the full graph can misjudge and "
                     "a path integral averages over.")
        if "BA-2Motifs" in datasets:
            text += (" On BA-2Motifs the class separates a house from a 5-cycle attached to the same kind of tree; "
                     "a house is a 5-cycle plus one edge, so the evidence is a conjunction of motif edges, which "
                     "a path that switches all edges on together can credit and one gradient at the full graph "
                     "may not.")
        if not math.isnan(ms_ig) and not math.isnan(ms_d) and ms_d > 0:
            text += (f" It pays {IG_STEPS} forward and backward passes for it: {ms_ig:.0f} ms per explanation in "
                     f"this run against {ms_d:.0f} ms for the default ({ms_ig / ms_d:.0f}x).")
        reasons.append(text)
    gb = by_method.get("GuidedBackprop", [])
    if gb:
        where = ", ".join(f"{i['key'][0]} / {i['key'][1]} ({i['metric']})" for i in gb)
        reasons.append(f"* **GuidedBackprop** is the better explainer in {len(gb)} of these {n} cases ({where}). "
                       "It drops negative gradients at every ReLU on the way back, so only evidence that raises "
                       "each activation reaches the input. It does not decompose the score (it is not "
                       "conservative), but its supporting-evidence-only view can sit closer to an unsigned "
                       "ground truth than a signed decomposition read by magnitude.")
    signed = [i for i in items if i["signed"]]
    if signed:
        def neg(key):
            return 100 * nanmean([x["neg"] for x in res.diag.get(key, [])])

        def magnitude(i):
            return res.mean(i["key"], f"{i['name']} (abs)", i["metric"])

        where = ", ".join(f"{i['key'][0]} / {i['key'][1]} ({i['metric']}): {i['name']} {i['b']:.3f} signed, "
                          f"{magnitude(i):.3f} magnitude; the default {i['d']:.3f} magnitude, "
                          f"{i['d_signed']:.3f} signed ({neg(i['key']):.0f}% of the motif edges with negative "
                          "default relevance)" for i in signed)
        like = sum(gap_ok(i["d_signed"] - i["b"]) for i in signed)
        view = sum(gap_ok(magnitude(i) - i["b"]) for i in signed)
        reasons.append(f"* **Signed views.** In {len(signed)} of these {n} cases the better explainer's best view is "
                       f"its signed one ({where}). In {view} of them its own magnitude view is within 0.01 of it, so "
                       "the gap to the default is not a matter of the view. Compared like with like, the default's "
                       f"signed view is within 0.01 of that explainer's signed view, or above, in {like} of the "
                       f"{len(signed)}; a signed ranking puts the motif edges that argue against the class last.")
    grads = [i for m in ("Saliency", "InputXGradient") for i in by_method.get(m, []) if not i["signed"]]
    if grads:
        where = ", ".join(f"{i['key'][0]} / {i['key'][1]} ({i['metric']}): {i['name']} {i['b']:.3f}, "
                          f"LRP Epsilon(1e-6) {i['eps']:.3f}" for i in grads)
        eps_ok = [i for i in grads if gap_ok(i["eps"] - i["b"])]
        reasons.append(f"* **A plain gradient** (Saliency or InputXGradient) is the better explainer in {len(grads)} "
                       f"of these {n} cases ({where}). On these ReLU models `Epsilon` on every layer is gradient x "
                       "input, so the default differs from `InputXGradient` only by its rules: `ZPlus` on the "
                       "input layer and `Gamma(1)` on the layers after it, which favour positive contributions."
                       + (f" In {len(eps_ok)} of these cases the `Epsilon(1e-6)` row is within 0.01 of the better "
                          "explainer: there it is these rules that move relevance away from the ground "
                          "truth." if eps_ok else "")
                       + (f" In {len(grads) - len(eps_ok)} the `Epsilon(1e-6)` row is more than 0.01 below as well: "
                          "there Saliency's plain |gradient|, without the multiplication by the input, ranks "
                          "better." if len(eps_ok) < len(grads) else ""))
    pert = [i for m in PERTURBATION for i in by_method.get(m, [])]
    if pert:
        where = ", ".join(f"{i['key'][0]} / {i['key'][1]} ({i['metric']}): {i['name']}" for i in pert)
        reasons.append(f"* **A trained mask** (GNNExplainer or PGExplainer) is the better explainer in {len(pert)} "
                       f"of these {n} cases ({where}). These optimise a soft edge mask against the model's output "
                       "(GNNExplainer per explanation, 100 epochs; PGExplainer a mask predictor), so they search "
                       "for the edges whose removal changes the prediction instead of propagating the score once.")
    small = [i for i in items if not math.isnan(i["sd_d"]) and abs(i["gap"]) <= max(i["sd_d"], _z(i["sd_b"]))]
    rescued = [i for i in items if gap_ok(i["best_reading_v"] - i["b"])]
    blind = [i for i in items if i not in rescued and gap_ok(i["best_lrp_v"] - i["b"])]
    reasons.append(f"* **Seed spread.** In {len(small)} of the {n} cases the gap is no larger than the larger of the "
                   "two standard deviations over seeds"
                   + (": " + ", ".join(f"{i['key'][0]} / {i['key'][1]} ({i['metric']})" for i in small) if small
                      else "") + "; there the order of the two explainers is not settled by "
                   f"{max(i['seeds'] for i in items)} training seeds.")
    reasons.append(f"* **Other rules.** In {len(rescued)} of the {n} cases another LRP row that reads the inputs "
                   "(not `Flat()` or `WSquare()`) comes within 0.01 of the best other explainer, or above"
                   + (": " + ", ".join(f"{i['key'][0]} / {i['key'][1]} ({i['metric']}): {i['best_reading']} "
                                       f"{i['best_reading_v']:.3f}" for i in rescued) if rescued else "")
                   + (f"; in {len(blind)} more only `Flat()` or `WSquare()` does ("
                      + ", ".join(f"{i['key'][0]} / {i['key'][1]} ({i['metric']}): {i['best_lrp']} "
                                  f"{i['best_lrp_v']:.3f}" for i in blind)
                      + "), which follow the graph structure rather than the model" if blind else "")
                   + ". The default is one composite for all models, chosen on `benchmarks/rules.py`; no single rule "
                   "is best on every model.")
    lines += ["Reasons, from the rows above and the way each method works:", "", *reasons, ""]
    return "\n".join(lines)


def pm(sd: float) -> str:
    return "" if math.isnan(sd) else f" ± {sd:.3f}"


def _z(v: float) -> float:
    return 0.0 if math.isnan(v) else v


def averages_table(res: Results, learned: list) -> str:
    rows = []
    for m in res.methods:
        e = [res.mean(k, m, "edge") for k in learned]
        nd = [res.mean(k, m, "node") for k in learned]
        row = [m, fmt(nanmean(e)), fmt(nanmean(nd))]
        if m != RANDOM:
            ok_e = ok_n = tot_n = 0
            for k in learned:
                be = res.best_other(k, "edge")[1] if is_lrp(m) else _best_excluding(res, k, "edge", m)
                bn = res.best_other(k, "node")[1] if is_lrp(m) else _best_excluding(res, k, "node", m)
                ok_e += gap_ok(res.mean(k, m, "edge") - be)
                if not math.isnan(res.mean(k, m, "node")):
                    tot_n += 1
                    ok_n += gap_ok(res.mean(k, m, "node") - bn)
            row += [f"{ok_e}/{len(learned)}", f"{ok_n}/{tot_n}" if tot_n else "n/a"]
        else:
            row += ["", ""]
        row.append(fmt(ms_overall(res, m), 1))
        rows.append(row)
    return table(["method", "edge AUROC", "node AUROC", "edge within 0.01 of the best other",
                  "node within 0.01 of the best other", "ms/expl."], rows)


def _best_excluding(res: Results, key, metric: str, method: str) -> float:
    """Best other (non-LRP) explainer other than ``method`` and its other view."""
    base = method.replace(" (abs)", "")
    vals = [res.mean(key, m, metric) for m in res.methods
            if is_other(m) and m.replace(" (abs)", "") != base]
    vals = [v for v in vals if not math.isnan(v)]
    return max(vals) if vals else float("nan")


SIGN_TEXT = """\
## The signed view

The ground truth marks every motif edge as important, whichever way it pushes
the logit, and AUROC reads larger mask values as more important; a signed mask
ranks strong evidence *against* the predicted class below irrelevant edges.
That is why the comparison above uses the magnitude view
(`lrp.LRP(mask='abs')`), the view comparable with magnitude explainers
(GNNExplainer, PGExplainer, Saliency). Over the learned models the default's
signed view averages {signed_e} edge / {signed_n} node AUROC, its magnitude
view {abs_e} / {abs_n}. How the default's signed edge relevance sits on the
ground truth (per instance, on its computation subgraph; mean over seeds):

{diag}
"""

NOTES = """\
## Reading the rows

True by construction, whatever the numbers:

* **`Epsilon(1e-6)` is gradient x input** on these ReLU models, so `LRP
  Epsilon(1e-6) (abs)` matches `InputXGradient (abs)` in node and edge
  masks; where float rounding falls on either side of a tie the per-seed
  mean AUROCs can differ (here by at most {eps_ixg}).
* **`Flat()` and `WSquare()` ignore the inputs** (`Flat` the weights too):
  their relevance follows the graph structure and the weights around the
  explained node. Where they score well, the ground truth is recoverable from
  structure alone; they are input-layer rules, not candidates for a whole
  model.
* **BA-Shapes, Tree-Cycles, Tree-Grid and BA-2Motifs have constant node
  features** (10 ones): node relevance then measures how much of the score
  reaches each node through the graph, not which feature matters.
* **`Flat()` and `WSquare()` give the same edge masks and node totals**
  here: with every input set to 1, node j's share of every output of a
  layer at node i is its aggregation weight a_ij / Σ_j a_ij, whatever the
  weights.
* **PGExplainer** has no node mask (its node AUROC is n/a). With PyG's
  default coefficients it often collapses to the same value on every edge
  (edge AUROC exactly 0.500).
"""


def render(res: Results, args, argv, runtime: float, done: bool, instances_n: int, epochs: tuple) -> str:
    keys = list(res.acc)
    learned = [k for k in keys if res.learned(k)]
    not_learned = [k for k in keys if not res.learned(k)]
    out = []
    seeds_txt = " ".join(map(str, args.seeds))
    pert_seeds = args.perturbation_seeds if args.perturbation_seeds is not None else args.seeds
    lines = [
        "# Faithfulness: LRP vs PyG explainers on ground-truth datasets",
        "",
        f"- command: `python {' '.join([os.path.relpath(sys.argv[0], ROOT)] + argv)}`",
        f"- date: {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- data seed {args.data_seed} (datasets, explained instances); training seeds {seeds_txt} (model "
        "initialisation, training, PGExplainer training, GNNExplainer's initial masks, random baseline)",
        f"- torch {torch.__version__}, torch_geometric {torch_geometric.__version__}, torch_geometric_lrp "
        f"{lrp.__version__}, Python {platform.python_version()}, {os.cpu_count()} CPU cores, torch threads "
        f"{getattr(args, 'threads', 1)}",
        f"- instances per model: {instances_n}; GNNExplainer epochs {epochs[0]}; PGExplainer epochs {epochs[1]}"
        + (f"; GNNExplainer and PGExplainer on training seed(s) {' '.join(map(str, pert_seeds))} only"
           if list(pert_seeds) != list(args.seeds) else "")
        + ("; fidelity columns skipped (`--no-fidelity`)" if args.no_fidelity else "")
        + ("; QUICK smoke run (shorter training, fewer instances and epochs)" if args.quick else ""),
        f"- runtime: {runtime / 60:.1f} min{'' if done else ' so far (PARTIAL: the run is in progress or stopped)'}",
        "",
        "Each trained model is explained by every method on the same instances. Cells `m ± s`: mean over training "
        "seeds of the per-seed mean over instances, ± the standard deviation over seeds of those per-seed means. "
        "LRP runs through PyG's `Explainer` with `lrp.LRP`; `LRP default` is `lrp.LRP()` without rules (the "
        "default composite), every other LRP row one rule on every layer. Method, metrics and ground truth: the "
        "docstrings of `benchmarks/faithfulness.py` and `benchmarks/common.py`.",
        "",
    ]
    if learned:
        tab, counts = summary_table(res, learned)
        out += ["## The default against the best other explainer", "",
                "For every learned model: the default composite in the magnitude view (`lrp.LRP(mask='abs')`), "
                "edge and node AUROC, against the best of Saliency, InputXGradient, IntegratedGradients, "
                "GuidedBackprop (signed or magnitude view), GNNExplainer and PGExplainer on the same model; gap = "
                "default - best other (mean over seeds).", "", tab,
                f"The default is within 0.01 of the best other explainer, or above it, on {counts['edge']} of "
                f"{len(learned)} learned models in edge AUROC and {counts['node']} of {len(learned)} in node AUROC.",
                ""]
        out += [why_section(res, learned, not_learned)]

    acc_rows = []
    for k in keys:
        a = res.acc[k]
        acc_rows.append([k[0], k[1], ", ".join(f"{x['test']:.3f}" for x in a), fmt(res.test_acc(k)),
                         "yes" if res.learned(k) else "**no (at chance)**",
                         ", ".join(f"{x['correct']}/{x['n']}" for x in a),
                         fmt(statistics.fmean(x["train_s"] for x in a), 1),
                         fmt(nanmean([x["pg_s"] for x in a]), 1)])
    out += ["## Trained models", "",
            table(["dataset", "model", "test acc per seed", "mean test acc", "learned",
                   "explained instances predicted correctly (per seed)", "train s", "PGExplainer train s"], acc_rows,
                  LL + ["r", "r", "l", "r", "r", "r"])]
    if learned:
        out += ["## Average over learned models", "",
                "Mean over the learned models of each row's mean AUROC; 'within 0.01' counts the learned models "
                "where the row is within 0.01 of the best other explainer (for a non-LRP row: the best of the other "
                "non-LRP explainers), or above it.", "", averages_table(res, learned)]

    for dataset in dict.fromkeys(k[0] for k in keys):
        for k in [k for k in keys if k[0] == dataset]:
            a = res.acc[k]
            notes = [f"{instances_n} instances; training seeds {', '.join(str(x['seed']) for x in a)}; mean test "
                     f"accuracy {res.test_acc(k):.3f}; hard masks: top {a[0]['k']} edges."]
            if not res.learned(k):
                notes.append("**The model did not learn the task (mean test accuracy at chance level): agreement "
                             "with the ground truth is not meaningful here.**")
            rows = []
            for m in res.methods:
                if m not in res.per[k]:
                    continue
                rows.append([m, res.cell(k, m, "edge"), res.cell(k, m, "node"),
                             str(int(nanmean(res.values(k, m, "n")))) if res.values(k, m, "n") else "n/a",
                             fmt(res.mean(k, m, "pos"), 2), fmt(res.mean(k, m, "neg"), 2),
                             fmt(res.mean(k, m, "charact"), 2), fmt(res.mean(k, m, "unf")),
                             fmt(res.mean(k, m, "ms"), 1)])
            cols = ["method", "edge AUROC", "node AUROC", "n", "fid+ ↑", "fid- ↓", "charact ↑", "unfaith. ↓",
                    "ms/expl."]
            out += [f"## {k[0]} / {k[1]}", "", *notes, "", table(cols, rows)]

    if learned and any(res.diag[k] for k in learned):
        def avg(method, metric):
            return fmt(nanmean([res.mean(k, method, metric) for k in learned]))

        diag_rows = []
        for k in keys:
            d = res.diag[k]
            if not d:
                continue
            diag_rows.append([k[0], k[1], fmt(100 * nanmean([x["neg"] for x in d]), 0),
                              fmt(100 * nanmean([x["gt_share"] for x in d]), 0),
                              fmt(100 * nanmean([x["share"] for x in d]), 0)])
        diag = table(["dataset", "model", "motif edges with negative relevance (mean %)",
                      "motif edges among subgraph edges (mean %)",
                      "motif share of absolute relevance (median %)"], diag_rows, LL + ["r"] * 3)
        out += [SIGN_TEXT.format(signed_e=avg(DEFAULT_SIGNED, "edge"), signed_n=avg(DEFAULT_SIGNED, "node"),
                                 abs_e=avg(DEFAULT_ABS, "edge"), abs_n=avg(DEFAULT_ABS, "node"), diag=diag)]
    diffs = [abs(a - b) for k in keys for metric in ("edge", "node")
             for a, b in zip(res.values(k, f"LRP {next(iter(RULES))} (abs)", metric),
                             res.values(k, "InputXGradient (abs)", metric))]
    out += [NOTES.format(eps_ixg=fmt(max(diffs)) if diffs else "n/a")]
    failures = [f"- {m}: {len(msgs)} failed explanation(s), e.g. {msgs[0]}" for m, msgs in res.failures.items() if msgs]
    if failures:
        out += ["## Failures", "", *failures, ""]
    return "\n".join(lines) + "\n" + "\n".join(out)


def save(res: Results, args, argv, runtime: float, done: bool, instances_n: int, epochs: tuple) -> None:
    args.out.write_text(render(res, args, argv, runtime, done, instances_n, epochs))
    if args.raw is not None:
        keep = ("seeds", "data_seed", "perturbation_seeds", "no_fidelity", "quick", "threads")
        args.raw.write_text(json.dumps(dict(args={a: getattr(args, a) for a in keep}, argv=argv, runtime=runtime,
                                            done=done, instances_n=instances_n, epochs=list(epochs),
                                            **res.to_json()), allow_nan=True))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=None,
                        help="training seeds (default 0 1 2; quick: 0); datasets and instances stay fixed")
    parser.add_argument("--data-seed", "--seed", dest="data_seed", type=int, default=0,
                        help="seed of the datasets and the instance sample (default 0)")
    parser.add_argument("--instances", type=int, default=None, help="instances per model (default 40; quick 8)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 8 instances, shorter training and epochs")
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--perturbation-seeds", type=int, nargs="+", default=None,
                        help="training seeds on which GNNExplainer and PGExplainer run (default: all of --seeds)")
    parser.add_argument("--no-fidelity", action="store_true", help="skip the fidelity / characterization columns")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (default 1: stable timings on a shared machine)")
    parser.add_argument("--out", type=Path, default=RESULTS / "faithfulness.md")
    parser.add_argument("--raw", type=Path, default=None,
                        help="also write the per-seed numbers as JSON here (rewritten after every model)")
    parser.add_argument("--render", type=Path, default=None, metavar="RAW",
                        help="only rewrite --out from a --raw file of an earlier run (no training, no explaining)")
    args = parser.parse_args(argv)
    argv = sys.argv[1:] if argv is None else argv
    if args.render is not None:
        raw = json.loads(args.render.read_text())
        saved = argparse.Namespace(**raw["args"])
        args.out.write_text(render(Results.from_json(raw), saved, raw["argv"], raw["runtime"], raw["done"],
                                   raw["instances_n"], tuple(raw["epochs"])))
        print(f"wrote {args.out} from {args.render}")
        return
    if args.seeds is None:
        args.seeds = [0] if args.quick else [0, 1, 2]
    instances_n = args.instances or (8 if args.quick else 40)
    epochs = (30, 10) if args.quick else (100, common.PG_EPOCHS)
    pert_seeds = set(args.seeds if args.perturbation_seeds is None else args.perturbation_seeds)
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", category=UserWarning)
    log = lambda s: print(s, flush=True)  # noqa: E731

    res, t0 = Results(), time.perf_counter()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for dataset in args.datasets:
        task = make_task(dataset, args.data_seed)
        for kind in args.models:
            for seed in args.seeds:
                t_model = time.perf_counter()
                trained = train(task, kind, seed=seed, quick=args.quick)
                log(f"{dataset} / {kind} / seed {seed}: train acc {trained.train_acc:.3f}, test acc "
                    f"{trained.test_acc:.3f} ({trained.seconds:.1f} s)")
                instances = make_instances(trained, instances_n, seed=args.data_seed)
                include = ["Captum"] + [f for f in PERTURBATION if seed in pert_seeds]
                others = make_methods(trained, instances, include=include, gnn_epochs=epochs[0],
                                      pg_epochs=epochs[1], seed=seed)
                pg = next((m for m in others if m.family == "PGExplainer"), None)
                # the order of the tables: LRP rows, gradient rows, trained masks
                order = {"LRP": 0, "Captum": 1, "GNNExplainer": 2, "PGExplainer": 3}
                methods = sorted(lrp_methods(trained) + others, key=lambda m: order[m.family])
                summaries, diag = evaluate(trained, instances, methods, seed, not args.no_fidelity, log,
                                           res.failures)
                res.add((dataset, kind), seed, summaries)
                if diag:
                    res.diag[(dataset, kind)].append(diag)
                res.acc[(dataset, kind)].append(dict(
                    seed=seed, train=trained.train_acc, test=trained.test_acc, k=task.motif_edges,
                    correct=sum(int(i.target[i.index]) == i.label for i in instances), n=len(instances),
                    train_s=trained.seconds, pg_s=pg.setup_seconds if pg else float("nan")))
                save(res, args, argv, time.perf_counter() - t0, False, instances_n, epochs)
                log(f"    model done in {time.perf_counter() - t_model:.1f} s "
                    f"(total {(time.perf_counter() - t0) / 60:.1f} min)")
    runtime = time.perf_counter() - t0
    save(res, args, argv, runtime, True, instances_n, epochs)
    log(f"wrote {args.out} in {runtime / 60:.1f} min")


if __name__ == "__main__":
    main()
