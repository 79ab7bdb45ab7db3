"""Where EqiForge keeps what it measured or computed once (this CPU's calibration, saturations, exact
extraction answers, Triton modules, kernels' static resources): one folder, ``$EQIFORGE_CACHE_DIR``, else
``~/.cache/eqiforge``, a subfolder per kind; and how entries are read and written there."""
from __future__ import annotations

import os
from pathlib import Path


def cache_dir(*parts: str) -> Path:
    """The cache folder, or ``parts`` under it (not created here: writers create what they write)."""
    return Path(os.environ.get("EQIFORGE_CACHE_DIR") or Path.home() / ".cache" / "eqiforge", *parts)


def read_entry(kind: str, filename: str) -> bytes | None:
    """The bytes of entry ``filename`` of the ``kind`` folder, or None when there is none (or unreadable)."""
    try:
        return (cache_dir(kind) / filename).read_bytes()
    except OSError:
        return None


def write_entry(kind: str, filename: str, data: bytes) -> None:
    """Write an entry whole (a temporary file renamed, so a reader never sees half of one), or nothing where
    the folder cannot be written: that only means no caching."""
    folder = cache_dir(kind)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f"{filename}.{os.getpid()}.tmp"
        tmp.write_bytes(data)
        tmp.replace(folder / filename)
    except OSError:
        pass
