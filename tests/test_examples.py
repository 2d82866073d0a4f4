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
    assert abs(explanation.residual) <= 1e-4 * abs(explanation.score) + 1e-5  # measured, not derived
    assert explanation.residual == pytest.approx(
        explanation.score - explanation.relevance_total - explanation.absorbed - explanation.lost, abs=1e-9)
    assert explanation.node_mask[33].abs().sum() == 0  # node 33 is 3 hops from node 5: outside 2 layers


def test_demo_prints_conserving_relevance(capsys):
    runpy.run_path(str(ROOT / "examples" / "demo.py"), run_name="__main__")
    out = capsys.readouterr().out
    values = {name: float(re.search(rf"^{name}\s+(\S+)", out, re.MULTILINE).group(1))
              for name in ("input relevance", "absorbed", "lost", "residual")}
    score = float(re.search(r"logit (\S+)|score (\S+)", out).group(0).split()[-1].rstrip(","))
    assert abs(values["residual"]) <= 1e-4 * abs(score) + 1e-5  # every amount measured
    assert score - values["input relevance"] - values["absorbed"] - values["lost"] == \
        pytest.approx(values["residual"], abs=2e-5)
    assert "most relevant input nodes" in out
