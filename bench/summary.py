"""Turn benchmark results (the dict written to cpu.json or cpu_kernelbench.json) into verdicts and a Markdown table.

The two targets:
- on programs with an algebraic win, EqiForge's median is within 10% of the hand rewrite's;
- on the other programs, EqiForge is never more than 5% slower than eager.
A target no program of the suite falls under is left out (the KernelBench-style suite has only the second).
A program whose EqiForge variant is missing or computes a different result fails its target.
Rows timed while other processes kept more than ``BUSY_CORES`` cores busy (even after retries) are flagged:
on a shared machine their ratios are noise, and the run should be repeated when the machine is quiet.
"""
from __future__ import annotations

from measure import BUSY_CORES

TARGETS = [  # (algebraic_win, yardstick variant, allowed ratio, sentence)
    (True, "hand", 1.10, "on programs with an algebraic win, EqiForge median within 10% of the hand rewrite"),
    (False, "eager", 1.05, "on the others never more than 5% slower than eager"),
]


def verdicts(results: dict) -> list[tuple[str, bool, list[str]]]:
    """(target sentence, passed, offending programs with the reason) per target the suite's programs fall under."""
    out = []
    for algebraic, yardstick, limit, sentence in TARGETS:
        if not any(row["algebraic_win"] == algebraic for row in results["programs"].values()):
            continue
        offenders = []
        for name, row in results["programs"].items():
            if row["algebraic_win"] != algebraic:
                continue
            ratio = row["ratios"][f"eqiforge/{yardstick}"]
            if ratio is None:
                offenders.append(f"{name} (EqiForge n/a)")
            elif not row["correct"]["eqiforge"]:
                offenders.append(f"{name} (wrong result, rel. error {row['rel_error']['eqiforge']:.1e})")
            elif ratio > limit:
                plan = row["ratios"][f"eqiforge_plan/{yardstick}"]
                offenders.append(f"{name} ({ratio:.2f}x {yardstick}; plan alone {_x(plan)}x)")
        out.append((sentence, not offenders, offenders))
    return out


def _ms(v):
    return "n/a" if v is None else f"{v:.3f}"


def _x(v):
    return "n/a" if v is None else f"{v:.2f}"


def _eqiforge_cells(row: dict) -> list[str]:
    info = row["info"].get("eqiforge")
    if info is None:
        return ["n/a"] * 4
    return [f"{row['build_seconds']['eqiforge']:.2f}",
            f"{info['predicted_before_s'] * 1e6:.1f} -> {info['predicted_after_s'] * 1e6:.1f}",
            str(info["enodes"]), info["stop_reason"]]


def _runs_cell(row: dict) -> str:
    """What a call of EqiForge's module runs: its plan, or the original program (no better plan)."""
    runs = row["info"].get("eqiforge", {}).get("runs")  # absent in results written before it was recorded
    return "n/a" if runs is None else "plan" if runs == "the plan" else "original"


def _load_cell(row: dict) -> str:
    cores = row["other_load_cores"]
    return "n/a" if cores is None else f"{cores:.2f}" + (" BUSY" if cores > BUSY_CORES else "")


def _correct_cell(row: dict) -> str:
    wrong = [f"{v} {e:.0e}" for v, e in row["rel_error"].items() if not row["correct"][v]]
    return "ok" if not wrong else "WRONG: " + ", ".join(wrong)


HEADER = ["program", "algebra", "eager ms", "compile ms", "hand ms", "EqiForge ms", "plan alone ms",
          "EqiForge/hand", "EqiForge/eager", "compile/eager", "optimize s", "predicted us (before -> after)",
          "e-nodes", "stop", "runs", "outputs", "other load"]


def markdown(results: dict) -> str:
    """The results table, the targets' verdicts and the errors of variants that could not be built or run."""
    m = results["machine"]
    suite = results.get("suite", "algebra")  # results written before suites existed are the algebra suite
    lines = [f"# CPU benchmark, {suite} suite ({m['date']})", "",
             f"EqiForge {m['eqiforge']} (backend {m.get('eqiforge_backend', 'torch')}), {m['cpu']}, "
             f"{m['cpus_usable']} usable CPUs, torch {m['torch']}, "
             f"{m['threads']} threads, "
             f"median of {m['repeats']} interleaved calls; times in ms; ratios (< 1: faster) are medians of per-round "
             f"ratios{'' if m.get('paired_ratios') else ' (in results before paired ratios: ratios of medians)'}. "
             f"'plan alone' is "
             f"EqiForge's lowered plan called without its drop-in wrapper (a diagnostic, not a target); 'runs' says "
             f"whether EqiForge's module runs its plan or the original program (a plan predicted no better).", "",
             "| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    for name, row in results["programs"].items():
        ms, r = row["median_ms"], row["ratios"]
        cells = [name, "yes" if row["algebraic_win"] else "no",
                 *(_ms(ms[v]) for v in ("eager", "compile", "hand", "eqiforge", "eqiforge_plan")),
                 *(_x(r[k]) for k in ("eqiforge/hand", "eqiforge/eager", "compile/eager")),
                 *_eqiforge_cells(row), _runs_cell(row), _correct_cell(row), _load_cell(row)]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    for sentence, passed, offenders in verdicts(results):
        lines.append(f"- **{'PASS' if passed else 'FAIL'}**: {sentence}"
                     + (f"; offending: {', '.join(offenders)}" if offenders else ""))
    busy = [name for name, row in results["programs"].items() if (row["other_load_cores"] or 0) > BUSY_CORES]
    if busy:
        lines += ["", f"Timed on a busy machine (other processes used > {BUSY_CORES} cores; 'other load' column): "
                      f"{', '.join(busy)}. Their ratios are unreliable; rerun when the machine is quiet."]
    errors = [f"- {name} / {v}: `{e}`" for name, row in results["programs"].items() for v, e in row["errors"].items()]
    if errors:
        lines += ["", "Variants that could not be built or run (not timed):", *errors]
    return "\n".join(lines) + "\n"
