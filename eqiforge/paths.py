"""Where EqiForge keeps what it measured or computed once (this CPU's calibration, exact extraction answers,
Triton modules, kernels' static resources): one folder, ``$EQIFORGE_CACHE_DIR``, else ``~/.cache/eqiforge``,
a subfolder per kind."""
from __future__ import annotations

import os
from pathlib import Path


def cache_dir(*parts: str) -> Path:
    """The cache folder, or ``parts`` under it (not created here: writers create what they write)."""
    return Path(os.environ.get("EQIFORGE_CACHE_DIR") or Path.home() / ".cache" / "eqiforge", *parts)
