"""How busy the machine was while something was timed: other processes' CPU use, which stalls our threads and
inflates timings. A measured decision taken while others used more cores than PyTorch's threads leave free is
provisional (choice.py): not cached, so the next process measures it again."""
from __future__ import annotations

import os
import time

import torch

#: other processes' cores, beyond those PyTorch's threads leave free, above which a timing is disturbed;
#: $EQIFORGE_BUSY_CORES sets it (the tests' is inf: their other worker is load by design)
DISTURBING_CORES = float(os.environ.get("EQIFORGE_BUSY_CORES", "0.25"))


class OtherLoad:
    """``with OtherLoad() as load: ...``: ``load.cores`` is the average number of cores other processes kept
    busy meanwhile (the machine's busy time less this process's own CPU time, over the wall time); None where
    /proc/stat is missing (not Linux)."""

    cores: float | None = None

    def __enter__(self):
        self._start = (_machine_busy_seconds(), _own_cpu_seconds(), time.perf_counter())
        return self

    def __exit__(self, *exc):
        busy, own, wall = _machine_busy_seconds(), _own_cpu_seconds(), time.perf_counter()
        if busy is not None and self._start[0] is not None and wall > self._start[2]:
            others = (busy - self._start[0]) - (own - self._start[1])
            self.cores = max(0.0, others / (wall - self._start[2]))
        return False

    @property
    def disturbing(self) -> bool:
        """Whether others used more cores than PyTorch's threads leave free, by more than DISTURBING_CORES."""
        spare = max(0, (os.cpu_count() or 1) - torch.get_num_threads())
        return self.cores is not None and self.cores > spare + DISTURBING_CORES


def _machine_busy_seconds() -> float | None:
    """Non-idle CPU seconds of the whole machine since boot (all cores)."""
    try:
        with open("/proc/stat") as f:
            ticks = [int(v) for v in f.readline().split()[1:]]
    except OSError:
        return None
    idle = ticks[3] + ticks[4]  # idle + iowait
    return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")  # user..steal; guest time is inside user


def _own_cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system
