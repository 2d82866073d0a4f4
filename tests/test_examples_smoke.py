"""Each script in examples/ runs as ``__main__`` with its default arguments and
prints results that hold: relevance adds up to the score, explanations beat
chance against the ground truth, files are written."""
from __future__ import annotations

import re
import runpy
import sys
from pathlib import Path

import pytest
import torch

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
NUMBER = r"([-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?)"


@pytest.fixture
def run_example(monkeypatch, tmp_path, capsys):
    """Run ``examples/<name>`` as a script in ``tmp_path``; return its stdout."""
    threads = torch.get_num_threads()

    def run(name: str, *args: str) -> str:
        monkeypatch.chdir(tmp_path)
        monkeypatch.setattr(sys, "argv", [name, *args])
        runpy.run_path(str(EXAMPLES / name), run_name="__main__")
        return capsys.readouterr().out

    yield run
    torch.set_num_threads(threads)  # the examples pick their own thread count


def number(pattern: str, out: str) -> float:
    match = re.search(pattern.replace("NUM", NUMBER), out)
    assert match, f"no line matching {pattern!r} in:\n{out}"
    return float(match.group(1))


def assert_conserved(out: str, expected_lines: int = 1) -> None:
    """``score T: input I, absorbed A, lost L, residual Q``: every amount is
    measured, so the residual Q (what no op accounted for) must be small."""
    lines = re.findall(rf"score {NUMBER}: input {NUMBER}, absorbed {NUMBER}, lost {NUMBER}, residual {NUMBER}", out)
    assert len(lines) == expected_lines, out
    for line in lines:
        score, total, absorbed, lost, residual = map(float, line)
        assert abs(residual) <= 1e-4 * abs(score) + 1e-5
        assert score - total - absorbed - lost == pytest.approx(residual, abs=2e-5)


def test_node_classification_ba_shapes(run_example, tmp_path):
    png = tmp_path / "explanation.png"
    out = run_example("node_classification_ba_shapes.py", "--out", str(png))
    assert number(r"test accuracy NUM", out) > 0.8
    auroc = number(r"edge AUROC vs ground truth: NUM", out)
    assert 0.5 < auroc <= 1.0  # the house edges rank above the base graph's
    mean_auroc = number(r"mean edge AUROC over \d+ correctly predicted motif nodes: NUM", out)
    assert 0.8 < mean_auroc <= 1.0
    # The top-ranked edge ends at the explained node and lies in its house.
    assert re.search(r"most relevant edges.*\n\s+\d+ ->\s+\d+\s+\S+\s+\(house\)", out)
    assert_conserved(out)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert not (tmp_path / "ba_shapes_explanation.png").exists()


def test_node_classification_ba_shapes_default_output_path(run_example, tmp_path):
    run_example("node_classification_ba_shapes.py", "--epochs", "5", "--motifs", "20", "--base-nodes", "60")
    assert (tmp_path / "ba_shapes_explanation.png").stat().st_size > 0


def test_graph_classification_motifs(run_example):
    out = run_example("graph_classification_motifs.py")
    assert number(r"GIN test accuracy NUM", out) > 0.9
    # Relevance of one graph of the batch stays in that graph.
    assert number(r"relevance on the other \d+ graphs of the batch: NUM", out) == 0.0
    top = number(r"fraction of the top \d+ edges in the motif: NUM", out)
    assert 0.0 <= top <= 1.0
    # Chance level is the motif's share of the edges (about a quarter).
    assert number(r"mean fraction of the top edges in the motif over \d+ correctly classified test graphs: NUM",
                  out) > 0.5
    assert_conserved(out)


def test_convert_trained_model(run_example):
    out = run_example("convert_trained_model.py")
    assert "converted model shares the original's parameters: True" in out
    assert number(r"differs from the original's by NUM", out) < 1e-6
    reports = re.findall(rf"seed {NUMBER} = input {NUMBER} \+ absorbed {NUMBER} \+ lost {NUMBER} "
                         rf"\+ residual {NUMBER}", out)
    assert len(reports) == 2  # default and custom composite
    logit = number(r"predicted class \d+, logit NUM", out)
    for seed, total, absorbed, lost, residual in (map(float, r) for r in reports):
        assert seed == pytest.approx(logit, rel=1e-4)
        assert abs(residual) <= 1e-4 * abs(seed) + 1e-5  # every amount measured: nothing unaccounted for
    assert out.count("conserved: True") == 2
    assert "NO RULE" not in out
    # Both reports list the layers lrp.convert swapped.
    assert len(re.findall(r"^conv1\s+GCNConv", out, re.MULTILINE)) == 2
    assert len(re.findall(r"^conv2\s+SAGEConv", out, re.MULTILINE)) == 2
    explained = number(r"lrp.explain with the same composite: input relevance NUM", out)
    assert explained == pytest.approx(number(r"\(check_conservation: NUM\)", out), rel=1e-5, abs=1e-6)
    # LRP-0 is gradient x input on this ReLU network: catches a rule that mis-scales relevance,
    # which the conservation line cannot (the audit books any gap of a rule as absorbed).
    assert number(r"LRP-0 everywhere vs gradient x input: max difference NUM", out) < 1e-5
    assert "original model untouched: True" in out


def test_infection_graph_network(run_example):
    out = run_example("infection_graph_network.py")
    assert number(r"on people who were healthy NUM", out) > 0.9
    assert re.search(r"person \d+ was healthy; predicted sick next step \(truth: sick\)", out)
    assert "transmits the infection: True" in out  # the top edge is an open contact with a sick person
    assert number(r"outside the person's incoming edges: NUM", out) == 0.0  # one core step: one hop
    assert "lrp.explain gives the same node and edge-feature relevance: True" in out
    # LRP-epsilon (epsilon 1e-6) on a ReLU network is gradient x input up to the stabiliser.
    assert number(r"relevance vs gradient x input: max difference NUM", out) < 1e-2
    nodes = number(r"input relevance: nodes NUM", out)
    edges = number(r"input relevance: nodes \S+, edges NUM", out)
    assert edges != 0.0 and nodes != 0.0
    report_input = number(r"= input NUM \+ absorbed", out)
    assert report_input == pytest.approx(nodes + edges, rel=1e-4, abs=1e-5)
    assert "NO RULE" not in out
    assert_conserved(out)
