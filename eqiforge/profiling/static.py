"""Static resources (registers, spills, shared memory) of a record's kernel, cached on disk by spec hash.

Compiling for Hopper takes seconds per config and needs no GPU, so the cache lets features be recomputed
freely (``eqiforge.lower.triton.static_resources`` does the compiling).
"""
from __future__ import annotations

import json
from pathlib import Path

from ..cost.dataset import digest
from ..lower.triton import static_resources
from ..paths import cache_dir as cache_root
from .measure import record_spec


def cached_static_resources(rec: dict, arch: int = 90, cache_dir: Path | None = None) -> dict:
    """``{"n_regs", "n_spills", "shared", ...}`` of the record's kernel for sm_``arch`` (cached in
    ``cache_dir``, default the ``static`` folder of EqiForge's cache)."""
    spec, _ = record_spec(rec)
    path = Path(cache_dir or cache_root("static")) / f"{digest(repr(spec), arch)}.json"
    if path.exists():
        return json.loads(path.read_text())
    resources = static_resources(spec, f"k{rec['key']}", arch)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(resources))
    return resources
