"""One node explanation on a large graph: what it costs next to the least it can cost.

For a random graph (``E = 10 N``) and a 3-layer GCN (hidden 64), one target node:

* ``cut + forward + backward``: PyG's ``k_hop_subgraph`` (4 hops: the 3 the
  model reads and the degrees of the outermost), then one plain forward and
  backward on that subgraph. Any explanation of the node needs at least this.
* ``lrp.explain``: the library's one call (cut, the check that the subgraph
  gives the full graph's answer, one relevance pass).
* ``Explainer(LRP())``: through PyG's ``Explainer`` with
  ``explanation_type='model'``. PyG first runs the model on the full graph
  for the prediction (row ``full-graph forward``); that is a floor the
  algorithm cannot lower.

Times are the median of ``--repeats`` runs, in one process (the first two
alternately), so compare the ratios. Run: ``python benchmarks/explain_scale.py [--sizes 100000 300000]``.
"""
from __future__ import annotations

import argparse
import statistics
import time
import warnings

import torch
from torch_geometric.explain import Explainer
from torch_geometric.nn import GCN
from torch_geometric.utils import k_hop_subgraph

import torch_geometric_lrp as lrp


def timed(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def timed_pair(first, second, repeats: int) -> tuple[float, float]:
    """Medians of ``first`` and ``second`` run alternately, so that both see
    the same state of the machine (allocator, caches, other load)."""
    a, b = [], []
    for _ in range(repeats):
        for fn, times in ((first, a), (second, b)):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    return statistics.median(a), statistics.median(b)


def baseline(model, x, edge_index, node: int) -> None:
    subset, sub_edge_index, mapping, _ = k_hop_subgraph(node, 4, edge_index, relabel_nodes=True,
                                                        num_nodes=x.shape[0])
    sub_x = x[subset].requires_grad_()
    out = model(sub_x, sub_edge_index)
    out[mapping, out[mapping].argmax()].sum().backward()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 300_000])
    parser.add_argument("--repeats", type=int, default=11)
    args = parser.parse_args()
    torch.manual_seed(0)
    rows = []
    for n in args.sizes:
        x = torch.randn(n, 32)
        edge_index = torch.randint(0, n, (2, 10 * n))
        model = GCN(32, 64, num_layers=3, out_channels=8).eval()
        node = 12345 % n
        explainer = Explainer(model, algorithm=lrp.LRP(), explanation_type="model", node_mask_type="attributes",
                              edge_mask_type="object",
                              model_config=dict(mode="multiclass_classification", task_level="node",
                                                return_type="raw"))
        with warnings.catch_warnings():
            warnings.simplefilter("error", lrp.explainers.SubgraphWarning)  # the subgraph path must hold
            lrp.explain(model, x, edge_index, index=node)  # warm-up
            t_base, t_explain = timed_pair(lambda: baseline(model, x, edge_index, node),
                                           lambda: lrp.explain(model, x, edge_index, index=node), args.repeats)
            with torch.no_grad():
                t_full = timed(lambda: model(x, edge_index), args.repeats)
            t_explainer = timed(lambda: explainer(x, edge_index, index=node), args.repeats)
        sub = k_hop_subgraph(node, 4, edge_index, num_nodes=n)[0].numel()
        rows.append((n, sub, t_base, t_explain, t_full, t_explainer))

    print(f"threads: {torch.get_num_threads()}, median of {args.repeats}")
    print("| nodes | edges | 4-hop nodes | cut + forward + backward | lrp.explain | ratio "
          "| full-graph forward | Explainer(LRP()) | ratio to floor |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n, sub, t_base, t_explain, t_full, t_explainer in rows:
        print(f"| {n:,} | {10 * n:,} | {sub:,} | {1e3 * t_base:.1f} ms | {1e3 * t_explain:.1f} ms "
              f"| {t_explain / t_base:.2f}x | {1e3 * t_full:.0f} ms | {1e3 * t_explainer:.0f} ms "
              f"| {t_explainer / t_full:.2f}x |")
    print("Explainer(LRP()): PyG computes the model's full-graph prediction before the algorithm runs; "
          "that forward is a floor the algorithm cannot lower.")


if __name__ == "__main__":
    main()
