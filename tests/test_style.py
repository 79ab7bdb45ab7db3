"""The repository's style is checked by ruff, with the configuration in pyproject.toml (line length 120)."""
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(importlib.util.find_spec("ruff") is None, reason="ruff is not installed (pip install -e .[dev])")
def test_ruff_check_passes():
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "."], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, f"ruff check found problems:\n{result.stdout}{result.stderr}"
