"""End to end on each device: the CPU, and CUDA where a GPU is present
(skipped elsewhere, as on CI). Explanations made on the device, in float64,
equal CPU references reached by another path (the full graph instead of the
subgraph, one target at a time instead of a batch, every walk instead of a
search), and what they hold stays on the device."""
from __future__ import annotations

import pytest
import torch
from torch_geometric.explain import Explainer

import torch_geometric_lrp as lrp
from devices import DEVICES, cpu, on
from explain_cases import DATA, NODE_MODELS, build, inputs
from test_walks import graph, model_of
from torch_geometric_lrp.explainers import api
from torch_geometric_lrp.explainers.core import Settings
from torch_geometric_lrp.explainers.subgraph import Incidence, cut, cut_each
from torch_geometric_lrp.rules import Gamma

TARGETS = [17, 3, 22]


def close(actual, expected, what: str) -> None:
    torch.testing.assert_close(cpu(actual), cpu(expected), rtol=1e-9, atol=1e-12, msg=lambda m: f"{what}: {m}")


def assert_on(device: str, *tensors) -> None:
    for t in tensors:
        if t is not None:
            assert t.device.type == device, f"a result on {t.device}, not on {device}"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", NODE_MODELS)
def test_explain_on_the_subgraph_equals_the_full_graph_on_the_cpu(name, device):
    model = build(name).double()
    x, edge_index = DATA["x"].double(), DATA["edge_index"]
    full = lrp.explain(model, x, edge_index, index=torch.tensor(TARGETS), subgraph=False)
    here = lrp.explain(model.to(device), *on(device, x, edge_index), index=TARGETS)  # a list: made on the CPU
    for key in ("node_mask", "edge_mask", "self_loop_relevance"):
        assert_on(device, here[key])
        close(here[key], full[key], key)
    assert here.score == pytest.approx(full.score, rel=1e-12)
    assert here.residual == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("strategy", ["copies", "shared", "auto"])
def test_explain_nodes_equals_one_target_at_a_time_on_the_cpu(strategy, device, monkeypatch):
    for budget in ("COPIES_BUDGET", "TRIMMED_BUDGET"):  # auto: one target per pass of copies
        monkeypatch.setattr(api, budget, 1)
    model = build("gcn").double()
    x, edge_index = DATA["x"].double(), DATA["edge_index"]
    alone = [lrp.explain(model, x, edge_index, index=t, subgraph=False) for t in TARGETS]
    model, x, edge_index = model.to(device), *on(device, x, edge_index)
    listed = lrp.explain_nodes(model, x, edge_index, TARGETS, batch_size=3, strategy=strategy)
    sparse = lrp.explain_nodes(model, x, edge_index, TARGETS, batch_size=3, strategy=strategy, output="sparse")
    for k, (ex, ref) in enumerate(zip(listed, alone)):
        assert_on(device, ex.node_mask, ex.edge_mask, ex.node_index, ex.edge_id)
        close(ex.node_mask, ref.node_mask[cpu(ex.node_index)], "node relevance")
        close(ex.edge_mask, ref.edge_mask[cpu(ex.edge_id)], "edge relevance")
        close(sparse.node_relevance.to_dense()[k], ref.node_mask.sum(-1), "sparse node relevance")
        close(sparse.edge_relevance.to_dense()[k], ref.edge_mask, "sparse edge relevance")
    assert_on(device, sparse.index, sparse.score, sparse.node_relevance, sparse.edge_relevance)


@pytest.mark.parametrize("device", DEVICES)
def test_explainer_on_a_graph_level_model(device):
    model = build("graph").double()
    x, edge_index, kwargs = inputs("graph")
    x = x.double()
    reference = lrp.explain(model, x, edge_index, index=1, **kwargs)
    model = model.to(device)
    explainer = Explainer(model, algorithm=lrp.LRP(), explanation_type="model", node_mask_type="attributes",
                          edge_mask_type="object",
                          model_config=dict(mode="multiclass_classification", task_level="graph", return_type="raw"))
    here = explainer(*on(device, x, edge_index), index=1, batch=kwargs["batch"].to(device))
    for key in ("node_mask", "edge_mask"):
        assert_on(device, here[key])
        close(here[key], reference[key], key)


@pytest.mark.parametrize("device", DEVICES)
def test_walk_search_and_subgraph_relevance_equal_every_walk_on_the_cpu(device):
    x, edge_index = graph(8, 0.35, seed=5)
    model = model_of("GIN", seed=5, channels=(3, 4, 4, 3))
    every = lrp.walks(model, x, edge_index, 3, rules=Gamma(0.25))
    nodes = torch.tensor([0, 3, 4, 6])
    inside = float(every.relevance[torch.isin(every.walks, nodes).all(dim=1)].sum())
    model, x, edge_index = model.to(device), *on(device, x, edge_index)
    top = lrp.walks(model, x, edge_index, 3, rules=Gamma(0.25), top_k=5)
    assert_on(device, top.walks, top.relevance)
    assert torch.equal(cpu(top.walks), every.walks[:5])
    close(top.relevance, every.relevance[:5], "walk relevance")
    value = lrp.subgraph_relevance(model, x, edge_index, nodes.to(device), 3, rules=Gamma(0.25))
    assert value == pytest.approx(inside, abs=1e-10)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("lean", [False, True])
def test_cuts_of_cpu_targets_are_made_where_the_graph_is(device, lean):
    edge_index, n = DATA["edge_index"], DATA["x"].shape[0]
    targets = torch.tensor(TARGETS)  # on the CPU, as users pass them
    here_each, *starts_here = cut_each(targets, 3, edge_index.to(device), n, lean=lean)
    each, *starts = cut_each(targets, 3, edge_index, n, lean=lean)
    here, union = cut(targets, 3, edge_index.to(device), n, lean=lean), cut(targets, 3, edge_index, n, lean=lean)
    assert starts_here == starts
    for a, b in ((here_each, each), (here, union)):
        for field in ("nodes", "edge_id", "edge_index", "index", "ring"):
            assert_on(device, getattr(a, field))
            assert torch.equal(cpu(getattr(a, field)), getattr(b, field)), field


@pytest.mark.parametrize("device", DEVICES)
def test_passes_of_copies_are_larger_on_a_gpu(device, monkeypatch):
    """A batch whose targets' cuts fill the CPU's budget twice over runs as
    several passes there, as one on a GPU (``api.GPU_BUDGET_FACTOR``)."""
    edge_index, n = DATA["edge_index"].to(device), DATA["x"].shape[0]
    chunk = torch.tensor(TARGETS, device=device)
    graph = Incidence(edge_index, n)
    copies, _, _ = cut_each(chunk, 3, edge_index, n, incidence=graph)
    monkeypatch.setattr(api, "TRIMMED_BUDGET", (copies.num_nodes + copies.edge_id.numel()) // 2)
    monkeypatch.setattr(api, "GPU_BUDGET_FACTOR", 4)
    batch = api._cut_batch(chunk, 3, edge_index, n, "source_to_target", graph, "copies", Settings(), False)
    assert len(batch.runs) == 1  # 'copies': one pass whatever the budget
    monkeypatch.setattr(api, "_way", lambda *args: "copies")  # auto, choosing copies
    batch = api._cut_batch(chunk, 3, edge_index, n, "source_to_target", graph, "auto", Settings(), False)
    assert len(batch.runs) == 1 if device == "cuda" else len(batch.runs) > 1
