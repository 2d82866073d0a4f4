"""The LRP layers of :mod:`torch_geometric_lrp.nn`, case by case.

For every layer and every input form PyG accepts for it (aggregations,
``edge_weight``, ``edge_attr``, bipartite ``(x_src, x_dst)``, self-loops added
inside the layer, ``torch_sparse.SparseTensor`` and ``torch.sparse``
adjacencies) this file checks, in float64:

1. ``lrp.nn.X`` loads PyG's ``X`` ``state_dict`` (strict, same keys) and its
   forward equals PyG's;
2. inside a relevance pass the output is unchanged;
3. with biases off and LRP-0, relevance is conserved: input relevance plus
   the audited ``lost`` equals the seed, and nothing is ``absorbed``;
4. the input relevance equals an independent reference: for bias-free,
   piecewise-linear layers LRP-0 is gradient x input of
   ``sum(out * seed / out)`` (computed with plain autograd on the *PyG* layer);
   for attention layers the same holds with the attention softmax detached
   (attention coefficients are constants), so no relevance enters the
   attention path.

Hand-worked examples at the end pin exact numbers.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Optional

import pytest
import torch
import torch_geometric.nn as pyg_nn
from torch import nn
from torch_geometric.utils import to_torch_coo_tensor, to_torch_csr_tensor

import torch_geometric_lrp as lrp

# PyG warns when its fused path converts a COO adjacency to CSR (COO is tested on
# purpose), torch when torch_sparse builds a CSR tensor without invariant checks.
pytestmark = [
    pytest.mark.filterwarnings("ignore:Converting sparse tensor to CSR format:UserWarning"),
    pytest.mark.filterwarnings("ignore:Sparse invariant checks are implicitly disabled:UserWarning"),
]

DTYPE = torch.float64
F_IN, F_DST, F_OUT, F_EDGE = 4, 5, 3, 2

# ---------------------------------------------------------------------------
# Graphs
# ---------------------------------------------------------------------------


def _random_edges(num_src: int, num_dst: int, num_edges: int, seed: int, loops: bool) -> torch.Tensor:
    """``num_edges`` distinct random edges ``src -> dst``, sorted by target."""
    gen = torch.Generator().manual_seed(seed)
    pairs = set()
    while len(pairs) < num_edges:
        s = int(torch.randint(num_src, (1,), generator=gen))
        d = int(torch.randint(num_dst, (1,), generator=gen))
        if loops or s != d:
            pairs.add((s, d))
    edge_index = torch.tensor(sorted(pairs, key=lambda p: (p[1], p[0]))).t()
    return edge_index.contiguous()


@dataclass(frozen=True)
class Graph:
    num_src: int
    num_dst: int
    edge_index: torch.Tensor
    x: torch.Tensor
    x_dst: Optional[torch.Tensor]
    edge_weight: torch.Tensor
    edge_attr: torch.Tensor


def _graph(bipartite: bool) -> Graph:
    gen = torch.Generator().manual_seed(7 if bipartite else 3)
    num_src, num_dst = (7, 5) if bipartite else (7, 7)
    # no self-loops in the input (the layers that add them do so themselves);
    # node 6 of the homogeneous graph gets no incoming edge (an empty group)
    edge_index = _random_edges(num_src, num_dst if bipartite else 6, 15 if not bipartite else 12,
                               seed=11 if bipartite else 5, loops=bipartite)
    x = torch.randn(num_src, F_IN, generator=gen, dtype=DTYPE)
    x_dst = torch.randn(num_dst, F_DST, generator=gen, dtype=DTYPE) if bipartite else None
    edge_weight = torch.rand(edge_index.size(1), generator=gen, dtype=DTYPE) + 0.5
    edge_attr = torch.randn(edge_index.size(1), F_IN, generator=gen, dtype=DTYPE)
    return Graph(num_src, num_dst, edge_index, x, x_dst, edge_weight, edge_attr)


HOMOGENEOUS = _graph(bipartite=False)
BIPARTITE = _graph(bipartite=True)


# ---------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------
@dataclass
class Case:
    """One layer configuration and one input form.

    ``build(cls, bias)`` constructs the layer from ``cls`` (the PyG class or
    its LRP subclass); ``bias=False`` must switch off every bias the
    constructor lets us switch off (inner ``Linear``/MLP included).
    """

    id: str
    layer: str
    build: Callable[[type, bool], nn.Module]
    adj: str = "edge_index"  # 'edge_index' | 'sparse' (SparseTensor) | 'csr' | 'coo' (torch.sparse)
    bipartite: bool = False
    dst_features: int = F_DST  # x_dst width for bipartite inputs
    edge_weight: bool = False
    edge_attr: Optional[int] = None  # width of edge_attr, None: no edge_attr
    attention: bool = False
    identity: bool = True  # relevance == gradient x input (see module docstring)
    marks: tuple = field(default_factory=tuple)

    def param(self):
        return pytest.param(self, id=self.id, marks=list(self.marks))


def _mlp(i: int, o: int, bias: bool) -> nn.Module:
    return nn.Sequential(nn.Linear(i, 6, bias=bias), nn.ReLU(), nn.Linear(6, o, bias=bias))


AGGRS = ("add", "mean", "max", "min")
SPARSE_FORMS = ("sparse", "csr", "coo")


def _with_adj(case: Case, forms=SPARSE_FORMS) -> list[Case]:
    """``case`` with its adjacency given as edge_index and each sparse form."""
    out = [case]
    for form in forms:
        out.append(Case(**{**case.__dict__, "id": f"{case.id}-{form}", "adj": form}))
    return out


def _cases() -> list[Case]:
    c: list[Case] = []

    # --- GCNConv: aggr via **kwargs; self-loops added inside by default -----
    for aggr in AGGRS:
        c.append(Case(f"gcn-{aggr}", "GCNConv",
                      lambda cls, b, a=aggr: cls(F_IN, F_OUT, bias=b, aggr=a)))
    c += _with_adj(Case("gcn-weight", "GCNConv", lambda cls, b: cls(F_IN, F_OUT, bias=b), edge_weight=True))
    c += _with_adj(Case("gcn-selfloops", "GCNConv", lambda cls, b: cls(F_IN, F_OUT, bias=b)))
    c.append(Case("gcn-noselfloops", "GCNConv", lambda cls, b: cls(F_IN, F_OUT, bias=b, add_self_loops=False)))
    c.append(Case("gcn-improved-weight", "GCNConv", lambda cls, b: cls(F_IN, F_OUT, bias=b, improved=True),
                  edge_weight=True))
    c += _with_adj(Case("gcn-nonormalize-weight", "GCNConv",
                        lambda cls, b: cls(F_IN, F_OUT, bias=b, normalize=False), edge_weight=True))
    # No bipartite GCNConv: PyG raises ("'GCNConv' received a tuple of node features ...").
    # Likewise ChebConv, SGConv and APPNP take a single node-feature tensor only.

    # --- GraphConv ------------------------------------------------------------
    for aggr in AGGRS:
        c += _with_adj(Case(f"graph-{aggr}", "GraphConv", lambda cls, b, a=aggr: cls(F_IN, F_OUT, aggr=a, bias=b)))
    c += _with_adj(Case("graph-weight", "GraphConv", lambda cls, b: cls(F_IN, F_OUT, bias=b), edge_weight=True))
    # 'sum' is PyG's other name of 'add'
    c.append(Case("graph-sum", "GraphConv", lambda cls, b: cls(F_IN, F_OUT, aggr="sum", bias=b)))
    c.append(Case("graph-mean-weight", "GraphConv", lambda cls, b: cls(F_IN, F_OUT, aggr="mean", bias=b),
                  edge_weight=True))
    c += _with_adj(Case("graph-bipartite", "GraphConv", lambda cls, b: cls((F_IN, F_DST), F_OUT, bias=b),
                        bipartite=True))

    # --- SAGEConv ---------------------------------------------------------------
    for aggr in AGGRS:
        c += _with_adj(Case(f"sage-{aggr}", "SAGEConv", lambda cls, b, a=aggr: cls(F_IN, F_OUT, aggr=a, bias=b)))
    c += _with_adj(Case("sage-bipartite", "SAGEConv", lambda cls, b: cls((F_IN, F_DST), F_OUT, bias=b),
                        bipartite=True))
    c.append(Case("sage-bipartite-max", "SAGEConv", lambda cls, b: cls((F_IN, F_DST), F_OUT, aggr="max", bias=b),
                  bipartite=True))
    c.append(Case("sage-noroot", "SAGEConv", lambda cls, b: cls(F_IN, F_OUT, root_weight=False, bias=b)))
    # node 6 has no incoming edge: without root weight and bias its output is exactly 0 (lost relevance)
    c.append(Case("sage-noroot-max", "SAGEConv",
                  lambda cls, b: cls(F_IN, F_OUT, aggr="max", root_weight=False, bias=b)))
    # project=True: an inner Linear(bias=True) + ReLU on x_j (its bias is zeroed for conservation)
    c.append(Case("sage-project", "SAGEConv", lambda cls, b: cls(F_IN, F_OUT, project=True, bias=b)))
    # normalize=True: x / ||x|| with a constant norm (pass rule): conserves, not gradient x input
    c.append(Case("sage-normalize", "SAGEConv", lambda cls, b: cls(F_IN, F_OUT, normalize=True, bias=b),
                  identity=False))

    # --- GINConv (aggr via **kwargs) ----------------------------------------
    for aggr in AGGRS:
        c += _with_adj(Case(f"gin-{aggr}", "GINConv", lambda cls, b, a=aggr: cls(_mlp(F_IN, F_OUT, b), aggr=a)))
    c.append(Case("gin-traineps", "GINConv", lambda cls, b: cls(_mlp(F_IN, F_OUT, b), eps=0.3, train_eps=True)))
    c += _with_adj(Case("gin-bipartite", "GINConv", lambda cls, b: cls(_mlp(F_IN, F_OUT, b)),
                        bipartite=True, dst_features=F_IN))

    # --- GINEConv: edge_attr required ----------------------------------------
    for aggr in AGGRS:
        c.append(Case(f"gine-{aggr}", "GINEConv", lambda cls, b, a=aggr: cls(_mlp(F_IN, F_OUT, b), aggr=a),
                      edge_attr=F_IN))
    # sparse forms: the adjacency carries edge_attr as its values (PyG reads it from there)
    c += _with_adj(Case("gine-edgedim", "GINEConv",
                        lambda cls, b: cls(_mlp(F_IN, F_OUT, b), eps=0.2, edge_dim=F_EDGE), edge_attr=F_EDGE))
    c += _with_adj(Case("gine-bipartite", "GINEConv", lambda cls, b: cls(_mlp(F_IN, F_OUT, b), edge_dim=F_EDGE),
                        edge_attr=F_EDGE, bipartite=True, dst_features=F_IN))

    # --- GATConv ----------------------------------------------------------------
    for aggr in AGGRS:
        c.append(Case(f"gat-{aggr}", "GATConv", lambda cls, b, a=aggr: cls(F_IN, F_OUT, heads=2, bias=b, aggr=a),
                      attention=True))
    c += _with_adj(Case("gat-selfloops", "GATConv", lambda cls, b: cls(F_IN, F_OUT, bias=b), attention=True))
    c.append(Case("gat-heads-mean", "GATConv", lambda cls, b: cls(F_IN, F_OUT, heads=3, concat=False, bias=b),
                  attention=True))
    c.append(Case("gat-noselfloops", "GATConv", lambda cls, b: cls(F_IN, F_OUT, heads=2, add_self_loops=False,
                                                                   bias=b), attention=True))
    # edge_attr + SparseTensor: PyG raises NotImplementedError ("The usage of 'edge_attr' and
    # 'add_self_loops' simultaneously is currently not yet supported ..."); torch.sparse works
    c += _with_adj(Case("gat-edgeattr", "GATConv",
                        lambda cls, b: cls(F_IN, F_OUT, heads=2, edge_dim=F_EDGE, bias=b),
                        edge_attr=F_EDGE, attention=True), forms=("csr", "coo"))
    c.append(Case("gat-residual", "GATConv", lambda cls, b: cls(F_IN, F_OUT, heads=2, residual=True, bias=b),
                  attention=True))
    c += _with_adj(Case("gat-bipartite", "GATConv",
                        lambda cls, b: cls((F_IN, F_DST), F_OUT, heads=2, add_self_loops=False, bias=b),
                        bipartite=True, attention=True))

    # --- GATv2Conv ------------------------------------------------------------
    for aggr in AGGRS:
        c.append(Case(f"gatv2-{aggr}", "GATv2Conv",
                      lambda cls, b, a=aggr: cls(F_IN, F_OUT, heads=2, bias=b, aggr=a), attention=True))
    c += _with_adj(Case("gatv2-selfloops", "GATv2Conv", lambda cls, b: cls(F_IN, F_OUT, bias=b), attention=True))
    c.append(Case("gatv2-shared", "GATv2Conv", lambda cls, b: cls(F_IN, F_OUT, heads=2, share_weights=True, bias=b),
                  attention=True))
    c.append(Case("gatv2-heads-mean", "GATv2Conv", lambda cls, b: cls(F_IN, F_OUT, heads=2, concat=False, bias=b),
                  attention=True))
    # edge_attr + SparseTensor: PyG raises NotImplementedError, as for GATConv
    c += _with_adj(Case("gatv2-edgeattr", "GATv2Conv",
                        lambda cls, b: cls(F_IN, F_OUT, heads=2, edge_dim=F_EDGE, bias=b),
                        edge_attr=F_EDGE, attention=True), forms=("csr", "coo"))
    c.append(Case("gatv2-residual", "GATv2Conv", lambda cls, b: cls(F_IN, F_OUT, heads=2, residual=True, bias=b),
                  attention=True))
    c += _with_adj(Case("gatv2-bipartite", "GATv2Conv",
                        lambda cls, b: cls((F_IN, F_DST), F_OUT, heads=2, add_self_loops=False, bias=b),
                        bipartite=True, attention=True))

    # --- TransformerConv (aggr via **kwargs) ----------------------------------
    for aggr in AGGRS:
        c.append(Case(f"transformer-{aggr}", "TransformerConv",
                      lambda cls, b, a=aggr: cls(F_IN, F_OUT, heads=2, bias=b, aggr=a), attention=True))
    c += _with_adj(Case("transformer", "TransformerConv", lambda cls, b: cls(F_IN, F_OUT, bias=b),
                        attention=True))
    c.append(Case("transformer-heads-mean", "TransformerConv",
                  lambda cls, b: cls(F_IN, F_OUT, heads=2, concat=False, bias=b), attention=True))
    c.append(Case("transformer-noroot", "TransformerConv",
                  lambda cls, b: cls(F_IN, F_OUT, heads=2, root_weight=False, bias=b), attention=True))
    c += _with_adj(Case("transformer-edgeattr", "TransformerConv",
                        lambda cls, b: cls(F_IN, F_OUT, heads=2, edge_dim=F_EDGE, bias=b),
                        edge_attr=F_EDGE, attention=True))
    c += _with_adj(Case("transformer-bipartite", "TransformerConv",
                        lambda cls, b: cls((F_IN, F_DST), F_OUT, heads=2, bias=b),
                        bipartite=True, attention=True))
    # beta=True: the skip gate beta = sigmoid(lin_beta([out, x_r, out - x_r])) is a constant
    # like the attention coefficients (the reference detaches lin_beta's output as well).
    c.append(Case("transformer-beta", "TransformerConv",
                  lambda cls, b: cls(F_IN, F_OUT, heads=2, beta=True, bias=b), attention=True))
    c.append(Case("transformer-beta-heads-mean", "TransformerConv",
                  lambda cls, b: cls(F_IN, F_OUT, heads=2, concat=False, beta=True, bias=b), attention=True))

    # --- ChebConv (aggr via **kwargs). No sparse forms: PyG's ChebConv builds its
    # Laplacian from an edge_index tensor and raises for a SparseTensor ("Subtraction,
    # the `-` operator, with a bool tensor is not supported") and for torch.sparse
    # ("Could not run 'aten::view' with arguments from the 'SparseCPU' backend").
    for aggr in AGGRS:
        c.append(Case(f"cheb-{aggr}", "ChebConv", lambda cls, b, a=aggr: cls(F_IN, F_OUT, K=3, bias=b, aggr=a)))
    c.append(Case("cheb-weight", "ChebConv", lambda cls, b: cls(F_IN, F_OUT, K=3, bias=b), edge_weight=True))
    c.append(Case("cheb-rw", "ChebConv", lambda cls, b: cls(F_IN, F_OUT, K=2, normalization="rw", bias=b)))
    c.append(Case("cheb-none", "ChebConv", lambda cls, b: cls(F_IN, F_OUT, K=2, normalization=None, bias=b),
                  edge_weight=True))

    # --- SGConv (aggr via **kwargs) -------------------------------------------
    for aggr in AGGRS:
        c.append(Case(f"sg-{aggr}", "SGConv", lambda cls, b, a=aggr: cls(F_IN, F_OUT, K=2, bias=b, aggr=a)))
    c += _with_adj(Case("sg-weight", "SGConv", lambda cls, b: cls(F_IN, F_OUT, K=2, bias=b), edge_weight=True))
    c.append(Case("sg-noselfloops", "SGConv", lambda cls, b: cls(F_IN, F_OUT, K=2, add_self_loops=False, bias=b)))

    # --- APPNP: no parameters (aggr via **kwargs) -------------------------------
    for aggr in AGGRS:
        c.append(Case(f"appnp-{aggr}", "APPNP", lambda cls, b, a=aggr: cls(K=3, alpha=0.2, aggr=a)))
    c += _with_adj(Case("appnp-weight", "APPNP", lambda cls, b: cls(K=3, alpha=0.2), edge_weight=True))
    c.append(Case("appnp-nonormalize", "APPNP", lambda cls, b: cls(K=2, alpha=0.3, normalize=False)))

    # --- EdgeConv -------------------------------------------------------------
    for aggr in AGGRS:
        c += _with_adj(Case(f"edge-{aggr}", "EdgeConv", lambda cls, b, a=aggr: cls(_mlp(2 * F_IN, F_OUT, b), aggr=a)))
    c += _with_adj(Case("edge-bipartite", "EdgeConv", lambda cls, b: cls(_mlp(2 * F_IN, F_OUT, b)),
                        bipartite=True, dst_features=F_IN))

    # --- GeneralConv ------------------------------------------------------------
    for aggr in AGGRS:
        c += _with_adj(Case(f"general-{aggr}", "GeneralConv", lambda cls, b, a=aggr: cls(F_IN, F_OUT, aggr=a, bias=b)))
    c += _with_adj(Case("general-edgeattr", "GeneralConv",
                        lambda cls, b: cls(F_IN, F_OUT, in_edge_channels=F_EDGE, bias=b), edge_attr=F_EDGE))
    c.append(Case("general-bipartite", "GeneralConv", lambda cls, b: cls((F_IN, F_DST), F_OUT, bias=b),
                  bipartite=True))
    c.append(Case("general-undirected-skip", "GeneralConv",
                  lambda cls, b: cls(F_IN, F_OUT, directed_msg=False, skip_linear=True, bias=b)))
    c += _with_adj(Case("general-attention", "GeneralConv",
                        lambda cls, b: cls(F_IN, F_OUT, in_edge_channels=F_EDGE, heads=2, attention=True, bias=b),
                        edge_attr=F_EDGE, attention=True))
    c.append(Case("general-attention-dot", "GeneralConv",
                  lambda cls, b: cls(F_IN, F_OUT, heads=2, attention=True, attention_type="dot_product", bias=b),
                  attention=True))
    c.append(Case("general-l2", "GeneralConv", lambda cls, b: cls(F_IN, F_OUT, l2_normalize=True, bias=b),
                  identity=False))
    return c


CASES = _cases()
PARAMS = [case.param() for case in CASES]


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------
def _build_pair(case: Case, bias: bool):
    """The PyG layer with random parameters and the LRP layer loaded from it."""
    torch.manual_seed(0)
    ref = case.build(getattr(pyg_nn, case.layer), bias).to(DTYPE)
    with torch.no_grad():
        gen = torch.Generator().manual_seed(1)
        for name, p in ref.named_parameters():
            if name.split(".")[-1] == "bias" and not bias:
                p.zero_()  # a bias the constructor has no switch for
            else:
                p.copy_(0.6 * torch.randn(p.shape, generator=gen, dtype=DTYPE))
    torch.manual_seed(123)  # different initial parameters: loading must matter
    layer = case.build(getattr(lrp.nn, case.layer), bias).to(DTYPE)
    assert type(layer).__bases__[-1] is getattr(pyg_nn, case.layer)  # the PyG layer it subclasses
    assert list(layer.state_dict()) == list(ref.state_dict())
    layer.load_state_dict(ref.state_dict(), strict=True)
    ref.eval()
    layer.eval()
    return ref, layer


def _inputs(case: Case, carry: bool):
    """``(args, kwargs, carriers)``: the layer's call arguments and the tensors
    marked as carrying relevance (name -> leaf tensor)."""
    g = BIPARTITE if case.bipartite else HOMOGENEOUS
    carriers = {}
    x = g.x.clone()
    if carry:
        carriers["x"] = x.requires_grad_()
    if case.bipartite:
        x_dst = g.x_dst[:, : case.dst_features].clone()
        if carry:
            carriers["x_dst"] = x_dst.requires_grad_()
        x = (x, x_dst)
    kwargs = {}
    value = None
    if case.edge_weight:
        value = g.edge_weight.clone()  # a gate, carries no relevance
        kwargs["edge_weight"] = value
    if case.edge_attr is not None:
        value = g.edge_attr[:, : case.edge_attr].clone()
        if carry:
            carriers["edge_attr"] = value.requires_grad_()
        kwargs["edge_attr"] = value
    size = (g.num_dst, g.num_src)
    ei = g.edge_index
    if case.adj == "edge_index":
        adj = ei
    else:
        # the sparse adjacency is the transposed one (rows = targets); its
        # values are the edge weights / features, which PyG then reads from it
        kwargs.pop("edge_weight", None)
        kwargs.pop("edge_attr", None)
        if value is None and case.adj != "sparse":  # torch.sparse would default to float32 ones
            value = torch.ones(ei.size(1), dtype=DTYPE)
        if case.adj == "sparse":
            torch_sparse = pytest.importorskip("torch_sparse")
            adj = torch_sparse.SparseTensor(row=ei[1], col=ei[0], value=value, sparse_sizes=size)
        elif case.adj == "csr":
            adj = to_torch_csr_tensor(ei.flip(0), value, size=size)
        elif case.adj == "coo":
            adj = to_torch_coo_tensor(ei.flip(0), value, size=size)
        else:  # pragma: no cover
            raise ValueError(case.adj)
    return (x, adj), kwargs, carriers


def _seed(out: torch.Tensor) -> torch.Tensor:
    """A random signed seed on every output (outputs that are exactly 0, e.g.
    EdgeConv at a node without incoming edges, lose theirs)."""
    gen = torch.Generator().manual_seed(2)
    return torch.randn(out.shape, generator=gen, dtype=out.dtype)


def _relevance(case: Case, layer: nn.Module):
    """Run a relevance pass (LRP-0); return output, seed, relevances, audit."""
    args, kwargs, carriers = _inputs(case, carry=True)
    with lrp.relevance_pass(layer, default_rule=lrp.rules.Epsilon(0.0)):
        out = layer(*args, **kwargs)
        seed = _seed(out.detach())
        with lrp.RelevanceAudit() as audit:
            out.backward(seed)
    relevance = {k: (t.grad if t.grad is not None else torch.zeros_like(t)) for k, t in carriers.items()}
    return out.detach(), seed, relevance, audit


_SOFTMAX_MODULES = ("gat_conv", "gatv2_conv", "transformer_conv", "general_conv")


def _constant_attention(monkeypatch, ref: nn.Module) -> None:
    """Make PyG's attention layers detach their attention softmax, and
    TransformerConv its skip gate ``lin_beta`` (for the plain-autograd
    reference; call it after the relevance pass, so that the LRP layers, which
    inherit PyG's code, run unpatched)."""
    import importlib

    from torch_geometric.utils import softmax

    def detached(*args, **kwargs):
        return softmax(*args, **kwargs).detach()

    for name in _SOFTMAX_MODULES:
        monkeypatch.setattr(importlib.import_module(f"torch_geometric.nn.conv.{name}"), "softmax", detached)
    if getattr(ref, "lin_beta", None) is not None:
        ref.lin_beta.register_forward_hook(lambda module, inputs, output: output.detach())


# ---------------------------------------------------------------------------
# The matrix
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("case", PARAMS)
def test_forward_matches_pyg(case):
    ref, layer = _build_pair(case, bias=True)
    args, kwargs, _ = _inputs(case, carry=False)
    expected = ref(*args, **kwargs)
    out = layer(*args, **kwargs)
    assert out.dtype == DTYPE and out.shape == expected.shape
    assert expected.abs().max() > 0.1  # the comparison is not trivially between zeros
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("case", PARAMS)
def test_forward_unchanged_in_relevance_pass(case):
    ref, layer = _build_pair(case, bias=True)
    args, kwargs, _ = _inputs(case, carry=False)
    expected = ref(*args, **kwargs)
    args, kwargs, _ = _inputs(case, carry=True)
    fuse = getattr(layer, "fuse", None)
    with lrp.relevance_pass(layer, default_rule=lrp.rules.Epsilon(0.0)):
        out = layer(*args, **kwargs)
    assert out.requires_grad  # relevance rides on the output
    torch.testing.assert_close(out.detach(), expected, rtol=0, atol=1e-6)
    # the pass restores what it changed
    assert all(p.requires_grad for p in layer.parameters())
    assert getattr(layer, "fuse", None) == fuse


@pytest.mark.parametrize("case", PARAMS)
def test_conservation_without_bias(case):
    _, layer = _build_pair(case, bias=False)
    out, seed, relevance, audit = _relevance(case, layer)
    total_in = sum(r.sum() for r in relevance.values()).item()
    scale = seed.abs().sum().item()
    assert abs(seed.sum().item()) > 0.01 * scale  # "rel" below is meaningful
    assert total_in + audit.lost == pytest.approx(seed.sum().item(), rel=1e-5)
    assert abs(audit.absorbed) <= 1e-6 * scale
    # what is lost is exactly the seed of the outputs that are 0 (no input contributed)
    assert audit.lost == pytest.approx(seed[out == 0].sum().item(), abs=1e-9 * scale)
    if case.layer in ("GATConv", "GATv2Conv") and "edge_attr" in relevance:
        # edge features only enter the attention coefficients, which are constants
        assert torch.count_nonzero(relevance["edge_attr"]) == 0


@pytest.mark.parametrize("case", [p for p, c in zip(PARAMS, CASES) if c.identity])
def test_relevance_equals_reference(case, monkeypatch):
    """LRP-0 on a bias-free piecewise-linear layer is gradient x input of
    ``sum(out * seed / out)``; attention layers likewise with the attention
    coefficients held constant (softmax detached in the PyG reference)."""
    ref, layer = _build_pair(case, bias=False)
    out, seed, relevance, _ = _relevance(case, layer)
    if case.attention:
        _constant_attention(monkeypatch, ref)

    args, kwargs, carriers = _inputs(case, carry=True)
    ref_out = ref(*args, **kwargs)
    torch.testing.assert_close(ref_out.detach(), out, rtol=0, atol=1e-9)
    scale = torch.where(out != 0, seed / out, 0)
    (ref_out * scale).sum().backward()
    for name, leaf in carriers.items():
        grad = leaf.grad if leaf.grad is not None else torch.zeros_like(leaf)
        torch.testing.assert_close(relevance[name], leaf.detach() * grad, rtol=1e-6, atol=1e-8,
                                   msg=lambda m, n=name: f"relevance of {n}: {m}")


# ---------------------------------------------------------------------------
# Attention: relevance stays on the value path
# ---------------------------------------------------------------------------
def test_gat_edge_attr_gets_no_relevance_but_conserves():
    torch.manual_seed(0)
    layer = lrp.nn.GATConv(F_IN, F_OUT, heads=2, edge_dim=F_EDGE, bias=False).to(DTYPE)
    g = HOMOGENEOUS
    x = g.x.clone().requires_grad_()
    edge_attr = g.edge_attr[:, :F_EDGE].clone().requires_grad_()
    with lrp.relevance_pass(layer, default_rule=lrp.rules.Epsilon(0.0)):
        out = layer(x, g.edge_index, edge_attr)
        with lrp.RelevanceAudit() as audit:
            out.backward(out.detach())
    assert edge_attr.grad is None or torch.count_nonzero(edge_attr.grad) == 0
    # ... while plain autograd does reach edge_attr through the attention path
    edge_attr2 = g.edge_attr[:, :F_EDGE].clone().requires_grad_()
    layer(g.x, g.edge_index, edge_attr2).pow(2).sum().backward()
    assert edge_attr2.grad.abs().sum() > 0
    assert x.grad.sum().item() + audit.lost == pytest.approx(out.detach().sum().item(), rel=1e-9)


# ---------------------------------------------------------------------------
# Hand-worked examples (expected values derived by hand, not by the package)
# ---------------------------------------------------------------------------
def _set(linear_weight: torch.Tensor, values):
    with torch.no_grad():
        linear_weight.copy_(torch.tensor(values, dtype=DTYPE))


def test_gcn_path_graph_by_hand():
    r"""GCNConv(2, 1, bias=False), W = [[1, -1]], on the path 0 - 1 - 2.

    x = [[1, 0], [3, 1], [2, 2]]  ->  h = x W^T = [1, 2, 0].
    With self-loops the degrees are d = [2, 3, 2]; the message j -> i is
    h_j / sqrt(d_i d_j). Node 0:  out_0 = h_0 / 2 + h_1 / sqrt(6)
    = 1/2 + 2/sqrt(6) = 1.316496580927726.
    Seed R = [1, 0, 0] (explain node 0). The sum splits it proportionally:
        R_h0 = (1/2) / out_0      = sqrt(6) / (sqrt(6) + 4) = 0.379795897113271
        R_h1 = (2/sqrt(6)) / out_0 = 4 / (sqrt(6) + 4)       = 0.620204102886729
    The linear map splits R_hk over x_k W^T = x_k0 * 1 + x_k1 * (-1):
        R_x0 = [1 * R_h0 / 1, 0]                 = [0.379795897113271, 0]
        R_x1 = [3 * R_h1 / 2, -1 * R_h1 / 2]     = [0.930306154330094, -0.310102051443365]
        R_x2 = [0, 0]  (node 2 is two hops away)
    Sum: R_h0 + R_h1 = 1 = the seed.
    """
    layer = lrp.nn.GCNConv(2, 1, bias=False).to(DTYPE)
    _set(layer.lin.weight, [[1.0, -1.0]])
    edge_index = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    x = torch.tensor([[1.0, 0.0], [3.0, 1.0], [2.0, 2.0]], dtype=DTYPE, requires_grad=True)
    with lrp.relevance_pass(layer, default_rule=lrp.rules.Epsilon(0.0)):
        out = layer(x, edge_index)
        with lrp.RelevanceAudit() as audit:
            out.backward(torch.tensor([[1.0], [0.0], [0.0]], dtype=DTYPE))
    assert out[0, 0].item() == pytest.approx(1.316496580927726, abs=1e-12)
    r_h0, r_h1 = 0.379795897113271, 0.620204102886729
    expected = torch.tensor([[r_h0, 0.0], [1.5 * r_h1, -0.5 * r_h1], [0.0, 0.0]], dtype=DTYPE)
    torch.testing.assert_close(x.grad, expected, rtol=0, atol=1e-12)
    assert audit.lost == 0 and abs(audit.absorbed) < 1e-12


def test_sage_mean_by_hand():
    r"""SAGEConv(2, 1, aggr='mean', bias=False): out_i = W_l mean_j x_j + W_r x_i,
    W_l = [[1, 2]], W_r = [[1, -1]]; edges 1 -> 0, 2 -> 0, 0 -> 1.

    x = [[1, 2], [3, -1], [1, 3]]. Node 0: mean(x_1, x_2) = [2, 1],
    W_l [2, 1] = 2 + 2 = 4, W_r x_0 = 1 - 2 = -1, out_0 = 3.
    Seed R = [1, 0, 0]:
      add:      R_l = 4/3,  R_r = -1/3
      lin_r:    R_x0 = [1 * 1, 2 * (-1)] * (-1/3) / (-1) = [1/3, -2/3]
      lin_l:    contributions [2 * 1, 1 * 2] = [2, 2] of 4 -> R_mean = [2/3, 2/3]
      mean (the count 2 is a constant, so it splits like the sum):
        feature 0: x_1 = 3, x_2 = 1 (sum 4)   -> R = 3/4 * 2/3 = 1/2,  1/4 * 2/3 = 1/6
        feature 1: x_1 = -1, x_2 = 3 (sum 2)  -> R = -1/2 * 2/3 = -1/3, 3/2 * 2/3 = 1
    R_x = [[1/3, -2/3], [1/2, -1/3], [1/6, 1]], summing to 1.
    """
    layer = lrp.nn.SAGEConv(2, 1, aggr="mean", bias=False).to(DTYPE)
    _set(layer.lin_l.weight, [[1.0, 2.0]])
    _set(layer.lin_r.weight, [[1.0, -1.0]])
    edge_index = torch.tensor([[1, 2, 0], [0, 0, 1]])
    x = torch.tensor([[1.0, 2.0], [3.0, -1.0], [1.0, 3.0]], dtype=DTYPE, requires_grad=True)
    with lrp.relevance_pass(layer, default_rule=lrp.rules.Epsilon(0.0)):
        out = layer(x, edge_index)
        with lrp.RelevanceAudit() as audit:
            out.backward(torch.tensor([[1.0], [0.0], [0.0]], dtype=DTYPE))
    assert out[0, 0].item() == pytest.approx(3.0, abs=1e-12)
    expected = torch.tensor([[1 / 3, -2 / 3], [1 / 2, -1 / 3], [1 / 6, 1.0]], dtype=DTYPE)
    torch.testing.assert_close(x.grad, expected, rtol=0, atol=1e-12)
    assert audit.lost == 0 and abs(audit.absorbed) < 1e-12


def test_sage_max_by_hand():
    r"""SAGEConv(1, 1, aggr='max', root_weight=False, bias=False), W_l = [[2]];
    edges 1 -> 0, 2 -> 0. x = [[5], [3], [4]]: out_0 = 2 * max(3, 4) = 8.
    Seed R_0 = 1: the winner x_2 takes all of it, R_x = [0, 0, 1]. Nodes 1
    and 2 have no incoming edge: their output is 0 and a seed put there is
    lost (here 0.5 + 0.25 = 0.75)."""
    layer = lrp.nn.SAGEConv(1, 1, aggr="max", root_weight=False, bias=False).to(DTYPE)
    _set(layer.lin_l.weight, [[2.0]])
    edge_index = torch.tensor([[1, 2], [0, 0]])
    x = torch.tensor([[5.0], [3.0], [4.0]], dtype=DTYPE, requires_grad=True)
    with lrp.relevance_pass(layer, default_rule=lrp.rules.Epsilon(0.0)):
        out = layer(x, edge_index)
        with lrp.RelevanceAudit() as audit:
            out.backward(torch.tensor([[1.0], [0.5], [0.25]], dtype=DTYPE))
    torch.testing.assert_close(out.detach(), torch.tensor([[8.0], [0.0], [0.0]], dtype=DTYPE))
    torch.testing.assert_close(x.grad, torch.tensor([[0.0], [0.0], [1.0]], dtype=DTYPE), rtol=0, atol=1e-12)
    assert audit.lost == pytest.approx(0.75, abs=1e-12)


def test_gat_attention_is_constant_by_hand():
    r"""GATConv(1, 1, heads=1, bias=False), W = [[1]], att_src = 1, att_dst = 0,
    edge 1 -> 0 plus the self-loops the layer adds. x = [[1], [2]].

    Node 0 attends over j in {1, 0} (the edge and its self-loop) with logits
    e_0j = leaky_relu(att_src h_j + att_dst h_0) = h_j, i.e. e_00 = 1,
    e_01 = 2, so alpha_00 = 1 / (1 + e), alpha_01 = e / (1 + e), and
    out_0 = (1 * 1 + e * 2) / (1 + e). With alpha a constant, a seed of 1 on
    node 0 splits over the messages alpha_0j h_j:
        R_x0 = 1 / (1 + 2e) = 0.155362...,  R_x1 = 2e / (1 + 2e) = 0.844637...
    (Relevance pushed through the attention logits would change both.) Node
    1 only attends to itself: out_1 = h_1 = 2, and its seed 0.5 returns to x_1.
    """
    layer = lrp.nn.GATConv(1, 1, heads=1, bias=False).to(DTYPE)
    _set(layer.lin.weight, [[1.0]])
    _set(layer.att_src, [[[1.0]]])
    _set(layer.att_dst, [[[0.0]]])
    edge_index = torch.tensor([[1], [0]])
    x = torch.tensor([[1.0], [2.0]], dtype=DTYPE, requires_grad=True)
    with lrp.relevance_pass(layer, default_rule=lrp.rules.Epsilon(0.0)):
        out = layer(x, edge_index)
        with lrp.RelevanceAudit() as audit:
            out.backward(torch.tensor([[1.0], [0.5]], dtype=DTYPE))
    e = math.e
    assert out[0, 0].item() == pytest.approx((1 + 2 * e) / (1 + e), abs=1e-12)
    expected = torch.tensor([[1 / (1 + 2 * e)], [2 * e / (1 + 2 * e) + 0.5]], dtype=DTYPE)
    torch.testing.assert_close(x.grad, expected, rtol=0, atol=1e-12)
    assert audit.lost == 0 and abs(audit.absorbed) < 1e-12


@pytest.mark.parametrize("name, args", [("GCNConv", (4, 3)), ("GraphConv", (4, 3)), ("SAGEConv", (4, 3)),
                                        ("GATConv", (4, 3)), ("TransformerConv", (4, 3)), ("GeneralConv", (4, 3)),
                                        ("ChebConv", (4, 3, 2)), ("APPNP", (2, 0.1))])
def test_pyg_edge_masks_reach_the_lrp_layers_whatever_was_built_first(name, args):
    """PyG's explain edge masks (``set_masks``: GNNExplainer, Captum) scale
    the messages of an lrp layer as of its PyG layer. Before, an lrp layer
    built after its PyG parent kept the parent's compiled ``propagate`` for
    explain mode, which has no mask branch: masks were ignored."""
    import torch_geometric.nn as pyg_nn
    from torch_geometric.explain.algorithm.utils import clear_masks, set_masks
    from torch_geometric_lrp import nn as lrp_nn

    torch.manual_seed(0)
    pyg = getattr(pyg_nn, name)(*args).double().eval()  # the PyG class built first
    ours = getattr(lrp_nn, name)(*args).double().eval()
    ours.load_state_dict(pyg.state_dict())
    x = torch.randn(6, 4, dtype=torch.float64)
    edge_index = torch.tensor([[0, 1, 2, 3, 4, 5, 1], [1, 2, 3, 4, 5, 0, 3]])
    mask = torch.rand(edge_index.shape[1], dtype=torch.float64)
    for layer in (pyg, ours):
        set_masks(layer, mask, edge_index, apply_sigmoid=False)
    try:
        masked = ours(x, edge_index)
        torch.testing.assert_close(masked, pyg(x, edge_index), rtol=1e-12, atol=1e-14)
    finally:
        clear_masks(pyg), clear_masks(ours)
    assert (masked - ours(x, edge_index)).abs().max() > 1e-3  # the masks did change the output
