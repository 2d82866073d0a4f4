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


@pytest.fixture
def routed(monkeypatch) -> list:
    """The torch functions that go through the relevance mode from here on,
    in order (a test may append its own markers to the list)."""
    from torch_geometric_lrp.mode import RelevanceMode

    calls: list = []
    route = RelevanceMode.__torch_function__

    def counted(self, func, types, args=(), kwargs=None):
        calls.append(func)
        return route(self, func, types, args, kwargs)

    monkeypatch.setattr(RelevanceMode, "__torch_function__", counted)
    return calls
