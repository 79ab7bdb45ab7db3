"""Profiling records: one JSON line per measured kernel, and the shape split used for evaluation.

A record is what was measured and where::

    {"key": ..., "device": "H200", "versions": {"torch": ..., "triton": ...}, "machine": <CPU model, CPU only>,
     "op": "GemmK", "in_shapes": [...], "in_dtypes": [...], "out_shape": [...], "dtype": "float16",
     "attrs": [...], "group": <problem key>, "shape": <shape key>, "seconds": 1.2e-05,
     "resources": {"n_regs": ..., "n_spills": ..., "shared": ...} or null}

``group`` names the problem (op, operand shapes and dtypes, fused expression) so that records in one group
are alternative configurations of the same work, the choice extraction makes; ``shape`` names the problem
dims alone. Evaluation holds out whole shapes, so a model is never tested on a shape it was trained on.
Every device-table GPU is one kind of chip, but ``cpu`` is any processor: a CPU record names its model
(``machine``), and a model is trained on, evaluated on and used by one.
"""
from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

from .. import ops
from .features import NodeFeatures, node_features

RECORDS_FILE = "records.jsonl"


def tuplify(value):
    """JSON lists back to the tuples the op attributes are made of (fused expressions nest)."""
    return tuple(tuplify(v) for v in value) if isinstance(value, (list, tuple)) else value


def digest(*parts) -> str:
    return hashlib.sha1(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def kernel_record(op: str, in_shapes, in_dtypes, out_shape, dtype: str, attrs: tuple) -> dict:
    """A record's kernel part (no device or time yet), with its ``key``, ``group`` and ``shape``."""
    rec = {"op": op, "in_shapes": [list(s) for s in in_shapes], "in_dtypes": list(in_dtypes),
           "out_shape": list(out_shape), "dtype": dtype, "attrs": json.loads(json.dumps(attrs))}
    rec["key"] = digest(rec)
    rec["shape"] = digest(op, rec["in_shapes"], rec["out_shape"])
    kernel = ops.get(op)  # its configuration (a GEMM's tile and split-K) is not part of the problem
    problem = [a for name, a in zip(kernel.attr_names, rec["attrs"]) if name not in kernel.config]
    rec["group"] = digest(rec["shape"], rec["in_dtypes"], rec["dtype"], problem)
    return rec


def record_features(rec: dict) -> NodeFeatures:
    return node_features(rec["op"], [tuple(s) for s in rec["in_shapes"]], rec["in_dtypes"], tuple(rec["out_shape"]),
                         rec["dtype"], attrs=tuplify(rec["attrs"]))


def read_records(path: str | Path) -> list[dict]:
    """Records of a JSON-lines file, or of every ``*.jsonl`` under a directory (or its committed, gzipped
    ``*.jsonl.gz`` where the plain file is absent); a torn last line (a run cut short mid-write) is skipped."""
    path = Path(path)
    if path.is_dir():
        plain = sorted(path.rglob("*.jsonl"))
        files = plain + sorted(p for p in path.rglob("*.jsonl.gz") if p.with_suffix("") not in plain)
    else:
        files = [path] if path.exists() else []
    records = []
    for file in files:
        text = gzip.decompress(file.read_bytes()).decode() if file.suffix == ".gz" else file.read_text()
        for line in text.splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return records


def append_record(path: Path, rec: dict) -> None:
    """Append one record and flush it, so a run cut short keeps everything measured before. A torn last
    line (a run killed mid-write) is ended first, so it cannot swallow the new record."""
    with open(path, "a+b") as fh:
        torn = fh.tell() > 0 and fh.seek(-1, 2) >= 0 and fh.read(1) != b"\n"
    with open(path, "a") as fh:
        fh.write(("\n" if torn else "") + json.dumps(rec) + "\n")
        fh.flush()


def split_by_shape(records: list[dict], held_out: float = 0.25, seed: int = 0) -> tuple[list[dict], list[dict]]:
    """(train, test): whole shapes go to one side, chosen by a seeded hash of the shape key (stable as
    records are added)."""
    def test_side(shape: str) -> bool:
        return int(digest(seed, shape), 16) % 1000 < held_out * 1000
    train = [r for r in records if not test_side(r["shape"])]
    test = [r for r in records if test_side(r["shape"])]
    return train, test
