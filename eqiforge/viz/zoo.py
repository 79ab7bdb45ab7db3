"""Rule-set ablation across a zoo of programs: which rule sets matter where.

Each program is ablated leave-one-out (every rule set, then all but one, for each); its row in the table is, per
rule set, the predicted plan time without that set over the time with all of them (1.0: the set changes nothing
for this program; 3.0: without it the plan is predicted 3x slower). The table is data, Markdown, CSV and a
heatmap (programs x rule sets). The whole zoo is one sweep (``ablation.run_combinations``: every program x every
combination) on local worker processes or a Ray cluster; a worker loads a program of a zoo given by name
(:func:`zoo_sources`) itself.
"""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path

from .. import examples
from ..errors import EqiforgeError
from ..frontend.targets import load_target
from .ablation import ProgramSource, executor_or_local, prepared, run_combinations, setup, shipped
from .figures import new_figure, save, save_table


@dataclass
class ZooTable:
    """``loss[program][rule set]``: the predicted time without the set over the time with every set."""

    loss: dict[str, dict[str, float]] = field(default_factory=dict)
    predicted_us: dict[str, float] = field(default_factory=dict)  # per program, with every rule set
    rulesets: list[str] = field(default_factory=list)  # the columns

    def to_markdown(self) -> str:
        """Programs as rows, rule sets as columns, the loss to two decimals (blank: not in that run)."""
        lines = ["Predicted plan time without each rule set over the time with all of them (1.00: no loss).", "",
                 "| program | all (us) | " + " | ".join(self.rulesets) + " |",
                 "|---|---:|" + "---:|" * len(self.rulesets)]
        for program, row in self.loss.items():
            cells = [f"{row[s]:.2f}" if s in row else "" for s in self.rulesets]
            lines.append(f"| {program} | {self.predicted_us[program]:.1f} | " + " | ".join(cells) + " |")
        return "\n".join(lines) + "\n"

    def to_csv(self, path) -> Path:
        path = Path(path)
        with path.open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["program", "all_us", *self.rulesets])
            for program, row in self.loss.items():
                writer.writerow([program, self.predicted_us[program], *(row.get(s, "") for s in self.rulesets)])
        return path

    def heatmap(self, path=None):
        """Programs x rule sets, coloured by the log of the loss; each cell labelled. Returns the Figure."""
        programs = list(self.loss)
        if not programs:
            raise EqiforgeError("no programs were ablated: nothing to draw")
        values = [[math.log10(self.loss[p][s]) if s in self.loss[p] else math.nan for s in self.rulesets]
                  for p in programs]
        top = max((abs(v) for row in values for v in row if not math.isnan(v)), default=0.0) or 1.0
        fig = new_figure(1.6 + 0.75 * len(self.rulesets), 1.2 + 0.42 * len(programs))
        ax = fig.subplots()
        image = ax.imshow(values, cmap="RdBu_r", vmin=-top, vmax=top, aspect="auto")
        for i, program in enumerate(programs):
            for j, name in enumerate(self.rulesets):
                if name in self.loss[program]:
                    ax.text(j, i, f"{self.loss[program][name]:.2f}", ha="center", va="center", fontsize=7)
        ax.set_xticks(range(len(self.rulesets)), self.rulesets, rotation=45, ha="right", fontsize=8)
        ax.set_yticks(range(len(programs)), programs, fontsize=8)
        fig.colorbar(image, ax=ax, label="log10(time without the set / with all)")
        ax.set_title("What removing each rule set costs (predicted plan time)", fontsize=10)
        if path is not None:
            save(fig, path)
        return fig

    def save(self, folder) -> dict[str, Path]:
        """zoo.md, zoo.csv and zoo.png in ``folder`` (created if needed)."""
        return save_table(self, folder, "zoo", "heatmap", self.heatmap)


def ablate_zoo(programs: dict, rules=None, jobs: int = 2, progress: bool = False, *, executor=None,
               results_path=None, sources: dict | None = None, **options) -> ZooTable:
    """Ablate every program of ``programs`` (name -> (callable, example inputs)) leave-one-out over ``rules``
    (default: the rule sets ``eqiforge.optimize`` uses) as one sweep on ``executor`` (default: ``jobs`` local
    worker processes; rows kept in ``results_path`` as ``ablation.ablate`` keeps them) and tabulate each set's
    loss per program. ``sources`` (name -> ProgramSource) say how workers load programs (default: they get the
    captured programs). ``options`` are ``eqiforge.optimize``'s; nothing is timed (predicted times compare)."""
    opts, names, runs = setup(rules, "leave-one-out", jobs, 1, options)
    plans = {}
    for name, (fn, inputs) in programs.items():
        captured, program_opts = prepared(fn, inputs, opts)
        plans[name] = ((sources or {}).get(name) or shipped(captured, fn, inputs), runs, program_opts)
    with executor_or_local(executor, jobs) as runner:
        rows = run_combinations(runner, plans, results_path, progress)
    table = ZooTable(rulesets=names)
    for name, (reference, *others) in rows.items():
        table.predicted_us[name] = reference["predicted_us"]
        table.loss[name] = {row["combination"].removeprefix("all - "): row["predicted_us"] / reference["predicted_us"]
                            for row in others}
    return table


def zoo_sources(spec: str, names) -> dict[str, ProgramSource]:
    """How a worker loads each program ``names`` of the zoo ``spec`` ("examples" or a folder of program files)
    by itself, as ``frontend.targets.load_zoo`` loads it (a folder by its absolute path: workers may start
    elsewhere)."""
    spec = spec if spec == "examples" else str(Path(spec).resolve())
    return {name: ProgramSource(zoo_program, (spec, name)) for name in names}


def zoo_program(spec: str, name: str):
    """(callable, example inputs) of the program ``name`` of the zoo ``spec``: a built-in example, or the file
    ``name``.py of the folder ``spec``."""
    return examples.load(name) if spec == "examples" else load_target(str(Path(spec) / f"{name}.py"))
