"""Each example runs end to end and prints numbers that add up."""
import re
import runpy
import sys
from pathlib import Path

import pytest
import torch

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.fixture(autouse=True)
def one_thread():
    # tiny models: one thread is faster, and immune to a busy second core
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def run(name, monkeypatch, capsys, *argv):
    monkeypatch.setattr(sys, "argv", [name, *argv])
    runpy.run_path(str(EXAMPLES / name), run_name="__main__")
    return capsys.readouterr().out


def assert_sum_is_score(out):
    total, score = map(float, re.search(r"sum\s+([-+0-9.e]+)\s+vs score\s+([-+0-9.e]+)", out).groups())
    assert total == pytest.approx(score, rel=1e-4, abs=1e-5)


def test_node_classification_ba_shapes(monkeypatch, capsys, tmp_path):
    png = tmp_path / "ba.png"
    out = run("node_classification_ba_shapes.py", monkeypatch, capsys, "--out", str(png), "--epochs", "300")
    assert_sum_is_score(out)
    auroc = float(re.search(r"edge AUROC vs ground truth: ([0-9.]+)", out).group(1))
    assert 0.0 <= auroc <= 1.0
    assert png.stat().st_size > 10_000


def test_graph_classification_motifs(monkeypatch, capsys):
    out = run("graph_classification_motifs.py", monkeypatch, capsys, "--graphs", "60", "--epochs", "10")
    assert_sum_is_score(out)
    share = float(re.search(r"share of \|edge relevance\| in the motif ([0-9.]+)", out).group(1))
    assert 0.0 < share < 1.0


def test_convert_trained_model(monkeypatch, capsys):
    out = run("convert_trained_model.py", monkeypatch, capsys)
    assert "parameters shared True; output equal True" in out
    assert "conserved: True" in out
    assert "original model untouched: True" in out
    score, total = map(float, re.search(r"score ([-0-9.]+), .* = ([-0-9.]+)", out).groups())
    assert total == pytest.approx(score, rel=1e-4)


def test_infection_graph_network(monkeypatch, capsys):
    out = run("infection_graph_network.py", monkeypatch, capsys, "--epochs", "200")
    assert_sum_is_score(out)
    # the open flag of the edge from an infected source carries the evidence
    rows = re.findall(r"infected=(\d) open=(\d)\s+\[([-+0-9.]+), ([-+0-9.]+)\]", out)
    assert rows
    best = max(rows, key=lambda r: float(r[2]))
    assert best[0] == "1" and best[1] == "1"
