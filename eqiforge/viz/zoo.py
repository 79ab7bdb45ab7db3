"""Rule-set ablation across a zoo of programs: which rule sets matter where.

Each program is ablated leave-one-out (``ablation.ablate``: every rule set, then all but one, for each); its
row in the table is, per rule set, the predicted plan time without that set over the time with all of them
(1.0: the set changes nothing for this program; 3.0: without it the plan is predicted 3x slower). The table
is data, Markdown, CSV and a heatmap (programs x rule sets). Programs are ablated one after another, each in
``jobs`` worker processes; rule sets a program's default run does not use (another backend's) are blank.
"""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import EqiforgeError
from .ablation import ablate
from .figures import new_figure, save, save_table


@dataclass
class ZooTable:
    """``loss[program][rule set]``: the predicted time without the set over the time with every set."""

    loss: dict[str, dict[str, float]] = field(default_factory=dict)
    predicted_us: dict[str, float] = field(default_factory=dict)  # per program, with every rule set
    rulesets: list[str] = field(default_factory=list)  # the columns, in the first program's order

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


def ablate_zoo(programs: dict, rules=None, jobs: int = 2, progress: bool = False, **options) -> ZooTable:
    """Ablate every program of ``programs`` (name -> (callable, example inputs)) leave-one-out over ``rules``
    (default: the rule sets ``eqiforge.optimize`` uses for each) and tabulate each set's loss per program.
    ``options`` are ``eqiforge.optimize``'s; nothing is timed (the predicted times are compared)."""
    table = ZooTable()
    for name, (fn, inputs) in programs.items():
        rows = ablate(fn, inputs, rules, "leave-one-out", jobs, measure=False, progress=progress, name=name,
                      **options).rows
        reference = rows[0]["predicted_us"]
        table.predicted_us[name] = reference
        table.loss[name] = {row["combination"].removeprefix("all - "): row["predicted_us"] / reference
                            for row in rows[1:]}
        table.rulesets += [s for s in table.loss[name] if s not in table.rulesets]
    return table
