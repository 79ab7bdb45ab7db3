"""A disk cache of saturations: the same program under the same rules and schedule gives the same e-graph,
so a program optimized again (another process, torch.compile's next run of a model, a second model of the
same architecture) reads its snapshot instead of saturating again.

egglog's saturation is deterministic: what it builds depends only on the commands it runs (the schema, the
selected rule sets, the encoded program) and on the schedule. An entry's name hashes exactly those commands,
as egglog prints them, with the schedule, egglog's version and this format's version. Only runs that
stopped for a reason the machine's speed cannot change are stored (saturated, an iteration or an e-node
limit); one cut short by the clock, or replayed after a killed step, runs again next time. Entries are
pickles in the ``saturate`` folder of EqiForge's cache (eqiforge/paths.py), the user's own as Inductor's
cache is; one that cannot be read is saturated again. A snapshot read here goes through the encoding and
plan checks like any other: the cache saves time, it is not trusted beyond what a saturation would be.
"""
from __future__ import annotations

import hashlib
import pickle
from importlib.metadata import version

from ..paths import read_entry, write_entry
from .report import SaturationReport, Stop
from .snapshot import Snapshot

#: bump when what an entry holds changes (2: kernels canonical up to commutative operands, equal e-classes merged)
VERSION = 2
KEPT = (Stop.SATURATED, Stop.ITERATIONS, Stop.ENODES)  # stops that do not depend on the machine's speed


def key(commands, schedule) -> str:
    """The entry's name for running ``commands`` (schema, rule sets, program: all egglog runs) by ``schedule``."""
    digest = hashlib.sha256(repr((VERSION, version("egglog"), schedule)).encode())
    for command in commands:
        digest.update(str(command).encode())
        digest.update(b"\n")
    return digest.hexdigest()


def load(name: str) -> tuple[Snapshot, SaturationReport] | None:
    """(snapshot, report) stored under ``name``, or None."""
    data = read_entry("saturate", f"{name}.pkl")
    try:
        snap, report = pickle.loads(data) if data is not None else (None, None)
    except Exception:  # noqa: BLE001 - a damaged or foreign entry: saturate again
        return None
    if not isinstance(snap, Snapshot) or not isinstance(report, SaturationReport):
        return None
    report.from_cache = True
    return snap, report


def store(name: str, snap: Snapshot, report: SaturationReport) -> None:
    """Keep a run whose stop the machine's speed did not decide (see KEPT)."""
    if report.stop_reason.kind in KEPT:
        write_entry("saturate", f"{name}.pkl", pickle.dumps((snap, report), protocol=pickle.HIGHEST_PROTOCOL))
