"""Shared pieces of ``faithfulness.py`` and ``cost.py``: datasets with ground
truth, models, training, the explainers compared, metrics and measurement.

Everything is deterministic for a given seed (CPU, single process).

Datasets (all synthetic, generated here with PyG's generators)
--------------------------------------------------------------
* ``BA-Shapes``: ``ExplainerDataset(BAGraph(300, 5), 'house', num_motifs=80)``;
  node classes = role in the house (0 = base graph).
* ``Tree-Cycles``: ``ExplainerDataset(TreeGraph(8), CycleMotif(6), 80)``.
* ``Tree-Grid``: ``ExplainerDataset(TreeGraph(8), GridMotif(), 80)``.
  These three have constant node features (10 ones, as in the GNNExplainer
  paper); ground truth of an explained node = the edges and nodes of *its
  own* motif (a connected component of the dataset's ``edge_mask``).
* ``Infection``: ``InfectionDataset(ERGraph(500, 0.004), 50 infected,
  max_path_length=3)``; class = distance to the nearest infected node (0..3,
  4 = farther). PyG's ``edge_mask`` marks every edge that points away from an
  infected node within 3 hops (the union of all infection paths); the ground
  truth of an explained node ``v`` is the part of it that lies on a shortest
  path from an infected node to ``v``: edges ``j -> i`` (messages from ``j``
  to ``i``) with ``d(j) + 1 = d(i)`` and ``d(i) + dist(i, v) = d(v)`` (``d`` =
  distance to the nearest infected node), and the nodes on those paths.
* ``BA-2Motifs``: 200 graphs generated here: a Barabasi-Albert tree of 20
  nodes (``barabasi_albert_graph(20, 1)``) with a 5-node motif attached by
  one edge, a house (class 0) or a 5-cycle (class 1), 100 each; 10 constant
  features; ground truth = the motif's edges and nodes.

Models: 3 message-passing layers (hidden 64) with ``torch.nn.ReLU`` modules and
a linear head; ``GCN`` uses ``GCNConv``, ``GIN`` uses ``GINConv`` over a
two-layer MLP; graph models read out with ``global_mean_pool``.
"""
from __future__ import annotations

import math
import statistics
import os
import platform
import random
import sys
import time
from collections import deque
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import peak_memory  # beside this module
import torch
import torch.nn.functional as F
import torch_geometric
from torch import Tensor
from torch.nn import Linear, ModuleList, ReLU, Sequential
from torch_geometric.data import Batch, Data
from torch_geometric.datasets import ExplainerDataset, InfectionDataset
from torch_geometric.datasets.graph_generator import BAGraph, ERGraph, TreeGraph
from torch_geometric.datasets.motif_generator import CycleMotif, GridMotif, HouseMotif
from torch_geometric.explain import Explainer, Explanation
from torch_geometric.explain.algorithm import CaptumExplainer, GNNExplainer, PGExplainer
from torch_geometric.explain.algorithm.utils import clear_masks
from torch_geometric.explain.metric import characterization_score, fidelity, unfaithfulness
from torch_geometric.loader import DataLoader
from torch_geometric.nn import GCNConv, GINConv, MessagePassing, global_add_pool, global_mean_pool
from torch_geometric.utils import barabasi_albert_graph, k_hop_subgraph

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import torch_geometric_lrp as lrp  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
NUM_LAYERS = 3
HIDDEN = 64
DATASETS = ("BA-Shapes", "Tree-Cycles", "Tree-Grid", "Infection", "BA-2Motifs")
MODELS = ("GCN", "GIN")


def set_seed(seed: int) -> None:
    """Seed torch, numpy and random (PyG's ``barabasi_albert_graph`` draws from numpy)."""
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)


# ---------------------------------------------------------------------------
# Datasets
# ---------------------------------------------------------------------------

@dataclass
class Task:
    """A dataset with its ground truth.

    Node-level tasks keep one graph in ``data`` (``x``, ``edge_index``, ``y``,
    ``train_mask``, ``test_mask``); graph-level tasks a list in ``graphs``
    (each with ``gt_edge`` / ``gt_node``) and ``train_idx`` / ``test_idx``.
    ``candidates`` are the node ids (graph ids) instances are drawn from.
    ``motif_edges`` is the number of directed edges of one ground-truth
    explanation by construction: the size of the hard masks of the fidelity
    metrics.
    """

    name: str
    level: str
    num_features: int
    num_classes: int
    motif_edges: int
    candidates: Tensor
    data: Optional[Data] = None
    graphs: Optional[list] = None
    train_idx: Optional[Tensor] = None
    test_idx: Optional[Tensor] = None
    truth: Optional[Callable[[int], tuple[Tensor, Tensor]]] = None  # node -> (gt_edge, gt_node)


def _split(n: int, seed: int, train: float = 0.8) -> tuple[Tensor, Tensor]:
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(n, generator=g)
    cut = int(train * n)
    return perm[:cut], perm[cut:]


def _masks(n: int, seed: int) -> tuple[Tensor, Tensor]:
    train, _ = _split(n, seed)
    train_mask = torch.zeros(n, dtype=torch.bool)
    train_mask[train] = True
    return train_mask, ~train_mask


def _components(edge_index: Tensor, edge_on: Tensor, num_nodes: int) -> Tensor:
    """Component id per node of the graph made of the edges where ``edge_on``
    (union-find); nodes outside it are their own component."""
    parent = list(range(num_nodes))

    def find(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for a, b in edge_index[:, edge_on].t().tolist():
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[ra] = rb
    return torch.tensor([find(a) for a in range(num_nodes)])


def _motif_task(name: str, graph_generator, motif_generator, motif_edges: int, seed: int) -> Task:
    set_seed(seed)
    d = ExplainerDataset(graph_generator=graph_generator, motif_generator=motif_generator, num_motifs=80)[0]
    n = d.num_nodes
    gt_edge_all, gt_node_all = d.edge_mask.bool(), d.node_mask.bool()
    comp = _components(d.edge_index, gt_edge_all, n)
    edge_comp = comp[d.edge_index[0]]

    def truth(v: int) -> tuple[Tensor, Tensor]:
        return gt_edge_all & (edge_comp == comp[v]), gt_node_all & (comp == comp[v])

    train_mask, test_mask = _masks(n, seed)
    data = Data(x=torch.ones(n, 10), edge_index=d.edge_index, y=d.y, train_mask=train_mask, test_mask=test_mask)
    return Task(name, "node", 10, int(d.y.max()) + 1, motif_edges, gt_node_all.nonzero().view(-1),
                data=data, truth=truth)


def _bfs(adj: list[list[int]], sources: list[int], n: int) -> list[float]:
    dist = [math.inf] * n
    queue = deque()
    for s in sources:
        dist[s] = 0
        queue.append(s)
    while queue:
        a = queue.popleft()
        for b in adj[a]:
            if dist[b] == math.inf:
                dist[b] = dist[a] + 1
                queue.append(b)
    return dist


def _infection_task(seed: int) -> Task:
    set_seed(seed)
    d = InfectionDataset(graph_generator=ERGraph(num_nodes=500, edge_prob=0.004), num_infected_nodes=50,
                         max_path_length=3)[0]
    n, ei = d.num_nodes, d.edge_index
    src, dst = ei.tolist()
    out_adj = [[] for _ in range(n)]  # j -> i (messages flow from j to i)
    in_adj = [[] for _ in range(n)]
    for j, i in zip(src, dst):
        out_adj[j].append(i)
        in_adj[i].append(j)
    infected = (d.x[:, 1] == 1).nonzero().view(-1).tolist()
    d_inf = torch.tensor(_bfs(out_adj, infected, n))
    pyg_mask = d.edge_mask.bool()

    def truth(v: int) -> tuple[Tensor, Tensor]:
        to_v = torch.tensor(_bfs(in_adj, [v], n))  # dist(u, v) along message direction
        on_path = (d_inf + to_v) == d_inf[v]
        s, t = ei
        gt_edge = on_path[s] & on_path[t] & (d_inf[s] + 1 == d_inf[t]) & (to_v[s] == to_v[t] + 1)
        assert bool((gt_edge <= pyg_mask).all()), "per-node truth must lie inside PyG's edge_mask"
        return gt_edge, on_path

    train_mask, test_mask = _masks(n, seed)
    data = Data(x=d.x, edge_index=ei, y=d.y, train_mask=train_mask, test_mask=test_mask)
    candidates = ((d.y >= 1) & (d.y <= 3)).nonzero().view(-1)
    return Task("Infection", "node", 2, int(d.y.max()) + 1, 3, candidates, data=data, truth=truth)


def ba2motifs_task(seed: int, num_graphs: int = 200) -> Task:
    set_seed(seed)
    graphs = []
    for k in range(num_graphs):
        label = k % 2
        base = barabasi_albert_graph(20, 1)
        motif = HouseMotif()() if label == 0 else CycleMotif(5)()
        i = int(torch.randint(0, 20, (1,)))
        j = int(torch.randint(0, 5, (1,))) + 20
        edge_index = torch.cat([base, motif.edge_index + 20, torch.tensor([[i, j], [j, i]])], dim=1)
        gt_edge = torch.cat([torch.zeros(base.shape[1], dtype=torch.bool),
                             torch.ones(motif.edge_index.shape[1], dtype=torch.bool),
                             torch.zeros(2, dtype=torch.bool)])
        gt_node = torch.arange(25) >= 20
        graphs.append(Data(x=torch.ones(25, 10), edge_index=edge_index, y=torch.tensor([label]),
                           gt_edge=gt_edge, gt_node=gt_node))
    train_idx, test_idx = _split(num_graphs, seed)
    return Task("BA-2Motifs", "graph", 10, 2, 12, torch.arange(num_graphs), graphs=graphs,
                train_idx=train_idx, test_idx=test_idx)


def make_task(name: str, seed: int = 0) -> Task:
    if name == "BA-Shapes":
        return _motif_task(name, BAGraph(num_nodes=300, num_edges=5), "house", 12, seed)
    if name == "Tree-Cycles":
        return _motif_task(name, TreeGraph(depth=8), CycleMotif(6), 12, seed)
    if name == "Tree-Grid":
        return _motif_task(name, TreeGraph(depth=8), GridMotif(), 24, seed)
    if name == "Infection":
        return _infection_task(seed)
    if name == "BA-2Motifs":
        return ba2motifs_task(seed)
    raise ValueError(name)


# ---------------------------------------------------------------------------
# Models and training
# ---------------------------------------------------------------------------

class GNN(torch.nn.Module):
    """``NUM_LAYERS`` x (conv -> ReLU) -> [global pooling] -> Linear.

    ``pool``: the readout of graph models, ``"mean"`` (``global_mean_pool``,
    every benchmark's model) or ``"add"`` (``global_add_pool``, the sum
    readout of sGNN-LRP's GIN; ``walks.py --readout add``).

    ``head=False``: the layout of PyG's ``BasicGNN`` models (``GCN``,
    ``GIN``): the last conv outputs the class scores, with no ReLU after it
    and no ``Linear`` head (graph models pool those scores);
    ``rules.py --no-head``."""

    def __init__(self, kind: str, in_channels: int, out_channels: int, hidden: int = HIDDEN,
                 num_layers: int = NUM_LAYERS, graph_level: bool = False, pool: str = "mean", head: bool = True):
        super().__init__()
        if pool not in ("mean", "add"):
            raise ValueError(f"pool: 'mean' or 'add', got {pool!r}")
        self.kind, self.graph_level, self.pool = kind, graph_level, pool
        self.convs = ModuleList()
        for layer in range(num_layers):
            c_in = in_channels if layer == 0 else hidden
            c_out = hidden if head or layer < num_layers - 1 else out_channels
            if kind == "GCN":
                self.convs.append(GCNConv(c_in, c_out))
            elif kind == "GIN":
                self.convs.append(GINConv(Sequential(Linear(c_in, hidden), ReLU(), Linear(hidden, c_out))))
            else:
                raise ValueError(kind)
        self.acts = ModuleList([ReLU() for _ in range(num_layers if head else num_layers - 1)])
        self.head = Linear(hidden, out_channels) if head else None

    def forward(self, x: Tensor, edge_index: Tensor, batch: Optional[Tensor] = None) -> Tensor:
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index)
            if i < len(self.acts):
                x = self.acts[i](x)
        if self.graph_level:
            if batch is None:
                batch = torch.zeros(x.shape[0], dtype=torch.long, device=x.device)
            x = (global_mean_pool if self.pool == "mean" else global_add_pool)(x, batch)
        return x if self.head is None else self.head(x)


@dataclass
class Trained:
    task: Task
    kind: str
    model: GNN
    train_acc: float
    test_acc: float
    seconds: float


def train(task: Task, kind: str, seed: int = 0, quick: bool = False, pool: str = "mean",
          head: bool = True) -> Trained:
    set_seed(seed)
    model = GNN(kind, task.num_features, task.num_classes, graph_level=task.level == "graph", pool=pool, head=head)
    opt = torch.optim.Adam(model.parameters(), lr=0.003, weight_decay=5e-4)
    start = time.perf_counter()
    if task.level == "node":
        d = task.data
        epochs = 500 if quick else 2000
        model.train()
        for _ in range(epochs):
            opt.zero_grad()
            loss = F.cross_entropy(model(d.x, d.edge_index)[d.train_mask], d.y[d.train_mask])
            loss.backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            pred = model(d.x, d.edge_index).argmax(-1)
        train_acc = (pred[d.train_mask] == d.y[d.train_mask]).float().mean().item()
        test_acc = (pred[d.test_mask] == d.y[d.test_mask]).float().mean().item()
    else:
        train_acc, test_acc = fit_graphs(model, opt, task, seed, 100 if quick else 300, F.cross_entropy)
    return Trained(task, kind, model, train_acc, test_acc, time.perf_counter() - start)


def fit_graphs(model: torch.nn.Module, opt: torch.optim.Optimizer, task: Task, seed: int, epochs: int,
               loss, batch_size: int = 32, schedule=None) -> tuple[float, float]:
    """Train a graph-level ``model`` on ``task.train_idx`` for ``epochs``
    (batches of ``batch_size``, shuffled by a generator seeded with ``seed``),
    minimising ``loss(output, y)``; ``schedule``, an LR scheduler of ``opt``,
    steps once per epoch. Leave the model in eval mode and return its train
    and test accuracy."""
    g = torch.Generator().manual_seed(seed)
    loader = DataLoader([task.graphs[i] for i in task.train_idx], batch_size=batch_size, shuffle=True, generator=g)
    model.train()
    for _ in range(epochs):
        for b in loader:
            opt.zero_grad()
            loss(model(b.x, b.edge_index, b.batch), b.y).backward()
            opt.step()
        if schedule is not None:
            schedule.step()
    model.eval()

    def acc(idx):
        b = Batch.from_data_list([task.graphs[i] for i in idx])
        with torch.no_grad():
            return (model(b.x, b.edge_index, b.batch).argmax(-1) == b.y).float().mean().item()

    return acc(task.train_idx), acc(task.test_idx)


# ---------------------------------------------------------------------------
# Instances
# ---------------------------------------------------------------------------

@dataclass
class Instance:
    """One prediction to explain, with its ground truth and computation subgraph."""

    x: Tensor
    edge_index: Tensor
    index: int
    target: Tensor              # the model's prediction for every output row
    kwargs: dict
    gt_edge: Tensor             # bool [E]
    gt_node: Tensor             # bool [N]
    sub_edge: Tensor            # bool [E]: edges that reach the explained output
    sub_node: Tensor            # bool [N]
    label: int                  # dataset label of the explained output


def make_instances(trained: Trained, count: int, seed: int = 0) -> list[Instance]:
    """``count`` instances drawn (fixed seed) from the task's candidates
    (motif / infection-path nodes, or graphs); the explained class is the
    model's prediction."""
    task, model = trained.task, trained.model
    g = torch.Generator().manual_seed(seed + 1)
    pick = task.candidates[torch.randperm(task.candidates.numel(), generator=g)[:count]].tolist()
    out = []
    if task.level == "node":
        d = task.data
        with torch.no_grad():
            pred = model(d.x, d.edge_index).argmax(-1)
        for v in pick:
            gt_edge, gt_node = task.truth(v)
            nodes, _, _, sub_edge = k_hop_subgraph(v, NUM_LAYERS, d.edge_index, num_nodes=d.num_nodes,
                                                   directed=True)
            sub_node = torch.zeros(d.num_nodes, dtype=torch.bool)
            sub_node[nodes] = True
            out.append(Instance(d.x, d.edge_index, v, pred, {}, gt_edge, gt_node, sub_edge, sub_node,
                                int(d.y[v])))
    else:
        for k in pick:
            gr = task.graphs[k]
            batch = torch.zeros(gr.num_nodes, dtype=torch.long)
            with torch.no_grad():
                pred = model(gr.x, gr.edge_index, batch).argmax(-1)
            out.append(Instance(gr.x, gr.edge_index, 0, pred, {"batch": batch}, gr.gt_edge, gr.gt_node,
                                torch.ones(gr.edge_index.shape[1], dtype=torch.bool),
                                torch.ones(gr.num_nodes, dtype=torch.bool), int(gr.y)))
    return out


# ---------------------------------------------------------------------------
# Explainers
# ---------------------------------------------------------------------------

LRP_COMPOSITES = {
    "default": None,
    "epsilon": {torch.nn.Module: lrp.rules.Epsilon(1e-6)},
    "gamma": {torch.nn.Module: lrp.rules.Gamma(0.25)},
    "alpha-beta": {torch.nn.Module: lrp.rules.AlphaBeta(2, 1)},
}
LRP_VIEWS = {"default": ("signed", "abs", "positive"), "epsilon": ("signed", "abs"), "gamma": ("signed", "abs"),
             "alpha-beta": ("signed", "abs")}
CAPTUM_METHODS = ("Saliency", "InputXGradient", "IntegratedGradients", "GuidedBackprop")
#: Captum methods whose attributions are signed: their |abs| view is reported too.
CAPTUM_SIGNED = ("InputXGradient", "IntegratedGradients", "GuidedBackprop")
PG_EPOCHS = 30


@dataclass
class Method:
    """A row of the tables: an explainer and the view of its masks."""

    name: str
    family: str
    explainer: Explainer
    abs_view: bool = False      # report |mask| (the explainer's own output otherwise)
    base: Optional[str] = None  # the row whose explanations this view re-uses
    setup_seconds: float = 0.0  # one-off cost (PGExplainer training)


def model_config(task: Task) -> dict:
    return dict(mode="multiclass_classification", task_level=task.level, return_type="raw")


def scrub(model: torch.nn.Module) -> None:
    """Remove the explain state PyG's explainers leave on ``model``.

    PyG 2.8.1's ``GNNExplainer`` registers ``_edge_mask`` as a parameter slot
    of every message-passing layer and leaves it (as ``None``) after it is
    done; ``set_masks`` then wraps any later mask in a new ``Parameter``,
    which detaches it from the graph (``CaptumExplainer`` fails, and a
    ``PGExplainer`` trained afterwards gets no gradient into its MLP).
    """
    clear_masks(model)
    for module in model.modules():
        if isinstance(module, MessagePassing):
            module._parameters.pop("_edge_mask", None)
            module.explain = None


def make_methods(trained: Trained, train_instances: list[Instance], *, include=None,
                 gnn_epochs: int = 100, pg_epochs: int = PG_EPOCHS, seed: int = 0) -> list[Method]:
    """The compared explainers for ``trained.model``, all configured as
    phenomenon explanations of the model's predicted class
    (``node_mask_type='attributes'``, ``edge_mask_type='object'``; PGExplainer
    has edges only). PGExplainer is trained here on ``train_instances``
    (as PyG documents: ``algorithm.train(epoch, model, x, edge_index,
    target=..., index=...)`` per epoch and instance; graph level: per epoch
    over all training graphs in batches of 32)."""
    task, model = trained.task, trained.model
    cfg = model_config(task)

    def explainer(algorithm, node=True):
        return Explainer(model, algorithm=algorithm, explanation_type="phenomenon",
                         node_mask_type="attributes" if node else None, edge_mask_type="object",
                         model_config=cfg)

    def wanted(family):
        return include is None or family in include

    methods: list[Method] = []
    if wanted("LRP"):
        for comp, rules in LRP_COMPOSITES.items():
            for view in LRP_VIEWS[comp]:
                methods.append(Method(f"LRP {comp} ({view})", "LRP", explainer(lrp.LRP(rules=rules, mask=view))))
    if wanted("GNNExplainer"):
        methods.append(Method("GNNExplainer", "GNNExplainer", explainer(GNNExplainer(epochs=gnn_epochs))))
    if wanted("PGExplainer"):
        set_seed(seed)
        pg = explainer(PGExplainer(epochs=pg_epochs, lr=0.003), node=False)
        start = time.perf_counter()
        train_pgexplainer(pg, trained, train_instances, pg_epochs, seed)
        methods.append(Method("PGExplainer", "PGExplainer", pg, setup_seconds=time.perf_counter() - start))
    if wanted("Captum"):
        for name in CAPTUM_METHODS:
            methods.append(Method(name, "Captum", explainer(CaptumExplainer(name))))
            if name in CAPTUM_SIGNED:
                methods.append(Method(f"{name} (abs)", "Captum", methods[-1].explainer, abs_view=True, base=name))
    return methods


def train_pgexplainer(pg: Explainer, trained: Trained, train_instances: list[Instance], epochs: int,
                      seed: int) -> None:
    task, model = trained.task, trained.model
    scrub(model)
    if task.level == "node":
        for epoch in range(epochs):
            for inst in train_instances:
                pg.algorithm.train(epoch, model, inst.x, inst.edge_index, target=inst.target, index=inst.index)
    else:
        g = torch.Generator().manual_seed(seed)
        loader = DataLoader([task.graphs[i] for i in task.train_idx], batch_size=32, shuffle=True, generator=g)
        for epoch in range(epochs):
            for b in loader:
                with torch.no_grad():
                    target = model(b.x, b.edge_index, b.batch).argmax(-1)
                pg.algorithm.train(epoch, model, b.x, b.edge_index, target=target, batch=b.batch)
    scrub(model)


def explain(method: Method, inst: Instance, seed: int = 0) -> Explanation:
    """Run ``method`` on ``inst`` (seeded: GNNExplainer starts from random masks)."""
    set_seed(seed)
    model = method.explainer.model
    try:
        return method.explainer(inst.x, inst.edge_index, target=inst.target, index=inst.index, **inst.kwargs)
    finally:
        scrub(model)


# ---------------------------------------------------------------------------
# Metrics
# ---------------------------------------------------------------------------

def nanmean(v) -> float:
    """Mean of the values that are not NaN (NaN when there are none)."""
    v = [a for a in v if not math.isnan(a)]
    return statistics.fmean(v) if v else float("nan")


def auroc(scores: Tensor, labels: Tensor) -> float:
    """Area under the ROC curve (Mann-Whitney U with average ranks for ties;
    scores equal to 1e-5 of the largest |score| count as ties); NaN when
    ``labels`` holds one class only."""
    scores, labels = scores.double().view(-1), labels.bool().view(-1)
    pos, neg = int(labels.sum()), int((~labels).sum())
    if pos == 0 or neg == 0:
        return float("nan")
    scores = _quantize(scores)
    order = scores.argsort()
    sorted_scores = scores[order]
    ranks = torch.empty_like(scores)
    ranks[order] = torch.arange(1, scores.numel() + 1, dtype=torch.double)
    # average ranks over ties
    uniq, inverse, counts = torch.unique(sorted_scores, return_inverse=True, return_counts=True)
    rank_sum = torch.zeros(uniq.numel(), dtype=torch.double).index_add_(
        0, inverse, torch.arange(1, scores.numel() + 1, dtype=torch.double))
    avg = rank_sum / counts
    ranks[order] = avg[inverse]
    u = ranks[labels].sum().item() - pos * (pos + 1) / 2
    return u / (pos * neg)


def masks_of(method: Method, explanation: Explanation) -> tuple[Optional[Tensor], Tensor]:
    """(node score [N] or None, edge score [E]) of an explanation under the
    method's view; node score = node_mask summed over features."""
    edge = explanation.edge_mask.detach().float()
    node = explanation.get("node_mask")
    if node is not None:
        node = node.detach().float()
    if method.abs_view:
        edge = edge.abs()
        node = None if node is None else node.abs()
    return (None if node is None else node.sum(dim=-1)), edge


def _quantize(scores: Tensor) -> Tensor:
    """Scores that agree to 1e-5 of the largest |score| become equal: float
    rounding (e.g. epsilon-LRP vs gradient x input) must not decide a ranking."""
    scale = scores.abs().max()
    return torch.round(scores / (scale * 1e-5)) if scale > 0 else scores


def hard_topk(edge: Tensor, sub_edge: Tensor, k: int) -> Tensor:
    """1 on the ``k`` highest-scoring edges of the computation subgraph, 0
    elsewhere (ties, after :func:`_quantize`, go to the lower edge index)."""
    quantized = _quantize(edge[sub_edge].double())
    scores = torch.full(edge.shape, -math.inf, dtype=torch.double)
    scores[sub_edge] = quantized
    # stable descending sort: among equal scores the lower edge index wins
    order = torch.sort(scores, descending=True, stable=True).indices
    k = min(k, int(sub_edge.sum()))
    hard = torch.zeros_like(edge)
    hard[order[:k]] = 1.0
    return hard


def faithfulness_metrics(evaluator: Explainer, inst: Instance, hard_edge: Tensor) -> tuple[float, float, float]:
    """(fid+, fid-, unfaithfulness) of the hard edge mask with PyG's metrics.

    ``evaluator`` is one phenomenon ``Explainer`` per model, the same for all
    methods; the explanation holds the hard edge mask only (no node mask)."""
    ex = Explanation(x=inst.x, edge_index=inst.edge_index, edge_mask=hard_edge, target=inst.target,
                     index=inst.index, **inst.kwargs)
    ex._model_args = list(inst.kwargs)
    pos, neg = fidelity(evaluator, ex)
    unf = unfaithfulness(evaluator, ex)
    return pos, neg, unf


def charact(pos: float, neg: float) -> float:
    """PyG's characterization_score of mean fid+ / fid- (0 where it divides by 0)."""
    if pos == 0 or neg == 1:
        return 0.0
    return float(characterization_score(torch.tensor(pos), torch.tensor(neg)))


def evaluator_for(trained: Trained) -> Explainer:
    from torch_geometric.explain.algorithm import DummyExplainer
    return Explainer(trained.model, algorithm=DummyExplainer(), explanation_type="phenomenon",
                     node_mask_type=None, edge_mask_type="object", model_config=model_config(trained.task))


# ---------------------------------------------------------------------------
# Measurement and reporting
# ---------------------------------------------------------------------------

can_track_peak, reset_peak, peak = peak_memory.can_track, peak_memory.reset, peak_memory.peak


def machine() -> str:
    """The versions and the CPU cores of a run (every result file's header)."""
    return (f"torch {torch.__version__}, torch_geometric {torch_geometric.__version__}, "
            f"torch_geometric_lrp {lrp.__version__}, Python {platform.python_version()}, {os.cpu_count()} CPU cores")


def header(title: str, argv: list[str], seed: int, extra: list[str] = (),
           seeded: str = "datasets, model initialisation, training, instance sample, explainers") -> str:
    """The standard header; ``seeded`` says what ``seed`` seeds."""
    lines = [
        f"# {title}",
        "",
        f"- command: `python {' '.join([os.path.relpath(sys.argv[0], ROOT)] + argv)}`",
        f"- date: {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- seed: {seed} ({seeded})",
        f"- {machine()}, torch threads {torch.get_num_threads()}",
    ]
    return "\n".join(lines + list(extra)) + "\n"


def table(columns: list[str], rows: list[list[str]], align: Optional[list[str]] = None) -> str:
    align = align or ["l"] + ["r"] * (len(columns) - 1)
    sep = ["---:" if a == "r" else "---" for a in align]
    out = ["| " + " | ".join(columns) + " |", "| " + " | ".join(sep) + " |"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out) + "\n"


def fmt(v: Optional[float], digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    return f"{v:.{digits}f}"
