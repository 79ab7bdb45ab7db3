"""Published GPU timings as data: what a GPU cost model is fitted to and judged on until a GPU is lent.

KernelBench (github.com/ScalingIntelligence/KernelBench, MIT licence) publishes, per reference PyTorch
program and GPU setup, the mean wall time of a call in eager mode and under torch.compile's configurations.
``bench/kernelbench_data.py`` turns a snapshot of it into one file: each program version's calls as written
(frontend/as_written.py records, captured on meta tensors at the sizes the times were measured at) and each
published time, with where it came from; programs that could not be captured are listed with the reason.
This module loads that file (one loader for fitting, evaluation and tests).
"""
from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import EqiforgeError
from ..frontend.as_written import WrittenCall

FORMAT = "eqiforge-published-timings/1"
DATASET = Path(__file__).resolve().parents[2] / "bench" / "data" / "gpu" / "kernelbench.json.gz"  # a checkout's
#: torch configurations as published: eager, Inductor's default, its modes, and CUDA graphs without Inductor
CONFIGS = ("eager", "inductor", "max-autotune-no-cudagraphs", "max-autotune", "reduce-overhead", "cudagraphs")


@dataclass(frozen=True)
class PublishedProgram:
    key: str  # the problem file's content id: the same source is the same program
    problem: str  # "level1/19_ReLU.py"
    level: int
    calls: tuple[WrittenCall, ...]


@dataclass(frozen=True)
class Timing:
    setup: str  # the publisher's machine: "H100_Modal"
    gpu: str  # the device table's name: "H100", "H100_PCIE"
    config: str  # one of CONFIGS
    level: int
    problem: str  # "19_ReLU.py"
    program: str | None  # PublishedProgram.key, None where it was not captured
    seconds: float


@dataclass
class Published:
    source: dict
    programs: dict[str, PublishedProgram]
    timings: list[Timing]
    skipped: list[dict] = field(default_factory=list)

    def measured(self, *, gpus=None, setups=None, configs=("eager",),
                 levels=None) -> list[tuple[PublishedProgram, Timing]]:
        """(program, timing) pairs of captured programs, filtered by GPU, setup, configuration and level."""
        return [(self.programs[t.program], t) for t in self.timings
                if t.program in self.programs and (gpus is None or t.gpu in gpus)
                and (setups is None or t.setup in setups) and t.config in configs
                and (levels is None or t.level in levels)]

    def gpus(self) -> list[str]:
        return sorted({t.gpu for t in self.timings})


def load_published(path: str | Path = DATASET) -> Published:
    """The dataset at ``path`` (gzip'd JSON or plain JSON, ``FORMAT``)."""
    path = Path(path)
    if not path.exists():
        raise EqiforgeError(f"no published timings at {path}: build them with bench/kernelbench_data.py "
                            "(a source checkout has bench/data/gpu/kernelbench.json.gz)")
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        data = json.load(fh)
    if data.get("format") != FORMAT:
        raise EqiforgeError(f"{path} is not a published-timings file of format {FORMAT} (found {data.get('format')!r})")
    programs = {key: PublishedProgram(key, p["problem"], p["level"], tuple(_call(c) for c in p["calls"]))
                for key, p in data["programs"].items()}
    timings = [Timing(t["setup"], t["gpu"], t["config"], t["level"], t["problem"], t.get("program"), t["ms"] * 1e-3)
               for t in data["timings"] if t.get("ms")]  # a publisher's failed run has no time
    return Published(data.get("source", {}), programs, timings, data.get("skipped", []))


def _call(row: list) -> WrittenCall:
    op, in_shapes, in_dtypes, out_shapes, out_dtypes, args, sources = row
    return WrittenCall(op, tuple(map(tuple, in_shapes)), tuple(in_dtypes), tuple(map(tuple, out_shapes)),
                       tuple(out_dtypes), tuple(args), tuple(sources))
