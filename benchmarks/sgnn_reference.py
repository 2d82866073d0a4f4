r"""sGNN-LRP's own model and code against ``lrp.subgraph_relevance``.

sGNN-LRP (Xiong et al., ICML 2022) publishes a node AUROC of 0.9928 on
BA-2Motifs, from its pretrained 3-layer GIN (``models/gin-3-ba2motif.torch``)
and its greedy "local best guess" search with :math:`\alpha = 0` (0.9962
with its relaxed set relevance, :math:`\alpha = 0.05`). This script runs
that model through this project:

1. **The model.** The pickled reference model is loaded with the reference
   code (a checkout given by ``--repo``; imported at run time, nothing of it
   is copied here) and its weights are put into ``SgnnGIN`` of ``walks.py``,
   a PyG model: the reference aggregates with :math:`(A + I) / 2`, so each
   layer's first weight matrix is halved. Outputs must agree on every graph.
2. **Subgraph relevance.** For ``--sets`` random node sets per graph (and
   the motif, and all nodes), the reference's ``subgraph_mp_transcription``
   (its dense transcription, gamma = 3, 1.5, 0 by layer, target: the
   dataset label) against ``lrp.subgraph_relevance`` with the composite
   ``walks.PAPER_RULES``, with :math:`\alpha` = 0 and 0.05 (the
   reference's ``alpha``, ``subgraph_relevance(..., alpha=)`` here). The
   largest difference is reported relative to the graph's :math:`S(V)` (a
   set's own value can be near 0).
3. **The published figure.** The greedy search (``walks.greedy_order``, one
   batched ``subgraph_relevance`` call per step) on ``--graphs`` graphs of
   ``common.py``'s BA-2Motifs generator, node AUROC against the motif, for
   both values of :math:`\alpha`.

The reference's class 1 is the house (``int(label[1])`` of its data), ours
class 0, so its class is ``1 - y``.

Usage::

    git clone https://github.com/xiong-ping/sgnn_lrp_via_mp /tmp/sgnn_ref
    python benchmarks/sgnn_reference.py --repo /tmp/sgnn_ref    # about 1 minute

Writes ``benchmarks/results/sgnn_reference.md``.
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
import torch_geometric

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, ROOT, Instance, auroc, fmt, make_task, nanmean, table  # noqa: E402
from walks import PAPER_RULES, SgnnGIN, greedy_order  # noqa: E402

import torch_geometric_lrp as lrp  # noqa: E402

PUBLISHED = {0.0: 0.9928, 0.05: 0.9962}  # sGNN-LRP, evaluation_results/result_local_best_guess.txt, by alpha


def load_reference(repo: Path):
    """The reference code's ``GNN`` and its pretrained BA-2Motifs GIN."""
    sys.path.insert(0, str(repo))
    import modules  # noqa: F401  (the pickle refers to modules.GNN)
    import subgraph_relevance
    model = torch.load(repo / "models" / "gin-3-ba2motif.torch", weights_only=False)
    return model, subgraph_relevance


def as_pyg(reference) -> SgnnGIN:
    """``SgnnGIN`` with the reference's weights; its biases are
    :math:`-\tfrac12 \log(1 + e^{-2b})` of the stored ``b``."""
    twin = SgnnGIN(1, out_channels=2).eval()
    blocks = [b for b in reference.blocks if b.W]
    layers = [(twin.convs[0].nn[0], twin.convs[0].nn[2]), (twin.convs[1].nn[0], twin.convs[1].nn[2]),
              (twin.convs[2].nn,)]
    with torch.no_grad():
        for block, linears in zip(blocks, layers):
            for k, (lin, w, b) in enumerate(zip(linears, block.W, block.B)):
                lin.weight.copy_(w[0].T * (0.5 if k == 0 else 1.0))  # (A + I) / 2: the first map of the layer
                lin.bias.copy_(-0.5 * torch.log1p(torch.exp(-2.0 * b[0])))
    return twin


class RefGraph:
    """The reference's graph interface (``get_adj``, ``label``, ...)."""

    def __init__(self, g):
        self.nbnodes, self.label, self.node_features = g.num_nodes, 1 - int(g.y), None
        self.adj = torch.eye(g.num_nodes)
        self.adj[g.edge_index[0], g.edge_index[1]] = 1.0

    def get_adj(self):
        return self.adj


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repo", type=Path, required=True, help="a checkout of xiong-ping/sgnn_lrp_via_mp")
    parser.add_argument("--graphs", type=int, default=200, help="graphs of the greedy search (default 200)")
    parser.add_argument("--sets", type=int, default=5, help="random node sets per graph compared (default 5)")
    parser.add_argument("--out", type=Path, default=RESULTS / "sgnn_reference.md")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    reference, ref_sr = load_reference(args.repo)
    twin = as_pyg(reference)
    rules = PAPER_RULES["Gamma(3, 1.5, 0) by layer"]
    graphs = make_task("BA-2Motifs", 0).graphs[:args.graphs]
    gen = torch.Generator().manual_seed(0)

    out_diff, rel_diff, compared, right = 0.0, 0.0, 0, 0
    aucs = {alpha: {0: [], 1: []} for alpha in PUBLISHED}
    for g in graphs:
        ref_g, x = RefGraph(g), torch.ones(g.num_nodes, 1)
        with torch.no_grad():
            ours_out = twin(x, g.edge_index)[0]
        ref_out = reference.forward(ref_g.get_adj()).detach()
        out_diff = max(out_diff, float((ours_out - ref_out).abs().max() / ref_out.abs().max()))
        right += int(ours_out.argmax()) == ref_g.label
        target = torch.tensor([ref_g.label])
        sets = [torch.ones(g.num_nodes, dtype=torch.bool), g.gt_node.clone()]
        sets += [torch.rand(g.num_nodes, generator=gen) < 0.5 for _ in range(args.sets)]
        H, transforms = ref_sr.get_H_transform(ref_g.get_adj(), reference)
        inst = Instance(x, g.edge_index, 0, target, {}, None, g.gt_node, None, None, ref_g.label)
        for alpha in PUBLISHED:
            ours = lrp.subgraph_relevance(twin, x, g.edge_index, torch.stack(sets), 0, target=target, rules=rules,
                                          alpha=alpha)
            refs = [float(ref_sr.subgraph_mp_transcription(reference, ref_g, s.nonzero().view(-1).tolist(), alpha,
                                                           H=H, transforms=transforms)) for s in sets]
            # relative to the graph's scale, S(V) (a set's own value can be near 0)
            rel_diff = max(rel_diff, max(abs(float(v) - r) for v, r in zip(ours, refs)) / abs(refs[0]))
            compared += len(sets)
            aucs[alpha][int(g.y)].append(auroc(greedy_order(twin, inst, rules, alpha=alpha), g.gt_node))

    rows = [["outputs: SgnnGIN with the reference weights vs the reference forward", f"{out_diff:.1e}",
             f"{len(graphs)} graphs"],
            ["subgraph relevance: lrp.subgraph_relevance vs subgraph_mp_transcription, alpha 0 and 0.05",
             f"{rel_diff:.1e}", f"{compared} (node set, alpha) pairs"]]
    lines = [
        "# sGNN-LRP's model and code against lrp.subgraph_relevance",
        "",
        f"- command: `python {' '.join([os.path.relpath(sys.argv[0], ROOT)] + (sys.argv[1:] if argv is None else argv))}`",
        f"- date: {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- torch {torch.__version__}, torch_geometric {torch_geometric.__version__}, torch_geometric_lrp "
        f"{lrp.__version__}, Python {platform.python_version()}, torch threads 1",
        f"- runtime: {(time.perf_counter() - t0) / 60:.1f} min",
        "",
        "What is compared: see the docstring of `benchmarks/sgnn_reference.py`.",
        "",
        "## Agreement with the reference code (largest difference, relative to the output or to S(V))",
        "",
        table(["what", "largest difference", "over"], rows, ["l", "r", "r"]),
        "",
        "## The published figure, reproduced",
        "",
        table(["model", "alpha", "graphs", "accuracy", "greedy search node AUROC", "house", "cycle", "published"],
              [["sGNN-LRP's pretrained GIN (`gin-3-ba2motif.torch`)", f"{alpha:g}", str(len(graphs)),
                fmt(right / len(graphs)), f"**{fmt(nanmean(a[0] + a[1]), 4)}**", fmt(nanmean(a[0]), 4),
                fmt(nanmean(a[1]), 4), f"{PUBLISHED[alpha]}"] for alpha, a in aucs.items()],
              ["l"] + ["r"] * 7),
        "",
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
