"""The ablation table: one row per rule-set combination, as data, Markdown, CSV and a bar chart."""
from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

from .figures import new_figure, save, save_table

#: column -> (Markdown header, format); every row has every column
COLUMNS = {
    "combination": ("combination", "{}"),
    "rule_sets": ("rule sets", "{}"),
    "enodes": ("e-nodes", "{:,}"),
    "eclasses": ("e-classes", "{:,}"),
    "iterations": ("iterations", "{}"),
    "stop_reason": ("stopped because", "{}"),
    "saturate_s": ("saturate (s)", "{:.3f}"),
    "extract_s": ("extract (s)", "{:.3f}"),
    "predicted_us": ("predicted (us)", "{:.1f}"),
    "speedup": ("speedup", "{:.2f}x"),
    "kernels": ("kernels", "{}"),
    "measured_us": ("measured (us)", "{:.1f}"),
}
MARKDOWN_SKIP = ("rule_sets",)  # long; the combination label says the same (the CSV keeps it)


@dataclass
class AblationTable:
    """Rows as dicts with the keys of COLUMNS. ``measured_us`` is None where nothing was measured."""

    rows: list[dict]
    program: str = ""
    mode: str = ""
    rulesets: list[str] = field(default_factory=list)

    @property
    def columns(self) -> list[str]:
        return list(COLUMNS)

    def to_markdown(self) -> str:
        """A Markdown table (with a line saying what was ablated), numbers formatted for people."""
        keys = [k for k in COLUMNS if k not in MARKDOWN_SKIP]
        lines = [f"Rule-set ablation of `{self.program}` ({self.mode}); all = {', '.join(self.rulesets)}.", "",
                 "| " + " | ".join(COLUMNS[k][0] for k in keys) + " |",
                 "|" + "|".join("---" if k in ("combination", "stop_reason") else "---:" for k in keys) + "|"]
        for row in self.rows:
            lines.append("| " + " | ".join(_cell(k, row[k]) for k in keys) + " |")
        return "\n".join(lines) + "\n"

    def to_csv(self, path) -> Path:
        """Every column, unformatted (empty where not measured)."""
        path = Path(path)
        with path.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=self.columns)
            writer.writeheader()
            writer.writerows({k: "" if row[k] is None else row[k] for k in self.columns} for row in self.rows)
        return path

    def plot(self, path=None):
        """Bars per combination: predicted plan time, e-graph size and, where measured, measured time.

        Returns the Figure."""
        measured = any(row["measured_us"] is not None for row in self.rows)
        fig = new_figure(16 if measured else 12, 1.6 + 0.32 * len(self.rows))
        axes = fig.subplots(1, 3 if measured else 2, sharey=True)
        _time_panel(axes[0], self.rows)
        _size_panel(axes[1], self.rows)
        if measured:
            _measured_panel(axes[2], self.rows)
        axes[0].set_yticks(range(len(self.rows)), [row["combination"] for row in self.rows], fontsize=9)
        axes[0].invert_yaxis()
        fig.suptitle(f"Rule-set ablation of {self.program} ({self.mode})")
        if path is not None:
            save(fig, path)
        return fig

    def save(self, folder) -> dict[str, Path]:
        """ablation.md, ablation.csv and ablation.png in ``folder`` (created if needed)."""
        return save_table(self, folder, "ablation", "chart", self.plot)


def _cell(key: str, value) -> str:
    if value is None:
        return ""
    return COLUMNS[key][1].format(value).replace("|", "\\|")


def _bars(ax, values: list[float], labels: list[str], color: str, **style) -> None:
    """Horizontal bars, one per row, each with a text label at its end."""
    ax.barh(range(len(values)), values, color=color, **style)
    for y, (value, label) in enumerate(zip(values, labels)):
        ax.text(value, y, f" {label}", va="center", fontsize=8,
                bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.5, "alpha": 0.8})
    ax.set_xlim(0, max(values, default=0) * 1.3 or 1)


def _time_panel(ax, rows: list[dict]) -> None:
    predicted = [row["predicted_us"] for row in rows]
    _bars(ax, predicted, [f"{p:.1f} ({row['speedup']:.2f}x)" for p, row in zip(predicted, rows)], "#1f77b4")
    captured = rows[0]["predicted_us"] * rows[0]["speedup"]  # the report's speedup is over the captured program
    ax.axvline(captured, color="black", linestyle="--", linewidth=1, zorder=0)
    ax.set_xlim(0, max(predicted + [captured]) * 1.3)
    ax.set_xlabel("predicted plan time (us)\nlabel: speedup over the program as captured")
    ax.set_title(f"Predicted plan time (dashed: the program as captured, {captured:.1f} us)")


def _size_panel(ax, rows: list[dict]) -> None:
    _bars(ax, [row["enodes"] for row in rows], [f"{row['saturate_s']:.2f} s" for row in rows], "#2ca02c")
    ax.barh(range(len(rows)), [row["eclasses"] for row in rows], color="#98df8a", height=0.4)
    ax.set_xlabel("e-nodes (dark) and e-classes (light) after saturation\nlabel: saturation seconds")
    ax.set_title("E-graph size")


def _measured_panel(ax, rows: list[dict]) -> None:
    measured = [row["measured_us"] or 0.0 for row in rows]
    _bars(ax, measured, [f"{m:.1f}" if row["measured_us"] is not None else "not measured"
                         for m, row in zip(measured, rows)], "#ff7f0e")
    ax.set_xlabel("measured time of the optimized module\n(us, median of repeats)")
    ax.set_title("Measured time")
