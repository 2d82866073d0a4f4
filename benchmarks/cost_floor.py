r"""How fast can the default composite be at all? A hand-written floor next to LRP and Saliency.

``cost.py``'s bar asks one LRP explanation to take at most 1.3x Saliency's
time through the same ``Explainer`` call. This script asks whether any
implementation of the same explanation could meet it on these small graphs.
It runs three explainers through the same ``Explainer`` call, alternating call
by call (``cost.seconds_per_call``), on the first instances of
``faithfulness.py``'s sample:

* ``Saliency``: Captum's Saliency (one plain forward and backward);
* ``LRP``: ``lrp.LRP()``, the default composite (``ZPlus`` on the first
  message-passing layer, ``Gamma(1)`` on the two after it, hidden layers
  followed by a ReLU, ``Epsilon`` on the readout);
* ``floor``: :class:`Floor`, the same composite written by hand for exactly
  ``common.GNN`` (3 x GCNConv or GINConv, ReLU, mean pooling, Linear): no
  relevance mode, no accounting, no check; node-level targets on their
  computation subgraph (``k_hop_subgraph``), as ``LRP`` does. Each linear map runs once with
  the model's parameters (its value) and, under ``Gamma``, once more with the
  modified ones (its gradient path), and the gradient trick of Zennit and of
  the GNN-LRP reference code,

  .. math::  y = z' \odot \mathrm{sg}(z / \mathrm{stab}(z')) + \mathrm{sg}(z - z' \odot \mathrm{sg}(z / \mathrm{stab}(z'))),

  (:math:`\mathrm{sg}` = detach) makes one ordinary backward carry
  :math:`R / \mathrm{stab}(z')` into every map. Node relevance is
  :math:`x \odot \nabla_x`; edge relevance is the gradient of a multiplier 1
  on each input edge's messages, shared by the layers, so it sums over
  layers as ``LRP``'s ``edge_mask`` does. It is a benchmark reference, not
  library code: it knows one architecture and checks nothing.

Before timing, the floor's node and edge masks are compared with ``LRP``'s in
float64 on every timed instance (``max rel. diff``: the largest difference
over the largest magnitude of ``LRP``'s mask), so both rows time the same
explanation.

``floor / Saliency`` below 1.3 says the bar is reachable by an implementation
that does only the rule's arithmetic; ``LRP / floor`` is what the relevance
mode's generality (any model's forward, op by op, with conservation
accounting and the checks) costs on top.

By graph size
-------------
On the datasets above, node-level explanations run on a target's
computation subgraph while Saliency runs on the whole graph, and every call
is a few milliseconds of Python. The second table removes both: graph-level
``common.GNN`` models (3 x GCNConv or GINConv, hidden 64, ReLU, mean pooling,
Linear head; random weights, as cost does not depend on training) explain
one Barabasi-Albert graph (``barabasi_albert_graph(n, 5)``, about ``10 n``
directed edges, 64 standard-normal features) as a whole, so every method
covers every node and edge. The same three methods and ``plain fwd+bwd``
(the model with gradients, seeded at the class) alternate call by call for
``--size-rounds`` rounds. Where ``floor / Saliency`` stays above 1.3 as the
graph grows, the arithmetic the floor does (each map run in full twice
under ``Gamma``, three times under ``ZPlus``, aggregation included, then
the edge relevance) already costs more than the bar allows; an
implementation under the bar there would have to share work between those
runs (aggregate once, then multiply by both weight matrices).

On a GPU
--------
``--device cuda`` trains on the CPU as above (the same weights), then moves
the models, the instances and the size table's graphs to the GPU, and
synchronises after every timed call (each call's time includes its kernels).
The floor and LRP masks are compared there too.

Usage::

    python benchmarks/cost_floor.py           # all datasets and models, sizes to 300k edges (~5 min)
    python benchmarks/cost_floor.py --quick   # BA-Shapes and BA-2Motifs, sizes to 30k edges
    python benchmarks/cost_floor.py --device cuda --max-edges 1000000 --out benchmarks/results/cost_floor_cuda.md

Writes ``benchmarks/results/cost_floor.md`` (``--out`` to change).
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import time
import warnings
from pathlib import Path

import torch
from torch import Tensor
from torch_geometric.explain import Explainer, Explanation
from torch_geometric.explain.algorithm import CaptumExplainer, ExplainerAlgorithm
from torch_geometric.utils import barabasi_albert_graph, k_hop_subgraph

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
from common import DATASETS, MODELS, RESULTS, fmt, make_instances, make_task, model_config, table, train  # noqa: E402
from cost import plain_fwd_bwd, seconds_per_call  # noqa: E402

import torch_geometric_lrp as lrp  # noqa: E402
from torch_geometric_lrp.convert import DEFAULT_INPUT, DEFAULT_LOWER, DEFAULT_UPPER  # noqa: E402
from torch_geometric_lrp.rules import Epsilon, Gamma, ZPlus, stabilize  # noqa: E402

METHODS = ("Saliency", "LRP", "floor")


def _same(t: Tensor) -> Tensor:
    return t


def _streams(rule) -> list:
    r"""The rule's streams as ``(input, weight, bias)`` modifiers, written out
    (not taken from the rule, so that ``tests/test_floor_twin.py`` compares two
    independent implementations): ``Gamma``: :math:`(x, W + \gamma W^+, b +
    \gamma b^+)`; ``ZPlus``: :math:`(x^+, W^+, b^+)` and :math:`(x^-, W^-, 0)`,
    whose outputs add up to :math:`z^+`."""
    if isinstance(rule, Gamma):
        def gamma(t):
            return t + rule.gamma * t.clamp(min=0)
        return [(_same, gamma, gamma)]
    if isinstance(rule, ZPlus):
        def pos(t):
            return t.clamp(min=0)

        def neg(t):
            return t.clamp(max=0)
        return [(pos, pos, pos), (neg, neg, torch.zeros_like)]
    if isinstance(rule, Epsilon):
        return []  # the map itself
    raise TypeError(f"Floor knows Epsilon, Gamma and ZPlus, not {rule!r}")


def _ruled(rule, x: Tensor, run) -> Tensor:
    r"""``run(x, weight, bias)`` (a linear map of ``x`` with its weights passed
    through ``weight`` and its biases through ``bias``) with the value of the
    plain map and the gradient of ``rule``: :math:`R / \mathrm{stab}(z')`
    into the streams whose outputs add up to :math:`z'`, where the gradient
    arriving at the output is :math:`R / z`."""
    streams = _streams(rule)
    if not streams:
        z = z_mod = run(x, _same, _same)
    else:
        with torch.no_grad():
            z = run(x, _same, _same)
        z_mod = sum(run(inp(x), weight, bias) for inp, weight, bias in streams)
    with torch.no_grad():
        scale = (z / stabilize(z_mod.detach(), rule.epsilon)).masked_fill_(z_mod == 0, 0)
    y = z_mod * scale
    return y + (z - y).detach()


class Floor(ExplainerAlgorithm):
    """The default composite on ``common.GNN``, by hand (see the module docstring)."""

    def forward(self, model, x, edge_index, *, target, index=None, batch=None, **kwargs) -> Explanation:
        if model.graph_level:
            return self.explain(model, x, edge_index, int(target[0]), 0, batch)
        # a node's computation subgraph (its 3-hop in-neighbourhood), masks put back in place
        nodes, sub_edge_index, mapping, kept = k_hop_subgraph(int(index), len(model.convs), edge_index,
                                                              relabel_nodes=True, num_nodes=x.shape[0])
        degree = None
        if model.kind == "GCN":  # GCN normalises by degrees in the whole graph (with self-loops)
            degree = x.new_ones(x.shape[0]).index_add_(0, edge_index[1], x.new_ones(edge_index.shape[1]))[nodes]
        sub = self.explain(model, x[nodes], sub_edge_index, int(target[index]), int(mapping[0]), None, degree)
        node_mask = torch.zeros_like(x)
        node_mask[nodes] = sub.node_mask
        edge_mask = x.new_zeros(edge_index.shape[1])
        edge_mask[kept] = sub.edge_mask
        return Explanation(node_mask=node_mask, edge_mask=edge_mask)

    def explain(self, model, x, edge_index, klass: int, row: int, batch, degree=None) -> Explanation:
        x = x.detach().requires_grad_()
        edge = x.new_ones(edge_index.shape[1]).requires_grad_()
        src, dst = edge_index
        n = x.shape[0]
        if model.kind == "GCN":
            # GCN's normalisation a_ij = (d_i d_j)^(-1/2) with self-loops (appended),
            # frozen, from the degrees of the whole graph; the input edges' messages
            # are scaled by `edge`, the self-loops' by 1
            if degree is None:
                degree = x.new_ones(n).index_add_(0, dst, torch.ones_like(edge))
            loops = torch.arange(n, device=x.device)
            src, dst = torch.cat([src, loops]), torch.cat([dst, loops])
            norm = degree.rsqrt()[src] * degree.rsqrt()[dst]
            ones = x.new_ones(n)
        if model.head is None:
            raise TypeError("Floor knows common.GNN with its Linear head (head=True)")
        rules = (DEFAULT_INPUT, DEFAULT_LOWER, DEFAULT_LOWER)  # with a head, the last conv is a hidden layer
        h = x
        for conv, rule in zip(model.convs, rules):
            if model.kind == "GCN":
                def gcn(h, weight, bias, conv=conv):
                    msg = (h @ weight(conv.lin.weight).T)[src] * (norm * torch.cat([edge, ones])).unsqueeze(-1)
                    return msg.new_zeros(n, msg.shape[1]).index_add_(0, dst, msg) + \
                        bias(conv.bias)
                h = torch.relu(_ruled(rule, h, gcn))
            else:
                lin1, lin2 = conv.nn[0], conv.nn[2]

                def gin(h, weight, bias, lin1=lin1, eps=float(conv.eps)):
                    agg = torch.zeros_like(h).index_add_(0, dst, h[src] * edge.unsqueeze(-1)) + (1 + eps) * h
                    return agg @ weight(lin1.weight).T + bias(lin1.bias)
                h = torch.relu(_ruled(rule, h, gin))
                h = torch.relu(_ruled(rule, h, lambda h, weight, bias, lin=lin2: h @ weight(lin.weight).T +
                                      bias(lin.bias)))
        head = model.head
        if model.graph_level:
            b = torch.zeros(n, dtype=torch.long, device=x.device) if batch is None else batch
            count = torch.bincount(b).clamp(min=1).to(x.dtype).unsqueeze(-1)
            out = _ruled(DEFAULT_UPPER, h, lambda h, weight, bias: (h.new_zeros(int(b.max()) + 1, h.shape[1])
                                                                    .index_add_(0, b, h) / count) @ weight(head.weight).T +
                         bias(head.bias))
        else:
            out = _ruled(DEFAULT_UPPER, h, lambda h, weight, bias: h @ weight(head.weight).T + bias(head.bias))
        grad_x, grad_edge = torch.autograd.grad(out[row, klass], (x, edge))
        return Explanation(node_mask=(x * grad_x).detach(), edge_mask=grad_edge)

    def supports(self) -> bool:
        return True


def explainers(model, task) -> dict:
    cfg = model_config(task)

    def make(algorithm):
        return Explainer(model, algorithm=algorithm, explanation_type="phenomenon",
                         node_mask_type="attributes", edge_mask_type="object", model_config=cfg)

    return {"Saliency": make(CaptumExplainer("Saliency")), "LRP": make(lrp.LRP()), "floor": make(Floor())}


def call(explainer, inst):
    return lambda: explainer(inst.x, inst.edge_index, target=inst.target, index=inst.index, **inst.kwargs)


def synced(fn, device: torch.device):
    """``fn`` followed by a wait for the device's kernels (on a GPU a call
    returns once its kernels are queued)."""
    if device.type != "cuda":
        return fn

    def run():
        fn()
        torch.cuda.synchronize(device)
    return run


def moved(inst: common.Instance, device: torch.device) -> common.Instance:
    """``inst`` with the tensors an explanation reads on ``device``."""
    kwargs = {k: v.to(device) if isinstance(v, Tensor) else v for k, v in inst.kwargs.items()}
    return dataclasses.replace(inst, x=inst.x.to(device), edge_index=inst.edge_index.to(device),
                               target=inst.target.to(device), kwargs=kwargs)


def agreement(trained, instances) -> float:
    """Largest relative difference of the floor's masks from ``LRP``'s, in float64."""
    model = trained.model.double()
    try:
        found = explainers(model, trained.task)
        worst = 0.0
        for inst in instances:
            inst64 = common.Instance(**{**vars(inst), "x": inst.x.double()})
            a, b = call(found["LRP"], inst64)(), call(found["floor"], inst64)()
            for key in ("node_mask", "edge_mask"):
                ref = a[key]
                worst = max(worst, float((ref - b[key]).abs().max() / ref.abs().max().clamp(min=1e-300)))
        return worst
    finally:
        trained.model.float()


def size_row(kind: str, target_edges: int, args) -> list[str]:
    """One graph size: Saliency, LRP, the floor and a plain forward and
    backward on one graph-level ``common.GNN``, alternating call by call."""
    common.set_seed(args.seed)
    n = max(target_edges // 10, 10)
    edge_index = barabasi_albert_graph(n, 5)
    model = common.GNN(kind, 64, 4, graph_level=True).eval()
    x = torch.randn(n, 64)
    model, x, edge_index = model.to(args.device), x.to(args.device), edge_index.to(args.device)
    with torch.no_grad():
        target = model(x, edge_index).argmax(-1)
    task = common.Task(name="BA graph", level="graph", num_features=64, num_classes=4, motif_edges=0,
                       candidates=torch.zeros(1, dtype=torch.long))
    inst = common.Instance(x, edge_index, 0, target, {}, None, None, None, None, 0)
    found = explainers(model, task)
    calls = [synced(fn, args.device) for fn in [call(found[m], inst) for m in METHODS] + [plain_fwd_bwd(model, inst)]]
    for fn in calls:
        fn()  # warm-up
    t = seconds_per_call([[fn] for fn in calls], args.size_rounds)
    sal, lrp_, floor, plain = t
    return [kind, f"{edge_index.shape[1]:,}", f"{n:,}", *(fmt(1000 * v, 1) for v in (plain, sal, lrp_, floor)),
            fmt(sal / plain, 2), fmt(lrp_ / sal, 2), fmt(floor / sal, 2), fmt(lrp_ / floor, 2)]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="BA-Shapes and BA-2Motifs only")
    parser.add_argument("--instances", type=int, default=10, help="explanations timed per model")
    parser.add_argument("--rounds", type=int, default=20, help="alternating rounds over the instances")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--max-edges", type=int, default=None,
                        help="largest graph of the size table (default 300000; --quick 30000)")
    parser.add_argument("--size-rounds", type=int, default=7, help="alternating rounds per graph size")
    parser.add_argument("--device", type=torch.device, default=torch.device("cpu"),
                        help="where the models and graphs are explained: cpu, cuda")
    parser.add_argument("--out", type=Path, default=RESULTS / "cost_floor.md")
    args = parser.parse_args(argv)
    argv = sys.argv[1:] if argv is None else argv
    datasets = ("BA-Shapes", "BA-2Motifs") if args.quick else DATASETS
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", category=UserWarning)
    started = time.perf_counter()
    lines = []
    for dataset in datasets:
        task = make_task(dataset, args.seed)
        for kind in MODELS:
            trained = train(task, kind, seed=args.seed, quick=True)
            instances = [moved(inst, args.device) for inst in make_instances(trained, args.instances, seed=args.seed)]
            trained.model.to(args.device)
            diff = agreement(trained, instances)
            found = explainers(trained.model, task)
            groups = [[synced(call(found[m], inst), args.device) for inst in instances] for m in METHODS]
            for calls in groups:
                calls[0]()  # warm-up
            t = dict(zip(METHODS, seconds_per_call(groups, args.rounds)))
            lines.append([dataset, kind, *(fmt(1000 * t[m], 2) for m in METHODS), fmt(t["LRP"] / t["Saliency"], 2),
                          fmt(t["floor"] / t["Saliency"], 2), fmt(t["LRP"] / t["floor"], 2), f"{diff:.1e}"])
            print(" | ".join(lines[-1]), flush=True)
    max_edges = args.max_edges or (30_000 if args.quick else 300_000)
    sizes = [s for s in (1_000, 3_000, 10_000, 30_000, 100_000, 300_000, 1_000_000) if s <= max_edges]
    size_lines = []
    for kind in MODELS:
        for target_edges in sizes:
            size_lines.append(size_row(kind, target_edges, args))
            print(" | ".join(size_lines[-1]), flush=True)
    doc = common.header("Cost: a hand-written floor for the default composite", argv, args.seed,
                        [f"- device: {torch.cuda.get_device_name(args.device) if args.device.type == 'cuda' else 'cpu'}",
                         f"- {args.instances} instances per model, {args.rounds} alternating rounds; runtime "
                         f"{(time.perf_counter() - started) / 60:.1f} min", "",
                         "What is measured: see the docstring of `benchmarks/cost_floor.py`. Milliseconds per "
                         "explanation through the same `Explainer` call (medians).", ""])
    doc += "\n" + table(["dataset", "model", *(f"{m} ms" for m in METHODS), "LRP / Saliency", "floor / Saliency",
                         "LRP / floor", "max rel. diff (float64)"], lines) + "\n"
    doc += ("\n## By graph size (graph-level, whole graph explained)\n\n"
            f"{args.size_rounds} alternating rounds per size; milliseconds per call (medians).\n\n")
    doc += table(["model", "edges", "nodes", "plain fwd+bwd ms", "Saliency ms", "LRP ms", "floor ms",
                  "Saliency / plain", "LRP / Saliency", "floor / Saliency", "LRP / floor"], size_lines) + "\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(doc)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
