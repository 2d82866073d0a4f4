"""``benchmarks/pyg_explain_tests.py``: the two changes it makes to PyG's
tests, and its stand-in, run on a small suite written like PyG's."""
from __future__ import annotations

import importlib.util
import os
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
spec = importlib.util.spec_from_file_location("pyg_explain_tests",
                                              os.path.join(ROOT, "benchmarks", "pyg_explain_tests.py"))
runner = importlib.util.module_from_spec(spec)
spec.loader.exec_module(runner)


def test_only_mask_range_asserts_are_relaxed():
    text = textwrap.dedent("""\
        assert explanation.node_mask.min() >= 0
        assert explanation[key].get('edge_mask').max() <= 1
        assert loss.min() >= 1
        assert mask.max() <= 10
    """)
    relaxed, n = runner.relax_ranges(text)
    assert n == 2
    assert relaxed.splitlines() == [
        "assert torch.isfinite(explanation.node_mask).all()",
        "assert torch.isfinite(explanation[key].get('edge_mask')).all()",
        "assert loss.min() >= 1",
        "assert mask.max() <= 10",
    ]


def test_failures_are_sorted_by_kind():
    assert runner.kind_of("test_x[a]", "Failed: DID NOT RAISE <class 'ValueError'>") == "refusal"
    assert runner.kind_of("test_topk_threshold[object-topk-1]", "assert tensor(0) == 1") == "positive mask"
    assert runner.kind_of("test_topk_threshold[object-topk-1]", "RuntimeError: boom") == "failed"
    assert runner.kind_of("test_forward[a]", "assert 1 == 2") == "failed"
    assert runner.kind_of("test_forward[phenomenon-target1]", "ValueError: target: expected one entry per output "
                          "row (1) or per explained row (1); got shape (2,).") == "bad target"


SUITE = '''
import pytest
import torch
from torch_geometric.explain import Explainer, GNNExplainer, PGExplainer
from torch_geometric.nn import GCNConv


class GNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = GCNConv(3, 4)

    def forward(self, x, edge_index):
        return self.conv(x, edge_index)


x = torch.randn(6, 3)
edge_index = torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 5]])
config = dict(mode="multiclass_classification", task_level="node", return_type="raw")


@pytest.mark.parametrize("index", [None, 2])
def test_explainer(index):
    explainer = Explainer(GNN(), algorithm=GNNExplainer(epochs=2), explanation_type="model",
                          node_mask_type="attributes", edge_mask_type="object", model_config=config)
    explanation = explainer(x, edge_index, index=index)
    assert type(explainer.algorithm).__name__ == "GNNExplainer"
    assert "score" in explanation  # only LRP sets it
    assert explanation.node_mask.min() >= 0


def test_pg_explainer_contract():
    model = GNN()
    explainer = Explainer(model, algorithm=PGExplainer(epochs=2), explanation_type="phenomenon",
                          edge_mask_type="object", model_config=config)
    target = torch.zeros(6, dtype=torch.long)
    with pytest.raises(ValueError, match="not yet fully trained"):
        explainer(x, edge_index, target=target, index=0)
    assert explainer.algorithm.train(0, model, x, edge_index, target=target, index=0) == 0.0
    assert explainer(x, edge_index, target=target, index=0).edge_mask.shape == (5,)
'''


def test_stand_in_runs_a_pyg_style_suite(tmp_path):
    """Every explainer class is lrp.LRP under the original name, PGExplainer
    keeps its train-first contract, and a signed mask passes the relaxed
    range assert (it would fail the original one)."""
    checkout = tmp_path / "pyg"
    (checkout / "test" / "explain").mkdir(parents=True)
    (checkout / "test" / "explain" / "test_suite.py").write_text(SUITE)
    work = tmp_path / "work"
    work.mkdir()
    assert runner.prepare(str(checkout), str(work)) == 1
    counts, failures = runner.summarise(runner.run(str(work), capture=True))
    assert failures == []
    assert dict(counts["test/explain/test_suite.py"]) == {"passed": 3}
