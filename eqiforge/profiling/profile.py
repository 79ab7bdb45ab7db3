"""The measuring loop: candidates in, JSON-lines records out, within a time budget, resumable.

Every measured record is appended and flushed at once, so a run cut short (budget, Ctrl-C, a crash) keeps
what it measured; a rerun skips records whose key is already in the file. The timer and the clock are
parameters, so the loop is tested on a CPU with a fake timer.
"""
from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from ..cost.dataset import RECORDS_FILE, append_record, read_records


@dataclass
class ProfileRun:
    measured: int = 0
    skipped: int = 0  # already in the file
    failed: int = 0  # the timer raised (e.g. a config that does not compile): recorded as failures
    stop: str = ""


def profile(out_dir: str | Path, groups: Iterable[list[dict]], timer: Callable[[dict], float], device: str,
            versions: dict, budget_s: float = 600.0, max_records: int | None = None,
            clock: Callable[[], float] = time.monotonic, machine: str | None = None,
            known: Iterable[str] = ()) -> ProfileRun:
    """Measure the records of ``groups`` with ``timer`` until the budget, the record cap or the candidates
    run out; append them to ``out_dir/records.jsonl``, each stamped with ``machine`` when given (a CPU's
    model). Keys in the file or in ``known`` (measured elsewhere) are skipped."""
    path = Path(out_dir) / RECORDS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    done = {r["key"] for r in read_records(path)} | set(known)
    run, start = ProfileRun(), clock()
    stamp = {"device": device, "versions": versions, **({"machine": machine} if machine else {})}
    for rec in itertools.chain.from_iterable(groups):
        if clock() - start >= budget_s:
            run.stop = "time budget"
            return run
        if max_records is not None and run.measured >= max_records:
            run.stop = "record cap"
            return run
        if rec["key"] in done:
            run.skipped += 1
            continue
        try:
            seconds = timer(rec)
        except Exception as err:  # noqa: BLE001 - a kernel that fails is data about the config, not a crash
            run.failed += 1
            append_record(path, {**rec, **stamp, "seconds": None,
                                 "error": f"{type(err).__name__}: {err}"[:300]})
        else:
            run.measured += 1
            append_record(path, {**rec, **stamp, "seconds": seconds})
        done.add(rec["key"])
    run.stop = "candidates exhausted"
    return run
