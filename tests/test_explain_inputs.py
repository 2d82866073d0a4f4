"""What goes in: arguments are checked before any work, with errors that
name the argument and the fix, and inputs people really pass are explained
(issue items 3, 7, 9, 10, 11, 16, 17, 18)."""
from __future__ import annotations

import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.explain import Explainer
from torch_geometric.nn import GCNConv, GraphConv, SAGEConv

import torch_geometric_lrp as lrp
from explain_cases import (C, DATA, F_IN, GCN, HID, N, Model, assert_conserved, assert_same_explanation, build,
                           inputs, logits_of, lrp_explainer, one_thread_fixture, sparse_graph)

one_thread = pytest.fixture(autouse=True, scope="module")(one_thread_fixture)


@pytest.fixture
def no_work(monkeypatch):
    """Fails the test if a relevance pass starts."""
    from torch_geometric_lrp.explainers import core

    def refuse(*args, **kwargs):
        raise AssertionError("a relevance pass ran before the arguments were checked")

    monkeypatch.setattr(core.Pass, "__enter__", refuse)


# ---------------------------------------------------------------------------
# Item 3: max / min aggregation, a target without incoming edges
# ---------------------------------------------------------------------------
class MaxSAGE(Model):
    def __init__(self, out, aggr="max"):
        super().__init__()
        self.act = None
        self.conv1 = SAGEConv(F_IN, HID, aggr=aggr)
        self.conv2 = SAGEConv(HID, out, aggr=aggr)

    def logits(self, x, edge_index):
        return self.conv2(F.relu(self.conv1(x, edge_index)), edge_index)


@pytest.mark.parametrize("aggr", ["max", "min"])
@pytest.mark.parametrize("subgraph", [True, False])
def test_max_aggregation_target_without_incoming_edges(aggr, subgraph):
    torch.manual_seed(0)
    model = MaxSAGE(C, aggr).eval()
    x, edge_index = DATA["x"], DATA["edge_index"]
    edge_index = edge_index[:, (edge_index[1] != 3) & (edge_index[0] != 3)]  # node 3: no edges at all
    explanation = lrp.explain(model, x, edge_index, index=3, subgraph=subgraph)
    with torch.no_grad():
        assert explanation.score == pytest.approx(model(x, edge_index)[3].max().item(), rel=1e-5)
    assert torch.all(explanation.node_mask[torch.arange(N) != 3] == 0)
    assert_conserved(explanation)


# ---------------------------------------------------------------------------
# Item 7: non-finite values the target does not depend on
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("value", [float("nan"), float("inf")])
@pytest.mark.parametrize("subgraph", [True, False])
def test_non_finite_values_outside_the_dependency_change_nothing(value, subgraph):
    model = build("gcn")
    x, edge_index = sparse_graph()
    clean = lrp.explain(model, x, edge_index, index=10, subgraph=subgraph)
    poisoned_x = x.clone()
    poisoned_x[30] = value  # 20 hops away on the ring
    poisoned = lrp.explain(model, poisoned_x, edge_index, index=10, subgraph=subgraph)
    assert torch.isfinite(poisoned.node_mask).all() and torch.isfinite(poisoned.edge_mask).all()
    assert_same_explanation(poisoned, clean)


@pytest.mark.parametrize("layer", ["GATConv", "GATv2Conv", "TransformerConv"])
@pytest.mark.parametrize("where", ["x", "edge_attr"])
@pytest.mark.parametrize("subgraph", [True, False])
def test_a_non_finite_value_in_attention_the_target_does_not_read_changes_nothing(layer, where, subgraph):
    """Path 0 - 1 - 2, one attention layer, target 0. A NaN at node 2 (or on
    edge 2 -> 1) makes node 1's attention NaN, which node 0's output never
    reads: the explanation is the clean one (before: NaN in every row)."""
    import torch_geometric.nn as pyg_nn
    torch.manual_seed(0)
    edge_index = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    model = getattr(pyg_nn, layer)(3, 2, edge_dim=2).double().eval()
    x = torch.randn(3, 3, dtype=torch.float64)
    edge_attr = torch.randn(4, 2, dtype=torch.float64)
    clean = lrp.explain(model, x, edge_index, edge_attr=edge_attr, index=0, target=torch.tensor([0]),
                        subgraph=subgraph)
    if where == "x":
        x = x.clone()
        x[2, 0] = float("nan")
    else:
        edge_attr = edge_attr.clone()
        edge_attr[3, 0] = float("nan")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        poisoned = lrp.explain(model, x, edge_index, edge_attr=edge_attr, index=0, target=torch.tensor([0]),
                               subgraph=subgraph)
    for key in ("node_mask", "edge_mask", "edge_attr_mask"):
        torch.testing.assert_close(poisoned[key], clean[key], rtol=1e-12, atol=1e-12, msg=key)
    assert poisoned.score == clean.score


@pytest.mark.parametrize("rules", [None, lrp.rules.Epsilon(0.0), lrp.rules.AlphaBeta(2.0, 1.0)])
def test_a_non_finite_edge_weight_the_target_does_not_read_changes_nothing(rules):
    """A NaN edge weight far from the target, on the full graph: the GCN
    normalisation's NaN entries are gates the target never reads."""
    from torch_geometric.nn.models import GCN as StockGCN
    torch.manual_seed(0)
    model = StockGCN(F_IN, HID, num_layers=2, out_channels=C).eval()
    x, edge_index = sparse_graph()
    weight = torch.ones(edge_index.shape[1])
    clean = lrp.explain(model, x, edge_index, edge_weight=weight, index=10, subgraph=False, rules=rules)
    poisoned_weight = weight.clone()
    poisoned_weight[(edge_index[1] == 30).nonzero()[0]] = float("nan")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        poisoned = lrp.explain(model, x, edge_index, edge_weight=poisoned_weight, index=10, subgraph=False,
                               rules=rules)
    assert_same_explanation(poisoned, clean)


def test_a_non_finite_gate_the_target_reads_gives_a_non_finite_explanation():
    """Where the target does read the NaN attention, its score is NaN, and
    so is its relevance: said, not hidden."""
    from torch_geometric.nn import GATConv
    torch.manual_seed(0)
    edge_index = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    model = GATConv(3, 2).double().eval()
    x = torch.randn(3, 3, dtype=torch.float64)
    x[1, 0] = float("nan")
    with pytest.warns(RuntimeWarning, match="depends on a non-finite value"):
        found = lrp.explain(model, x, edge_index, index=0, target=torch.tensor([0]))
    assert found.node_mask.isnan().any()


# ---------------------------------------------------------------------------
# Item 9: targets
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("cls", [-1, C])
@pytest.mark.parametrize("api", ["explain", "explainer"])
def test_class_out_of_range_is_refused(cls, api):
    model = build("gcn")
    x, edge_index, _ = inputs("node")
    target = torch.full((N,), cls)
    with pytest.raises(ValueError, match=rf"target: class {cls} is out of range for a model with {C} classes"):
        if api == "explain":
            lrp.explain(model, x, edge_index, index=3, target=target)
        else:
            lrp_explainer(model, "multiclass_classification", "raw", "node", "phenomenon")(
                x, edge_index, index=3, target=target)


def test_float_target_on_a_classifier_is_refused(no_work):
    model = build("gcn")
    x, edge_index, _ = inputs("node")
    with pytest.raises(TypeError, match="target: a multiclass model's target holds class indices"):
        lrp.explain(model, x, edge_index, index=3, target=torch.ones(N), mode="multiclass_classification")


def test_float_target_on_a_classifier_is_refused_after_inference():
    model = build("gcn")
    x, edge_index, _ = inputs("node")
    with pytest.raises(TypeError, match="target: a multiclass model's target holds class indices"):
        lrp.explain(model, x, edge_index, index=3, target=torch.ones(N))


def test_regression_target_leaves_the_relevance_alone():
    """A regression phenomenon's target (the observed value) is not seeded:
    the relevance explains the prediction, as without it."""
    model = build("gcn", "regression")
    x, edge_index, _ = inputs("node")
    plain = lrp.explain(model, x, edge_index, index=3, mode="regression")
    given = lrp.explain(model, x, edge_index, index=3, target=torch.full((N, 1), 5.0), mode="regression")
    torch.testing.assert_close(given.node_mask, plain.node_mask)
    assert given.score == pytest.approx(logits_of(model, "node")[3].item(), rel=1e-5)


def test_regression_model_explanation_explains_the_output():
    """With explanation_type='model', PyG hands the prediction as the target:
    that is the output, explained as it is."""
    model = build("gcn", "regression")
    x, edge_index, _ = inputs("node")
    explanation = lrp_explainer(model, "regression", "raw", "node")(x, edge_index, index=3)
    assert explanation.score == pytest.approx(logits_of(model, "node")[3].item(), rel=1e-5)


# ---------------------------------------------------------------------------
# Item 10: grad modes
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("context", [torch.no_grad, torch.inference_mode])
@pytest.mark.parametrize("api", ["explain", "explainer", "explain_nodes"])
def test_explanations_under_no_grad_and_inference_mode(context, api):
    model = build("gcn")
    x, edge_index, _ = inputs("node")
    reference = lrp.explain(model, x, edge_index, index=3)
    with context():
        x_in, edge_index_in = x.clone(), edge_index.clone()  # inference tensors under inference_mode
        if api == "explain":
            explanation = lrp.explain(model, x_in, edge_index_in, index=3)
        elif api == "explainer":
            explanation = lrp_explainer(model, "multiclass_classification", "raw", "node")(
                x_in, edge_index_in, index=3)
        else:
            (explanation,) = lrp.explain_nodes(model, x_in, edge_index_in, torch.tensor([3]))
            explanation.node_mask = torch.zeros_like(x).index_add_(0, explanation.node_index, explanation.node_mask)
    torch.testing.assert_close(explanation.node_mask, reference.node_mask)
    assert explanation.score == pytest.approx(reference.score, rel=1e-6)


# ---------------------------------------------------------------------------
# Item 11: integer features
# explain, the Explainer and explain_nodes explain integer x through the model's
# embedding lookups (a pass has to run to see them): their errors are in test_embeddings.py


# ---------------------------------------------------------------------------
# Item 16: sparse adjacency
# ---------------------------------------------------------------------------
def torch_sparse_adjacency(edge_index):
    return torch.sparse_coo_tensor(edge_index.flip(0), torch.ones(edge_index.shape[1]), (N, N)).coalesce()


def sparse_tensor_adjacency(edge_index):
    torch_sparse = pytest.importorskip("torch_sparse")
    return torch_sparse.SparseTensor.from_edge_index(edge_index, sparse_sizes=(N, N)).t()


@pytest.mark.parametrize("make", [torch_sparse_adjacency, sparse_tensor_adjacency])
def test_sparse_adjacency(make, no_work):
    """An edge mask asked for with a sparse adjacency is refused by name;
    explain_nodes, which cuts edges, refuses it too."""
    model = build("gcn")
    x, edge_index, _ = inputs("node")
    adj = make(edge_index)
    with pytest.raises(ValueError, match="edge_mask_type: an edge mask needs edge_index as a"):
        lrp.explain(model, x, adj, index=3)
    with pytest.raises(ValueError, match="edge_mask_type: an edge mask needs edge_index as a"):
        lrp_explainer(model, "multiclass_classification", "raw", "node")(x, adj, index=3)
    with pytest.raises(ValueError, match="edge_index: explain_nodes cuts each target's subgraph"):
        lrp.explain_nodes(model, x, adj, torch.tensor([3]))


@pytest.mark.parametrize("make", [torch_sparse_adjacency, sparse_tensor_adjacency])
def test_sparse_adjacency_node_relevance(make):
    model = build("gcn", bias=False)
    x, edge_index, _ = inputs("node")
    explanation = lrp.explain(model, x, make(edge_index), index=3, edge_mask_type=None)
    reference = lrp.explain(model, x, edge_index, index=3)
    torch.testing.assert_close(explanation.node_mask, reference.node_mask, rtol=1e-4, atol=1e-5)
    assert explanation.score == pytest.approx(reference.score, rel=1e-6)
    assert "edge_mask" not in explanation or explanation.get("edge_mask") is None


def test_uncoalesced_sparse_adjacency():
    """A ``torch.sparse_coo_tensor`` as built (not coalesced, here with a
    duplicate entry) runs the model, and so is explained: as its coalesced
    copy, which gives the same output, and as the same edges given as an
    edge list (a duplicate edge twice). Before, the pass failed inside PyG's
    ``collect`` (``adj.indices()`` on an uncoalesced tensor). The user's
    adjacency is left as it was."""
    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = GraphConv(F_IN, C)

        def forward(self, x, adj):
            return self.conv(x, adj)

    model = Net().double().eval()
    x, edge_index, _ = inputs("node")
    x = x.double()
    edges = torch.cat([edge_index, edge_index[:, :1]], dim=1)  # one edge twice
    adj = torch.sparse_coo_tensor(edges.flip(0), torch.ones(edges.shape[1], dtype=torch.float64), (N, N))
    assert not adj.is_coalesced()
    target = int(edge_index[1, 0])
    explanation = lrp.explain(model, x, adj, index=target, edge_mask_type=None)
    reference = lrp.explain(model, x, edges, index=target)
    torch.testing.assert_close(explanation.node_mask, reference.node_mask, rtol=1e-10, atol=1e-12)
    assert explanation.score == pytest.approx(reference.score, rel=1e-12)
    assert not adj.is_coalesced() and adj._nnz() == edges.shape[1]


class ReadsStoredEntries(torch.nn.Module):
    """Reads the stored entries of its sparse adjacency, duplicates counted."""

    def __init__(self):
        super().__init__()
        self.conv = GCNConv(F_IN, C)

    def forward(self, x, adj):
        return self.conv(x, adj._indices().flip(0))


def test_an_uncoalesced_adjacency_whose_duplicates_the_model_reads_is_refused():
    """Its coalesced copy, which the pass needs, gives another output: the
    explanation would be of another output than the model's, so the call is
    refused by name. The model reading the same tensor coalesced is explained
    as usual."""
    torch.manual_seed(0)
    model = ReadsStoredEntries().double().eval()
    x, edge_index, _ = inputs("node")
    edges = torch.cat([edge_index, edge_index[:, :5]], dim=1)
    adj = torch.sparse_coo_tensor(edges.flip(0), torch.ones(edges.shape[1], dtype=torch.float64), (N, N))
    with pytest.raises(ValueError, match="edge_index: the model's output on this uncoalesced sparse adjacency "
                                         "differs from its output on the coalesced copy"):
        lrp.explain(model, x.double(), adj, index=3, edge_mask_type=None)
    lrp.explain(model, x.double(), adj.coalesce(), index=3, edge_mask_type=None)


# ---------------------------------------------------------------------------
# Item 17: multi-label binary classification
# ---------------------------------------------------------------------------
class MultiLabel(GCN):
    """Several independent labels per node, each with its own sigmoid (PPI style)."""

    def forward(self, x, edge_index):
        return torch.sigmoid(self.logits(x, edge_index))


@pytest.mark.parametrize("given", ["none", "full", "flat"])
def test_multi_label_binary_classification(given):
    torch.manual_seed(0)
    labels = 5
    model = MultiLabel(labels).eval()
    x, edge_index = sparse_graph()
    with torch.no_grad():
        logits = model.logits(x, edge_index)
    target = {"none": None, "full": (logits > 0.2).long(), "flat": (logits > 0.2).long().view(-1)}[given]
    explanation = lrp.explain(model, x, edge_index, index=torch.tensor([3, 30]), target=target)
    config = explanation._model_config
    assert (config.mode.value, config.return_type.value) == ("binary_classification", "probs")
    wanted = (logits > 0).long() if target is None else (logits > 0.2).long()
    expected = torch.where(wanted[[3, 30]] == 1, logits[[3, 30]], -logits[[3, 30]]).sum().item()
    assert explanation.score == pytest.approx(expected, rel=1e-5)
    assert explanation.target.shape == (2, labels)
    assert_conserved(explanation)
    via_explainer = Explainer(model, algorithm=lrp.LRP(), explanation_type="model", node_mask_type="attributes",
                              edge_mask_type="object", model_config=dict(mode="binary_classification",
                                                                         task_level="node", return_type="probs"))(
        x, edge_index, index=torch.tensor([3, 30]))
    if target is None:
        assert via_explainer.score == pytest.approx(explanation.score, rel=1e-5)


# ---------------------------------------------------------------------------
# Item 18 and the rest of the arguments: checked before any work
# ---------------------------------------------------------------------------
BAD = [
    (dict(batch_size=0), ValueError, "batch_size: expected a positive int"),
    (dict(batch_size=2.5), ValueError, "batch_size: expected a positive int"),
    (dict(mask="bogus"), ValueError, "mask: must be one of"),
    (dict(rules={"conv1": "epsilon"}), TypeError, "rules: values must be rules"),
    (dict(rules=[1]), TypeError, "rules: expected a rule"),
    (dict(mode="multiclass"), ValueError, "mode: must be one of"),
    (dict(num_hops=-1), ValueError, "num_hops: expected an int >= 0"),
]


@pytest.mark.parametrize("kwargs,error,message", BAD)
def test_explain_nodes_checks_arguments_first(kwargs, error, message, no_work):
    model = build("gcn")
    x, edge_index, _ = inputs("node")
    with pytest.raises(error, match=message):
        lrp.explain_nodes(model, x, edge_index, torch.tensor([3, 4]), **kwargs)


@pytest.mark.parametrize("index,error,message", [
    (torch.tensor([-1]), ValueError, "index: row positions must be >= 0"),
    (torch.tensor([0.5]), TypeError, "index: expected integer row positions or a boolean mask"),
    (torch.tensor([N]), ValueError, f"index: row {N} is out of range for {N} rows"),
    (torch.ones(N - 1, dtype=torch.bool), ValueError, "index: a boolean mask needs one entry per row"),
])
def test_explain_nodes_checks_index_first(index, error, message, no_work):
    model = build("gcn")
    x, edge_index, _ = inputs("node")
    with pytest.raises(error, match=message):
        lrp.explain_nodes(model, x, edge_index, index)


@pytest.mark.parametrize("kwargs,error,message", [
    (dict(mask="bogus"), ValueError, "mask: must be one of"),
    (dict(rules={3: lrp.rules.Epsilon()}), TypeError, "rules: keys must be module types or qualified names"),
    (dict(index=torch.tensor([-2])), ValueError, "index: row positions must be >= 0"),
    (dict(index=torch.tensor([], dtype=torch.long)), ValueError, "index: selects no rows"),
    (dict(index=torch.zeros(N, dtype=torch.bool)), ValueError, "index: selects no rows"),
    (dict(task_level="nodes"), ValueError, "task_level: must be one of"),
    (dict(edge_mask_type="attributes"), ValueError, "edge_mask_type: must be 'object' or None"),
    (dict(node_mask_type="everything"), ValueError, "node_mask_type: must be one of"),
])
def test_explain_checks_arguments_first(kwargs, error, message, no_work):
    model = build("gcn")
    x, edge_index, _ = inputs("node")
    with pytest.raises(error, match=message):
        lrp.explain(model, x, edge_index, **{"index": 3, **kwargs})


def test_lrp_refuses_an_empty_index():
    """Before, an all-False mask failed deep inside with a reshape error."""
    explainer = Explainer(build("gcn"), algorithm=lrp.LRP(), explanation_type="model", node_mask_type="attributes",
                          edge_mask_type="object", model_config=dict(mode="multiclass_classification",
                                                                      task_level="node", return_type="raw"))
    x, edge_index, _ = inputs("node")
    with pytest.raises(ValueError, match="index: selects no rows"):
        explainer(x, edge_index, index=torch.zeros(N, dtype=torch.bool))


@pytest.mark.parametrize("level,rows", [("node", N), ("graph", 3), ("edge", None)])
def test_a_boolean_index_of_the_wrong_length_is_refused(level, rows):
    """A boolean ``index`` must have one entry per output row. Before, a mask
    of the wrong length was read as the positions of its ``True`` entries and
    explained other rows than meant, without a word. A mask of the right
    length equals the list of its positions."""
    model = build({"node": "gcn", "graph": "graph", "edge": "link"}[level])
    x, edge_index, kwargs = inputs(level)
    rows = rows or kwargs["edge_label_index"].shape[1]
    explainer = Explainer(model, algorithm=lrp.LRP(), explanation_type="phenomenon", node_mask_type="attributes",
                          edge_mask_type="object", model_config=dict(mode="multiclass_classification",
                                                                      task_level=level, return_type="raw"))
    target = model(x, edge_index, **kwargs).argmax(-1)
    for short in (rows - 1, rows + 1):
        mask = torch.zeros(short, dtype=torch.bool)
        mask[:2] = True
        with pytest.raises(ValueError, match=f"index: a boolean mask needs one entry per output row \\({rows}\\), "
                                             f"got {short} entries"):
            lrp.explain(model, x, edge_index, index=mask, **kwargs)
        with pytest.raises(ValueError, match="index: a boolean mask needs one entry per output row"):
            explainer(x, edge_index, target=target, index=mask, **kwargs)
    mask = torch.zeros(rows, dtype=torch.bool)
    mask[[0, 2]] = True
    assert_same_explanation(lrp.explain(model, x, edge_index, index=mask, **kwargs),
                            lrp.explain(model, x, edge_index, index=torch.tensor([0, 2]), **kwargs))
    assert_same_explanation(explainer(x, edge_index, target=target, index=mask, **kwargs),
                            explainer(x, edge_index, target=target, index=torch.tensor([0, 2]), **kwargs))


def test_lrp_checks_its_arguments():
    with pytest.raises(ValueError, match="mask: must be one of"):
        lrp.LRP(mask="absolute")
    with pytest.raises(TypeError, match="rules: values must be rules"):
        lrp.LRP(rules={GCNConv: 0.25})


def test_index_out_of_range_for_the_output():
    model = build("graph")
    x, edge_index, kwargs = inputs("graph")
    with pytest.raises(ValueError, match="index: row 5 is out of range for an output of 3 rows"):
        lrp.explain(model, x, edge_index, index=5, **kwargs)


def test_a_forward_without_gradients_warns_that_no_relevance_reaches_the_inputs():
    class NoGrad(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 2)

        def forward(self, x, edge_index):
            with torch.no_grad():
                return self.lin(x)

    x, edge_index = torch.randn(5, 3), torch.tensor([[0, 1], [1, 2]])
    with pytest.warns(RuntimeWarning, match="does not depend on the explained inputs"):
        explanation = lrp.explain(NoGrad(), x, edge_index, index=1)
    assert explanation.relevance_total == 0.0


def test_edge_index_as_pyg_edge_index():
    """PyG's ``EdgeIndex`` (a tensor subclass with sort and CSR caches) is
    explained like the plain tensor it wraps; before, cutting the subgraph
    failed inside ``EdgeIndex`` arithmetic."""
    from torch_geometric import EdgeIndex

    model = build("gcn")
    x, edge_index, _ = inputs("node")
    wrapped = EdgeIndex(edge_index, sparse_size=(N, N))
    index = torch.tensor([3, 4])
    assert_same_explanation(lrp.explain(model, x, wrapped, index=index), lrp.explain(model, x, edge_index, index=index))
    explainer = Explainer(model, algorithm=lrp.LRP(), explanation_type="model", node_mask_type="attributes",
                          edge_mask_type="object", model_config=dict(mode="multiclass_classification",
                                                                      task_level="node", return_type="raw"))
    assert_same_explanation(explainer(x, wrapped, index=index), explainer(x, edge_index, index=index))
    for a, b in zip(lrp.explain_nodes(model, x, wrapped, index), lrp.explain_nodes(model, x, edge_index, index)):
        torch.testing.assert_close(a.node_mask, b.node_mask)
        torch.testing.assert_close(a.edge_mask, b.edge_mask)
    torch.testing.assert_close(lrp.walks(model, x, wrapped, 3).relevance, lrp.walks(model, x, edge_index, 3).relevance)


def test_index_is_a_set_of_rows():
    """A row given twice is explained once (as documented): the same masks
    and score as the row alone."""
    model = build("gcn")
    x, edge_index, _ = inputs("node")
    twice = lrp.explain(model, x, edge_index, index=torch.tensor([3, 3]))
    once = lrp.explain(model, x, edge_index, index=torch.tensor([3]))
    assert_same_explanation(twice, once)
    assert once.score != 0


class SelectedProbability(torch.nn.Module):
    """A binary node classifier returning ``sigmoid(z)[:, 0]`` (or a part of a softmax)."""

    def __init__(self, classes=1):
        super().__init__()
        from torch_geometric.nn import GCNConv
        self.conv, self.lin, self.classes = GCNConv(5, 8, bias=False), torch.nn.Linear(8, classes, bias=False), classes

    def logits(self, x, edge_index):
        return self.lin(self.conv(x, edge_index).relu())

    def forward(self, x, edge_index):
        z = self.logits(x, edge_index)
        return torch.sigmoid(z)[:, 0] if self.classes == 1 else torch.softmax(z, -1)[:, 1]


def test_relevance_starts_at_the_logit_under_a_selection_that_keeps_every_element():
    """``sigmoid(z)[:, 0]`` of a ``[N, 1]`` logit is ``sigmoid(z[:, 0])``: the
    seed is the logit (``-z`` for label 0), found through the selection.
    Before, the probability was seeded (score -0.46 for a logit of -0.16) and
    lrp.explain read the output as raw, every row of label 1."""
    torch.manual_seed(1)
    model = SelectedProbability().double()
    x, edge_index = torch.randn(20, 5, dtype=torch.float64), torch.randint(0, 20, (2, 50))
    z = model.logits(x, edge_index)[:, 0].detach()
    i = int(z.argmin())
    assert z[i] < 0
    e = lrp.explain(model, x, edge_index, index=i, mode="binary_classification", rules=lrp.rules.Epsilon(0.0))
    xx = x.clone().requires_grad_(True)
    reference = xx * torch.autograd.grad(-model.logits(xx, edge_index)[i, 0], xx)[0]
    assert e.target.tolist() == [0]
    assert e.score == pytest.approx(-float(z[i]), rel=1e-12)
    torch.testing.assert_close(e.node_mask, reference.detach(), rtol=1e-9, atol=1e-12)


def test_a_part_of_a_softmax_output_warns_that_relevance_starts_at_the_probability():
    torch.manual_seed(1)
    model = SelectedProbability(classes=3).double()
    x, edge_index = torch.randn(20, 5, dtype=torch.float64), torch.randint(0, 20, (2, 50))
    with pytest.warns(RuntimeWarning, match="part of a softmax or sigmoid output"):
        lrp.explain(model, x, edge_index, index=0, mode="regression")


def test_a_binary_row_given_twice_with_different_labels_is_refused():
    """+z and -z for one logit contradict each other; before, the label given
    last won (score +0.21 or -0.21 by the order of the arguments)."""
    torch.manual_seed(1)
    model = SelectedProbability().double()
    x, edge_index = torch.randn(20, 5, dtype=torch.float64), torch.randint(0, 20, (2, 50))
    with pytest.raises(ValueError, match="target: row 3 is given twice with different labels"):
        lrp.explain(model, x, edge_index, index=[3, 3], target=torch.tensor([1, 0]), mode="binary_classification")
    twice = lrp.explain(model, x, edge_index, index=[3, 3], target=torch.tensor([0, 0]), mode="binary_classification")
    once = lrp.explain(model, x, edge_index, index=3, target=torch.tensor([0]), mode="binary_classification")
    assert twice.score == once.score


class RearrangedProbabilities(torch.nn.Module):
    """Per-label sigmoids joined after the activation, or a softmax output transposed twice."""

    def __init__(self, how):
        super().__init__()
        self.conv, self.lin, self.how = GCNConv(5, 8), torch.nn.Linear(8, 3), how

    def forward(self, x, edge_index):
        z = self.lin(self.conv(x, edge_index).relu())
        if self.how == "cat":
            return torch.cat([torch.sigmoid(z[:, :1]), torch.sigmoid(z[:, 1:])], dim=1)
        return torch.softmax(z, -1).T.T


@pytest.mark.parametrize("how", ["cat", "transposed"])
def test_probabilities_rearranged_after_the_activation_warn(how):
    """Before, these seeded the probabilities with no warning (relevance 1.56
    for logits summing to 0.22)."""
    torch.manual_seed(0)
    model = RearrangedProbabilities(how).double()
    x, edge_index = torch.randn(10, 5, dtype=torch.float64), torch.randint(0, 10, (2, 30))
    with pytest.warns(RuntimeWarning, match="rearranges, joins or transforms softmax or sigmoid outputs"):
        lrp.explain(model, x, edge_index, index=0, mode="regression")


class PooledGIN(torch.nn.Module):
    """Two GIN layers (sum aggregation), ReLU, sum pooling per graph, a head."""

    def __init__(self):
        super().__init__()
        from torch_geometric.nn import GINConv

        torch.manual_seed(0)
        mlp = lambda a, b: torch.nn.Sequential(torch.nn.Linear(a, b), torch.nn.ReLU(), torch.nn.Linear(b, b))  # noqa: E731
        self.c1, self.c2 = GINConv(mlp(F_IN, HID)), GINConv(mlp(HID, HID))
        self.head = torch.nn.Linear(HID, C)

    def forward(self, x, edge_index, batch):
        from torch_geometric.nn import global_add_pool

        h = self.c2(self.c1(x, edge_index).relu(), edge_index).relu()
        return self.head(global_add_pool(h, batch))


@pytest.mark.parametrize("narrow", ["batch", "edge_index"])
def test_int32_indices_give_the_int64_explanation(narrow):
    """An int32 ``batch`` or ``edge_index`` (both valid for PyG) reaches
    ``scatter_add_`` as an expanded int32 index, whose backward (torch's CPU
    ``gather``) reads zeros: every graph but the first lost its relevance
    (index 1 explained with relevance 0, index 0 given graph 1's), without a
    word. The pass makes such indices int64."""
    model = PooledGIN().double().eval()
    g = torch.Generator().manual_seed(0)
    x = torch.randn(12, F_IN, dtype=torch.float64, generator=g)
    edge_index = torch.stack([torch.randint(0, 6, (20,), generator=g), torch.randint(0, 6, (20,), generator=g)])
    edge_index = torch.cat([edge_index, edge_index + 6], dim=1)
    batch = torch.tensor([0] * 6 + [1] * 6)
    for index in (0, 1):
        want = lrp.explain(model, x, edge_index, batch=batch, index=index)
        narrowed = dict(edge_index=edge_index, batch=batch)
        narrowed[narrow] = narrowed[narrow].int()
        got = lrp.explain(model, x, **narrowed, index=index)
        torch.testing.assert_close(got.node_mask, want.node_mask, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(got.edge_mask, want.edge_mask, rtol=1e-12, atol=1e-12)
        other = slice(6, 12) if index == 0 else slice(0, 6)
        assert float(got.node_mask[other].abs().sum()) == 0.0  # the other graph gets nothing


def _gcn_and_graph():
    torch.manual_seed(0)
    model = GCN(C).double().eval()
    x, edge_index = sparse_graph()
    return model, x.double(), edge_index


BAD_INPUTS = {  # name: (call on (model, x, edge_index), the error's type and message)
    "edge_index as a list": (lambda m, x, e: lrp.explain(m, x, e.tolist(), index=1),
                             TypeError, "edge_index: expected the edges as an integer tensor"),
    "edge_index uint8": (lambda m, x, e: lrp.explain(m, x, e.to(torch.uint8), index=1),
                         TypeError, r"edge_index: expected int64 \(or int32\) node ids, got torch.uint8"),
    "dense adjacency": (lambda m, x, e: lrp.explain(m, x, torch.ones(x.shape[0], x.shape[0]), index=1),
                        ValueError, "edge_index: got a dense adjacency matrix of shape"),
    "x empty": (lambda m, x, e: lrp.explain(m, x[:0], e, index=1), ValueError, "x: expected node features"),
    "index a string": (lambda m, x, e: lrp.explain(m, x, e, index="3"), TypeError, "index: expected row positions"),
    "index empty list": (lambda m, x, e: lrp.explain(m, x, e, index=[]), ValueError, "index: selects no rows"),
    "index a slice": (lambda m, x, e: lrp.explain(m, x, e, index=slice(2, 6)), TypeError,
                      r"index: .*got slice\(2, 6, None\); for a range of rows pass torch.arange"),
    "index a set": (lambda m, x, e: lrp.explain(m, x, e, index={2, 3}), TypeError, "sets have no order"),
    "edge_weight one short": (lambda m, x, e: lrp.explain(m, x, e, index=1, edge_weight=torch.ones(e.shape[1] - 1)),
                              ValueError, r"edge_weight: expected one row per edge of edge_index"),
    "batch float": (lambda m, x, e: lrp.explain(m, x, e, index=1, batch=torch.zeros(x.shape[0])),
                    ValueError, "batch: expected one integer graph id per node"),
    "batch negative": (lambda m, x, e: lrp.explain(m, x, e, index=1,
                                                   batch=-torch.ones(x.shape[0], dtype=torch.long)),
                       ValueError, "batch: graph ids must be >= 0"),
    "walks on a sparse adjacency": (lambda m, x, e: lrp.walks(m, x, torch.sparse_coo_tensor(
        e, torch.ones(e.shape[1]), (x.shape[0], x.shape[0])), index=1), ValueError, "edge_index: walks follow"),
    "relevance_pass default_rule": (lambda m, x, e: lrp.relevance_pass(m, default_rule="x").__enter__(),
                                    TypeError, "default_rule: expected a rule instance"),
    "relevance_pass model": (lambda m, x, e: lrp.relevance_pass("x").__enter__(),
                             TypeError, "model: expected a torch.nn.Module"),
    "subgraph a string": (lambda m, x, e: lrp.explain(m, x, e, index=1, subgraph="no"),
                          TypeError, "subgraph: expected True or False, got 'no'"),
    "LRP strict None": (lambda m, x, e: lrp.LRP(strict=None), TypeError, "strict: expected True or False"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_inputs_are_refused_by_name(case):
    """Each of these failed deep inside the pass with torch's or PyG's own
    error, or with a message naming another argument (found by a probe)."""
    call, error, message = BAD_INPUTS[case]
    model, x, edge_index = _gcn_and_graph()
    with pytest.raises(error, match=message):
        call(model, x, edge_index)


def test_mode_backward_refuses_an_input_that_was_not_watched():
    """``mode.backward(out, seed, [x])`` with the ``x`` that was never passed
    through ``mode.watch``: before, all-zero relevance without a word."""
    model, x, edge_index = _gcn_and_graph()
    with lrp.relevance_pass(model) as mode:
        watched = mode.watch(x)
        out = model(watched, edge_index)
        with pytest.raises(ValueError, match=r"inputs\[0\]: does not carry relevance"):
            mode.backward(out, out.detach(), [x])
        (relevance,) = mode.backward(out, out.detach(), [watched])
    assert float(relevance.abs().sum()) > 0


def test_numpy_numbers_are_taken_where_ints_and_floats_are():
    """``np.int64`` rows, ``top_k`` and ``batch_size`` and a numpy ``alpha``
    were refused by walks, subgraph_relevance and explain_nodes (``explain``
    took them); ``alpha=np.float32(0.05)`` said it must lie in [0, 1], got 0.05."""
    import numpy as np

    model, x, edge_index = _gcn_and_graph()
    want = lrp.walks(model, x, edge_index, index=3, top_k=4)
    got = lrp.walks(model, x, edge_index, index=np.int64(3), top_k=np.int64(4))
    torch.testing.assert_close(got.relevance, want.relevance)
    nodes = [2, 3, 4]
    want = lrp.subgraph_relevance(model, x, edge_index, nodes, index=3, alpha=0.25)
    assert lrp.subgraph_relevance(model, x, edge_index, nodes, index=np.int64(3), alpha=np.float32(0.25)) == \
        pytest.approx(want, rel=1e-6)
    want = lrp.explain_nodes(model, x, edge_index, index=[1, 2, 3], batch_size=2)
    got = lrp.explain_nodes(model, x, edge_index, index=[1, 2, 3], batch_size=np.int64(2))
    torch.testing.assert_close(got[0].node_mask, want[0].node_mask)


def test_zbox_bounds_of_the_wrong_width_and_a_seed_of_the_wrong_shape_are_refused_by_name():
    """Before: torch's expand error from inside the rule, and autograd's
    'Mismatch in shape' from inside check_conservation."""
    conv = GCNConv(4, 3).double()
    x, edge_index = torch.rand(6, 4, dtype=torch.float64), torch.tensor([[0, 1, 2], [1, 2, 3]])
    with pytest.raises(ValueError, match=r"ZBox: low of shape \(3,\) does not broadcast to the input .* \(6, 4\)"):
        lrp.explain(conv, x, edge_index, index=1, rules=lrp.rules.ZBox(torch.zeros(3), torch.ones(3)))
    with pytest.raises(ValueError, match=r"seed: expected the output's shape \(6, 3\), got \(2,\)"):
        lrp.check_conservation(conv, x, edge_index, seed=torch.ones(2))


def test_a_layer_that_fails_unfused_on_a_sparse_adjacency_is_refused_with_what_to_do():
    """EGConv with 'symnorm' on a SparseTensor keeps its normalisation in the
    adjacency's values, read only by PyG's fused kernel, which the pass turns
    off: before, a bare AssertionError from inside PyG. Now an error that
    says to pass edge_index (with which it is explained)."""
    torch_sparse = pytest.importorskip("torch_sparse")
    from torch_geometric.nn import EGConv

    torch.manual_seed(0)
    conv = EGConv(F_IN, 8, aggregators=["symnorm"], num_heads=2, num_bases=2).double().eval()
    x, edge_index = sparse_graph()
    x = x.double()
    adj = torch_sparse.SparseTensor.from_edge_index(edge_index, sparse_sizes=(x.shape[0], x.shape[0])).t()
    conv(x, adj)  # PyG's own forward runs
    with pytest.raises(RuntimeError, match=r"sparse adjacency .* Pass the edges as a \[2, E\] edge_index"):
        lrp.explain(conv, x, adj, index=1, edge_mask_type=None, mode="regression")
    explanation = lrp.explain(conv, x, edge_index, index=1, mode="regression")
    assert abs(float(explanation.residual)) <= 1e-9 * max(abs(float(explanation.score)), 1.0)


def test_a_model_whose_forward_takes_a_data_object_is_refused_by_name():
    """``forward(self, data)`` (as in PyG's proteins_topk_pool example):
    before, the forward's own TypeError about its arguments from inside the
    pass."""
    from torch_geometric.data import Data

    class TakesData(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = GCNConv(F_IN, C)

        def forward(self, data):
            return self.conv(data.x, data.edge_index)

    x, edge_index = sparse_graph()
    with pytest.raises(TypeError, match=r"model: TakesData.forward takes 1 positional argument\(s\) \(data\)"):
        lrp.explain(TakesData(), Data(x=x, edge_index=edge_index), index=1)


@pytest.mark.parametrize("rules", [lrp.rules.ZPlus(), lrp.rules.Gamma(0.25), None])
def test_a_stream_that_overflows_half_precision_is_said(rules):
    """In float16 a rule's stream can overflow (z+ = 80000 > 65504) while the
    forward is finite (z = 400): the relevance through it is then booked as
    absorbed and the masks are 0. Said, with what to do; float32 is silent
    and explains it."""
    from torch_geometric.nn import GraphConv

    class One(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c = GraphConv(2, 1, bias=False)

        def forward(self, x, edge_index):
            return self.c(x, edge_index)

    edge_index = torch.tensor([[0], [1]])
    x = torch.full((2, 2), 200.0)
    model = One().eval()
    with torch.no_grad():
        model.c.lin_rel.weight[:] = torch.tensor([[200.0, -199.0]])
        model.c.lin_root.weight[:] = torch.tensor([[200.0, -199.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        full = lrp.explain(model, x, edge_index, index=1, rules=rules, mode="regression")
    assert full.node_mask.abs().sum() > 0
    with pytest.warns(RuntimeWarning, match="half precision, the relevance of a linear map overflowed"):
        lrp.explain(model.half(), x.half(), edge_index, index=1, rules=rules, mode="regression")


def test_relevance_over_a_tiny_output_that_overflows_half_precision_is_said():
    """R / z overflows float16 (R = 10, z = 1e-4) although the forward is
    finite: the masks are infinite, and the warning says why."""
    class Gated(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(2, 1, bias=False), torch.nn.Linear(1, 1, bias=False)

        def forward(self, x, edge_index):
            return self.b(torch.sigmoid(self.a(x)))

    model = Gated().half().eval()
    with torch.no_grad():
        model.a.weight[:] = 1.0
        model.b.weight[:] = 20.0
    x = torch.tensor([[2e-4, -1e-4]]).half()
    with pytest.warns(RuntimeWarning, match=r"overflowed \(the relevance divided by a small output"):
        lrp.explain(model, x, torch.empty(2, 0, dtype=torch.long), index=0, rules=lrp.rules.Epsilon(0.0),
                    mode="regression", subgraph=False)


def test_a_regression_target_stays_on_the_explanation():
    """A regression target (the observed value) does not change the
    relevance, which explains the prediction, and stays on the explanation
    as documented (and as PyG's Explainer keeps it); before, ``target`` was
    replaced by the prediction."""
    from torch_geometric.nn.models import GCN as StockGCN
    torch.manual_seed(0)
    model = StockGCN(F_IN, HID, num_layers=2, out_channels=1).eval()
    x, edge_index, _ = inputs("node")
    observed = torch.randn(x.shape[0])
    given = lrp.explain(model, x, edge_index, index=3, target=observed, mode="regression")
    plain = lrp.explain(model, x, edge_index, index=3, mode="regression")
    [batched] = lrp.explain_nodes(model, x, edge_index, torch.tensor([3]), target=observed, mode="regression")
    assert float(given.target) == pytest.approx(float(observed[3])) == pytest.approx(float(batched.target))
    assert float(plain.target) == pytest.approx(float(model(x, edge_index)[3]), rel=1e-6)
    torch.testing.assert_close(given.node_mask, plain.node_mask)
    assert given.score == plain.score


class _OverflowingGate(torch.nn.Module):
    """``h * g + h`` or ``h / g + h`` with a gate ``g = exp(1000 h.sum())``
    that overflows to inf on some rows (a gate: the pass holds it constant)."""

    def __init__(self, divides):
        super().__init__()
        from torch_geometric.nn import GraphConv
        self.c, self.head, self.divides = GraphConv(4, 6, bias=False), torch.nn.Linear(6, 3, bias=False), divides

    def forward(self, x, edge_index, detach=False):
        h = self.c(x, edge_index).relu()
        g = torch.exp(1000 * h.sum(-1, keepdim=True) - (0 if self.divides else 500))
        if detach:  # the gate held constant; for the reference gradient, its inf entries (rows the
            g = g.detach()  # explained row does not read) pass nothing, as 0 relevance times them gives 0
            g = g if self.divides else torch.where(torch.isfinite(g), g, 0.0)
        return self.head((h / g if self.divides else h * g) + h)


@pytest.mark.parametrize("divides", [False, True])
def test_an_overflowing_gate_explains_what_the_model_computes(divides):
    """A factor inf makes the output non-finite: the explanation says so (NaN
    score and relevance, warned), never a finite score the model did not
    compute. A divisor inf passes 0: LRP-0 is gradient x input with the gate
    held constant, exactly."""
    torch.manual_seed(0)
    model = _OverflowingGate(divides).double().eval()
    x = torch.randn(12, 4, dtype=torch.float64) * 3
    edge_index = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 7], [1, 2, 3, 4, 5, 6, 7, 8]])
    with torch.no_grad():
        out = model(x, edge_index)
    for index in range(12):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            found = lrp.explain(model, x, edge_index, index=index, target=torch.tensor([0]),
                                rules=lrp.rules.Epsilon(0.0), subgraph=False)
        if not bool(torch.isfinite(out[index, 0])):
            assert not divides
            assert not math.isfinite(found.score) and not bool(torch.isfinite(found.node_mask).all())
            assert any("depends on a non-finite value" in str(w.message) for w in caught)
            continue
        assert found.score == pytest.approx(out[index, 0].item(), rel=1e-12)
        x_ = x.clone().requires_grad_()
        (grad,) = torch.autograd.grad(model(x_, edge_index, detach=True)[index, 0], x_)
        torch.testing.assert_close(found.node_mask, (x_ * grad).detach(), rtol=1e-9, atol=1e-12)
    assert divides or not bool(torch.isfinite(out).all())  # the case is met


def test_a_nan_edge_weight_into_the_target_gives_a_non_finite_explanation():
    """The target reads the NaN normalisation of its own in-edge: its score
    is NaN, and so is its relevance, with the warning that says why (not
    all-zero masks blamed on an empty attention)."""
    from torch_geometric.nn.models import GCN as StockGCN
    torch.manual_seed(0)
    model = StockGCN(F_IN, HID, num_layers=2, out_channels=C).eval()
    x, edge_index = sparse_graph()
    weight = torch.ones(edge_index.shape[1])
    weight[(edge_index[1] == 10).nonzero()[0]] = float("nan")
    for subgraph in (True, False):
        with pytest.warns(RuntimeWarning, match="depends on a non-finite value"):
            found = lrp.explain(model, x, edge_index, edge_weight=weight, index=10, subgraph=subgraph)
        assert not math.isfinite(found.score) and not bool(torch.isfinite(found.node_mask).all())


def test_a_gamma_denominator_that_overflows_half_precision_is_said():
    """Gamma's z + gamma z+ overflows float16 (z and z+ themselves do not):
    R / inf = 0 books all relevance as absorbed, under the residual's
    threshold; said, as the stream overflow is."""
    from torch_geometric.nn import GraphConv

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c, self.h = GraphConv(4, 6), torch.nn.Linear(6, 3)

        def forward(self, x, edge_index):
            return self.h(self.c(x, edge_index).relu())

    torch.manual_seed(0)
    model = Net().eval()
    with torch.no_grad():
        for p in model.c.parameters():
            p.mul_(200.0)
    x = torch.randn(10, 4, generator=torch.Generator().manual_seed(1)) * 200
    edge_index = torch.tensor([[0, 1, 2, 3, 4, 5], [1, 2, 3, 4, 5, 6]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        full = lrp.explain(model, x, edge_index, index=[1, 2], rules=lrp.rules.Gamma(10.0), target=torch.tensor([0, 0]))
    assert abs(full.relevance_total) > 0.5 * abs(full.score)
    with pytest.warns(RuntimeWarning, match="overflowed \\(a rule's denominator"):
        lrp.explain(model.half(), x.half(), edge_index, index=[1, 2], rules=lrp.rules.Gamma(10.0),
                    target=torch.tensor([0, 0]))


@pytest.mark.parametrize("far", [0.0, float("inf"), float("nan")])
def test_a_divisor_of_zero_or_non_finite_the_target_does_not_read_changes_nothing(far):
    """``h / gate`` with ``gate`` 0, inf or NaN at a node the target does not
    read (a degree normaliser of an isolated node): LRP-0 is gradient x input
    of the model whose far divisor is inf (that row contributes 0), without
    a warning (before: NaN relevance for a divisor 0)."""
    from torch_geometric.nn import GCNConv
    x = torch.randn(6, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    edge_index = torch.tensor([[0, 1, 2, 4], [1, 2, 3, 5]])  # node 3 reads 2, 1, 0; node 5 is far

    class Divided(torch.nn.Module):
        def __init__(self, gate):
            super().__init__()
            self.lin, self.c = torch.nn.Linear(3, 4, bias=False), GCNConv(4, 4, bias=False)
            self.head = torch.nn.Linear(4, 2, bias=False)
            self.register_buffer("gate", gate)

        def forward(self, x, edge_index):
            return self.head(self.c(self.lin(x).relu() / self.gate[:, None], edge_index).relu())

    def build(value):
        gate = torch.ones(6, dtype=torch.float64)
        gate[5] = value
        torch.manual_seed(1)
        return Divided(gate).double().eval()

    reference = build(float("inf"))
    x_ = x.clone().requires_grad_()
    out = reference(x_, edge_index)
    (grad,) = torch.autograd.grad(out[3, int(out[3].argmax())], x_)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        found = lrp.explain(build(far), x, edge_index, index=3, rules=lrp.rules.Epsilon(0.0), subgraph=False)
    torch.testing.assert_close(found.node_mask, (x_ * grad).detach(), rtol=1e-9, atol=1e-12)


def test_an_output_reached_only_through_held_gates_is_told_so():
    """Cross-attention whose keys and values are learned constants: ``x``
    reaches the output only through the attention weights, which the rules
    hold constant. The warning names that (before: only no_grad or detached
    tensors, which is not what happened)."""
    class QueryOnly(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.att = torch.nn.MultiheadAttention(4, 2)
            self.memory = torch.nn.Parameter(torch.randn(3, 4))
            self.lin = torch.nn.Linear(4, 2)

        def forward(self, x, edge_index):
            return self.lin(self.att(x, self.memory, self.memory, need_weights=False)[0])

    torch.manual_seed(0)
    model = QueryOnly().double().eval()
    x = torch.randn(5, 4, dtype=torch.float64)
    with pytest.warns(RuntimeWarning, match="only through gates the rules hold constant"):
        found = lrp.explain(model, x, torch.tensor([[0, 1], [1, 2]]), index=1, subgraph=False)
    assert float(found.node_mask.abs().sum()) == 0.0


class Head(torch.nn.Module):
    """A GCN layer then ``last`` on its ``C`` outputs per node."""

    def __init__(self, last, out=C):
        super().__init__()
        torch.manual_seed(0)
        self.conv, self.last = GCNConv(F_IN, out, bias=False), last

    def forward(self, x, edge_index):
        return self.last(self.conv(x, edge_index))


def _score_gradient(model, x, edge_index, score):
    """``x * d score / d x`` of the plain model (LRP-0's node relevance on a bias-free linear map)."""
    x = x.clone().requires_grad_()
    (grad,) = torch.autograd.grad(score(model(x, edge_index)), x)
    return (x * grad).detach()


@pytest.mark.parametrize("last", ["expit", "special_softmax", "special_log_softmax", "double", "logsigmoid"])
def test_other_spellings_of_the_output_activation_seed_the_logit(last):
    """``torch.special``'s aliases were refused as ops without a rule; a cast
    after the activation and ``logsigmoid`` (whose values are all <= 0: a
    binary model's default target was label 0 everywhere) hid the logit."""
    fns = {"expit": (torch.special.expit, 1), "special_softmax": (lambda z: torch.special.softmax(z, -1), C),
           "special_log_softmax": (lambda z: torch.special.log_softmax(z, -1), C),
           "double": (lambda z: torch.sigmoid(z).double(), 1), "logsigmoid": (F.logsigmoid, 1)}
    fn, width = fns[last]
    x, edge_index = torch.randn(N, F_IN), DATA["edge_index"]
    model, plain = Head(fn, width).eval(), Head(lambda z: z, width).eval()
    mode = "binary_classification" if width == 1 else None
    found = lrp.explain(model, x, edge_index, index=3, mode=mode, rules=lrp.rules.Epsilon(0))
    z = plain(x, edge_index)[3]
    klass = int(z.argmax()) if width > 1 else 0
    sign = 1.0 if width > 1 or z[0] > 0 else -1.0  # binary: the label the logit predicts, +z or -z
    assert found.score == pytest.approx(sign * float(z[klass]), rel=1e-5)
    expected = _score_gradient(plain, x, edge_index, lambda out: sign * out[3, klass])
    torch.testing.assert_close(found.node_mask.float(), expected, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("after", ["clamp", "dropout", "exp_of_log_softmax"])
def test_an_op_after_the_output_activation_warns_that_relevance_starts_at_the_output(after):
    """Before, these seeded the probability without a word."""
    fns = {"clamp": lambda z: F.softmax(z, -1).clamp(min=1e-9),
           "dropout": lambda z: F.dropout(F.softmax(z, -1), training=False),
           "exp_of_log_softmax": lambda z: F.log_softmax(z, -1).exp()}
    model = Head(fns[after]).eval()
    with pytest.warns(RuntimeWarning, match="rearranges, joins or transforms softmax or sigmoid outputs"):
        lrp.explain(model, torch.randn(N, F_IN), DATA["edge_index"], index=3, mode="multiclass_classification")


def test_one_graphs_class_scores_as_a_vector_are_refused():
    """A ``[C]`` output of one graph was read as ``C`` rows of one class: the
    sum of all logits explained (or "class 1 is out of range")."""
    class OneGraph(torch.nn.Module):
        def __init__(self, last):
            super().__init__()
            self.conv, self.lin, self.last = GCNConv(F_IN, HID), torch.nn.Linear(HID, C), last

        def forward(self, x, edge_index):
            return self.last(self.lin(self.conv(x, edge_index).relu().sum(0)))

    x, edge_index = torch.randn(N, F_IN), DATA["edge_index"]
    with pytest.raises(ValueError, match=r"multiclass_classification.*shape \(3,\).*out\.unsqueeze\(0\)"):
        lrp.explain(OneGraph(lambda z: z).eval(), x, edge_index, task_level="graph", mode="multiclass_classification")
    with pytest.raises(ValueError, match=r"mode: the output of one graph \(shape \(3,\)\) is one softmax"):
        lrp.explain(OneGraph(lambda z: F.log_softmax(z, -1)).eval(), x, edge_index, task_level="graph")
    with pytest.raises(ValueError, match=r"cannot tell it.*one graph's 3 class scores.*out\.unsqueeze\(0\)"):
        lrp.explain(OneGraph(lambda z: z).eval(), x, edge_index)
    with pytest.raises(ValueError, match=r"single number \(shape \(\)\).*out\.view\(1\)"):
        lrp.explain(OneGraph(lambda z: z[0]).eval(), x, edge_index, mode="regression")


@pytest.mark.parametrize("how", ["list", "numpy"])
def test_a_boolean_mask_as_a_list_or_array_has_its_length_checked(how):
    """As a tensor it was refused for the wrong length; as a list it explained
    the rows its True entries pointed at in a shorter output."""
    import numpy as np

    model, x, edge_index = GCN(C).eval(), torch.randn(N, F_IN), DATA["edge_index"]
    mask = [False] * (N + 3)
    mask[1] = True
    with pytest.raises(ValueError, match=rf"a boolean mask needs one entry per output row \({N}\), got {N + 3}"):
        lrp.explain(model, x, edge_index, index=mask if how == "list" else np.array(mask))


def test_a_uint8_index_is_refused_as_ambiguous():
    """torch indexes with a uint8 tensor as a mask (PyG's explainers too);
    read as positions it explained other rows without a word."""
    model, x, edge_index = GCN(C).eval(), torch.randn(N, F_IN), DATA["edge_index"]
    with pytest.raises(TypeError, match=r"index: a uint8 tensor.*index\.bool\(\).*index\.long\(\)"):
        lrp.explain(model, x, edge_index, index=torch.tensor([0, 1, 0], dtype=torch.uint8))


def test_half_precision_rounding_is_not_reported_as_a_leak():
    """bfloat16 rounds at about 1e-2: a plain GCN's residual from rounding
    alone was reported as "some op changed relevance ... a gradient hook",
    and its subgraph outputs, summed in another order, as a model that reads
    further than its layers (a SubgraphWarning)."""
    from torch_geometric.nn import GCN as StockGCN

    torch.manual_seed(0)
    edge_index = torch.randint(0, 20, (2, 60))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        warnings.simplefilter("error", lrp.SubgraphWarning)
        for trial in range(10):
            model = StockGCN(8, 16, num_layers=2, out_channels=4).to(torch.bfloat16).eval()
            x = torch.randn(20, 8).to(torch.bfloat16)
            lrp.explain(model, x, edge_index, index=trial, target=torch.tensor([0]))


def test_relevance_that_overflows_in_the_backward_is_told_so():
    """A finite float16 forward whose contribution x * w (80,000) exceeds the
    dtype: the warning said a value overflowed inside the forward, and a
    second one blamed a gradient hook for the residual."""
    conv = GCNConv(2, 2, bias=False).half()
    with torch.no_grad():
        conv.lin.weight.copy_(torch.tensor([[2.0, -1.9], [1.0, 0.0]]))
    x = torch.tensor([[40000.0, 40000.0], [1.0, 1.0]], dtype=torch.float16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lrp.explain(conv, x, torch.tensor([[1], [1]]), index=0, rules=lrp.rules.Epsilon(0), target=torch.tensor([0]),
                    subgraph=False)
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert any("overflowed in the backward" in m and "float32 copy" in m for m in messages), messages
    assert not any("does not add up" in m or "inside the forward" in m for m in messages), messages


def test_vectors_that_sum_to_one_are_refused_only_as_one_graphs_scores():
    """A per-graph sigmoid vector (with ``batch``) that happens to sum to 1,
    and a log-softmax over the nodes, are explained as before; only one
    graph's softmax vector without ``batch`` is refused."""
    class PerGraph(torch.nn.Module):
        def __init__(self, last):
            super().__init__()
            torch.manual_seed(0)
            self.conv, self.lin, self.last = GCNConv(F_IN, HID), torch.nn.Linear(HID, 1), last

        def forward(self, x, edge_index, batch=None):
            from torch_geometric.nn import global_add_pool

            h = self.conv(x, edge_index).relu()
            return self.last(self.lin(global_add_pool(h, batch)).view(-1) if batch is not None else self.lin(h).view(-1))

    x, edge_index = torch.randn(N, F_IN), DATA["edge_index"]
    batch = (torch.arange(N) >= N // 2).long()
    # sigmoid(a) + sigmoid(-a) = 1: a [2] sigmoid output that sums to one
    found = lrp.explain(PerGraph(lambda z: torch.sigmoid(torch.stack([z[0], -z[0]]))).eval(), x, edge_index,
                        index=0, batch=batch, mode=None)
    assert found._model_config.mode.value == "binary_classification"
    nodes = lrp.explain(PerGraph(lambda z: F.log_softmax(z, 0)).eval(), x, edge_index, index=2, task_level="node")
    assert math.isfinite(nodes.score)


def test_an_unused_buffer_made_under_inference_mode_is_no_obstacle():
    class WithStats(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = GCNConv(F_IN, C)
            with torch.inference_mode():
                self.register_buffer("unused_stats", torch.zeros(3))

        def forward(self, x, edge_index):
            return self.conv(x, edge_index)

    assert_conserved(lrp.explain(WithStats().eval(), torch.randn(N, F_IN), DATA["edge_index"], index=1))


def test_a_backward_through_a_value_without_a_rule_is_refused_also_after_the_pass():
    """The pass lets an auxiliary value with no rule through (the output does
    not use it). Its tensors carry relevance, with the parameters as
    constants, so a backward of it, in the pass or after, is refused."""
    class WithAux(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.aux = GCNConv(F_IN, C), torch.nn.Linear(F_IN, 2)

        def forward(self, x, edge_index):
            self.aux_loss = torch.sin(self.aux(x)).sum()
            return self.conv(x, edge_index)

    model = WithAux().eval()
    lrp.explain(model, torch.randn(N, F_IN), DATA["edge_index"], index=1)
    with pytest.raises(lrp.UnsupportedOpError, match="'sin'"):
        model.aux_loss.backward()


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_non_finite_weight_of_another_class_changes_nothing(value):
    """A NaN in the head's row of class 2 leaves class 0's logit as it was;
    explaining class 0 gave an all-NaN mask (0 relevance times the weight in
    the backward). Weights are guarded as gates are: the mask of the clean
    model."""
    class Head(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.conv, self.lin = GCNConv(F_IN, HID), torch.nn.Linear(HID, C)

        def forward(self, x, edge_index):
            return self.lin(self.conv(x, edge_index).relu())

    model = Head().double().eval()
    x, edge_index = torch.randn(N, F_IN, dtype=torch.float64), DATA["edge_index"]
    clean = lrp.explain(model, x, edge_index, index=1, rules=lrp.rules.Epsilon(0), target=torch.tensor([0]))
    with torch.no_grad():
        model.lin.weight[2, 1] = value
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the NaN the bias of class 2 absorbs is told
        found = lrp.explain(model, x, edge_index, index=1, rules=lrp.rules.Epsilon(0), target=torch.tensor([0]))
    assert found.score == clean.score
    torch.testing.assert_close(found.node_mask, clean.node_mask)
    torch.testing.assert_close(found.edge_mask, clean.edge_mask)


class CopiesARowOfX(torch.nn.Module):
    """Writes one row of ``x`` over another, in place, then a GCN layer."""

    def __init__(self, clone: bool):
        super().__init__()
        torch.manual_seed(0)
        self.conv, self.clone = GCNConv(F_IN, C), clone

    def forward(self, x, edge_index):
        if self.clone:
            x = x.clone()
        x[0] = x[1]
        return self.conv(x, edge_index)


def test_a_write_into_the_explained_input_says_to_write_on_a_copy():
    """The pass watches ``x`` as a leaf of autograd, into which torch lets no
    forward write in place: refused naming the input and the fix (before:
    torch's error about a view of a leaf). With ``x.clone()`` first it is
    explained: LRP-0 equals gradient x input."""
    x, edge_index = DATA["x"].detach().double(), DATA["edge_index"]  # (another test may leave it requiring grad)
    with pytest.raises(lrp.UnsupportedOpError, match=r"writes in place into an explained input.*x = x.clone\(\)"):
        lrp.explain(CopiesARowOfX(False).double().eval(), x, edge_index, index=3)
    # a number written into x where no map can stand for it (the op-level Pass rule around the write):
    # refused the same way (before, the write was dropped: the explanation of x as it was)
    class ZeroesAColumn(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(F_IN, C, bias=False)

        def forward(self, x, edge_index):
            x[:, 0] = 0.0
            return self.lin(x)

    with pytest.raises(lrp.UnsupportedOpError, match=r"writes in place into an explained input"):
        lrp.explain(ZeroesAColumn().double().eval(), x, edge_index, index=3,
                    rules={"": lrp.rules.Pass(), "lin": lrp.rules.Epsilon(0.0)}, subgraph=False)
    model = CopiesARowOfX(True).double().eval()
    ex = lrp.explain(model, x, edge_index, index=3, rules=lrp.rules.Epsilon(0.0), subgraph=False)
    xg = x.clone().requires_grad_()
    out = model(xg, edge_index)
    out[3, out[3].argmax()].backward()
    torch.testing.assert_close(ex.node_mask, xg.grad * x)

