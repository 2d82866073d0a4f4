"""CI installs both scatter back-ends: make sure their tests did not skip."""
import importlib
import os

import pytest


@pytest.mark.skipif(not os.environ.get("LRP_REQUIRE_SCATTER"), reason="only where the scatter extra must be present")
@pytest.mark.parametrize("name", ["torch_scatter", "torch_sparse"])
def test_scatter_backends_are_installed(name):
    importlib.import_module(name)
