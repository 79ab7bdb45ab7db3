"""Every number a page cites from a results file is the number that file holds.

A claim is a row of ``CLAIMS``: the page, a pattern whose groups hold the numbers as the page writes them
(matched against the page's text with its line breaks and runs of spaces made single spaces), the file
behind them, and a function that reads the same numbers from that file and writes them as the page rounds
them. A results file measured again, or a page edited, that no longer agree fail here, naming both. It only
reads files: no benchmark runs.
"""
from __future__ import annotations

import json
import math
import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
WORDS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six"}


# ---- reading results files ------------------------------------------------------------------------------------

def tables(name: str) -> list[list[dict[str, str]]]:
    """The markdown tables of a results file, each a list of rows (column name -> cell)."""
    found: list[list[dict[str, str]]] = []
    head = None
    for line in (RESULTS / name).read_text().splitlines():
        if not line.startswith("|"):
            head = None
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if head is None:
            head = cells
            found.append([])
        elif not set("".join(cells)) <= set("-: "):
            found[-1].append(dict(zip(head, cells)))
    return found


def rows(name: str, table: int = 0, **where: str) -> list[dict[str, str]]:
    """The rows of a file's ``table``-th table whose cells equal ``where`` (column -> value)."""
    return [r for r in tables(name)[table] if all(r[column] == value for column, value in where.items())]


def column(found: list[dict[str, str]], name: str) -> list[float]:
    return [float(r[name]) for r in found]


def lines(name: str) -> list[str]:
    return (RESULTS / name).read_text().splitlines()


def fixed(*values: float, digits: int = 2) -> tuple[str, ...]:
    return tuple(f"{v:.{digits}f}" for v in values)


def span(values: list[float], digits: int = 2) -> tuple[str, str]:
    return fixed(min(values), max(values), digits=digits)


def geomean(values: list[float]) -> float:
    return math.exp(statistics.mean(math.log(v) for v in values))


def thousands(value: str | int) -> str:
    return f"{int(value):,}"


# ---- the numbers, computed from the files ---------------------------------------------------------------------

def algebra_wins() -> tuple[str, ...]:
    """cpu.md: the algebra programs, EqiForge (torch backend) over eager and over the hand rewrite."""
    wins = rows("cpu.md", algebra="yes")
    return (str(len(wins)), *span(column(wins, "EqiForge/eager")), *span(column(wins, "EqiForge/hand")))


def algebra_suite(name: str) -> tuple[int, int, int]:
    """(programs, with algebra, controls) of an algebra-suite results file."""
    found = rows(name)
    yes = sum(r["algebra"] == "yes" for r in found)
    return len(found), yes, len(found) - yes


def algebra_suite_counts() -> tuple[str, ...]:
    """cpu_inductor.md and cpu.md, which must agree."""
    counts = algebra_suite("cpu_inductor.md")
    assert algebra_suite("cpu.md") == counts, "cpu.md and cpu_inductor.md disagree on the algebra suite"
    return tuple(map(str, counts))


def inductor_algebra(ratio: str) -> tuple[str, ...]:
    found = rows("cpu_inductor.md")
    return (str(len(found)), *span(column(found, ratio)))


FASTER = "eqiforge.optimize / the faster of eager and torch.compile"
BACKEND = "compile (backend=eqiforge) / torch.compile"


def kernelbench(ratio: str) -> tuple[str, ...]:
    """cpu_inductor_kernelbench.md: programs, range and geomean of a ratio column."""
    values = column(rows("cpu_inductor_kernelbench.md"), ratio)
    return (str(len(values)), *span(values), *fixed(geomean(values)))


def kernelbench_backend_with_rerun() -> tuple[str, ...]:
    """The backend's ratios, batch_norm_relu's, and batch_norm_relu's in the 400-round rerun."""
    ours = rows("cpu_inductor_kernelbench.md", program="batch_norm_relu")[0][BACKEND]
    rerun_file = "cpu_inductor_kernelbench_400_repeats.md"
    rerun = rows(rerun_file, program="batch_norm_relu")[0][BACKEND]
    rounds = re.search(r"median of (\d+) interleaved calls", (RESULTS / rerun_file).read_text()).group(1)
    return (*kernelbench(BACKEND), ours, rerun, rounds)


def first_calls() -> dict[str, float]:
    """cpu_first_call_kernelbench.md's first-call table: medians, maxima and the measured choice's cost."""
    found = rows("cpu_first_call_kernelbench.md", table=1)
    defaults = column(found, "eqiforge.optimize (defaults)")
    never = column(found, "eqiforge.optimize (measure=never)")
    compile_ = column(found, "torch.compile")
    added = [d - n for d, n in zip(defaults, never)]
    return {"programs": len(found), "defaults": statistics.median(defaults), "defaults_max": max(defaults),
            "never": statistics.median(never), "compile": statistics.median(compile_),
            "added": statistics.median(added), "added_total": sum(added)}


def first_call_opening() -> tuple[str, ...]:
    f = first_calls()
    return fixed(f["defaults"], f["defaults_max"], f["compile"])


def first_call_row() -> tuple[str, ...]:
    f = first_calls()
    return (str(f["programs"]), *fixed(f["added"], f["compile"]), f"{f['added_total']:.1f}")


def first_call_limitations() -> tuple[str, ...]:
    f = first_calls()
    return fixed(f["defaults"], f["defaults_max"], f["never"], f["compile"])


def twins() -> tuple[str, ...]:
    """cpu_twins.md: EqiForge over the twin, apart from the programs its check names (the drop-in's input
    check on programs of a few microseconds): theirs, their times in us, and their plans alone over the twin."""
    found = rows("cpu_twins.md")
    offending = [r for r in found if float(r["EqiForge/hand"]) > 1.10]
    rest = [r for r in found if r not in offending]
    alone = [float(x) for x in re.findall(r"plan alone (\S+)x\)", lines("cpu_twins.md")[-1])]
    assert len(alone) == len(offending), "cpu_twins.md's check line and its table disagree"
    micros = [round(float(r["EqiForge ms"]) * 1000) for r in offending]
    return (str(len(found)), *span(column(rest, "EqiForge/hand")), *span(column(offending, "EqiForge/hand")),
            WORDS[len(offending)], str(min(micros)), str(max(micros)), *span(alone))


def twins_limitations() -> tuple[str, ...]:
    values = twins()
    return values[5], values[3], values[4], values[8], values[9]


def hf_inference_optimize() -> tuple[str, ...]:
    """cpu_hf_models_inference.md: eqiforge.optimize's median over torch.compile's, per model."""
    found = rows("cpu_hf_models_inference.md")
    ratios = [float(r["eqiforge.optimize"]) / float(r["torch.compile"]) for r in found]
    return (str(len(found)), *span(ratios))


def hf_backend(name: str, table: int, digits: int) -> tuple[str, ...]:
    """The eqiforge backend's time over torch.compile's (the file gives torch.compile's over ours), range and
    the inverse of the file's geomean line for that table."""
    found = rows(name, table=table)
    ratios = [1 / float(r["speed-up vs torch.compile"]) for r in found]
    geomeans = re.findall(r"Geomean speed-up of the eqiforge backend over torch.compile: (\S+)x\.",
                          (RESULTS / name).read_text())
    return (str(len(found)), *span(ratios, digits), f"{1 / float(geomeans[table]):.{digits}f}")


def hf_backend_opening() -> tuple[str, ...]:
    count, low, high, _ = hf_backend("cpu_hf_models_inference.md", 0, 3)
    return WORDS[int(count)], low, high


def row_sums() -> tuple[str, ...]:
    return (rows("cpu.md", program="row_sums")[0]["EqiForge/eager"],)


def kernelbench_suite() -> tuple[str, ...]:
    return (str(len(rows("cpu_inductor_kernelbench.md"))),)


def run_cpu_kernelbench() -> tuple[str, ...]:
    """cpu_kernelbench.md: its programs, and the programs its failed check names with their ratios to eager."""
    last = lines("cpu_kernelbench.md")[-1]
    assert last.startswith("- **FAIL**"), "cpu_kernelbench.md's check no longer fails: the page says it does"
    ratios = [float(x) for x in re.findall(r"\((\S+)x eager;", last)]
    return (str(len(rows("cpu_kernelbench.md"))), str(len(ratios)), *span(ratios))


def families() -> tuple[str, ...]:
    """cpu_families.md's programs, and the families of bench/families.py (each a key of FAMILIES)."""
    source = (ROOT / "bench" / "families.py").read_text()
    body = source[source.index("FAMILIES: dict"):source.index("TWINS: list")]
    count = len(re.findall(r'^    "\w+": \[', body, re.M))
    return str(len(rows("cpu_families.md"))), str(count)


def joint(name: str, block: str = "bert") -> dict[str, str]:
    return rows(name, block=block)[0]


def unguided_growth() -> tuple[str, ...]:
    before, after = joint("joint_scaling_before.md"), joint("joint_scaling_unguided.md")
    return thousands(before["e-nodes"]), thousands(after["e-nodes"])


def guided_bert() -> tuple[str, ...]:
    """The guided and unguided BERT block: e-nodes, extraction seconds, both proven optimal ("ilp" alone,
    no time-limit note), the same predicted time."""
    guided, unguided = joint("joint_scaling.md"), joint("joint_scaling_unguided.md")
    assert guided["extraction"] == unguided["extraction"] == "ilp", "an extraction was not proven optimal"
    assert guided["predicted us"] == unguided["predicted us"], "the guided and unguided plans' prices differ"
    return (thousands(guided["e-nodes"]), thousands(unguided["e-nodes"]), guided["extract"], unguided["extract"],
            guided["predicted us"].split(" -> ")[1])


def guided_bert_nodes() -> tuple[str, ...]:
    return guided_bert()[:2]


def h100_held_out() -> tuple[str, ...]:
    """The H100's held-out level-3 accuracy in the shipped GPU figures."""
    figures = json.loads((ROOT / "eqiforge" / "cost" / "gpu_figures.json").read_text())
    held = figures["gpus"]["H100"]["held_out_level3"]
    return (str(held["programs"]), f"{held['median_ratio']:.2f}", f"{held['within_1_5x'] * 100:.0f}",
            f"{held['within_2x'] * 100:.0f}", f"{held['kendall_tau']:.2f}")


# ---- the claims -----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Claim:
    page: str  # relative to the repository's root
    pattern: str  # a regex over the page's text (single spaces); its groups are the numbers as written
    source: str  # the file behind them, relative to the root
    numbers: Callable[[], tuple[str, ...]]  # the same numbers read from ``source``, as the page rounds them


CLAIMS = [
    # README: the opening
    Claim("README.md", r"On the benchmark's (\d+) such programs .*?the plan runs in (\S+)-(\S+)x eager's time, and "
          r"in (\S+)-(\S+)x the time of the same rewrite made by hand", "bench/results/cpu.md", algebra_wins),
    Claim("README.md", r"On (\d+) KernelBench-style programs \([^)]*\) it runs in (\S+)-(\S+)x the time of the "
          r"faster of eager and `torch.compile` \(geomean (\S+)x\)", "bench/results/cpu_inductor_kernelbench.md",
          lambda: kernelbench(FASTER)),
    Claim("README.md", r"as the backend of (\w+) small Hugging Face models, in (\S+)-(\S+)x `torch.compile`'s time",
          "bench/results/cpu_hf_models_inference.md", hf_backend_opening),
    Claim("README.md", r"`eqiforge.optimize` took (\S+) s at the median \(at most (\S+) s\), `torch.compile`'s "
          r"first call (\S+) s", "bench/results/cpu_first_call_kernelbench.md", first_call_opening),
    Claim("README.md", r"The benchmark's `row_sums`, the same algebra, runs in (\S+)x eager's time",
          "bench/results/cpu.md", row_sums),
    # README: the Measured table
    Claim("README.md", r"\| (\d+) programs with an algebraic win [^|]*\| (\S+)-(\S+)x \((\S+)-(\S+)x the hand "
          r"rewrites\)", "bench/results/cpu.md", algebra_wins),
    Claim("README.md", r"\| (\d+) algebra programs \(the (\d+) and (\w+) with nothing to gain\)",
          "bench/results/cpu_inductor.md",
          lambda: (lambda n, yes, no: (str(n), str(yes), WORDS[no]))(*algebra_suite("cpu_inductor.md"))),
    Claim("README.md", r"\| (\d+) algebra programs [^|]*/ the faster of eager and `torch.compile` \| (\S+)-(\S+)x \|",
          "bench/results/cpu_inductor.md", lambda: inductor_algebra(FASTER)),
    Claim("README.md", r"\| the same (\d+): `torch.compile\(backend=\"eqiforge\"\)` / `torch.compile` \| "
          r"(\S+)-(\S+)x \| `python bench/inductor_cpu.py` \|", "bench/results/cpu_inductor.md",
          lambda: inductor_algebra(BACKEND)),
    Claim("README.md", r"\| (\d+) more algebra programs with hand-rewritten twins [^|]*\| (\S+)-(\S+)x; (\S+)-(\S+)x "
          r"on (\w+) programs of (\d+)-(\d+) us \(their plans alone (\S+)-(\S+)x", "bench/results/cpu_twins.md",
          twins),
    Claim("README.md", r"\| (\d+) KernelBench-style programs, nothing algebraic [^|]*\| (\S+)-(\S+)x, "
          r"geomean (\S+)x \|", "bench/results/cpu_inductor_kernelbench.md", lambda: kernelbench(FASTER)),
    Claim("README.md", r"\| the same (\d+): `torch.compile\(backend=\"eqiforge\"\)` / `torch.compile` \| "
          r"(\S+)-(\S+)x, geomean (\S+)x \(batch_norm_relu's (\S+)x: (\S+)x in an earlier run of (\d+) rounds",
          "bench/results/cpu_inductor_kernelbench.md", kernelbench_backend_with_rerun),
    Claim("README.md", r"\| the same (\d+), first call with empty caches[^|]*\| (\S+) s / (\S+) s at the median "
          r"program; (\S+) s over the suite", "bench/results/cpu_first_call_kernelbench.md", first_call_row),
    Claim("README.md", r"\| (\d+) Hugging Face models \([^)]*\), inference[^|]*\| (\S+)-(\S+)x \(medians\)",
          "bench/results/cpu_hf_models_inference.md", hf_inference_optimize),
    Claim("README.md", r"\| the same (\d+): `torch.compile\(backend=\"eqiforge\"\)` / `torch.compile` \| "
          r"(\S+)-(\S+)x \(geomean (\S+)x\) \| `python bench/hf_models.py --no-train`",
          "bench/results/cpu_hf_models_inference.md", lambda: hf_backend("cpu_hf_models_inference.md", 0, 3)),
    Claim("README.md", r"\| the same (\d+), a training step[^|]*\| (\S+)-(\S+)x \(geomean (\S+)x\)",
          "bench/results/cpu_hf_models.md", lambda: hf_backend("cpu_hf_models.md", 1, 2)),
    # docs/benchmarks.md
    Claim("docs/benchmarks.md", r"--suite kernelbench # (\d+) programs", "bench/results/cpu_inductor_kernelbench.md",
          kernelbench_suite),
    Claim("docs/benchmarks.md", r"--suite families # (\d+) spellings of (\d+) algebra families",
          "bench/results/cpu_families.md", families),
    Claim("docs/benchmarks.md", r"The algebra suite\*\* \(`bench/programs.py`\): (\d+) programs, each with a hand "
          r"rewrite; (\d+) where algebra matters .*? and (\d+) controls", "bench/results/cpu_inductor.md",
          algebra_suite_counts),
    Claim("docs/benchmarks.md", r"The KernelBench-style suite\*\* \(`bench/kernelbench_style.py`\): (\d+) programs",
          "bench/results/cpu_inductor_kernelbench.md", kernelbench_suite),
    Claim("docs/benchmarks.md", r"`bench/results/cpu_inductor_kernelbench.md` has all (\d+)",
          "bench/results/cpu_inductor_kernelbench.md", kernelbench_suite),
    Claim("docs/benchmarks.md", r"is an earlier run, of (\d+) of them, and its check fails: (\d+) programs ran "
          r"(\S+)-(\S+)x eager's time", "bench/results/cpu_kernelbench.md", run_cpu_kernelbench),
    # docs/rules.md and docs/concepts.md
    Claim("docs/rules.md", r"kernel layer unguided: ([\d,]+) e-nodes before, ([\d,]+) after",
          "bench/results/joint_scaling_unguided.md", unguided_growth),
    Claim("docs/rules.md", r"a BERT-base layer: ([\d,]+) e-nodes instead of ([\d,]+), extracted in (\S+) s instead "
          r"of (\S+) s, the ILP proving its plan optimal in both, the same predicted time, (\S+) us",
          "bench/results/joint_scaling.md", guided_bert),
    Claim("docs/concepts.md", r"BERT-base's layer: ([\d,]+) e-nodes instead of ([\d,]+)\)",
          "bench/results/joint_scaling.md", guided_bert_nodes),
    # docs/gpu.md
    Claim("docs/gpu.md", r"on the H100 SXM's (\d+) held-out whole-architecture programs \(KernelBench's level 3\), "
          r"the predicted time is (\S+)x the published one at the median, (\d+)% of programs within 1.5x and "
          r"(\d+)% within 2x, Kendall tau (\S+) between", "eqiforge/cost/gpu_figures.json", h100_held_out),
    # docs/limitations.md
    Claim("docs/limitations.md", r"(\w+) such programs of the twins benchmark run in (\S+)-(\S+)x the time of their "
          r"hand rewrites, while their plans called directly run in (\S+)-(\S+)x", "bench/results/cpu_twins.md",
          twins_limitations),
    Claim("docs/limitations.md", r"it took (\S+) s at the median \(at most (\S+) s\) with the defaults and (\S+) s "
          r"with `measure=\"never\"`, against (\S+) s for `torch.compile`'s first call",
          "bench/results/cpu_first_call_kernelbench.md", first_call_limitations),
]


def page_text(page: str) -> str:
    return " ".join((ROOT / page).read_text().split())


@pytest.mark.parametrize("claim", CLAIMS, ids=[f"{c.page}:{c.pattern[:40]}" for c in CLAIMS])
def test_a_cited_number_is_its_results_file_s(claim: Claim):
    assert (ROOT / claim.source).is_file(), f"{claim.page} cites {claim.source}, which does not exist"
    found = re.findall(claim.pattern, page_text(claim.page))
    assert found, f"{claim.page} no longer says what this claim reads (pattern {claim.pattern!r}): update the claim"
    expected = claim.numbers()
    for written in found:
        written = (written,) if isinstance(written, str) else tuple(written)
        assert written == expected, f"{claim.page} says {written}, {claim.source} gives {expected}"


@pytest.mark.parametrize("page", ["README.md", "docs/benchmarks.md", "docs/rules.md", "docs/gpu.md",
                                  "docs/limitations.md"])
def test_every_claim_bearing_page_has_its_claims_checked(page):
    assert any(claim.page == page for claim in CLAIMS)
