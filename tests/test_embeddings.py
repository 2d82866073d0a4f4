"""Categorical inputs: integer ``x`` (and ``edge_attr``) looked up in
embeddings inside the model (issue 11). Relevance starts at the outputs of
the lookups; it equals the relevance of a twin model explained on those
embeddings as float input.
"""
from __future__ import annotations

import copy

import pytest
import torch
from torch_geometric.explain import Explainer
from torch_geometric.nn import GCNConv, GINEConv

import torch_geometric_lrp as lrp
from explain_cases import assert_conserved, one_thread_fixture
from torch_geometric_lrp.rules import Epsilon

one_thread = pytest.fixture(autouse=True, scope="module")(one_thread_fixture)

N, D, HID, C_OUT, COLS, CATS = 30, 6, 8, 3, 3, 5


def graph(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ring = torch.arange(N)
    src = torch.cat([ring, torch.randint(0, N, (10,), generator=g)])
    dst = torch.cat([(ring + 1) % N, torch.randint(0, N, (10,), generator=g)])
    edge_index = torch.cat([torch.stack([src, dst]), torch.stack([dst, src])], dim=1)
    x = torch.randint(0, CATS, (N, COLS), generator=g)
    return x, edge_index


class Rest(torch.nn.Module):
    """GCNConv -> ReLU -> GCNConv on float node features."""

    def __init__(self, bias: bool = True):
        super().__init__()
        self.conv1 = GCNConv(D, HID, bias=bias)
        self.conv2 = GCNConv(HID, C_OUT, bias=bias)

    def forward(self, h, edge_index):
        return self.conv2(self.conv1(h, edge_index).relu(), edge_index)


class Embedded(torch.nn.Module):
    """Embedding -> Rest, on one categorical column (x of shape [N])."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.emb = torch.nn.Embedding(CATS, D)
        self.rest = Rest()

    def forward(self, x, edge_index):
        return self.rest(self.emb(x), edge_index)


class AtomEncoder(torch.nn.Module):
    """OGB-style: one embedding per column, summed."""

    def __init__(self, widths=None):
        super().__init__()
        self.embs = torch.nn.ModuleList(torch.nn.Embedding(CATS, w) for w in (widths or [D] * COLS))

    def forward(self, x):
        h = 0
        for c, emb in enumerate(self.embs):
            h += emb(x[:, c])
        return h


class Atoms(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.encoder = AtomEncoder()
        self.rest = Rest()

    def forward(self, x, edge_index):
        return self.rest(self.encoder(x), edge_index)


class StackedTwin(torch.nn.Module):
    """Atoms on float input: the per-column embeddings, [N, COLS * D], summed."""

    def __init__(self, rest: Rest):
        super().__init__()
        self.rest = rest

    def forward(self, e, edge_index):
        return self.rest(e.view(e.shape[0], COLS, D).sum(1), edge_index)


@pytest.mark.parametrize("subgraph", [True, False])
def test_embedding_relevance_equals_the_float_twin(subgraph):
    model = Embedded().eval()
    x, edge_index = graph()
    x = x[:, 0]  # one column, 1-D
    ex = lrp.explain(model, x, edge_index, index=3, subgraph=subgraph)
    with torch.no_grad():
        e = model.emb(x)
    twin = lrp.explain(model.rest, e, edge_index, index=3, subgraph=subgraph)
    assert ex.embedding_relevance.shape == (N, D) and ex.node_mask.shape == (N, 1)
    torch.testing.assert_close(ex.embedding_relevance, twin.node_mask)
    torch.testing.assert_close(ex.node_mask, twin.node_mask.sum(-1, keepdim=True))
    assert ex.score == pytest.approx(twin.score, rel=1e-6)
    assert ex.relevance_total == pytest.approx(twin.relevance_total, rel=1e-5, abs=1e-6)
    assert_conserved(ex)
    torch.testing.assert_close(ex.edge_mask, twin.edge_mask)
    assert ex.x is x and ex.node_mask.dtype == torch.float32


@pytest.mark.parametrize("subgraph", [True, False])
def test_atom_encoder_per_column_equals_the_stacked_twin(subgraph):
    model = Atoms().eval()
    x, edge_index = graph(1)
    ex = lrp.explain(model, x, edge_index, index=[2, 7], subgraph=subgraph)
    with torch.no_grad():
        e = torch.cat([emb(x[:, c]) for c, emb in enumerate(model.encoder.embs)], dim=1)
    twin = lrp.explain(StackedTwin(model.rest).eval(), e, edge_index, index=[2, 7], subgraph=subgraph)
    per = twin.node_mask.view(N, COLS, D)
    assert ex.node_mask.shape == (N, COLS)
    torch.testing.assert_close(ex.node_mask, per.sum(-1), rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(ex.embedding_relevance, per.sum(1), rtol=1e-4, atol=1e-6)
    assert ex.score == pytest.approx(twin.score, rel=1e-6)
    assert_conserved(ex)
    assert_conserved(twin)
    # relevance only on the explained targets' receptive field, and it adds up
    assert float(ex.node_mask.sum()) == pytest.approx(ex.relevance_total, rel=1e-5, abs=1e-6)


def test_conservation_without_biases_is_exact():
    model = Atoms().eval()
    model.rest = Rest(bias=False)
    x, edge_index = graph(2)
    ex = lrp.explain(model, x, edge_index, index=5, rules=Epsilon(0.0))
    assert ex.relevance_total == pytest.approx(ex.score, rel=1e-5)
    assert abs(ex.residual) < 1e-5 * (1 + abs(ex.score))
    with torch.no_grad():
        assert ex.score == pytest.approx(float(model(x, edge_index)[5].max()), rel=1e-6)


def test_widths_differ_no_embedding_relevance():
    model = Atoms().eval()
    x, edge_index = graph(3)

    class Cat(torch.nn.Module):  # per-column widths 2, 3, 1, concatenated to D
        def __init__(self):
            super().__init__()
            self.embs = torch.nn.ModuleList(torch.nn.Embedding(CATS, w) for w in (2, 3, 1))
            self.rest = model.rest

        def forward(self, x, edge_index):
            return self.rest(torch.cat([e(x[:, c]) for c, e in enumerate(self.embs)], -1), edge_index)

    ex = lrp.explain(Cat().eval(), x, edge_index, index=4)
    assert "embedding_relevance" not in ex and ex.node_mask.shape == (N, COLS)
    assert_conserved(ex)


@pytest.mark.parametrize("node_mask_type", ["attributes", "object", "common_attributes"])
def test_through_pyg_explainer(node_mask_type):
    model = Atoms().eval()
    x, edge_index = graph(4)
    explainer = Explainer(model, algorithm=lrp.LRP(), explanation_type="model", node_mask_type=node_mask_type,
                          edge_mask_type="object",
                          model_config=dict(mode="multiclass_classification", task_level="node", return_type="raw"))
    ex = explainer(x, edge_index, index=6)
    direct = lrp.explain(model, x, edge_index, index=6)
    expected = {"attributes": direct.node_mask, "object": direct.node_mask.sum(-1, keepdim=True),
                "common_attributes": direct.node_mask.sum(0, keepdim=True)}[node_mask_type]
    torch.testing.assert_close(ex.node_mask, expected)
    torch.testing.assert_close(ex.embedding_relevance, direct.embedding_relevance)
    assert_conserved(ex)


def test_bond_encoder_edge_attr():
    class Molecule(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(2)
            self.atoms = AtomEncoder()
            self.bonds = torch.nn.ModuleList(torch.nn.Embedding(4, D) for _ in range(2))
            self.conv = GINEConv(torch.nn.Linear(D, C_OUT))

        def forward(self, x, edge_index, edge_attr):
            e = self.bonds[0](edge_attr[:, 0]) + self.bonds[1](edge_attr[:, 1])
            return self.conv(self.atoms(x), edge_index, e)

    x, edge_index = graph(5)
    edge_attr = torch.randint(0, 4, (edge_index.shape[1], 2), generator=torch.Generator().manual_seed(0))
    model = Molecule().eval()
    for subgraph in (True, False):
        ex = lrp.explain(model, x, edge_index, index=1, edge_attr=edge_attr, subgraph=subgraph)
        assert ex.node_mask.shape == (N, COLS) and ex.edge_attr_mask.shape == (edge_index.shape[1], 2)
        assert float(ex.edge_attr_mask.abs().sum()) > 0
        assert ex.relevance_total == pytest.approx(
            float(ex.node_mask.sum() + ex.edge_attr_mask.sum()), rel=1e-5, abs=1e-6)
        assert_conserved(ex)
    # a node no edge reaches: its subgraph has no edges, and no bond lookup rows; the mask is there, 0,
    # as on the full graph (before, it was missing on the cut: a KeyError for the same call on another node)
    isolated = torch.cat([x, x[:1]])
    alone = [lrp.explain(model, isolated, edge_index, index=N, edge_attr=edge_attr, subgraph=s) for s in (True, False)]
    many = lrp.explain_nodes(model, isolated, edge_index, [N], edge_attr=edge_attr)[0]
    sparse = lrp.explain_nodes(model, isolated, edge_index, [N], edge_attr=edge_attr, output="sparse")
    assert all(float(ex.edge_attr_mask.abs().sum()) == 0 for ex in alone + [many])
    assert alone[0].edge_attr_mask.shape == alone[1].edge_attr_mask.shape == (edge_index.shape[1], 2)
    assert sparse.edge_attr_relevance is not None


def test_float_edge_attr_with_integer_x():
    class Mixed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(4)
            self.atoms = AtomEncoder()
            self.conv = GINEConv(torch.nn.Linear(D, C_OUT), edge_dim=2)

        def forward(self, x, edge_index, edge_attr):
            return self.conv(self.atoms(x), edge_index, edge_attr)

    x, edge_index = graph(10)
    edge_attr = torch.rand(edge_index.shape[1], 2, generator=torch.Generator().manual_seed(1))
    ex = lrp.explain(Mixed().eval(), x, edge_index, index=2, edge_attr=edge_attr)
    assert ex.edge_attr_mask.shape == (edge_index.shape[1], 2) and float(ex.edge_attr_mask.abs().sum()) > 0
    assert ex.relevance_total == pytest.approx(
        float(ex.node_mask.sum() + ex.edge_attr_mask.sum()), rel=1e-5, abs=1e-6)
    assert_conserved(ex)


def test_other_uses_of_x_are_constants():
    """An integer x also used as an index (here to pick a per-category
    scale) gives that use no relevance; the lookup's share still adds up."""
    class Scaled(Embedded):
        def __init__(self):
            super().__init__()
            self.scale = torch.nn.Parameter(torch.rand(CATS) + 0.5)

        def forward(self, x, edge_index):
            return self.rest(self.emb(x) * self.scale[x].unsqueeze(-1), edge_index)

    x, edge_index = graph(6)
    ex = lrp.explain(Scaled().eval(), x[:, 0], edge_index, index=0)
    assert ex.node_mask.shape == (N, 1)
    assert_conserved(ex)


def test_float_x_is_unchanged_gradient_times_input():
    """LRP-0 on a bias-free ReLU model: relevance equals gradient x input."""
    model = Rest(bias=False).eval()
    torch.manual_seed(3)
    x = torch.randn(N, D)
    _, edge_index = graph(7)
    ex = lrp.explain(model, x, edge_index, index=3, rules=Epsilon(0.0))
    xg = x.clone().requires_grad_()
    out = model(xg, edge_index)
    out[3, out[3].argmax()].backward()
    torch.testing.assert_close(ex.node_mask, xg.grad * x, rtol=1e-4, atol=1e-6)
    assert "embedding_relevance" not in ex


@pytest.mark.parametrize("api", ["explain", "explainer"])
def test_integer_x_without_a_lookup_names_x(api):
    model = Rest().eval()
    x, edge_index = graph(8)
    x = x[:, :1].expand(N, D).contiguous()
    with pytest.raises(TypeError, match=r"x: relevance is carried by floating-point node features or by an "
                                        r"embedding lookup of x.*x\.float\(\)"):
        if api == "explain":
            lrp.explain(model, x, edge_index, index=3)
        else:
            Explainer(model, algorithm=lrp.LRP(), explanation_type="phenomenon", node_mask_type="attributes",
                      model_config=dict(mode="multiclass_classification", task_level="node", return_type="raw"))(
                x, edge_index, index=3, target=torch.zeros(N, dtype=torch.long))


def test_explain_nodes_explains_integer_x_as_explain_does():
    x, edge_index = graph(9)
    x = x[:, 0]
    model = Embedded().eval()
    index = torch.tensor([3, 5, 3])
    listed = lrp.explain_nodes(model, x, edge_index, index, batch_size=2)
    sparse = lrp.explain_nodes(model, x, edge_index, index, batch_size=2, output="sparse")
    for k, (t, ex) in enumerate(zip(index.tolist(), listed)):
        alone = lrp.explain(model, x, edge_index, index=t, subgraph=False)
        torch.testing.assert_close(ex.node_mask, alone.node_mask[ex.node_index])
        torch.testing.assert_close(ex.embedding_relevance, alone.embedding_relevance[ex.node_index])
        row = sparse.node_relevance.to_dense()[k]
        torch.testing.assert_close(row[ex.node_index], ex.node_mask.sum(-1))
        assert sparse.node_relevance.dtype == ex.node_mask.dtype
    with pytest.raises(TypeError, match="x: relevance is carried by floating-point node features"):
        lrp.explain_nodes(model.rest, x, edge_index, torch.tensor([3]))

def test_ids_the_lookup_cannot_take_fail_with_the_lookups_error():
    """Ids out of the table's range fail the model's own forward: its error
    is raised, not the message that the model looks nothing up in x (which
    it does)."""
    x, edge_index = graph(10)
    model = Embedded().eval()
    with pytest.raises(IndexError, match="index out of range"):
        lrp.explain(model, x[:, 0] + CATS, edge_index, index=3)


def test_a_max_norm_lookup_leaves_the_weight_as_it_was():
    """``Embedding(max_norm=...)`` renormalises the rows it looks up in place
    in every forward; an explanation leaves the weight as it was (before, the
    rows it read were renormalised), and explains the renormalised lookup."""
    x, edge_index = graph(11)
    model = Embedded().eval()
    model.emb.max_norm = 1.0
    with torch.no_grad():
        model.emb.weight.mul_(5.0)
    before = model.emb.weight.detach().clone()
    ex = lrp.explain(model, x[:, 0], edge_index, index=3, subgraph=False)
    assert torch.equal(model.emb.weight, before)
    renormed = copy.deepcopy(model)
    expected = renormed(x[:, 0], edge_index)[3]  # a plain forward renormalises the copy's rows
    assert float(ex.score) == pytest.approx(float(expected.max()), rel=1e-6)
    assert not torch.equal(renormed.emb.weight, before)


def test_features_of_a_one_column_categorical_x_are_drawn(tmp_path):
    """A 1-D categorical ``x`` has one feature: its ``[N, 1]`` mask is per
    feature, as for a float ``[N, 1]`` x (before: refused as a mask summed
    over features)."""
    pytest.importorskip("matplotlib")
    x, edge_index = graph(12)
    ex = lrp.explain(Embedded().eval(), x[:, 0], edge_index, index=3, node_mask_type="attributes")
    lrp.visualize_features(ex, path=tmp_path / "features.png")
    assert (tmp_path / "features.png").stat().st_size > 0


class WritesIntoLookup(torch.nn.Module):
    """A lookup, then numbers written in place into its output (masking a
    category), then ``Rest``; ``twin=True`` takes the lookup's output as
    float input instead (the writes on a copy of it)."""

    def __init__(self, twin: bool = False):
        super().__init__()
        torch.manual_seed(0)
        self.emb, self.rest, self.twin = torch.nn.Embedding(CATS, D), Rest(), twin

    def forward(self, x, edge_index, ids=None):
        h = x * 1.0 if self.twin else self.emb(x)
        ids = x if ids is None else ids
        h[ids == 0] = 0.0
        h.index_fill_(0, torch.tensor([1]), 0.5)
        return self.rest(h, edge_index)


def test_writes_in_place_into_a_lookup_are_explained_as_into_a_float_input():
    """Before, the pass's lookup output was a leaf of autograd, into which
    torch refuses writes in place: the explanation failed where the model
    runs."""
    x, edge_index = graph(13)
    x = x[:, 0]
    model = WritesIntoLookup().eval()
    ex = lrp.explain(model, x, edge_index, index=3, subgraph=False)
    twin = WritesIntoLookup(twin=True).eval()
    twin.rest.load_state_dict(model.rest.state_dict())
    h = model.emb(x).detach()
    ref = lrp.explain(twin, h, edge_index, index=3, subgraph=False, ids=x)
    torch.testing.assert_close(ex.embedding_relevance, ref.node_mask)
    assert float(ex.score) == pytest.approx(float(ref.score))


def test_a_model_with_lookups_converts_and_is_refused_by_check_conservation_by_name():
    """``lrp.convert`` takes ``torch.nn.Embedding`` (it was refused as a module
    without relevance support) and explains as the model itself does;
    ``check_conservation`` refuses the integer input naming its dtype and
    what to do."""
    x, edge_index = graph(14)
    model = Embedded().eval()
    converted = lrp.convert(model)
    a = lrp.explain(model, x[:, 0], edge_index, index=3)
    b = lrp.explain(converted, x[:, 0], edge_index, index=3)
    torch.testing.assert_close(a.node_mask, b.node_mask)
    with pytest.raises(TypeError, match=r"input '0' must be a floating-point tensor, got torch.int64.*lrp.explain"):
        lrp.check_conservation(model, x[:, 0], edge_index)
