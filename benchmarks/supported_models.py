"""Coverage: which PyG models and layers ``lrp.explain`` explains, and why it refuses the others.

Every class exported by ``torch_geometric.nn.models`` and by
``torch_geometric.nn.conv`` (``__all__``; ``MessagePassing`` itself and the
functions ``to_captum_*`` / ``captum_output_to_dicts`` are not layers), with
the ``BasicGNN`` models also under their common options (``jk``, ``norm``,
``v2``, aggregations), plus the heterogeneous layers (``HGTConv``,
``HANConv``, ``HeteroConv``, ``to_hetero`` of a SAGE model,
``HeteroJumpingKnowledge``) on a small ``HeteroData``. Each entry is a
builder written out below that returns ``(model, inputs)``:

* Graph: 20 nodes, 60 random edges (no self-loops), 8 features; where a
  layer takes them, ``edge_attr`` (4 features), ``pos`` (3-D), ``edge_type``
  (3 relations), ``node_type`` (2 types), a negative edge set (signed
  layers). Graph-level models (``AttentiveFP``, ``NeuralFingerprint`` and the
  3-D molecule models) get 5 molecules of 4 atoms (complete graphs, the same
  20 nodes / 60 edges) with a ``batch`` vector; the molecule models get atom
  types ``z`` as ``x`` and ``pos``. Link predictors get 8 ``edge_label_index``
  pairs. Models built on node ids (``Node2Vec``, ``MetaPath2Vec``,
  ``LightGCN``, ``TGNMemory``, ``RENet``) get the ids as ``x``
  (``torch.arange``), as they would be called.
* Model: a conv layer gets a head, ``Linear(relu(conv(x, ...)), 3)``; a model
  with ``out_channels`` ends in 3 logits itself, one without gets the same
  head. Everything is in eval mode, untrained (seed 0).
* Call: ``lrp.explain(model, x, edge_index, index=torch.arange(5),
  mode=..., **kwargs)`` with the defaults otherwise (``strict=True``,
  subgraph cut for node-level outputs); ``mode`` is
  ``multiclass_classification`` except where the model's output is one
  value per row (graph regression of the molecule models, link scores).

Columns: ``task`` is the task level ``lrp.explain`` read off the output and
the mode it was given. ``status`` is ``explained``; ``explained (gap)`` when the
conservation gap ``|residual| / |score|`` is above 1e-3 (listed, counted as
not explained); ``refused`` when ``lrp.explain`` raises (the reason is the
exception's type and the first line of its message); ``skipped (cannot
build)`` / ``skipped (cannot run)`` when the model itself cannot be
constructed or cannot run a plain forward + backward here (PyG refuses the
arguments, an optional package such as ``torch_cluster`` or ``pyg_lib`` is
missing). Skipped entries do not count in the percentages, which are
``explained / (explained + explained (gap) + refused)``. ``time`` is one
explanation divided by one plain forward + backward of the same model on the
same inputs (``out[index].sum().backward()`` with ``x.requires_grad_()``),
each the median of 3 runs, run alternately, after one untimed run of each
(``n/a`` for a model whose forward runs under ``torch.no_grad``).

Writes ``benchmarks/results/coverage.md`` (``--out``); ``--only NAME`` runs the
entries of that name or class with tracebacks and writes nothing unless
``--out`` is given. One torch thread; about 15 seconds on two cores.

    python benchmarks/supported_models.py [--only NAME] [--out PATH]
"""
from __future__ import annotations

import argparse
import inspect
import os
import platform
import sys
import time
import traceback
import warnings
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Optional

import torch
import torch_geometric
from torch.nn import Linear, ReLU, Sequential
from torch_geometric.data import Data, HeteroData
from torch_geometric.nn import conv as C
from torch_geometric.nn import models as M

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from common import table  # noqa: E402
from explain_scale import timed_pair  # noqa: E402  (both sides run alternately)

import torch_geometric_lrp as lrp  # noqa: E402

N, E, F_IN, CLASSES, HIDDEN = 20, 60, 8, 3, 16
INDEX = torch.arange(5)
GAP_LIMIT = 1e-3
REPEATS = 3
MULTICLASS, BINARY, REGRESSION = "multiclass_classification", "binary_classification", "regression"
NOT_LAYERS = {"MessagePassing", "to_captum_model", "to_captum_input", "captum_output_to_dicts"}


# ---------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------

def graph() -> dict:
    """20 nodes, 60 random edges without self-loops, and every extra input a layer may take."""
    g = torch.Generator().manual_seed(0)
    src = torch.randint(0, N, (E,), generator=g)
    dst = (src + torch.randint(1, N, (E,), generator=g)) % N
    neg_src = torch.randint(0, N, (E // 2,), generator=g)
    neg_dst = (neg_src + torch.randint(1, N, (E // 2,), generator=g)) % N
    label_src = torch.randint(0, N, (8,), generator=g)
    label_dst = (label_src + torch.randint(1, N, (8,), generator=g)) % N
    pos = torch.randn(N, 3, generator=g)
    return dict(
        x=torch.randn(N, F_IN, generator=g),
        edge_index=torch.stack([src, dst]),
        edge_attr=torch.randn(E, 4, generator=g),
        edge_weight=torch.rand(E, generator=g) + 0.1,
        pos=pos,
        normal=torch.nn.functional.normalize(torch.randn(N, 3, generator=g), dim=-1),
        edge_type=torch.randint(0, 3, (E,), generator=g),
        node_type=torch.randint(0, 2, (N,), generator=g),
        neg_edge_index=torch.stack([neg_src, neg_dst]),
        edge_label_index=torch.stack([label_src, label_dst]),
        y=torch.randint(0, CLASSES, (N,), generator=g),
        train_mask=torch.rand(N, generator=g) < 0.5,
    )


def molecules() -> dict:
    """5 molecules of 4 atoms, each a complete graph (12 directed edges): 20 nodes, 60 edges."""
    g = torch.Generator().manual_seed(0)
    pairs = torch.tensor([[i, j] for i in range(4) for j in range(4) if i != j]).t()
    edge_index = torch.cat([pairs + 4 * k for k in range(5)], dim=1)
    return dict(
        x=torch.randn(N, F_IN, generator=g),
        z=torch.randint(1, 10, (N,), generator=g),
        pos=torch.randn(N, 3, generator=g),
        edge_index=edge_index,
        edge_attr=torch.randn(E, 4, generator=g),
        batch=torch.arange(5).repeat_interleave(4),
    )


def hetero() -> HeteroData:
    """12 papers (8 features), 8 authors (6 features); writes, its reverse, cites."""
    g = torch.Generator().manual_seed(0)
    data = HeteroData()
    data["paper"].x = torch.randn(12, F_IN, generator=g)
    data["author"].x = torch.randn(8, 6, generator=g)
    writes = torch.stack([torch.randint(0, 8, (24,), generator=g), torch.randint(0, 12, (24,), generator=g)])
    data["author", "writes", "paper"].edge_index = writes
    data["paper", "rev_writes", "author"].edge_index = writes.flip(0)
    src = torch.randint(0, 12, (20,), generator=g)
    dst = (src + torch.randint(1, 12, (20,), generator=g)) % 12
    data["paper", "cites", "paper"].edge_index = torch.stack([src, dst])
    return data


def node_inputs(*keys: str) -> dict:
    """``x``, ``edge_index`` and the named extra inputs of :func:`graph`."""
    g = graph()
    return {"x": g["x"], "edge_index": g["edge_index"], **{k: g[k] for k in keys}}


# ---------------------------------------------------------------------------
# Wrappers
# ---------------------------------------------------------------------------

def plain_call(body, x, edge_index, **kwargs):
    return body(x, edge_index, **kwargs)


class Net(torch.nn.Module):
    """``call(body, x, edge_index, **kwargs)``, followed by ``Linear(width, 3)``
    after a ReLU when ``width`` is given (node-level logits)."""

    def __init__(self, body: torch.nn.Module, call: Callable = plain_call, width: Optional[int] = None):
        super().__init__()
        self.body, self.call = body, call
        self.head = None if width is None else Linear(width, CLASSES)

    def forward(self, x, edge_index, **kwargs):
        out = self.call(self.body, x, edge_index, **kwargs)
        return out if self.head is None else self.head(out.relu())


def headed(body: torch.nn.Module, inputs: dict, call: Callable = plain_call) -> Net:
    """``body`` with a ``Linear(·, 3)`` head; one eval-mode forward finds the
    body's output width (and materialises lazy parameters)."""
    body.eval()
    x, edge_index, kwargs = split(inputs)
    with torch.no_grad():
        out = call(body, x, edge_index, **kwargs)
    return Net(body, call, out.shape[-1])


def conv_entry(conv: torch.nn.Module, *keys: str, call: Callable = plain_call, inputs: Optional[dict] = None):
    """A conv layer on :func:`graph` with the named extra inputs (or on ``inputs``), under a head."""
    inputs = inputs or node_inputs(*keys)
    return headed(conv, inputs, call), inputs


def sorted_by_target(inputs: dict) -> dict:
    """``inputs`` with the edges sorted by target node (``LSTMAggregation`` needs a sorted index)."""
    order = inputs["edge_index"][1].argsort(stable=True)
    return {**inputs, "edge_index": inputs["edge_index"][:, order]}


def mlp(*sizes: int) -> Sequential:
    layers = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [Linear(a, b), ReLU()]
    return Sequential(*layers[:-1])


class AllPairs:
    """An ``interaction_graph`` for SchNet: every ordered pair of atoms of one
    molecule, with its length (``radius_graph``, the default, needs ``pyg_lib``
    or ``torch_cluster``; on molecules of 4 atoms this is the radius graph of a
    large cutoff)."""

    def __call__(self, pos, batch):
        same = batch.view(-1, 1) == batch.view(1, -1)
        same.fill_diagonal_(False)
        edge_index = same.nonzero().t()
        row, col = edge_index
        return edge_index, (pos[row] - pos[col]).norm(dim=-1)


def summary(z, *args, **kwargs):
    return torch.sigmoid(z.mean(dim=0))


def corruption(x, edge_index):
    return x[torch.randperm(x.size(0))], edge_index


class VariationalEncoder(torch.nn.Module):
    """``(mu, logstd)`` from two ``GCNConv``, as VGAE / ARGVA expect."""

    def __init__(self):
        super().__init__()
        self.mu, self.logstd = C.GCNConv(F_IN, HIDDEN), C.GCNConv(F_IN, HIDDEN)

    def forward(self, x, edge_index):
        return self.mu(x, edge_index), self.logstd(x, edge_index)


class JKNet(torch.nn.Module):
    """Two ``GCNConv`` (ReLU) read out by ``JumpingKnowledge``, then a head."""

    def __init__(self, mode: str):
        super().__init__()
        self.convs = torch.nn.ModuleList([C.GCNConv(F_IN, HIDDEN), C.GCNConv(HIDDEN, HIDDEN)])
        self.jk = M.JumpingKnowledge(mode, channels=HIDDEN, num_layers=2)
        self.head = Linear(2 * HIDDEN if mode == "cat" else HIDDEN, CLASSES)

    def forward(self, x, edge_index):
        xs = []
        for conv in self.convs:
            x = conv(x, edge_index).relu()
            xs.append(x)
        return self.head(self.jk(xs))


class EdgeModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = mlp(2 * F_IN + 4, HIDDEN, 4)

    def forward(self, src, dst, edge_attr, u, batch):
        return self.mlp(torch.cat([src, dst, edge_attr], dim=-1))


class NodeModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = mlp(F_IN + 4, HIDDEN, HIDDEN)

    def forward(self, x, edge_index, edge_attr, u, batch):
        messages = torch_geometric.utils.scatter(edge_attr, edge_index[1], 0, dim_size=x.size(0), reduce="mean")
        return self.mlp(torch.cat([x, messages], dim=-1))


class DeepGCN(torch.nn.Module):
    """An encoder, one ``DeepGCNLayer`` (``GENConv``, ``LayerNorm``, ``res+``), a head."""

    def __init__(self):
        super().__init__()
        self.encoder = Linear(F_IN, HIDDEN)
        self.layer = M.DeepGCNLayer(C.GENConv(HIDDEN, HIDDEN), torch.nn.LayerNorm(HIDDEN), ReLU(), block="res+")
        self.head = Linear(HIDDEN, CLASSES)

    def forward(self, x, edge_index):
        return self.head(self.layer(self.encoder(x), edge_index).relu())


class CorrectSmooth(torch.nn.Module):
    """A linear base predictor's softmax, corrected and smoothed by ``CorrectAndSmooth``."""

    def __init__(self):
        super().__init__()
        self.base = Linear(F_IN, CLASSES)
        self.cs = M.CorrectAndSmooth(2, 0.8, 2, 0.8)

    def forward(self, x, edge_index, y, train_mask):
        return self.cs(self.base(x).softmax(dim=-1), y[train_mask], train_mask, edge_index)


class MaskLabelNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.label = M.MaskLabel(CLASSES, F_IN)
        self.conv = C.GCNConv(F_IN, HIDDEN)
        self.head = Linear(HIDDEN, CLASSES)

    def forward(self, x, edge_index, y, train_mask):
        return self.head(self.conv(self.label(x, y, train_mask), edge_index).relu())


class RevNet(torch.nn.Module):
    """An encoder, ``GroupAddRev`` over two ``GCNConv`` groups, a head. (``GroupAddRev``
    frees the storage of its input, so the input is the encoder's output, not ``x``.)"""

    def __init__(self, disable: bool = False):
        super().__init__()
        self.encoder = Linear(F_IN, HIDDEN)
        self.rev = M.GroupAddRev(C.GCNConv(HIDDEN // 2, HIDDEN // 2), num_groups=2, disable=disable)
        self.head = Linear(HIDDEN, CLASSES)

    def forward(self, x, edge_index):
        return self.head(self.rev(self.encoder(x), edge_index).relu())


class WLNet(torch.nn.Module):
    """``WLConv`` colours (integer ``x``), embedded, then a head."""

    def __init__(self):
        super().__init__()
        self.wl = C.WLConv()
        self.embedding = torch.nn.Embedding(64, HIDDEN)
        self.head = Linear(HIDDEN, CLASSES)

    def forward(self, x, edge_index):
        return self.head(self.embedding(self.wl(x, edge_index) % 64).relu())


class SAGE(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = C.SAGEConv((-1, -1), HIDDEN), C.SAGEConv((-1, -1), HIDDEN)

    def forward(self, x, edge_index):
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)


class HeteroJK(torch.nn.Module):
    """Two ``HeteroConv`` layers read out per node type by ``HeteroJumpingKnowledge``."""

    def __init__(self, metadata):
        super().__init__()
        self.convs = torch.nn.ModuleList([
            C.HeteroConv({et: C.SAGEConv((-1, -1), HIDDEN) for et in metadata[1]}, aggr="sum") for _ in range(2)])
        self.jk = M.HeteroJumpingKnowledge(metadata[0], "cat")

    def forward(self, x_dict, edge_index_dict):
        xs = {t: [] for t in x_dict}
        for conv in self.convs:
            x_dict = {t: h.relu() for t, h in conv(x_dict, edge_index_dict).items()}
            for t, h in x_dict.items():
                xs[t].append(h)
        return self.jk(xs)


# ---------------------------------------------------------------------------
# Registry
# ---------------------------------------------------------------------------

@dataclass
class Entry:
    name: str
    kind: str             # model / conv / hetero
    cls: str              # the class of the __all__ lists it covers
    build: Callable[[], tuple]
    mode: str = MULTICLASS


ENTRIES: list[Entry] = []


def add(name: str, kind: str, build: Callable[[], tuple], mode: str = MULTICLASS, cls: Optional[str] = None):
    ENTRIES.append(Entry(name, kind, cls or name.split(" ")[0], build, mode))


# --- BasicGNN models and their options -----------------------------------------------------

def basic_gnn(cls, **kwargs):
    def build():
        return cls(F_IN, HIDDEN, num_layers=2, out_channels=CLASSES, **kwargs), node_inputs()
    return build


def pna_degree() -> torch.Tensor:
    deg = torch_geometric.utils.degree(graph()["edge_index"][1], N, dtype=torch.long)
    return torch.bincount(deg)


PNA_FULL = dict(aggregators=["mean", "min", "max", "std"], scalers=["identity", "amplification", "attenuation"])
PNA_SIMPLE = dict(aggregators=["mean", "max", "sum"], scalers=["identity"])

add("GCN", "model", basic_gnn(M.GCN))
for jk in ("cat", "max", "lstm"):
    add(f"GCN (jk='{jk}')", "model", basic_gnn(M.GCN, jk=jk))
for norm in ("batch_norm", "layer_norm", "graph_norm", "instance_norm", "pair_norm"):
    add(f"GCN (norm='{norm}')", "model", basic_gnn(M.GCN, norm=norm))
add("GraphSAGE", "model", basic_gnn(M.GraphSAGE))
add("GraphSAGE (aggr='max')", "model", basic_gnn(M.GraphSAGE, aggr="max"))
add("GraphSAGE (jk='cat', norm='layer_norm')", "model", basic_gnn(M.GraphSAGE, jk="cat", norm="layer_norm"))
add("GIN", "model", basic_gnn(M.GIN))
add("GIN (jk='max')", "model", basic_gnn(M.GIN, jk="max"))
add("GAT", "model", basic_gnn(M.GAT, heads=2))
add("GAT (v2=True)", "model", basic_gnn(M.GAT, v2=True, heads=2))
add("PNA (mean/min/max/std)", "model", lambda: basic_gnn(M.PNA, deg=pna_degree(), **PNA_FULL)())
add("PNA (mean/max/sum)", "model", lambda: basic_gnn(M.PNA, deg=pna_degree(), **PNA_SIMPLE)())
add("EdgeCNN", "model", basic_gnn(M.EdgeCNN))
add("EdgeCNN (jk='cat')", "model", basic_gnn(M.EdgeCNN, jk="cat"))


# --- the other models --------------------------------------------------------------------

def ids_inputs(*keys: str) -> dict:
    """Node ids as ``x``, for the models that read a table of node embeddings."""
    return {**node_inputs(*keys), "x": torch.arange(N)}


def molecule_inputs(*keys: str, atoms: bool = False) -> dict:
    m = molecules()
    return {"x": m["z"] if atoms else m["x"], "edge_index": m["edge_index"], **{k: m[k] for k in keys}}


def build_renet():
    g = torch.Generator().manual_seed(1)
    history = 2 * N  # two past events per query
    inputs = ids_inputs()
    inputs.update(rel=torch.randint(0, 3, (N,), generator=g), obj=torch.randint(0, N, (N,), generator=g),
                  h_sub=torch.randint(0, N, (history,), generator=g),
                  h_sub_t=torch.randint(0, 3, (history,), generator=g),
                  h_sub_batch=torch.arange(N).repeat_interleave(2),
                  h_obj=torch.randint(0, N, (history,), generator=g),
                  h_obj_t=torch.randint(0, 3, (history,), generator=g),
                  h_obj_batch=torch.arange(N).repeat_interleave(2))

    def call(m, x, edge_index, **history_kwargs):
        return m(Data(sub=x, **history_kwargs))[0]

    return Net(M.RENet(N, 3, HIDDEN, seq_len=3), call), inputs


def build_gpse():
    def call(m, x, edge_index):
        n = x.size(0)
        data = Data(x=x, edge_index=edge_index, batch=torch.zeros(n, dtype=torch.long),
                    y=torch.zeros(n, 4), y_graph=torch.zeros(1, 2))
        return m(data)[0][:n]

    model = M.GPSE(dim_in=F_IN, dim_out=4, dim_inner=HIDDEN, layers_mp=2, num_node_targets=4, num_graph_targets=2,
                   multi_head_dim_inner=8, virtual_node=False)
    return Net(model, call), node_inputs()


def build_lpformer():
    model = M.LPFormer(F_IN, HIDDEN, num_gnn_layers=2, num_transformer_layers=1, num_heads=1)
    inputs = node_inputs("edge_label_index")
    inputs["ppr_matrix"] = model.calc_sparse_ppr(inputs["edge_index"], N)

    def call(m, x, edge_index, edge_label_index, ppr_matrix):
        return m(edge_label_index, x, edge_index, ppr_matrix)

    return Net(model, call), inputs


add("MLP", "model", lambda: (Net(M.MLP([F_IN, HIDDEN, CLASSES]), lambda m, x, ei: m(x)), node_inputs()))
add("JumpingKnowledge (mode='cat')", "model", lambda: (JKNet("cat"), node_inputs()))
add("JumpingKnowledge (mode='lstm')", "model", lambda: (JKNet("lstm"), node_inputs()))
add("MetaLayer (edge + node model)", "model", lambda: conv_entry(
    M.MetaLayer(EdgeModel(), NodeModel()), "edge_attr", call=lambda m, x, ei, edge_attr: m(x, ei, edge_attr)[0]))
add("Node2Vec", "model", lambda: (Net(M.Node2Vec(graph()["edge_index"], HIDDEN, walk_length=4, context_size=2),
                                      lambda m, x, ei: m(x), HIDDEN), ids_inputs()))
add("MetaPath2Vec (paper ids)", "model", lambda: (
    Net(M.MetaPath2Vec(hetero().edge_index_dict, HIDDEN,
                       [("author", "writes", "paper"), ("paper", "rev_writes", "author")],
                       walk_length=4, context_size=2), lambda m, x, ei: m("paper", x), HIDDEN),
    {"x": torch.arange(12), "edge_index": hetero()["paper", "cites", "paper"].edge_index}))
add("DeepGraphInfomax", "model", lambda: conv_entry(
    M.DeepGraphInfomax(HIDDEN, C.GCNConv(F_IN, HIDDEN), summary, corruption), call=lambda m, x, ei: m(x, ei)[0]))
add("InnerProductDecoder (GCNConv encoder, link scores)", "model", lambda: (
    Net(torch.nn.ModuleDict(dict(encoder=C.GCNConv(F_IN, HIDDEN), decoder=M.InnerProductDecoder())),
        lambda m, x, ei, edge_label_index: m["decoder"](m["encoder"](x, ei), edge_label_index)),
    node_inputs("edge_label_index")), mode=BINARY)
add("GAE (encode)", "model", lambda: conv_entry(M.GAE(C.GCNConv(F_IN, HIDDEN)), call=lambda m, x, ei: m.encode(x, ei)))
add("VGAE (encode)", "model", lambda: conv_entry(M.VGAE(VariationalEncoder()), call=lambda m, x, ei: m.encode(x, ei)))
add("ARGA (encode)", "model", lambda: conv_entry(
    M.ARGA(C.GCNConv(F_IN, HIDDEN), mlp(HIDDEN, HIDDEN, 1)), call=lambda m, x, ei: m.encode(x, ei)))
add("ARGVA (encode)", "model", lambda: conv_entry(
    M.ARGVA(VariationalEncoder(), mlp(HIDDEN, HIDDEN, 1)), call=lambda m, x, ei: m.encode(x, ei)))
add("SignedGCN", "model", lambda: conv_entry(M.SignedGCN(F_IN, HIDDEN, num_layers=2, lamb=5), "neg_edge_index"))
add("RENet (node ids)", "model", build_renet)
add("GraphUNet", "model", lambda: (M.GraphUNet(F_IN, HIDDEN, CLASSES, depth=2), node_inputs()))
add("SchNet (interaction_graph: atom pairs)", "model", lambda: (
    Net(M.SchNet(hidden_channels=HIDDEN, num_filters=HIDDEN, num_interactions=2, num_gaussians=10, cutoff=10.0,
                 interaction_graph=AllPairs()),
        lambda m, x, ei, pos, batch: m(x, pos, batch)),
    molecule_inputs("pos", "batch", atoms=True)), mode=REGRESSION)
add("DimeNet", "model", lambda: (
    Net(M.DimeNet(hidden_channels=HIDDEN, out_channels=1, num_blocks=1, num_bilinear=4, num_spherical=3,
                  num_radial=3, cutoff=5.0), lambda m, x, ei, pos, batch: m(x, pos, batch)),
    molecule_inputs("pos", "batch", atoms=True)), mode=REGRESSION)
add("DimeNetPlusPlus", "model", lambda: (
    Net(M.DimeNetPlusPlus(hidden_channels=HIDDEN, out_channels=1, num_blocks=1, int_emb_size=8, basis_emb_size=4,
                          out_emb_channels=HIDDEN, num_spherical=3, num_radial=3, cutoff=5.0),
        lambda m, x, ei, pos, batch: m(x, pos, batch)),
    molecule_inputs("pos", "batch", atoms=True)), mode=REGRESSION)
add("GPSE", "model", build_gpse)
add("GPSENodeEncoder", "model", lambda: conv_entry(
    M.GPSENodeEncoder(dim_emb=HIDDEN, dim_pe_in=F_IN, dim_pe_out=4, dim_in=F_IN, expand_x=True), "pos",
    call=lambda m, x, ei, pos: m(x, torch.cat([pos, pos, pos[:, :2]], dim=-1))))
add("DeepGCNLayer (GENConv, LayerNorm, res+)", "model", lambda: (DeepGCN(), node_inputs()))
add("TGNMemory (node ids)", "model", lambda: (
    Net(M.TGNMemory(N, 4, HIDDEN, 4, message_module=torch_geometric.nn.models.tgn.IdentityMessage(4, HIDDEN, 4),
                    aggregator_module=torch_geometric.nn.models.tgn.LastAggregator()),
        lambda m, x, ei: m(x)[0], HIDDEN), ids_inputs()))
add("LabelPropagation (soft labels = x)", "model", lambda: (
    Net(M.LabelPropagation(num_layers=2, alpha=0.9)), node_inputs()))
add("CorrectAndSmooth (linear base predictor)", "model", lambda: (CorrectSmooth(), node_inputs("y", "train_mask")))
add("AttentiveFP", "model", lambda: (
    M.AttentiveFP(F_IN, HIDDEN, CLASSES, edge_dim=4, num_layers=2, num_timesteps=2),
    molecule_inputs("edge_attr", "batch")))
add("RECT_L", "model", lambda: conv_entry(M.RECT_L(F_IN, HIDDEN)))
add("LINKX", "model", lambda: (M.LINKX(N, F_IN, HIDDEN, CLASSES, num_layers=2), node_inputs()))
add("LightGCN (node ids, link scores)", "model", lambda: (
    Net(M.LightGCN(N, HIDDEN, num_layers=2), lambda m, x, ei, edge_label_index: m(ei, edge_label_index)),
    ids_inputs("edge_label_index")), mode=BINARY)
add("MaskLabel", "model", lambda: (MaskLabelNet(), node_inputs("y", "train_mask")))
add("GroupAddRev (GCNConv, 2 groups)", "model", lambda: (RevNet(), node_inputs()))
add("GroupAddRev (disable=True)", "model", lambda: (RevNet(disable=True), node_inputs()))
add("GNNFF", "model", lambda: (
    Net(M.GNNFF(hidden_node_channels=HIDDEN, hidden_edge_channels=HIDDEN, num_layers=2),
        lambda m, x, ei, pos, batch: m(x, pos, batch)),
    molecule_inputs("pos", "batch", atoms=True)), mode=REGRESSION)
add("PMLP", "model", lambda: (M.PMLP(F_IN, HIDDEN, CLASSES, num_layers=2), node_inputs()))
add("NeuralFingerprint", "model", lambda: (
    M.NeuralFingerprint(F_IN, HIDDEN, CLASSES, num_layers=2), molecule_inputs("batch")))
add("ViSNet", "model", lambda: (
    Net(M.ViSNet(hidden_channels=HIDDEN, num_heads=2, num_layers=2, num_rbf=8),
        lambda m, x, ei, pos, batch: m(x, pos, batch)[0]),
    molecule_inputs("pos", "batch", atoms=True)), mode=REGRESSION)
add("LPFormer (link scores)", "model", build_lpformer, mode=BINARY)
add("SGFormer", "model", lambda: (
    Net(M.SGFormer(F_IN, HIDDEN, CLASSES, trans_num_layers=1, gnn_num_layers=2),
        lambda m, x, ei: m(x, ei, torch.zeros(x.size(0), dtype=torch.long))), node_inputs()))
add("Polynormer", "model", lambda: (
    Net(M.Polynormer(F_IN, HIDDEN, CLASSES, local_layers=2, global_layers=1),
        lambda m, x, ei: m(x, ei, torch.zeros(x.size(0), dtype=torch.long))), node_inputs()))
add("ARLinkPredictor (link scores)", "model", lambda: (
    Net(M.ARLinkPredictor(F_IN, HIDDEN), lambda m, x, ei, edge_label_index: m(x, edge_label_index)),
    node_inputs("edge_label_index")), mode=BINARY)


# --- conv layers ---------------------------------------------------------------------------

# Layers for which ``Cls(8, 16)`` is a complete constructor, on x and edge_index.
for _cls in (C.GCNConv, C.SAGEConv, C.GraphConv, C.ResGatedGraphConv, C.GATConv, C.GATv2Conv,
             C.TransformerConv, C.TAGConv, C.ARMAConv, C.SGConv, C.MFConv, C.FeaStConv, C.HypergraphConv,
             C.LEConv, C.ClusterGCNConv, C.GENConv, C.FiLMConv, C.SuperGATConv, C.EGConv, C.GeneralConv,
             C.MixHopConv):
    add(_cls.__name__, "conv", lambda cls=_cls: conv_entry(cls(F_IN, HIDDEN)))
# Layers without channel arguments (the output keeps the 8 input features).
add("SimpleConv", "conv", lambda: conv_entry(C.SimpleConv()))
add("AGNNConv", "conv", lambda: conv_entry(C.AGNNConv()))
add("APPNP", "conv", lambda: conv_entry(C.APPNP(K=2, alpha=0.1)))
add("LGConv", "conv", lambda: conv_entry(C.LGConv()))
add("WLConvContinuous", "conv", lambda: conv_entry(C.WLConvContinuous()))
# Options and edge inputs of the common layers.
add("GCNConv (edge_weight)", "conv", lambda: conv_entry(C.GCNConv(F_IN, HIDDEN), "edge_weight"))
add("SAGEConv (aggr='max')", "conv", lambda: conv_entry(C.SAGEConv(F_IN, HIDDEN, aggr="max")))
add("SAGEConv (aggr=['mean', 'max'])", "conv", lambda: conv_entry(C.SAGEConv(F_IN, HIDDEN, aggr=["mean", "max"])))
add("SAGEConv (aggr='lstm')", "conv", lambda: conv_entry(
    C.SAGEConv(F_IN, HIDDEN, aggr="lstm"), inputs=sorted_by_target(node_inputs())))
add("GATConv (edge_dim=4)", "conv", lambda: conv_entry(C.GATConv(F_IN, HIDDEN, heads=2, edge_dim=4), "edge_attr"))
add("TransformerConv (edge_dim=4)", "conv", lambda: conv_entry(C.TransformerConv(F_IN, HIDDEN, edge_dim=4),
                                                                "edge_attr"))
add("GeneralConv (in_edge_channels=4)", "conv", lambda: conv_entry(
    C.GeneralConv(F_IN, HIDDEN, in_edge_channels=4), "edge_attr"))
# Layers with required arguments or other inputs.
add("ChebConv", "conv", lambda: conv_entry(C.ChebConv(F_IN, HIDDEN, K=2)))
add("SSGConv", "conv", lambda: conv_entry(C.SSGConv(F_IN, HIDDEN, alpha=0.1, K=2)))
add("GINConv", "conv", lambda: conv_entry(C.GINConv(mlp(F_IN, HIDDEN, HIDDEN))))
add("GINEConv", "conv", lambda: conv_entry(C.GINEConv(mlp(F_IN, HIDDEN, HIDDEN), edge_dim=4), "edge_attr"))
add("RGCNConv", "conv", lambda: conv_entry(C.RGCNConv(F_IN, HIDDEN, num_relations=3), "edge_type"))
add("RGCNConv (num_bases=2)", "conv", lambda: conv_entry(C.RGCNConv(F_IN, HIDDEN, 3, num_bases=2), "edge_type"))
add("RGCNConv (num_blocks=2)", "conv", lambda: conv_entry(C.RGCNConv(F_IN, HIDDEN, 3, num_blocks=2), "edge_type"))
add("FastRGCNConv", "conv", lambda: conv_entry(C.FastRGCNConv(F_IN, HIDDEN, num_relations=3), "edge_type"))
add("RGATConv", "conv", lambda: conv_entry(C.RGATConv(F_IN, HIDDEN, num_relations=3), "edge_type"))
add("SignedConv", "conv", lambda: conv_entry(C.SignedConv(F_IN, HIDDEN, first_aggr=True), "neg_edge_index"))
add("DNAConv (2 stacked inputs)", "conv", lambda: conv_entry(
    C.DNAConv(F_IN, heads=2), call=lambda m, x, ei: m(torch.stack([x, x], dim=1), ei)))
add("PointNetConv", "conv", lambda: conv_entry(
    C.PointNetConv(local_nn=mlp(F_IN + 3, HIDDEN, HIDDEN)), "pos", call=lambda m, x, ei, pos: m(x, pos, ei)))
add("GMMConv", "conv", lambda: conv_entry(
    C.GMMConv(F_IN, HIDDEN, dim=4, kernel_size=3), "edge_attr"))
add("SplineConv", "conv", lambda: conv_entry(C.SplineConv(F_IN, HIDDEN, dim=4, kernel_size=3), "edge_attr"))
add("NNConv", "conv", lambda: conv_entry(C.NNConv(F_IN, HIDDEN, mlp(4, F_IN * HIDDEN)), "edge_attr"))
add("CGConv", "conv", lambda: conv_entry(C.CGConv(F_IN, dim=4), "edge_attr"))
add("EdgeConv", "conv", lambda: conv_entry(C.EdgeConv(mlp(2 * F_IN, HIDDEN, HIDDEN))))
add("DynamicEdgeConv (k=4)", "conv", lambda: conv_entry(
    C.DynamicEdgeConv(mlp(2 * F_IN, HIDDEN, HIDDEN), k=4), call=lambda m, x, ei: m(x)))
add("XConv", "conv", lambda: conv_entry(
    C.XConv(F_IN, HIDDEN, dim=3, kernel_size=4), "pos", call=lambda m, x, ei, pos: m(x, pos)))
add("PPFConv", "conv", lambda: conv_entry(
    C.PPFConv(local_nn=mlp(F_IN + 4, HIDDEN, HIDDEN)), "pos", "normal",
    call=lambda m, x, ei, pos, normal: m(x, pos, normal, ei)))
add("PointTransformerConv", "conv", lambda: conv_entry(
    C.PointTransformerConv(F_IN, HIDDEN), "pos", call=lambda m, x, ei, pos: m(x, pos, ei)))
add("PNAConv (mean/min/max/std)", "conv", lambda: conv_entry(C.PNAConv(F_IN, HIDDEN, deg=pna_degree(), **PNA_FULL)))
add("PNAConv (mean/max/sum)", "conv", lambda: conv_entry(C.PNAConv(F_IN, HIDDEN, deg=pna_degree(), **PNA_SIMPLE)))
add("GCN2Conv", "conv", lambda: conv_entry(
    C.GCN2Conv(F_IN, alpha=0.1, theta=0.5, layer=1), call=lambda m, x, ei: m(x, x, ei)))
add("PANConv", "conv", lambda: conv_entry(C.PANConv(F_IN, HIDDEN, filter_size=2), call=lambda m, x, ei: m(x, ei)[0]))
add("WLConv (integer colours, embedded)", "conv", lambda: (
    WLNet(), {**node_inputs(), "x": torch.randint(0, 4, (N,), generator=torch.Generator().manual_seed(0))}))
add("FAConv", "conv", lambda: conv_entry(C.FAConv(F_IN, eps=0.1), call=lambda m, x, ei: m(x, x, ei)))
add("PDNConv", "conv", lambda: conv_entry(C.PDNConv(F_IN, HIDDEN, edge_dim=4, hidden_channels=8), "edge_attr"))
add("HEATConv", "conv", lambda: conv_entry(
    C.HEATConv(F_IN, HIDDEN, num_node_types=2, num_edge_types=3, edge_type_emb_dim=4, edge_dim=4,
               edge_attr_emb_dim=4, heads=2), "node_type", "edge_type", "edge_attr"))
add("PointGNNConv", "conv", lambda: conv_entry(
    C.PointGNNConv(mlp_h=mlp(F_IN, 3), mlp_f=mlp(F_IN + 3, HIDDEN, F_IN), mlp_g=mlp(F_IN, HIDDEN, F_IN)), "pos",
    call=lambda m, x, ei, pos: m(x, pos, ei)))
add("GPSConv (GINConv, multihead attention)", "conv", lambda: conv_entry(
    C.GPSConv(F_IN, C.GINConv(mlp(F_IN, HIDDEN, F_IN)), heads=2)))
add("AntiSymmetricConv", "conv", lambda: conv_entry(C.AntiSymmetricConv(F_IN, num_iters=2)))
add("DirGNNConv (GCNConv)", "conv", lambda: conv_entry(C.DirGNNConv(C.GCNConv(F_IN, HIDDEN))))
add("GatedGraphConv", "conv", lambda: conv_entry(C.GatedGraphConv(HIDDEN, num_layers=2)))
add("GravNetConv", "conv", lambda: conv_entry(
    C.GravNetConv(F_IN, HIDDEN, space_dimensions=3, propagate_dimensions=8, k=4), call=lambda m, x, ei: m(x)))
add("CuGraphSAGEConv", "conv", lambda: conv_entry(C.CuGraphSAGEConv(F_IN, HIDDEN)))
add("CuGraphGATConv", "conv", lambda: conv_entry(C.CuGraphGATConv(F_IN, HIDDEN)))
add("CuGraphRGCNConv", "conv", lambda: conv_entry(C.CuGraphRGCNConv(F_IN, HIDDEN, num_relations=3), "edge_type"))
add("FusedGATConv (add_self_loops=False)", "conv", lambda: conv_entry(
    C.FusedGATConv(F_IN, HIDDEN, add_self_loops=False)))


def mesh_inputs() -> dict:
    """20 mesh edges with 8 features, each with 4 neighbouring edges (``A[:, 4i + k] = (i, k-th neighbour)``)."""
    g = torch.Generator().manual_seed(0)
    rows = torch.arange(N).repeat_interleave(4)
    cols = (rows + torch.randint(1, N, (4 * N,), generator=g)) % N
    return {"x": graph()["x"], "edge_index": torch.stack([rows, cols])}


add("MeshCNNConv", "conv", lambda: (headed(C.MeshCNNConv(F_IN, HIDDEN), mesh_inputs()), mesh_inputs()))


# --- heterogeneous -------------------------------------------------------------------------

def hetero_entry(body: torch.nn.Module, node_type: str = "paper"):
    """``body(x_dict, edge_index_dict)[node_type]`` under a head; the model takes the dicts."""
    data = hetero()
    inputs = {"x": data.x_dict, "edge_index": data.edge_index_dict}
    return headed(body, inputs, call=lambda m, x, ei: m(x, ei)[node_type]), inputs


def hetero_conv() -> torch.nn.Module:
    metadata = hetero().metadata()
    return C.HeteroConv({et: (C.GCNConv(-1, HIDDEN) if et[0] == et[2] else C.SAGEConv((-1, -1), HIDDEN))
                         for et in metadata[1]}, aggr="sum")


add("HGTConv", "hetero", lambda: hetero_entry(C.HGTConv(-1, HIDDEN, hetero().metadata(), heads=2)))
add("HANConv", "hetero", lambda: hetero_entry(
    C.HANConv({"paper": F_IN, "author": 6}, HIDDEN, hetero().metadata(), heads=2)))
add("HeteroConv (SAGEConv, GCNConv)", "hetero", lambda: hetero_entry(hetero_conv()))
add("to_hetero (2-layer SAGEConv model)", "hetero", lambda: hetero_entry(
    torch_geometric.nn.to_hetero(SAGE(), hetero().metadata(), aggr="sum")), cls="to_hetero")
add("HeteroJumpingKnowledge (mode='cat')", "hetero", lambda: hetero_entry(HeteroJK(hetero().metadata())))


# ---------------------------------------------------------------------------
# Running an entry
# ---------------------------------------------------------------------------

@dataclass
class Row:
    entry: Entry
    status: str
    reason: str = ""
    gap: Optional[float] = None
    ratio: Optional[float] = None
    task: str = ""


def reason_of(error: BaseException, limit: int = 120) -> str:
    """``Type: first line of the message``, shortened to ``limit`` characters."""
    lines = str(error).strip().splitlines()
    text = f"{type(error).__name__}: {lines[0] if lines else ''}".strip()
    return text if len(text) <= limit else text[:limit - 3] + "..."


def split(inputs: dict) -> tuple:
    kwargs = {k: v for k, v in inputs.items() if k not in ("x", "edge_index")}
    return inputs["x"], inputs["edge_index"], kwargs


def with_grad(x):
    """A leaf copy of ``x`` (of each floating tensor of a dict) that requires grad."""
    if isinstance(x, dict):
        return {k: with_grad(v) for k, v in x.items()}
    return x.detach().clone().requires_grad_() if x.is_floating_point() else x


def forward(model: torch.nn.Module, inputs: dict):
    x, edge_index, kwargs = split(inputs)
    return model(with_grad(x), edge_index, **kwargs)


def plain(model: torch.nn.Module, inputs: dict) -> None:
    """One forward and backward of the explained rows (``out[index].sum().backward()``)."""
    forward(model, inputs)[INDEX].sum().backward()


def explain(model: torch.nn.Module, inputs: dict, mode: str):
    x, edge_index, kwargs = split(inputs)
    return lrp.explain(model, x, edge_index, index=INDEX, mode=mode, **kwargs)


def run(entry: Entry, verbose: bool = False) -> Row:
    torch.manual_seed(0)
    try:
        model, inputs = entry.build()
        model.eval()
    except Exception as error:  # noqa: BLE001 - every failure is a row of the table
        if verbose:
            traceback.print_exc()
        return Row(entry, "skipped (cannot build)", reason_of(error))
    try:  # the plain forward and backward, once untimed
        out = forward(model, inputs)
        # a forward under torch.no_grad (LabelPropagation) has no backward: explained all the same, no time
        differentiable = out.requires_grad
        if differentiable:
            out[INDEX].sum().backward()
    except Exception as error:  # noqa: BLE001
        if verbose:
            traceback.print_exc()
        return Row(entry, "skipped (cannot run)", reason_of(error))
    try:
        explanation = explain(model, inputs, entry.mode)
    except Exception as error:  # noqa: BLE001
        if verbose:
            traceback.print_exc()
        return Row(entry, "refused", reason_of(error))
    task = f"{explanation._model_config.task_level.value}, {entry.mode.split('_')[0]}"
    score, residual = float(explanation.score), float(explanation.residual)
    gap = abs(residual) / abs(score) if score != 0 else float("inf")
    ratio = None
    if differentiable:
        t_explain, t_plain = timed_pair(lambda: explain(model, inputs, entry.mode), lambda: plain(model, inputs),
                                        REPEATS)
        ratio = t_explain / t_plain
    status = "explained" if gap <= GAP_LIMIT else "explained (gap)"
    if verbose:
        print(explanation)
    return Row(entry, status, gap=gap, ratio=ratio, task=task)


# ---------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------

def exported_classes() -> list[tuple[str, str]]:
    """(name, module) of every class in the two ``__all__`` lists, helpers left out."""
    out = []
    for module, source in (("models", M), ("conv", C)):
        out += [(name, module) for name in source.__all__
                if name not in NOT_LAYERS and inspect.isclass(getattr(source, name))]
    return out


def uncovered() -> list[Entry]:
    """A ``skipped`` entry for each exported class no builder covers (none today)."""
    covered = {e.cls for e in ENTRIES}
    return [Entry(name, "model" if module == "models" else "conv", name, None)
            for name, module in exported_classes() if name not in covered]


def percent(rows: list[Row]) -> str:
    explained = sum(r.status == "explained" for r in rows)
    counted = sum(r.status in ("explained", "explained (gap)", "refused") for r in rows)
    share = f"{100 * explained / counted:.0f}%" if counted else "n/a"
    return f"{explained} / {counted} = {share}"


def report(rows: list[Row], seconds: float) -> str:
    kinds = ("model", "conv", "hetero")
    counts = {s: sum(r.status.startswith(s) for r in rows) for s in ("explained", "refused", "skipped")}
    gaps = sum(r.status == "explained (gap)" for r in rows)
    lines = [
        "# Coverage: PyG models and layers through lrp.explain", "",
        f"- command: `python {' '.join([os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:])}`",
        f"- date: {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- torch {torch.__version__}, torch_geometric {torch_geometric.__version__}, torch_geometric_lrp "
        f"{lrp.__version__}, Python {platform.python_version()}, {os.cpu_count()} CPU cores, torch threads "
        f"{torch.get_num_threads()}",
        f"- **explained: {percent(rows)}** overall; "
        + "; ".join(f"{kind} {percent([r for r in rows if r.entry.kind == kind])}" for kind in kinds),
        f"- {len(rows)} entries ({len(exported_classes())} classes of `torch_geometric.nn.models` and "
        f"`torch_geometric.nn.conv`, some under several options, and `to_hetero`): "
        f"{counts['explained'] - gaps} explained, {gaps} explained with a conservation gap above {GAP_LIMIT:g}, "
        f"{counts['refused']} refused, {counts['skipped']} skipped (not counted)",
        f"- left out as not layers: {', '.join(f'`{n}`' for n in sorted(NOT_LAYERS))}",
        f"- runtime of this run: {seconds:.0f} s", "",
        "What each column means: see the docstring of `benchmarks/supported_models.py`. `time` is one explanation / "
        "one plain forward + backward of the same model (median of 3, alternately).", "",
    ]
    body = [[r.entry.name, r.entry.kind, r.task, r.status, r.reason.replace("|", "\\|"),
             "" if r.gap is None else f"{r.gap:.1e}",
             f"{r.ratio:.1f}x" if r.ratio is not None else ("n/a" if r.gap is not None else "")]
            for r in rows]
    lines.append(table(["name", "kind", "task", "status", "reason", "gap", "time"], body,
                       align=["l", "l", "l", "l", "l", "r", "r"]))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="run the entries of this name or class only, with tracebacks")
    parser.add_argument("--out", type=Path, default=None,
                        help="where to write the table (default benchmarks/results/coverage.md; "
                             "with --only, nothing is written unless --out is given)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    started = time.perf_counter()
    entries = ENTRIES + uncovered()
    if args.only:
        entries = [e for e in entries if args.only in (e.name, e.cls)]
        if not entries:
            raise SystemExit(f"no entry named {args.only!r}; names: {', '.join(e.name for e in ENTRIES)}")
    rows = []
    for entry in entries:
        if entry.build is None:
            rows.append(Row(entry, "skipped (cannot build)", "no builder in benchmarks/supported_models.py"))
            continue
        start = time.perf_counter()
        rows.append(run(entry, verbose=bool(args.only)))
        print(f"{time.perf_counter() - start:6.2f} s  {rows[-1].status:24s} {entry.name}  {rows[-1].reason}",
              file=sys.stderr, flush=True)
    text = report(rows, time.perf_counter() - started)
    print(text)
    out = args.out or (None if args.only else ROOT / "benchmarks" / "results" / "coverage.md")
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
        print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
