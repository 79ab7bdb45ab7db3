"""A disk cache of exact extraction: the same snapshot and prices give the same choice without solving again.

The ILP is what makes a deep model's first optimization slow (one BERT layer's block: its 3 s time limit),
and a solve stopped by its time limit depends on how fast the machine was that moment. An entry is keyed by
everything the answer depends on (the snapshot's e-nodes, e-classes and roots, every price, the time limit
and this format's version); a hit is used only after ``check_choice`` accepts it for this snapshot, so a
corrupt or foreign entry is solved again. Entries live in the ``extract`` folder of EqiForge's cache
(eqiforge/paths.py); a folder that cannot be written only means no caching.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from ..egraph.snapshot import Snapshot
from ..paths import read_entry, write_entry
from .dag import Costs

VERSION = 2  # bump when what an entry means changes (2: the ILP solved in units of the cheapest node)


def key(snap: Snapshot, node_cost: Costs, roots: Sequence[int], time_limit: float) -> str:
    """The entry's name: a hash of everything the extraction's answer depends on (prices exactly, as hex)."""
    text = repr((VERSION, snap.node_op, snap.node_attrs, snap.node_children, snap.node_class, list(roots),
                 [float(c).hex() for c in node_cost], float(time_limit)))
    return hashlib.sha256(text.encode()).hexdigest()


def load(name: str) -> tuple[dict[int, int], str] | None:
    """(choice, method) stored under ``name``, or None."""
    data = read_entry("extract", f"{name}.json")
    try:
        entry = json.loads(data) if data is not None else None
        return ({int(c): int(n) for c, n in entry["choice"]}, str(entry["method"])) if entry else None
    except (ValueError, KeyError, TypeError):
        return None


def store(name: str, choice: dict[int, int], method: str) -> None:
    """Write an entry (see paths.write_entry)."""
    write_entry("extract", f"{name}.json", json.dumps({"choice": sorted(choice.items()), "method": method}).encode())
