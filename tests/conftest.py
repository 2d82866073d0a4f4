"""Shared test settings."""
from __future__ import annotations

import pytest

from torch_geometric_lrp.explainers import core

#: The library's threshold, before the fixture below lowers it.
TRIM_MIN_EDGES = core.TRIM_MIN_EDGES


@pytest.fixture(autouse=True)
def trim_every_cut(monkeypatch):
    """Every cut runs with trimmed layers, however small: the suite's graphs
    are far below ``core.TRIM_MIN_EDGES``, under which a cut runs untrimmed
    (the same explanation, a little faster), and would otherwise never reach
    trimming. ``test_trim.py`` checks the threshold itself."""
    monkeypatch.setattr(core, "TRIM_MIN_EDGES", 0)
