r"""DIG's ``GNN_LRP`` against ``lrp.walks``: the same walks, their relevance
and the cost.

DIG (``dive-into-graphs``) ships the usual GNN-LRP implementation: it lists
every walk of the graph, then runs one masked backward pass per walk ending
at the explained node. This script runs it and ``lrp.walks`` on the same
model and graphs, in one process:

* the model is DIG's own 3-layer node-level ``GCN_3l`` (hidden 32, 8 input
  features, 3 classes; ReLU after each layer, then Linear-ReLU-Linear), with
  its biases set to 0, and its PyG twin (``GCNConv`` layers with DIG's
  weights: outputs checked equal);
* rules matched to DIG's: GNN-LRP-:math:`\gamma` with :math:`\gamma` = 2, 1, 1
  on the three graph layers and 1 on the head, no stabiliser. DIG's
  :math:`\gamma` leaves biases unchanged where the published rule (and
  ``lrp.rules.Gamma``) adds :math:`\gamma b^+`, hence the bias-free model: on
  it the two definitions are the same;
* random undirected graphs (no self-loops; ``N`` nodes, mean degree ``d``),
  class 0 of ``--targets`` target nodes per graph.

Reported per graph (medians over the targets): the walks into a target
(DIG's count and ours must be equal and the walks the same), seconds of
DIG's call (``GNN_LRP(...)(x, edge_index, node_idx=v, num_classes=1)``,
what a user pays: its walk listing, its one backward per walk and its mask
evaluation), of ``lrp.walks(top_k=None)`` and of ``lrp.walks(top_k=10)``,
their ratio, and the largest difference between the two relevances of a
walk relative to the largest |relevance| (the run fails above 1e-4).

Setup, once: ``bash scripts/setup_dig.sh`` (a virtual environment
``.venv-dig`` that sees this machine's packages, with DIG 1.1.0 and the
captum 0.2.0 it imports; the project's own environment is left alone).
Run: ``.venv-dig/bin/python benchmarks/walks_dig.py`` (about a minute);
writes ``benchmarks/results/walks_dig.md``.

DIG 1.1.0 targets PyG 2.0. On PyG 2.8 one of its methods needs replacing:
its ``GCNConv.propagate`` calls PyG internals renamed since; it is replaced
by GCN's message passing written out (:func:`_gcn_propagate`). Calling
PyG's own ``propagate`` instead would run PyG's aggregation module, which
DIG's walk extraction (forward hooks on leaf modules) would take for a
layer of the model.
"""
from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
import warnings
from datetime import datetime, timezone
from importlib.metadata import version
from pathlib import Path

import torch
import torch_geometric
from torch_geometric.nn import GCNConv
from torch_geometric.utils import add_remaining_self_loops, scatter, to_undirected

import torch_geometric_lrp as lrp

RESULTS = Path(__file__).resolve().parent / "results"
SIZES = [(25, 4), (50, 6), (100, 6), (200, 8)]  # (nodes, mean degree)
TOLERANCE = 1e-4


def _gcn_propagate(self, edge_index, x=None, edge_weight=None, size=None):
    """GCN's message passing, :math:`\\sum_j a_{ij} x_j`, for DIG's layer."""
    messages = x.index_select(0, edge_index[0]) * edge_weight.view(-1, 1)
    return scatter(messages, edge_index[1], 0, dim_size=x.shape[0], reduce="sum")


def load_dig():
    try:
        import dig.xgraph.models.models as dig_models
        from dig.xgraph.method import GNN_LRP
    except ImportError as error:
        sys.exit(f"walks_dig.py needs DIG ({error}). Set it up with `bash scripts/setup_dig.sh` and run "
                 f"`.venv-dig/bin/python benchmarks/walks_dig.py`.")
    dig_models.GCNConv.propagate = _gcn_propagate
    return dig_models, GNN_LRP


class Twin(torch.nn.Module):
    """DIG's ``GCN_3l`` (node level) as PyG ``GCNConv`` layers, with its weights."""

    def __init__(self, dig_model):
        super().__init__()
        self.convs = torch.nn.ModuleList()
        for layer in [dig_model.conv1, *dig_model.convs]:
            conv = GCNConv(*layer.weight.shape)
            with torch.no_grad():
                conv.lin.weight.copy_(layer.weight.T)  # DIG computes x @ weight
                conv.bias.copy_(layer.bias)
            self.convs.append(conv)
        self.ffn = dig_model.ffn

    def forward(self, x, edge_index):
        for conv in self.convs:
            x = conv(x, edge_index).relu()
        return self.ffn(x)


# DIG's GNN_LRP: gamma = 2, 1, 1 on the graph layers, 1 on every Linear of the head
RULES = {"convs.0": lrp.rules.Gamma(2.0, epsilon=0.0), "convs.1": lrp.rules.Gamma(1.0, epsilon=0.0),
         "convs.2": lrp.rules.Gamma(1.0, epsilon=0.0), "ffn": lrp.rules.Gamma(1.0, epsilon=0.0)}


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def compare(dig_walks: dict, edge_index: torch.Tensor, n: int, ours: lrp.Walks) -> float:
    """Largest |difference| of a walk's relevance, relative to the largest
    |relevance|; raises where the two sets of walks differ."""
    with_loops, _ = add_remaining_self_loops(edge_index, num_nodes=n)
    steps = dig_walks["ids"]  # per walk, its edges (with self-loops) in message order
    nodes = torch.cat([with_loops[0, steps[:, :1]], with_loops[1, steps]], 1)
    theirs = {tuple(w): float(r) for w, r in zip(nodes.tolist(), dig_walks["score"][:, 0])}
    mine = {tuple(w): float(r) for w, r in zip(ours.walks.tolist(), ours.relevance)}
    if set(theirs) != set(mine):
        raise AssertionError(f"different walks: {len(set(theirs) ^ set(mine))} of {len(theirs)} / {len(mine)}")
    scale = max(max(abs(r) for r in mine.values()), 1e-30)
    return max(abs(theirs[w] - mine[w]) for w in mine) / scale


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", type=int, default=3, help="target nodes per graph (default 3)")
    args = parser.parse_args(argv)
    dig_models, GNN_LRP = load_dig()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", category=UserWarning)
    begin = time.perf_counter()
    rows = []
    for n, degree in SIZES:
        g = torch.Generator().manual_seed(n)
        edge_index = torch.randint(0, n, (2, n * degree // 2), generator=g)
        edge_index = to_undirected(edge_index[:, edge_index[0] != edge_index[1]], num_nodes=n)
        x = torch.randn(n, 8, generator=g)
        torch.manual_seed(n)
        dig_model = dig_models.GCN_3l(model_level="node", dim_node=8, dim_hidden=32, num_classes=3).eval()
        with torch.no_grad():
            for m in dig_model.modules():
                if getattr(m, "bias", None) is not None:
                    m.bias.zero_()
        twin = Twin(dig_model).eval()
        with torch.no_grad():
            assert torch.allclose(dig_model(x, edge_index), twin(x, edge_index), atol=1e-6), "twin differs"
        cols = {k: [] for k in ("walks", "dig", "all", "top10", "error")}
        for v in torch.randperm(n, generator=g)[:args.targets].tolist():
            explainer = GNN_LRP(dig_model, explain_graph=False)
            (dig_walks, _, _), t_dig = timed(lambda: explainer(x, edge_index, node_idx=torch.tensor(v),
                                                                sparsity=0.5, num_classes=1))
            every, t_all = timed(lambda: lrp.walks(twin, x, edge_index, v, target=torch.tensor([0]), rules=RULES))
            _, t_top = timed(lambda: lrp.walks(twin, x, edge_index, v, target=torch.tensor([0]), rules=RULES,
                                               top_k=10))
            cols["error"].append(compare(dig_walks, edge_index, n, every))
            for k, t in (("walks", every.num_walks), ("dig", t_dig), ("all", t_all), ("top10", t_top)):
                cols[k].append(t)
        med = {k: statistics.median(v) for k, v in cols.items()}
        med["error"] = max(cols["error"])
        rows.append((n, edge_index.shape[1], degree, med))
        print(f"N={n}: {med['walks']:.0f} walks, DIG {med['dig']:.2f} s, walks() {med['all']:.3f} s, "
              f"top 10 {med['top10']:.3f} s, max relative difference {med['error']:.1e}", flush=True)
    runtime = time.perf_counter() - begin
    worst = max(med["error"] for *_, med in rows)
    lines = [
        "# DIG's GNN_LRP against lrp.walks",
        "",
        "- command: `.venv-dig/bin/python benchmarks/walks_dig.py`",
        f"- date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; runtime {runtime:.0f} s",
        f"- torch {torch.__version__}, torch_geometric {torch_geometric.__version__}, dive-into-graphs "
        f"{version('dive-into-graphs')}, Python {platform.python_version()}, torch threads 1",
        "",
        f"DIG's `GCN_3l` (node level, hidden 32, biases 0) and its PyG twin; rules matched to DIG's "
        f"(γ = 2, 1, 1 on the graph layers, 1 on the head, no stabiliser); random undirected graphs, "
        f"{args.targets} targets each, class 0; medians in seconds. Setup and method: the docstring of "
        f"`benchmarks/walks_dig.py`. Every walk DIG lists, `lrp.walks` lists too, and no other; their "
        f"relevances agree to {worst:.0e} of the largest |relevance| (float32).",
        "",
        "| nodes / edges | mean degree | walks into a target | DIG `GNN_LRP` | DIG per walk (ms) "
        "| `lrp.walks()` (all) | `lrp.walks(top_k=10)` | DIG / `walks()` | max relative difference |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n, e, degree, med in rows:
        lines.append(f"| {n} / {e} | {degree} | {med['walks']:,.0f} | {med['dig']:.2f} "
                     f"| {1000 * med['dig'] / med['walks']:.1f} | {med['all']:.3f} | {med['top10']:.3f} "
                     f"| {med['dig'] / med['all']:.0f}x | {med['error']:.0e} |")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "walks_dig.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    if worst > TOLERANCE:
        sys.exit(f"walk relevances differ by {worst:.1e} (more than {TOLERANCE:.0e})")


if __name__ == "__main__":
    sys.exit(main())
