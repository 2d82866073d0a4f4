"""PyG's own explain tests, run with ``lrp.LRP()`` as the algorithm.

Takes a PyG source checkout (its ``test/explain`` folder; use the tag of the
installed PyG), copies that folder to a temporary directory and runs it with
pytest after two changes, both made to the copy only:

* **The algorithm.** Before the test modules are imported, every explainer
  class that ``torch_geometric.explain`` exports (``GNNExplainer``,
  ``CaptumExplainer``, ``AttentionExplainer``, ``PGExplainer``,
  ``GraphMaskExplainer``, ``DummyExplainer``) is replaced by a subclass of
  ``lrp.LRP`` that takes and ignores the original's arguments. So every
  ``Explainer(..., algorithm=GNNExplainer(epochs=2))`` of the suite explains
  with ``lrp.LRP()`` and its defaults. PGExplainer's tests check that it
  refuses to explain before it is trained, then train it
  (``explainer.algorithm.train(epoch, model, x, ...)`` returns a loss) and
  explain. LRP learns nothing, so the PGExplainer stand-in keeps that
  contract and no more: it raises PGExplainer's "not yet fully trained"
  error until ``train`` is called, and ``train`` runs nothing and returns a
  loss of 0.
* **The mask range.** Relevance is signed and not bounded by 1, so each
  ``assert <mask>.min() >= 0`` and ``assert <mask>.max() <= 1`` becomes
  ``assert torch.isfinite(<mask>).all()`` (the issue's one allowed change).

Everything else (models, data, configurations, the remaining asserts) runs as
PyG wrote it. Tests that never build an explainer (configs, ``Explanation``
methods, metrics, Captum helpers) run as they are and count too.

Writes a per-file table of passed / failed / skipped to
``benchmarks/results/pyg_explain_tests.md`` (``--out``) and prints the failures'
first lines. About a minute on two cores.

    git clone --branch <version> <PyG repository> /tmp/pyg   # once
    python benchmarks/pyg_explain_tests.py /tmp/pyg [--out PATH] [-- PYTEST ARGS]
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Loaded by pytest (``-p``) before it imports any test module.
PLUGIN = '''
import torch_geometric.explain as explain
import torch_geometric.explain.algorithm as algorithm
import torch_geometric_lrp as lrp

REPLACED = ("GNNExplainer", "CaptumExplainer", "AttentionExplainer",
            "PGExplainer", "GraphMaskExplainer", "DummyExplainer")


def stand_in(name):
    class StandIn(lrp.LRP):
        """lrp.LRP() with its defaults, whatever the arguments."""

        def __init__(self, *args, **kwargs):
            super().__init__()
            self.trained = name != "PGExplainer"

        def reset_parameters(self):
            pass

        def train(self, epoch, model, *args, **kwargs):
            self.trained = True  # LRP learns nothing: no step is run.
            return 0.0

        def forward(self, *args, **kwargs):
            # PGExplainer's contract, which its tests check before they train.
            if not self.trained:
                raise ValueError("PGExplainer stand-in: not yet fully trained (call train first)")
            return super().forward(*args, **kwargs)

    StandIn.__name__ = StandIn.__qualname__ = name
    return StandIn


def pytest_configure(config):
    for name in REPLACED:
        cls = stand_in(name)
        for module in (explain, algorithm):
            if hasattr(module, name):
                setattr(module, name, cls)
'''

RANGE = re.compile(r"assert (?P<mask>.+?)\.(?:min\(\) >= 0|max\(\) <= 1)\s*$", re.M)


def relax_ranges(text: str) -> tuple[str, int]:
    """``assert m.min() >= 0`` / ``assert m.max() <= 1`` -> finiteness of ``m``."""
    return RANGE.subn(lambda m: f"assert torch.isfinite({m['mask']}).all()", text)


def prepare(checkout: str, work: str) -> int:
    source = os.path.join(checkout, "test", "explain")
    if not os.path.isdir(source):
        raise SystemExit(f"checkout: no test/explain under {checkout!r}; pass a PyG source checkout")
    target = os.path.join(work, "test", "explain")
    shutil.copytree(source, target)
    top = os.path.join(checkout, "test", "conftest.py")
    if os.path.exists(top):
        shutil.copy(top, os.path.join(work, "test", "conftest.py"))
    changed = 0
    for folder, _, files in os.walk(target):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path) as f:
                    text, n = relax_ranges(f.read())
                if n and "import torch\n" not in text:
                    text = "import torch\n" + text
                with open(path, "w") as f:
                    f.write(text)
                changed += n
    with open(os.path.join(work, "lrp_stand_in.py"), "w") as f:
        f.write(PLUGIN)
    return changed


# Failures that test another algorithm or positive masks, not LRP (each is
# listed in the output with its test name):
#: the test expects the replaced algorithm to refuse a configuration (Captum's
#: perturbation methods, Captum / AttentionExplainer node-mask types,
#: PGExplainer before training or on model explanations); LRP explains it.
REFUSAL = "DID NOT RAISE"
#: tests whose asserts need every mask entry > 0 (PyG's ``topk`` threshold
#: counting ``mask > 0``; ``fidelity`` of a model whose output is ``x``, which
#: multiplies ``x`` by the mask): signed relevance is negative or 0 there.
POSITIVE_MASKS = ("test_topk_threshold[", "test_fidelity[")
#: the test passes a ``target`` that does not fit the model's output
#: (``test_forward``: two values for a regression model with one output);
#: the replaced ``DummyExplainer`` never reads it, LRP refuses it by name.
BAD_TARGET = "target: expected one entry per"


def kind_of(test: str, message: str) -> str:
    if message.startswith(f"Failed: {REFUSAL}"):
        return "refusal"
    if BAD_TARGET in message:
        return "bad target"
    if test.startswith(POSITIVE_MASKS) and message.startswith("assert"):
        return "positive mask"
    return "failed"


def summarise(junit: str) -> tuple[dict, list]:
    counts = defaultdict(lambda: defaultdict(int))
    failures = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        module = case.get("classname", "").split(".")
        name = "/".join(module[:-1] if module[-1][:1].isupper() else module) + ".py"
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                message = next(iter((child.get("message") or child.tag).splitlines()), child.tag)
                outcome = kind_of(case.get("name"), message)
                failures.append((outcome, f"{name}::{case.get('name')}: {message}"))
            elif child.tag == "skipped":
                outcome = "skipped"
        counts[name][outcome] += 1
    return counts, failures


def run(work: str, pytest_args=(), capture: bool = False) -> str:
    """pytest on the prepared copy in ``work``, with the stand-in loaded
    first; returns the path of its JUnit XML report."""
    junit = os.path.join(work, "junit.xml")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([work, ROOT, os.environ.get("PYTHONPATH", "")]))
    command = [sys.executable, "-m", "pytest", "-q", "-p", "lrp_stand_in", "-p", "no:cacheprovider",
               f"--junitxml={junit}", "--rootdir", work, os.path.join(work, "test", "explain"), *pytest_args]
    subprocess.run(command, cwd=work, env=env, check=False, capture_output=capture)
    return junit


def table(counts: dict, changed: int, version: str, meta: list = ()) -> str:
    lines = [
        "# PyG's explain tests with `lrp.LRP()`",
        "",
        *meta,
        *([""] if meta else []),
        f"Generated by `benchmarks/pyg_explain_tests.py` (PyG {version}). Every explainer class"
        f" replaced by `lrp.LRP()`; {changed} mask-range asserts turned into finiteness checks.",
        "",
        "| test file | passed | failed | another algorithm's refusal | assumes masks > 0 | "
        "target refused (does not fit the output) | skipped |",
        "|---|---|---|---|---|---|---|",
    ]
    total = defaultdict(int)
    kinds = ("passed", "failed", "refusal", "positive mask", "bad target", "skipped")
    for name in sorted(counts):
        lines.append(f"| `{name}` | " + " | ".join(str(counts[name][k]) for k in kinds) + " |")
        for k in kinds:
            total[k] += counts[name][k]
    lines.append("| **all** | " + " | ".join(f"**{total[k]}**" for k in kinds) + " |")
    return "\n".join(lines) + "\n"


def checkout_version(checkout: str) -> str:
    """The PyG version of the checkout's sources (``unknown`` without them)."""
    found = re.search(r"__version__ = '([^']+)'",
                      open(os.path.join(checkout, "torch_geometric", "__init__.py")).read()) \
        if os.path.exists(os.path.join(checkout, "torch_geometric", "__init__.py")) else None
    return found.group(1) if found else "unknown"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkout", help="a PyG source checkout (has test/explain)")
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "pyg_explain_tests.md"))
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args()

    import torch_geometric

    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as work:
        changed = prepare(os.path.abspath(args.checkout), work)
        counts, failures = summarise(run(work, args.pytest_args))

    from datetime import datetime, timezone

    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    import common  # (late: the header's versions, after the suite ran)

    meta = [
        f"- command: `python {' '.join([os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:])}`",
        f"- date: {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}; runtime "
        f"{(time.perf_counter() - start) / 60:.1f} min",
        f"- {common.machine()}; pytest with torch's default threads",
        f"- the tests of PyG {checkout_version(args.checkout)} (the checkout), run on the installed PyG "
        f"{torch_geometric.__version__}",
    ]
    text = table(counts, changed, torch_geometric.__version__, meta)
    print(text)
    for kind, line in sorted(failures):
        print(f"{kind.upper()}: {line}")
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    return 1 if any(kind == "failed" for kind, _ in failures) else 0


if __name__ == "__main__":
    sys.exit(main())
