"""Heterogeneous graphs: ``x_dict`` / ``edge_index_dict`` through PyG's
``Explainer`` with ``lrp.LRP`` and through ``lrp.explain``.

* PyG's heterogeneous explain matrix (HGT and HAN models; node, edge and
  graph level; every mode and return type; index, mask types; dense and
  sparse edges): a valid ``HeteroExplanation`` with masks per type, the
  seeded score equal to the target's logit, and the measured accounting
  (per op, ``RelevanceAudit``) leaving no residual.
* ``to_hetero`` and ``HeteroConv`` models.
* Exactness: a bias-free ``to_hetero`` model under ``Epsilon(0)`` gives
  gradient x input per node type; the edge relevance of a one-layer model
  equals the message contributions computed by hand; a graph with one node
  type and one edge type gives what the homogeneous model gives.
* The gate rule (a sigmoid / softmax factor of a product is held constant).
"""
from __future__ import annotations

import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_geometric.data import Data, HeteroData
from torch_geometric.explain import Explainer, HeteroExplanation
from torch_geometric.nn import (GATConv, GCNConv, GraphConv, HANConv, HeteroConv, HGTConv, SAGEConv,
                                global_add_pool, to_hetero)
from torch_geometric.transforms import ToSparseTensor

import torch_geometric_lrp as lrp
from explain_cases import MODES, one_thread_fixture

one_thread = pytest.fixture(autouse=True, scope="module")(one_thread_fixture)

C = 5


def hetero_data(seed: int = 0) -> HeteroData:
    g = torch.Generator().manual_seed(seed)
    data = HeteroData()
    data["paper"].x = torch.randn(8, 6, generator=g)
    data["author"].x = torch.randn(10, 4, generator=g)
    for (src, n_src), (dst, n_dst), name in [(("paper", 8), ("paper", 8), "cites"),
                                             (("paper", 8), ("author", 10), "written_by"),
                                             (("author", 10), ("paper", 8), "writes")]:
        edges = torch.stack([torch.randint(n_src, (14,), generator=g), torch.randint(n_dst, (14,), generator=g)])
        data[src, name, dst].edge_index = edges
    return data


BATCH = {"paper": torch.tensor([0, 0, 0, 0, 1, 1, 1, 1]), "author": torch.tensor([0] * 5 + [1] * 5)}
LABEL_INDEX = {"paper": torch.tensor([0, 1, 2]), "author": torch.tensor([2, 3, 1])}
ACTIVATION = {("binary_classification", "probs"): torch.sigmoid,
              ("multiclass_classification", "probs"): lambda z: z.softmax(-1),
              ("multiclass_classification", "log_probs"): lambda z: z.log_softmax(-1)}


class HeteroNet(torch.nn.Module):
    """Two HGT or HAN layers; node-level (paper rows), edge-level (rows
    picked per node type and summed) or graph-level (sum pooling per type)."""

    def __init__(self, kind: str, metadata, level: str, mode: str, return_type: str):
        super().__init__()
        conv = {"hgt": HGTConv, "han": HANConv}[kind]
        out = C if mode == "multiclass_classification" else 1
        self.conv1 = conv(-1, 8, heads=2, metadata=metadata)
        self.conv2 = conv(8, out, heads=1, metadata=metadata)
        self.level = level
        self.activation = ACTIVATION.get((mode, return_type))

    def logits(self, x_dict, edge_index_dict, batch=None, edge_label_index=None):
        h = {k: v.relu() for k, v in self.conv1(x_dict, edge_index_dict).items()}
        h = self.conv2(h, edge_index_dict)
        if self.level == "graph":
            return torch.stack([global_add_pool(v, batch[k]) for k, v in h.items()], dim=-1).sum(-1)
        if self.level == "edge":
            return torch.stack([h[k][rows] for k, rows in edge_label_index.items()]).sum(0)
        return h["paper"]

    def forward(self, x_dict, edge_index_dict, batch=None, edge_label_index=None):
        z = self.logits(x_dict, edge_index_dict, batch, edge_label_index)
        return z if self.activation is None else self.activation(z)


def expected_score(logits: torch.Tensor, index, mode: str) -> float:
    rows = torch.as_tensor(index).view(-1)
    z = logits[rows]
    if mode == "multiclass_classification":
        return float(z.max(-1).values.sum())
    if mode == "binary_classification":
        return float(z.abs().sum())  # the evidence for the predicted label
    return float(z.sum())


def check_accounting(explanation) -> None:
    total = sum(float(r.sum(dtype=torch.float64)) for r in explanation.node_mask_dict.values()) \
        if "node_mask" in explanation.node_stores[0] else None
    if total is not None:
        assert explanation.relevance_total == pytest.approx(total, rel=1e-5, abs=1e-6)
    budget = abs(explanation.score) + abs(explanation.absorbed) + 1e-6
    assert abs(explanation.residual) <= 1e-4 * budget


@pytest.mark.parametrize("edges", ["dense", "sparse"])
@pytest.mark.parametrize("node_mask_type,edge_mask_type",
                         [("attributes", "object"), ("attributes", None), (None, "object")])
@pytest.mark.parametrize("index", [1, "range"])
@pytest.mark.parametrize("level", ["node", "edge", "graph"])
@pytest.mark.parametrize("mode,return_type", MODES)
@pytest.mark.parametrize("kind", ["hgt", "han"])
def test_pyg_hetero_matrix(kind, mode, return_type, level, index, node_mask_type, edge_mask_type, edges):
    data = hetero_data()
    torch.manual_seed(0)
    model = HeteroNet(kind, data.metadata(), level, mode, return_type)
    index = torch.arange(2) if index == "range" else index
    kwargs = {"batch": BATCH, "edge_label_index": LABEL_INDEX}
    explainer = Explainer(model, algorithm=lrp.LRP(), explanation_type="model", node_mask_type=node_mask_type,
                          edge_mask_type=edge_mask_type,
                          model_config=dict(mode=mode, task_level=level, return_type=return_type))
    if edges == "sparse":
        if kind == "hgt":
            pytest.skip("PyG's HGTConv itself fails on a SparseTensor adjacency of this graph")
        data = ToSparseTensor()(data)
        edge_index = data.adj_t_dict
        if edge_mask_type is not None:
            with pytest.raises(ValueError, match="edge_mask_type"):
                explainer(data.x_dict, edge_index, index=index, **kwargs)
            return
    else:
        edge_index = data.edge_index_dict
    explanation = explainer(data.x_dict, edge_index, index=index, **kwargs)

    assert isinstance(explanation, HeteroExplanation)
    if edges == "dense":  # PyG's validate reads the SparseTensor as a [2, E] edge_index
        explanation.validate(raise_on_error=True)
    if node_mask_type is not None:
        for node_type, x in data.x_dict.items():
            assert explanation[node_type].node_mask.shape == x.shape
            assert torch.isfinite(explanation[node_type].node_mask).all()
    else:
        assert "node_mask" not in explanation.node_stores[0]
    if edge_mask_type is not None:
        for edge_type, e in data.edge_index_dict.items():
            assert explanation[edge_type].edge_mask.shape == (e.shape[1],)
            assert torch.isfinite(explanation[edge_type].edge_mask).all()
    with torch.no_grad():
        logits = model.logits(data.x_dict, edge_index, **kwargs)
    assert explanation.score == pytest.approx(expected_score(logits, index, mode), rel=1e-4, abs=1e-5)
    check_accounting(explanation)


# --- to_hetero and HeteroConv ---------------------------------------------------------------


class SAGE(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = SAGEConv((-1, -1), 16)
        self.conv2 = SAGEConv((-1, -1), 16)

    def forward(self, x, edge_index):
        x = self.conv1(x, edge_index).relu()
        return self.conv2(x, edge_index)


class HeteroSAGE(torch.nn.Module):
    def __init__(self, metadata):
        super().__init__()
        self.gnn = to_hetero(SAGE(), metadata, aggr="sum")
        self.lin = torch.nn.Linear(16, C)

    def forward(self, x_dict, edge_index_dict):
        return self.lin(self.gnn(x_dict, edge_index_dict)["paper"])


class Stack(torch.nn.Module):
    """HeteroConv over GCN (self-loops), SAGE and GAT (attention), then a linear head."""

    def __init__(self):
        super().__init__()
        self.conv = HeteroConv({("paper", "cites", "paper"): GCNConv(-1, 16),
                                ("paper", "written_by", "author"): SAGEConv((-1, -1), 16),
                                ("author", "writes", "paper"): GATConv((-1, -1), 16, heads=2, concat=False,
                                                                        add_self_loops=False)}, aggr="sum")
        self.lin = torch.nn.Linear(16, C)

    def forward(self, x_dict, edge_index_dict):
        return self.lin(self.conv(x_dict, edge_index_dict)["paper"].relu())


@pytest.mark.parametrize("node_mask_type", ["attributes", "object", "common_attributes"])
@pytest.mark.parametrize("build", [lambda d: HeteroSAGE(d.metadata()), lambda d: Stack()], ids=["to_hetero", "HeteroConv"])
def test_to_hetero_and_hetero_conv_through_explainer(build, node_mask_type):
    data = hetero_data(1)
    torch.manual_seed(1)
    model = build(data)
    with torch.no_grad():
        logits = model(data.x_dict, data.edge_index_dict)
    explainer = Explainer(model, algorithm=lrp.LRP(), explanation_type="model", node_mask_type=node_mask_type,
                          edge_mask_type="object",
                          model_config=dict(mode="multiclass_classification", task_level="node", return_type="raw"))
    explanation = explainer(data.x_dict, data.edge_index_dict, index=torch.tensor([0, 3]))
    explanation.validate(raise_on_error=True)
    for node_type, x in data.x_dict.items():
        mask = explanation[node_type].node_mask
        expected = {"attributes": x.shape, "object": (x.shape[0], 1), "common_attributes": (1, x.shape[1])}
        assert mask.shape == expected[node_mask_type]
    assert explanation.score == pytest.approx(expected_score(logits, [0, 3], "multiclass_classification"), rel=1e-5)
    check_accounting(explanation)
    # the targets read edges of both types that end at papers
    for edge_type in [("paper", "cites", "paper"), ("author", "writes", "paper")]:
        assert explanation[edge_type].edge_mask.abs().sum() > 0


def test_hetero_conv_books_self_loops_of_gcn_per_node_type():
    data = hetero_data(2)
    torch.manual_seed(2)
    model = Stack()
    explanation = lrp.explain(model, data, index=torch.arange(8))
    loops = explanation.self_loop_relevance_dict
    assert loops["paper"].abs().sum() > 0  # GCNConv adds self-loops to paper -> paper
    assert loops["author"].abs().sum() == 0  # no layer adds self-loops on authors


# --- exactness -------------------------------------------------------------------------------


class Head(torch.nn.Module):
    """The ``node_type`` rows of a ``to_hetero`` model's output dict."""

    def __init__(self, gnn: torch.nn.Module, node_type: str = "paper"):
        super().__init__()
        self.gnn, self.node_type = gnn, node_type

    def forward(self, x_dict, edge_index_dict):
        return self.gnn(x_dict, edge_index_dict)[self.node_type]


class Plain(torch.nn.Module):
    def __init__(self, layers: int = 2, bias: bool = False, aggr: str = "add"):
        super().__init__()
        self.convs = torch.nn.ModuleList(
            [GraphConv((-1, -1), 7, aggr=aggr, bias=bias) for _ in range(layers)])

    def forward(self, x, edge_index):
        for i, conv in enumerate(self.convs):
            x = conv(x, edge_index)
            if i < len(self.convs) - 1:
                x = x.relu()
        return x


def test_bias_free_to_hetero_lrp0_is_gradient_x_input():
    data = hetero_data(3)
    x_dict = {k: v.double() for k, v in data.x_dict.items()}
    torch.manual_seed(3)
    model = to_hetero(Plain(bias=False), data.metadata(), aggr="sum").double()
    model(x_dict, data.edge_index_dict)

    head = Head(model)
    explanation = lrp.explain(head, x_dict, data.edge_index_dict, index=torch.tensor([2, 5]),
                              rules=lrp.rules.Epsilon(0.0))
    inputs = {k: v.clone().requires_grad_() for k, v in x_dict.items()}
    out = head(inputs, data.edge_index_dict)
    target = out[[2, 5]].argmax(-1)
    out[[2, 5]].gather(1, target.view(-1, 1)).sum().backward()
    for node_type, x in inputs.items():
        torch.testing.assert_close(explanation[node_type].node_mask, x.grad * x, rtol=1e-9, atol=1e-12)
    assert explanation.relevance_total == pytest.approx(explanation.score, rel=1e-9)


def test_edge_relevance_of_one_layer_is_its_messages():
    """``out_p = W_root x_p + sum_t sum_{(s -> p) in t} W_rel^t x_s``: under
    LRP-0 the relevance of edge ``s -> p`` of type ``t`` is
    ``seed_p . (W_rel^t x_s)``."""
    data = hetero_data(4)
    x_dict = {k: v.double() for k, v in data.x_dict.items()}
    torch.manual_seed(4)
    gnn = to_hetero(Plain(layers=1), data.metadata(), aggr="sum").double()
    gnn(x_dict, data.edge_index_dict)

    head = Head(gnn)
    rows = torch.tensor([0, 1, 4])
    explanation = lrp.explain(head, x_dict, data.edge_index_dict, index=rows, rules=lrp.rules.Epsilon(0.0))
    with torch.no_grad():
        out = head(x_dict, data.edge_index_dict)
    seed = torch.zeros_like(out)
    seed[rows, out[rows].argmax(-1)] = 1.0
    for edge_type, edges in data.edge_index_dict.items():
        conv = gnn.convs[0]["__".join(edge_type)]
        expected = torch.zeros(edges.shape[1], dtype=torch.float64)
        if edge_type[2] == "paper":
            for k, (s, p) in enumerate(edges.t().tolist()):
                message = conv.lin_rel(x_dict[edge_type[0]][s])
                expected[k] = (seed[p] * message * out[p]).sum() / out[p][seed[p] == 1].sum() \
                    if seed[p].any() else 0.0
        torch.testing.assert_close(explanation[edge_type].edge_mask, expected, rtol=1e-9, atol=1e-12)


def test_one_node_type_equals_the_homogeneous_model():
    g = torch.Generator().manual_seed(5)
    x = torch.randn(12, 5, generator=g)
    edge_index = torch.randint(12, (2, 30), generator=g)

    class GCN(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = GCNConv(5, 8)
            self.conv2 = GCNConv(8, 3)

        def forward(self, x, edge_index):
            return self.conv2(self.conv1(x, edge_index).relu(), edge_index)

    torch.manual_seed(5)
    homogeneous = GCN()
    metadata = (["v"], [("v", "to", "v")])
    hetero = to_hetero(GCN(), metadata)
    for name in ("conv1", "conv2"):
        getattr(hetero, name)["v__to__v"].load_state_dict(getattr(homogeneous, name).state_dict())

    index = torch.tensor([1, 7])
    expected = lrp.explain(homogeneous, x, edge_index, index=index, subgraph=False)
    got = lrp.explain(Head(hetero, "v"), {"v": x}, {("v", "to", "v"): edge_index}, index=index)
    torch.testing.assert_close(got["v"].node_mask, expected.node_mask, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got["v", "to", "v"].edge_mask, expected.edge_mask, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got["v"].self_loop_relevance, expected.self_loop_relevance, rtol=1e-5, atol=1e-6)
    assert got.score == pytest.approx(expected.score, rel=1e-6)
    assert got.absorbed == pytest.approx(expected.absorbed, rel=1e-4, abs=1e-6)


def test_hgt_edge_relevance_sums_to_the_relevance_of_its_messages():
    """HGT propagates once over all edge types (per-type blocks with node
    offsets): each block is booked on its type, none is left unmatched."""
    data = hetero_data(6)
    torch.manual_seed(6)
    model = HeteroNet("hgt", data.metadata(), "node", "regression", "raw")
    model.logits(data.x_dict, data.edge_index_dict)
    from torch_geometric_lrp.explainers.core import Pass, Settings
    with Pass(model, Settings(mode=None)) as p:
        out = p.forward(data.x_dict, data.edge_index_dict, {})
        seed = torch.zeros_like(out)
        seed[:3] = out.detach()[:3]
        p.relevance(seed)
        assert p._edges.unmatched == 0.0
        assert sum(float(e.abs().sum()) for e in p.edge.values()) > 0


# --- lrp.explain inputs and errors ----------------------------------------------------------


def test_explain_takes_hetero_data_and_data():
    data = hetero_data(7)
    torch.manual_seed(7)
    model = HeteroSAGE(data.metadata())
    a = lrp.explain(model, data, index=2)
    b = lrp.explain(model, data.x_dict, data.edge_index_dict, index=2)
    assert isinstance(a, HeteroExplanation)
    for node_type in data.node_types:
        torch.testing.assert_close(a[node_type].node_mask, b[node_type].node_mask)
        torch.testing.assert_close(a[node_type].x, data[node_type].x)
    assert a.index.tolist() == [2]

    homogeneous = Data(x=torch.randn(6, 3), edge_index=torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4]]))
    gcn = GCNConv(3, 2)
    c = lrp.explain(gcn, homogeneous, index=1, mode="multiclass_classification")
    d = lrp.explain(gcn, homogeneous.x, homogeneous.edge_index, index=1, mode="multiclass_classification")
    torch.testing.assert_close(c.node_mask, d.node_mask)


class TakesEdgeFeatures(torch.nn.Module):
    """GINE on ``edge_attr``, zeros where none is given, then mean pooling by ``batch``."""

    def __init__(self):
        super().__init__()
        from torch_geometric.nn import GINEConv
        torch.manual_seed(9)
        self.conv, self.head = GINEConv(torch.nn.Linear(3, 4), edge_dim=2), torch.nn.Linear(4, 2)

    def forward(self, x, edges, edge_attr=None, *, batch=None):
        if edge_attr is None:
            edge_attr = torch.zeros(edges.shape[1], 2)
        from torch_geometric.nn import global_mean_pool
        return self.head(global_mean_pool(self.conv(x, edges, edge_attr).relu(), batch))


def test_explain_passes_the_data_attributes_the_forward_takes():
    """``lrp.explain(model, data)`` runs ``model`` on the graph as given: the
    attributes its forward takes by name (``edge_attr``, ``batch``) come
    from ``data`` unless given. Before, only ``x`` and ``edge_index`` were
    taken, so the model ran with ``edge_attr=None`` and one graph, silently
    (another score and other masks)."""
    g = torch.Generator().manual_seed(4)
    data = Data(x=torch.randn(7, 3, generator=g), edge_index=torch.tensor([[0, 1, 2, 3, 4, 5], [1, 2, 0, 4, 5, 6]]),
                edge_attr=torch.randn(6, 2, generator=g), batch=torch.tensor([0, 0, 0, 1, 1, 1, 1]), y=torch.ones(2))
    model = TakesEdgeFeatures()
    got = lrp.explain(model, data, index=1)
    want = lrp.explain(model, data.x, data.edge_index, index=1, edge_attr=data.edge_attr, batch=data.batch)
    assert got.score == pytest.approx(float(model(data.x, data.edge_index, data.edge_attr, batch=data.batch)[1].max()))
    torch.testing.assert_close(got.node_mask, want.node_mask)
    torch.testing.assert_close(got.edge_attr_mask, want.edge_attr_mask)
    # what is given wins
    zeros = torch.zeros(6, 2)
    given = lrp.explain(model, data, index=1, edge_attr=zeros)
    torch.testing.assert_close(given.node_mask, lrp.explain(model, data.x, data.edge_index, index=1,
                                                            edge_attr=zeros, batch=data.batch).node_mask)


def test_explain_passes_the_hetero_data_attributes_the_forward_takes():
    """``edge_attr_dict`` taken from a ``HeteroData`` (collected per edge type)."""
    data = hetero_data(10)
    torch.manual_seed(10)
    model = HeteroSAGE(data.metadata())

    class WithEdgeWeights(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = model

        def forward(self, x_dict, edge_index_dict, weight_dict=None):
            if weight_dict is not None:
                x_dict = {k: v * 2.0 for k, v in x_dict.items()}
            return self.inner(x_dict, edge_index_dict)

    for edge_type in data.edge_types:
        data[edge_type].weight = torch.ones(14)
    wrapped = WithEdgeWeights()
    got = lrp.explain(wrapped, data, index=2)
    want = lrp.explain(wrapped, data.x_dict, data.edge_index_dict, index=2, weight_dict=data.collect("weight"))
    plain = lrp.explain(wrapped, data.x_dict, data.edge_index_dict, index=2)
    for node_type in data.node_types:
        torch.testing.assert_close(got[node_type].node_mask, want[node_type].node_mask)
    assert not torch.allclose(got["paper"].node_mask, plain["paper"].node_mask)


def test_hetero_inputs_are_checked():
    data = hetero_data(8)
    model = HeteroSAGE(data.metadata())
    with pytest.raises(TypeError, match=r"x\['author'\]"):
        lrp.explain(model, {**data.x_dict, "author": torch.arange(10)}, data.edge_index_dict)
    with pytest.raises(ValueError, match="edge_index: a heterogeneous graph takes x and edge_index as dicts"):
        lrp.explain(model, data.x_dict, data["paper", "cites", "paper"].edge_index)
    with pytest.raises(ValueError, match="node type 'venue'"):
        lrp.explain(model, data.x_dict, {**data.edge_index_dict, ("paper", "at", "venue"): torch.zeros(2, 1).long()})
    with pytest.raises(ValueError, match="edge_index: the edges are taken from the HeteroData"):
        lrp.explain(model, data, data.edge_index_dict)
    with pytest.raises(ValueError, match="x: heterogeneous graphs"):
        lrp.explain_nodes(model, data.x_dict, data.edge_index_dict)


# --- gates -----------------------------------------------------------------------------------


class Gated(torch.nn.Module):
    """``sigmoid(x A) * (x B)`` then a sum over columns: a GRU-style gate."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(4, 3, bias=False)
        self.b = torch.nn.Linear(4, 3, bias=False)

    def forward(self, x, detach_gate: bool = False):
        gate = torch.sigmoid(self.a(x))
        gate = gate.detach() if detach_gate else gate
        return (gate * self.b(x)).sum(-1, keepdim=True)


def test_a_sigmoid_factor_is_a_gate():
    torch.manual_seed(9)
    model = Gated().double()
    x = torch.randn(5, 4, dtype=torch.float64)
    with lrp.relevance_pass(model, rules=lrp.rules.Epsilon(0.0)) as mode:
        watched = mode.watch(x)
        out = model(watched)
    (relevance,) = mode.backward(out, out.detach(), [watched])
    # the reference: the gate detached, gradient x input (exact for LRP-0 on a bias-free linear map)
    reference = x.clone().requires_grad_()
    model(reference, detach_gate=True).sum().backward()  # seed = out: one unit per output
    torch.testing.assert_close(relevance, reference.grad * x, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(relevance.sum(), out.sum().detach(), rtol=1e-9, atol=1e-12)


def test_softmax_attention_readout_is_a_gate():
    """``sum_i softmax(s)_i x_i`` over nodes (an attention readout): the
    weights are held constant, all relevance reaches ``x`` through the
    weighted sum."""
    torch.manual_seed(10)
    x = torch.randn(6, 3, dtype=torch.float64)
    score = torch.nn.Linear(3, 1, bias=False).double()

    def readout(h, detach=False):
        w = torch.softmax(score(h), dim=0)
        return ((w.detach() if detach else w) * h).sum(0, keepdim=True)

    class Readout(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.score = score

        def forward(self, h):
            return readout(h)

    with lrp.relevance_pass(Readout(), rules=lrp.rules.Epsilon(0.0)) as mode:
        watched = mode.watch(x)
        out = Readout()(watched)
    (relevance,) = mode.backward(out, out.detach(), [watched])
    reference = x.clone().requires_grad_()
    readout(reference, detach=True).sum().backward()
    torch.testing.assert_close(relevance, reference.grad * x, rtol=1e-9, atol=1e-12)


# --- properties ------------------------------------------------------------------------------


@settings(max_examples=15, deadline=None)
@given(papers=st.integers(1, 9), authors=st.integers(1, 9), edges=st.integers(0, 25), seed=st.integers(0, 10_000))
def test_random_hetero_graphs_lrp0_is_gradient_x_input(papers, authors, edges, seed):
    """On random sizes (edge types without edges, nodes without messages
    included), a bias-free ``to_hetero`` model under ``Epsilon(0)`` gives
    gradient x input for every node type, no residual, and one edge mask
    entry per edge of every type."""
    g = torch.Generator().manual_seed(seed)
    data = HeteroData()
    data["paper"].x = torch.randn(papers, 3, generator=g, dtype=torch.float64)
    data["author"].x = torch.randn(authors, 2, generator=g, dtype=torch.float64)
    for src, n_src, dst, n_dst, name in [("paper", papers, "paper", papers, "cites"),
                                         ("author", authors, "paper", papers, "writes"),
                                         ("paper", papers, "author", authors, "written_by")]:
        data[src, name, dst].edge_index = torch.stack([torch.randint(n_src, (edges,), generator=g),
                                                       torch.randint(n_dst, (edges,), generator=g)])
    torch.manual_seed(seed)
    gnn = to_hetero(Plain(bias=False), data.metadata(), aggr="sum").double()
    gnn(data.x_dict, data.edge_index_dict)

    head = Head(gnn)
    explanation = lrp.explain(head, data, index=0, rules=lrp.rules.Epsilon(0.0))
    inputs = {k: v.clone().requires_grad_() for k, v in data.x_dict.items()}
    out = head(inputs, data.edge_index_dict)
    out[0, out[0].argmax()].backward()
    for node_type, x in inputs.items():
        torch.testing.assert_close(explanation[node_type].node_mask, x.grad * x, rtol=1e-7, atol=1e-10)
    assert abs(explanation.residual) <= 1e-9 * (1 + abs(explanation.score))
    for edge_type in data.edge_types:
        assert explanation[edge_type].edge_mask.shape == (edges,)


class SharedHeteroConv(torch.nn.Module):
    """The layers of a ``to_hetero`` model of :class:`Plain`, run as ``HeteroConv``\\ s
    (the same modules, so the same parameters and outputs)."""

    def __init__(self, gnn: torch.nn.Module, edge_types: list):
        super().__init__()
        self.convs = torch.nn.ModuleList(
            [HeteroConv({t: layers["__".join(t)] for t in edge_types}, aggr="sum") for layers in gnn.convs])

    def forward(self, x_dict, edge_index_dict):
        for i, conv in enumerate(self.convs):
            x_dict = conv(x_dict, edge_index_dict)
            if i < len(self.convs) - 1:
                x_dict = {k: v.relu() for k, v in x_dict.items()}
        return x_dict


def test_hetero_conv_and_to_hetero_agree_under_one_rule():
    """``HeteroConv`` sums over edge types inside the layer (one map under the
    layer's rule); ``to_hetero`` sums in its generated forward. Under one rule
    for every layer the sum continues the layers' maps in both, so the same
    layers explain the same way; under the default composite the input
    layer's sum is a map of its own in ``to_hetero`` only (docs/hetero.md)."""
    data = hetero_data(6)
    x_dict = {k: v.double() for k, v in data.x_dict.items()}
    torch.manual_seed(6)
    gnn = to_hetero(Plain(bias=True), data.metadata(), aggr="sum").double()
    gnn(x_dict, data.edge_index_dict)  # lazy shapes
    with torch.no_grad():
        for p in gnn.parameters():  # signed biases that count
            p.uniform_(-0.5, 0.5)
    twin = SharedHeteroConv(gnn, data.edge_types)
    torch.testing.assert_close(twin(x_dict, data.edge_index_dict)["paper"],
                               gnn(x_dict, data.edge_index_dict)["paper"])
    rows = torch.tensor([0, 3, 5])

    def explain(model, rules):
        return lrp.explain(Head(model), x_dict, data.edge_index_dict, index=rows, rules=rules)

    for rules in (lrp.rules.Gamma(0.25), lrp.rules.ZPlus()):
        a, b = explain(gnn, rules), explain(twin, rules)
        for node_type in x_dict:
            torch.testing.assert_close(a[node_type].node_mask, b[node_type].node_mask, rtol=1e-9, atol=1e-12)
        for edge_type in data.edge_types:
            torch.testing.assert_close(a[edge_type].edge_mask, b[edge_type].edge_mask, rtol=1e-9, atol=1e-12)
    a, b = explain(gnn, None), explain(twin, None)
    gap = max(float((a[t].node_mask - b[t].node_mask).abs().max()) for t in x_dict)
    assert gap > 1e-6 * max(float(a[t].node_mask.abs().max()) for t in x_dict)
    check_accounting(a)
    check_accounting(b)


# --- edge relevance booked on the right edge type -----------------------------------------

WRITES, REVIEWS = ("author", "writes", "paper"), ("author", "reviews", "paper")


def two_relations(seed: int = 0):
    """Authors and papers, joined by two edge types over the same pairs."""
    g = torch.Generator().manual_seed(seed)
    x = {"author": torch.randn(6, 4, generator=g, dtype=torch.float64),
         "paper": torch.randn(5, 3, generator=g, dtype=torch.float64)}
    edges = torch.stack([torch.randint(0, 6, (9,), generator=g), torch.randint(0, 5, (9,), generator=g)])
    return x, edges


class TwoRelations(torch.nn.Module):
    """One ``GraphConv`` per edge type as plain attributes (no ``ModuleDict``), bias-free."""

    def __init__(self):
        super().__init__()
        self.writes = GraphConv((4, 3), 8, bias=False)
        self.reviews = GraphConv((4, 3), 8, bias=False)
        self.head = torch.nn.Linear(8, 2, bias=False)

    def forward(self, x_dict, edge_index_dict):
        pair = (x_dict["author"], x_dict["paper"])
        h = self.writes(pair, edge_index_dict[WRITES]) + self.reviews(pair, edge_index_dict[REVIEWS])
        return self.head(h.relu())


class TwoRelationsConv(torch.nn.Module):
    """The same as a ``HeteroConv`` (registered per edge type)."""

    def __init__(self):
        super().__init__()
        self.conv = HeteroConv({WRITES: GraphConv((4, 3), 8, bias=False),
                                REVIEWS: GraphConv((4, 3), 8, bias=False)}, aggr="sum")
        self.head = torch.nn.Linear(8, 2, bias=False)

    def forward(self, x_dict, edge_index_dict):
        return self.head(self.conv(x_dict, edge_index_dict)["paper"].relu())


def message_gradients(model, x_dict, edge_index_dict, index: int, layers: dict) -> dict:
    """LRP-0's edge relevance on a bias-free ReLU model: the gradient of the
    explained logit with respect to a multiplier 1 on each edge's messages,
    per edge type (``layers``: the layer of each type)."""
    from torch_geometric.explain.algorithm.utils import clear_masks, set_masks
    with torch.no_grad():
        target = int(model(x_dict, edge_index_dict)[index].argmax())
    masks = {t: torch.ones(e.shape[1], dtype=torch.float64, requires_grad=True) for t, e in edge_index_dict.items()}
    for t, layer in layers.items():
        set_masks(layer, masks[t], edge_index_dict[t], apply_sigmoid=False)
    try:
        score = model(x_dict, edge_index_dict)[index, target]
        grads = torch.autograd.grad(score, list(masks.values()))
    finally:
        clear_masks(model)
    return dict(zip(masks, grads))


@pytest.mark.parametrize("build", ["plain attributes", "HeteroConv"])
@pytest.mark.parametrize("edges_given", ["one tensor for both", "equal tensors"])
def test_each_edge_type_gets_the_relevance_of_its_own_messages(build, edges_given):
    """Two edge types over the same pairs, given as one tensor or as two
    equal ones: each layer's messages go to the type whose edges its forward
    got. Before, the first type took both layers' messages (a tensor found
    by identity first, a routing reused for equal edges) and the second type
    got 0, with node masks and conservation intact and no warning."""
    x, edges = two_relations(3)
    edge_index = {WRITES: edges, REVIEWS: edges if edges_given == "one tensor for both" else edges.clone()}
    torch.manual_seed(3)
    model = (TwoRelations() if build == "plain attributes" else TwoRelationsConv()).double()
    layers = ({WRITES: model.writes, REVIEWS: model.reviews} if build == "plain attributes" else
              {WRITES: model.conv.convs[WRITES], REVIEWS: model.conv.convs[REVIEWS]})
    if build == "plain attributes" and edges_given == "one tensor for both":
        # nothing tells the two layers' types apart: said, not guessed
        with pytest.warns(RuntimeWarning, match="could not be booked on an input edge type"):
            explanation = lrp.explain(model, x, edge_index, index=2, rules=lrp.rules.Epsilon(0.0))
        assert all(float(explanation[t].edge_mask.abs().sum()) == 0 for t in edge_index)
        return
    explanation = lrp.explain(model, x, edge_index, index=2, rules=lrp.rules.Epsilon(0.0))
    want = message_gradients(model, x, edge_index, 2, layers)
    assert all(float(w.abs().max()) > 1e-3 for w in want.values()), "degenerate: a type without relevance"
    for t in edge_index:
        torch.testing.assert_close(explanation[t].edge_mask, want[t], rtol=1e-9, atol=1e-12)


class OneTypeGCN(torch.nn.Module):
    """A ``GCNConv`` called directly on one edge type (no ``ModuleDict``)."""

    def __init__(self):
        super().__init__()
        self.conv = GCNConv(4, 8, bias=False)
        self.head = torch.nn.Linear(8, 2, bias=False)

    def forward(self, x_dict, edge_index_dict):
        return self.head(self.conv(x_dict["paper"], edge_index_dict["paper", "cites", "paper"]).relu())


def test_a_layer_called_on_one_edge_type_with_self_loops_books_its_messages():
    """``GCNConv`` drops the input's self-loops before adding its own, so its
    messages no longer start with the input edges: they are found by the
    edge tensor the layer got. Before, the whole edge mask was 0."""
    g = torch.Generator().manual_seed(4)
    x = torch.randn(7, 4, generator=g, dtype=torch.float64)
    edges = torch.tensor([[0, 1, 2, 2, 3, 5, 6], [1, 2, 3, 2, 4, 6, 0]])  # 2 -> 2 is a self-loop
    torch.manual_seed(4)
    model = OneTypeGCN().double()
    cites = ("paper", "cites", "paper")
    hetero = lrp.explain(model, {"paper": x}, {cites: edges}, index=1, rules=lrp.rules.Epsilon(0.0))

    class Homogeneous(torch.nn.Module):
        def forward(self, x, edge_index):
            return model({"paper": x}, {cites: edge_index})

    plain = lrp.explain(Homogeneous(), x, edges, index=1, rules=lrp.rules.Epsilon(0.0))
    assert float(plain.edge_mask.abs().sum()) > 1e-3
    torch.testing.assert_close(hetero[cites].edge_mask, plain.edge_mask, rtol=1e-9, atol=1e-12)


def test_hgt_given_some_edge_types_books_each_block_on_its_type():
    """``HGTConv`` concatenates the edge types of the dict it gets, in its
    order, which need not be all of the input's nor in the input's order.
    Before, every type after the first got a zero mask when the model
    passed HGT a subset of the input's types."""
    data = hetero_data(6)
    used = list(reversed(data.edge_types))  # every type, in another order
    extra = ("paper", "extra", "paper")

    class Subset(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = HGTConv(-1, 8, (data.node_types, used), heads=2)
            self.head = torch.nn.Linear(8, 2)

        def forward(self, x_dict, edge_index_dict):
            return self.head(self.conv(x_dict, {t: edge_index_dict[t] for t in used})["paper"])

    torch.manual_seed(6)
    model = Subset()
    model(data.x_dict, data.edge_index_dict)
    edge_index = {**data.edge_index_dict, extra: data.edge_index_dict[data.edge_types[0]].flip(0)}
    with_extra = lrp.explain(model, data.x_dict, edge_index, index=3)
    alone = lrp.explain(model, data.x_dict, data.edge_index_dict, index=3)
    for t in used:
        torch.testing.assert_close(with_extra[t].edge_mask, alone[t].edge_mask)
    assert all(float(alone[t].edge_mask.abs().sum()) > 0 for t in used if t[2] == "paper")  # one layer: into papers
    assert float(with_extra[extra].edge_mask.abs().sum()) == 0


def papers_and_authors():
    """A tiny heterogeneous graph: 4 papers, 3 authors, writes and its reverse."""
    torch.manual_seed(0)
    x = {"paper": torch.randn(4, 3), "author": torch.randn(3, 3)}
    edges = {("author", "writes", "paper"): torch.tensor([[0, 1, 2], [0, 1, 3]]),
             ("paper", "rev_writes", "author"): torch.tensor([[0, 1, 3], [0, 1, 2]])}
    return x, edges


def test_index_as_a_dict_is_refused_by_name():
    x, edges = papers_and_authors()

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = HeteroConv({k: SAGEConv((3, 3), 4) for k in edges})
            self.head = torch.nn.Linear(4, 2)

        def forward(self, x_dict, edge_index_dict):
            return self.head(self.conv(x_dict, edge_index_dict)["paper"])

    with pytest.raises(TypeError, match=r"index: .* got a dict \('paper'\)\. .*pass their positions"):
        lrp.explain(Model(), x, edges, index={"paper": 0})


def test_convert_and_check_conservation_name_heterogeneous_models():
    from torch_geometric.nn import to_hetero

    x, edges = papers_and_authors()

    class Plain(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = SAGEConv((3, 3), 4)

        def forward(self, x, edge_index):
            return self.conv(x, edge_index)

    for model in (to_hetero(Plain(), (list(x), list(edges))),
                  HeteroConv({k: SAGEConv((3, 3), 4) for k in edges})):
        with pytest.raises(lrp.UnsupportedModuleError, match="(?s)is a heterogeneous model.*lrp.explain"):
            lrp.convert(model)
        with pytest.raises(TypeError, match="check_conservation: the inputs hold a HeteroData or dicts.*lrp.explain"):
            lrp.check_conservation(model, x, edges)

    class ByData(torch.nn.Module):
        """Takes the graph as one HeteroData (or its dicts in a list)."""

        def __init__(self):
            super().__init__()
            self.inner = to_hetero(Plain(), (list(x), list(edges)))

        def forward(self, data):
            if isinstance(data, list):
                return self.inner(*data)
            return self.inner(data.x_dict, data.edge_index_dict)

    data = HeteroData()
    for key, value in x.items():
        data[key].x = value
    for key, value in edges.items():
        data[key].edge_index = value
    for given in (data, [x, edges]):  # before: "input '0' must be a floating-point tensor"
        with pytest.raises(TypeError, match="the inputs hold a HeteroData or dicts"):
            lrp.check_conservation(ByData(), given)


def _message_weight_gradients(model, layer, x_dict, edge_index_dict, row):
    """d out[row, 0] / d w per edge type, with every message of ``layer``
    multiplied by a weight of ones of the edge type whose input tensor its
    call got: the edge relevance of LRP-0 on a bias-free model."""
    weights = {k: torch.ones(v.shape[1], dtype=torch.float64, requires_grad=True) for k, v in edge_index_dict.items()}
    current = {}
    hooks = [layer.register_propagate_forward_pre_hook(lambda m, inputs: current.__setitem__("edges", inputs[0])),
             layer.register_message_forward_hook(lambda m, inputs, out: out * weights[next(
                 k for k, v in edge_index_dict.items() if v is current["edges"])].view(-1, 1))]
    try:
        score = model(x_dict, edge_index_dict)[row, 0]
        return dict(zip(weights, torch.autograd.grad(score, list(weights.values()))))
    finally:
        for h in hooks:
            h.remove()


@pytest.mark.parametrize("same_pairs", [False, True])
def test_one_conv_shared_by_two_edge_types_books_each_call_on_its_type(same_pairs):
    """A conv that a ``HeteroConv`` holds under two edge types (weights shared
    across relations) propagates once per type: each call's messages go to
    the type whose edges it got, also where both types hold the same pairs."""
    torch.manual_seed(0)
    cites, rev = ("paper", "cites", "paper"), ("paper", "rev_cites", "paper")
    x = {"paper": torch.randn(4, 3, dtype=torch.float64)}
    edges = {cites: torch.tensor([[0, 1, 2], [1, 2, 3]]),
             rev: torch.tensor([[0, 1, 2], [1, 2, 3]]) if same_pairs else torch.tensor([[1, 2, 3, 0], [0, 1, 2, 2]])}
    shared = GraphConv(3, 2, bias=False)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = HeteroConv({cites: shared, rev: shared}, aggr="sum")

        def forward(self, x_dict, edge_index_dict):
            return self.conv(x_dict, edge_index_dict)["paper"]

    model = Net().double().eval()
    found = lrp.explain(model, x, edges, index=2, target=torch.tensor([0]), rules=lrp.rules.Epsilon(0.0))
    expected = _message_weight_gradients(model, shared, x, edges, 2)
    for key in edges:
        torch.testing.assert_close(found[key].edge_mask, expected[key], rtol=1e-9, atol=1e-12)


class _ThresholdedWrites(torch.nn.Module):
    """One edge type whose layer keeps the edges of weight > 0.5 (a selection
    of that type's columns), with the pair 0 -> 1 listed twice."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.convs = torch.nn.ModuleDict({"author__writes__paper": GraphConv((4, 4), 3, bias=False)})

    def forward(self, x_dict, edge_index_dict, weight):
        edges = edge_index_dict[("author", "writes", "paper")]
        kept = edges[:, weight > 0.5]
        return self.convs["author__writes__paper"]((x_dict["author"], x_dict["paper"]), kept)


def test_a_selection_of_one_edge_types_columns_is_booked_on_the_columns_it_kept():
    """The second copy of a pair kept its relevance on the first copy, which
    the layer had dropped (homogeneous graphs followed the selection; edge
    types did not). Reference: LRP-0 of this bias-free map is the gradient of a
    multiplier of ones on each input edge."""
    writes = ("author", "writes", "paper")
    x = {"author": torch.randn(3, 4, dtype=torch.float64), "paper": torch.randn(2, 4, dtype=torch.float64)}
    edge_index = {writes: torch.tensor([[0, 0, 2], [1, 1, 1]])}
    weight = torch.tensor([0.2, 0.9, 0.7])
    model = _ThresholdedWrites().double().eval()
    found = lrp.explain(model, x, edge_index, index=1, target=torch.tensor([0]), mode="multiclass_classification",
                        rules=lrp.rules.Epsilon(0.0), weight=weight)
    multiplier = torch.ones(3, dtype=torch.float64, requires_grad=True)
    conv = model.convs["author__writes__paper"]
    handle = conv.register_message_forward_hook(lambda m, inputs, out: out * multiplier[weight > 0.5].view(-1, 1))
    try:
        (expected,) = torch.autograd.grad(model(x, edge_index, weight)[1, 0], multiplier)
    finally:
        handle.remove()
    assert expected[0] == 0 and expected[1] != 0
    torch.testing.assert_close(found[writes].edge_mask, expected)


def test_a_graph_level_model_is_told_from_its_batch_dict():
    """``batch_dict`` tells the number of graphs as ``batch`` does (it asked
    for ``task_level=``)."""
    from torch_geometric.nn import global_add_pool

    class Pooled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.conv = HeteroConv({("a", "to", "b"): GraphConv((3, 3), 4), ("b", "to", "a"): GraphConv((3, 3), 4)})
            self.head = torch.nn.Linear(4, 2)

        def forward(self, x_dict, edge_index_dict, batch_dict):
            h = self.conv(x_dict, edge_index_dict)
            return self.head(sum(global_add_pool(v.relu(), batch_dict[k], size=2) for k, v in h.items()))

    x = {"a": torch.randn(5, 3), "b": torch.randn(4, 3)}
    edge_index = {("a", "to", "b"): torch.tensor([[0, 1, 3, 4], [0, 1, 2, 3]]),
                  ("b", "to", "a"): torch.tensor([[0, 1, 2, 3], [1, 0, 4, 3]])}
    batch = {"a": torch.tensor([0, 0, 0, 1, 1]), "b": torch.tensor([0, 0, 1, 1])}
    model = Pooled().eval()
    found = lrp.explain(model, x, edge_index, index=1, batch_dict=batch, mode="multiclass_classification")
    assert found._model_config.task_level.value == "graph"
    expected = lrp.explain(model, x, edge_index, index=1, batch_dict=batch, mode="multiclass_classification",
                           task_level="graph")
    for t in x:
        torch.testing.assert_close(found[t].node_mask, expected[t].node_mask)


def test_a_model_returning_a_dict_is_told_what_to_return():
    class PerType(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = HeteroConv({("a", "to", "b"): GraphConv((3, 3), 4), ("b", "to", "a"): GraphConv((3, 3), 4)})

        def forward(self, x_dict, edge_index_dict):
            return self.conv(x_dict, edge_index_dict)

    x = {"a": torch.randn(3, 3), "b": torch.randn(3, 3)}
    edge_index = {("a", "to", "b"): torch.tensor([[0, 1], [1, 2]]), ("b", "to", "a"): torch.tensor([[0, 2], [1, 0]])}
    with pytest.raises(TypeError, match=r"must return one tensor, got dict\. .*out\['paper'\]"):
        lrp.explain(PerType().eval(), x, edge_index, index=0, mode="multiclass_classification")


# ---------------------------------------------------------------------------
# Edge masks: layers over reversed edges, and edges the model joins itself
# ---------------------------------------------------------------------------
def _message_relevance(layers, run):
    """Per message, message * d score / d message (LRP-0 on a bias-free ReLU
    model), in the order of each layer's messages, summed over the calls."""
    weights, hooks = [], []
    for layer in layers:
        def scale(module, inputs, out):
            weights.append(torch.ones(out.shape[0], dtype=out.dtype, requires_grad=True))
            return out * weights[-1].view(-1, 1)
        hooks.append(layer.register_message_forward_hook(scale))
    try:
        score = run()
    finally:
        for hook in hooks:
            hook.remove()
    return torch.autograd.grad(score, weights)


def test_dirgnn_conv_out_in_a_hetero_model_books_message_k_on_edge_k():
    """DirGNNConv's conv_out propagates over the input edges reversed: its
    message k belongs to input edge k, as on a homogeneous graph. In a
    HeteroConv it was booked by pairs instead, on the reciprocal edge where
    there is one, without a word."""
    from torch_geometric.nn import DirGNNConv
    torch.manual_seed(0)
    convs = [DirGNNConv(GraphConv(3, 4, bias=False), root_weight=False).double(),
             DirGNNConv(GraphConv(4, 4, bias=False), root_weight=False).double()]
    head = torch.nn.Linear(4, 3, bias=False).double()
    et = ("paper", "cites", "paper")

    class Het(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.c2, self.head = HeteroConv({et: convs[0]}), HeteroConv({et: convs[1]}), head

        def forward(self, x_dict, edge_index_dict):
            h = {k: v.relu() for k, v in self.c1(x_dict, edge_index_dict).items()}
            return self.head(self.c2(h, edge_index_dict)["paper"])

    x = torch.randn(5, 3, dtype=torch.float64)
    ei = torch.tensor([[1, 0, 2, 3, 4, 0], [0, 1, 0, 1, 3, 2]])  # (1,0)/(0,1) and (2,0)/(0,2) both ways
    model = Het()
    out = model({"paper": x}, {et: ei})
    per_layer = _message_relevance([m for c in convs for m in (c.conv_in, c.conv_out)],
                                   lambda: model({"paper": x}, {et: ei})[0, out[0].argmax()])
    reference = sum(per_layer)
    explanation = lrp.explain(model, {"paper": x}, {et: ei}, index=0, rules=lrp.rules.Epsilon(0.0))
    torch.testing.assert_close(explanation[et].edge_mask, reference, rtol=1e-10, atol=1e-12)


class JoinsItsEdges(torch.nn.Module):
    """Numbers the node types as one graph and joins the edge types itself
    (in ``order``), then runs homogeneous layers."""

    def __init__(self, order):
        super().__init__()
        self.order = order
        self.c1, self.c2 = GraphConv(3, 4, bias=False), GraphConv(4, 4, bias=False)
        self.head = torch.nn.Linear(4, 3, bias=False)

    def forward(self, x_dict, edge_index_dict):
        types = sorted(x_dict)
        offset = dict(zip(types, torch.tensor([0] + [x_dict[t].shape[0] for t in types]).cumsum(0).tolist()))
        x = torch.cat([x_dict[t] for t in types])
        edge_types = self.order(list(edge_index_dict))
        edges = torch.cat([edge_index_dict[t] + torch.tensor([[offset[t[0]]], [offset[t[2]]]]) for t in edge_types], 1)
        h = self.c2(self.c1(x, edges).relu(), edges)
        return self.head(h[offset["paper"]:offset["paper"] + x_dict["paper"].shape[0]])


def test_edges_a_model_joins_itself_are_booked_on_their_types_or_not_at_all():
    """Joined by the model, in the input's order or another, the edges tell
    the order (each block one type's edges shifted by the node types'
    offsets): each type's messages land on its own edges. Before, the blocks
    were read in the input's order only, and a join in another order whose
    blocks were shifted copies of each other (here the same two edges) was
    booked on the other type, silently. Where two orders fit (a relation
    and its reverse, one-to-one), nothing tells the types apart: no booking,
    with the documented warning."""
    g = torch.Generator().manual_seed(0)
    x = {"paper": torch.randn(4, 3, generator=g, dtype=torch.float64),
         "author": torch.randn(3, 3, generator=g, dtype=torch.float64)}
    edges = {("paper", "cites", "paper"): torch.tensor([[0, 1], [1, 2]]),
             ("author", "writes", "paper"): torch.tensor([[0, 1], [1, 2]])}
    for order in (lambda types: types, sorted, lambda types: types[::-1]):
        torch.manual_seed(0)
        model = JoinsItsEdges(order).double()
        out = model(x, edges)
        reference = sum(_message_relevance([model.c1, model.c2], lambda: model(x, edges)[2, out[2].argmax()]))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            explanation = lrp.explain(model, x, edges, index=2, rules=lrp.rules.Epsilon(0.0))
        torch.testing.assert_close(torch.cat([explanation[t].edge_mask for t in order(list(edges))]), reference,
                                   rtol=1e-10, atol=1e-12)
    both_ways = {("author", "writes", "paper"): torch.tensor([[0, 1, 2], [0, 1, 2]]),
                 ("paper", "rev_writes", "author"): torch.tensor([[0, 1, 2], [0, 1, 2]])}
    model = JoinsItsEdges(lambda types: types[::-1]).double()
    with pytest.warns(RuntimeWarning, match="could not be booked on an input edge type"):
        explanation = lrp.explain(model, x, both_ways, index=1, rules=lrp.rules.Epsilon(0.0))
    for t in both_ways:
        assert torch.equal(explanation[t].edge_mask, torch.zeros(3, dtype=torch.float64))


def test_the_many_target_paths_refuse_a_heterogeneous_graph_by_name():
    """Before: explain_nodes with an edge dict said to convert a sparse
    adjacency; explain_loader with output='sparse' said the loader had no
    loader.data."""
    from torch_geometric.loader import NeighborLoader
    data = HeteroData()
    data["paper"].x = torch.randn(6, 3)
    data["author"].x = torch.randn(4, 3)
    data["author", "writes", "paper"].edge_index = torch.tensor([[0, 1, 2, 3], [0, 1, 2, 3]])
    model = torch.nn.Linear(3, 2)
    with pytest.raises(ValueError, match="edge_index: got a dict of edge types; explain_nodes explains homogeneous"):
        lrp.explain_nodes(model, data["paper"].x, data.edge_index_dict, index=torch.tensor([0]))
    loader = NeighborLoader(data, num_neighbors=[-1], batch_size=2, input_nodes=("paper", torch.arange(4)))
    for output in ("list", "sparse"):
        with pytest.raises(ValueError, match="loader: its graph is a HeteroData"):
            lrp.explain_loader(model, loader, output=output)
