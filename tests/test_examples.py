"""The README snippet and the demo run and conserve relevance."""
import re
import runpy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_readme_example_conserves(capsys):
    code = re.search(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S).group(1)
    namespace = {}
    exec(compile(code, "README.md", "exec"), namespace)
    explanation = namespace["explanation"]
    assert explanation.node_mask.shape == (34, 34) and explanation.edge_mask.shape == (156,)
    total = explanation.relevance_total + explanation.absorbed + explanation.lost
    assert total == pytest.approx(explanation.score, rel=1e-4)
    assert explanation.node_mask[33].abs().sum() == 0  # node 33 is 3 hops from node 5: outside 2 layers


def test_demo_prints_conserving_relevance(capsys):
    runpy.run_path(str(ROOT / "examples" / "demo.py"), run_name="__main__")
    out = capsys.readouterr().out
    total, score = map(float, re.search(r"sum\s+(\S+)\s+vs score\s+(\S+)", out).groups())
    assert total == pytest.approx(score, rel=1e-4)
    assert "most relevant input nodes" in out
