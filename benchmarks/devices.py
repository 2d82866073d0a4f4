"""Every coverage entry explained on a device, next to the same explanation on the CPU.

``supported_models.py`` builds each supported PyG model and layer with its inputs
(seed 0). This script converts each to float64, explains it with
``lrp.explain`` (the same call as ``supported_models.py``) on the CPU, moves a copy
of the model and the inputs to ``--device`` and explains again there. Every
floating tensor of the two explanations (node and edge masks, self-loop
relevance, score, residual, absorbed relevance; heterogeneous ones per
type) is compared: ``max rel. diff`` is the largest absolute difference
over the largest magnitude of the CPU tensor, over all of them. The CPU is
the reference because CI runs there; a device must give the same numbers,
the same warnings (the library's own; PyG's differ by device) and the
same refusals.

Status per entry:

* ``same``: both explained, every tensor within ``--tolerance``
  (default 1e-9 relative), the same keys and shapes, the same warnings of the library;
* ``differs``: numbers, keys, shapes or warnings differ (listed);
* ``refused on both`` / ``refused on <device> only`` / ``refused on cpu only``;
* ``skipped``: the model cannot be built or cannot run on this machine.

Usage::

    python benchmarks/devices.py --device cuda      # on a machine with a GPU (~1 min)
    python benchmarks/devices.py --device cpu       # the harness itself: a CPU copy against the CPU

Writes ``benchmarks/results/devices_<device>.md`` (``--out`` to change).
"""
from __future__ import annotations

import argparse
import copy
import os
import platform
import sys
import time
import warnings
from datetime import datetime, timezone
from pathlib import Path

import torch
import torch_geometric
from torch_geometric.data import Data, HeteroData

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
import supported_models as coverage  # noqa: E402
from common import table  # noqa: E402


def moved(obj, device, dtype=torch.float64):
    """``obj`` with every tensor on ``device`` and every floating tensor in ``dtype``."""
    if isinstance(obj, torch.Tensor):
        return obj.to(device, dtype) if obj.is_floating_point() else obj.to(device)
    if isinstance(obj, (Data, HeteroData)):
        out = copy.copy(obj).to(device)
        return out.apply(lambda t: t.to(dtype) if t.is_floating_point() else t)
    if isinstance(obj, dict):
        return {k: moved(v, device, dtype) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(moved(v, device, dtype) for v in obj)
    return obj


def tensors_of(explanation, prefix: str = "") -> dict:
    """Every floating tensor of an explanation (a dict of ``name -> tensor``; per
    type for heterogeneous ones)."""
    found = {}
    items = explanation.to_dict().items() if hasattr(explanation, "to_dict") else explanation.items()
    for key, value in items:
        name = f"{prefix}{key}"
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            found[name] = value.to_dense() if value.layout != torch.strided else value
        elif isinstance(value, dict):
            found.update(tensors_of(value, name + "."))
    return found


def explained(model, inputs: dict, mode: str):
    """The explanation (or the exception) and the warnings' messages."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = coverage.explain(model, inputs, mode)
        except Exception as error:  # noqa: BLE001 - a refusal is a row
            result = error
    # the library's warnings (raised where it is, or attributed to its caller), not torch's or PyG's
    # own: they differ by device (on CUDA PyG suggests torch-scatter for max scatters)
    theirs = (f"{os.sep}torch_geometric{os.sep}", f"{os.sep}torch{os.sep}")
    ours = [w for w in caught if not any(part in w.filename for part in theirs)]
    return result, sorted({f"{w.category.__name__}: {str(w.message).splitlines()[0][:100]}" for w in ours})


def built(entry, device: str, dtype: torch.dtype):
    """The entry's model and inputs (seed 0: the same weights on every call) on
    ``device`` in ``dtype``, after one plain forward there."""
    torch.manual_seed(0)
    model, inputs = entry.build()
    model, inputs = model.eval().to(device, dtype), moved(inputs, device, dtype)
    coverage.forward(model, inputs)
    return model, inputs


def compare(entry, device: str, tolerance: float) -> tuple[str, str, float]:
    """``(status, detail, max rel. diff)`` of one coverage entry: in float64,
    or in float32 (with a tolerance of 1e-4) where the model does not run in
    float64."""
    dtype = torch.float64
    try:
        model, inputs = built(entry, "cpu", dtype)
    except Exception:  # noqa: BLE001 - some PyG layers make float32 tensors of their own
        dtype, tolerance = torch.float32, max(tolerance, 1e-4)
        try:
            model, inputs = built(entry, "cpu", dtype)
        except Exception as error:  # noqa: BLE001
            return "skipped", coverage.reason_of(error), float("nan")
    on_cpu, cpu_warnings = explained(model, inputs, entry.mode)
    try:
        there_model, there_inputs = built(entry, device, dtype)
    except Exception as error:  # noqa: BLE001
        return "skipped", f"cannot run on {device}: {coverage.reason_of(error)}", float("nan")
    on_device, device_warnings = explained(there_model, there_inputs, entry.mode)
    cpu_failed, device_failed = isinstance(on_cpu, Exception), isinstance(on_device, Exception)
    if cpu_failed or device_failed:
        if cpu_failed and device_failed:
            return "refused on both", coverage.reason_of(on_device), float("nan")
        which = "cpu" if cpu_failed else device
        return f"refused on {which} only", coverage.reason_of(on_cpu if cpu_failed else on_device), float("nan")
    expected, actual = tensors_of(on_cpu), tensors_of(on_device)
    problems, worst = [], 0.0
    if expected.keys() != actual.keys():
        problems.append(f"keys differ: {sorted(expected.keys() ^ actual.keys())}")
    for name in sorted(expected.keys() & actual.keys()):
        a, b = expected[name], actual[name].detach().cpu()
        if a.shape != b.shape:
            problems.append(f"{name}: shape {tuple(a.shape)} vs {tuple(b.shape)}")
            continue
        if b.device.type != "cpu" and actual[name].device.type != torch.device(device).type:
            problems.append(f"{name}: left on {actual[name].device}")
        if a.numel() == 0:
            continue
        finite = torch.isfinite(a)
        if not torch.equal(finite, torch.isfinite(b)):
            problems.append(f"{name}: non-finite entries differ")
            continue
        scale = a[finite].abs().max().item() if finite.any() else 0.0
        diff = (a[finite] - b[finite]).abs().max().item() if finite.any() else 0.0
        rel = diff / scale if scale > 0 else diff
        worst = max(worst, rel)
        if rel > tolerance:
            problems.append(f"{name}: rel. diff {rel:.1e}")
    if cpu_warnings != device_warnings:
        problems.append(f"warnings differ: cpu {cpu_warnings} vs {device} {device_warnings}")
    if dtype != torch.float64:
        problems.insert(0, "float32")
    return ("differs" if problems and problems != ["float32"] else "same"), "; ".join(problems), worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--tolerance", type=float, default=1e-9)
    parser.add_argument("--only", help="the entries of this name or class only")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    started = time.perf_counter()
    entries = [e for e in coverage.ENTRIES if args.only in (None, e.name, e.cls)]
    rows, counts = [], {}
    for entry in entries:
        try:
            status, detail, worst = compare(entry, args.device, args.tolerance)
        except Exception as error:  # noqa: BLE001 - a failure outside the explanation is a row too
            status, detail, worst = "harness failed", coverage.reason_of(error), float("nan")
        counts[status] = counts.get(status, 0) + 1
        rows.append([entry.name, status, "n/a" if worst != worst else f"{worst:.1e}", detail.replace("|", "/")])
        print(f"{status:22s} {entry.name}  {detail}", file=sys.stderr, flush=True)
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else platform.processor() or "cpu"
    text = "\n".join([
        f"# Devices: every coverage entry on `{args.device}` next to the CPU",
        "",
        f"- command: `python benchmarks/devices.py {' '.join(sys.argv[1:])}`",
        f"- date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC",
        f"- device: {name}; torch {torch.__version__}, torch_geometric {torch_geometric.__version__}, "
        f"Python {platform.python_version()}",
        f"- runtime: {time.perf_counter() - started:.0f} s; tolerance {args.tolerance:g} (relative, float64)",
        "",
        "What is compared: see the docstring of `benchmarks/devices.py`.",
        "",
        "Counts: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())),
        "",
        table(["entry", "status", "max rel. diff", "detail"], rows, ["l", "l", "r", "l"]),
        "",
    ])
    print(text)
    out = args.out or ROOT / "benchmarks" / "results" / f"devices_{args.device.split(':')[0]}.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
