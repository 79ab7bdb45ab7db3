"""Growth plots: how an e-graph grew during saturation, drawn from the SaturationReport alone.

Four panels: size after every step (e-nodes and e-classes, log scale, the e-node and iteration limits as
lines, the stop reason at the last point), e-nodes added per iteration split by rule set, matches per rule
(the busiest named, the rest grouped) and time per iteration by rule set with the cumulative time against
the time limit. One step = one rule set run once (then shapes re-derived); an iteration runs every set.
"""
from __future__ import annotations

from collections import Counter

from matplotlib.ticker import FuncFormatter, MaxNLocator

from ..egraph.report import SaturationReport, StepStats
from .figures import colors_for, new_figure, save

TOP_RULES = 10
LIMIT_STYLE = {"color": "#d62728", "linestyle": ":", "linewidth": 1.5}


def plot_growth(report, path=None, *, title: str | None = None, top_rules: int = TOP_RULES):
    """The growth figure of ``report`` (a Report or SaturationReport); saved as PNG/SVG when ``path`` is given.

    Returns the matplotlib Figure."""
    sat: SaturationReport = getattr(report, "saturation", report)
    sets = list(dict.fromkeys(s.ruleset for s in sat.steps))
    colors = colors_for(sets)
    fig = new_figure(13, 8.5)
    (size_ax, added_ax), (rules_ax, time_ax) = fig.subplots(2, 2)
    _size_panel(size_ax, sat, colors)
    _added_panel(added_ax, sat, sets, colors)
    _matches_panel(rules_ax, sat, colors, top_rules)
    _time_panel(time_ax, sat, sets, colors)
    what = f" of {title}" if title else ""
    fig.suptitle(f"E-graph growth{what}: {sat.enodes:,} e-nodes, {sat.eclasses:,} e-classes after "
                 f"{sat.iterations} iterations; stopped because {sat.stop_reason}", fontsize=12)
    if path is not None:
        save(fig, path)
    return fig


def step_positions(steps: list[StepStats]) -> list[float]:
    """x of each step: iteration i spans (i-1, i] and its k-th of m steps sits at i-1 + k/m."""
    per_iteration = Counter(s.iteration for s in steps)
    seen: Counter = Counter()
    xs = []
    for s in steps:
        seen[s.iteration] += 1
        xs.append(s.iteration - 1 + seen[s.iteration] / per_iteration[s.iteration])
    return xs


def per_iteration(sat: SaturationReport, sets: list[str], value) -> dict[str, list[float]]:
    """``value(step, size before it)`` summed per (rule set, iteration 1..N): the rows of a stacked bar."""
    table = {name: [0.0] * sat.iterations for name in sets}
    before = sat.initial_enodes
    for s in sat.steps:
        table[s.ruleset][s.iteration - 1] += value(s, before)
        before = s.enodes
    return table


def _size_panel(ax, sat: SaturationReport, colors: dict[str, str]) -> None:
    xs = [0.0] + step_positions(sat.steps)
    enodes = [sat.initial_enodes] + [s.enodes for s in sat.steps]
    eclasses = [sat.initial_eclasses] + [s.eclasses for s in sat.steps]
    ax.plot(xs, enodes, "-", color="black", label="e-nodes", zorder=2)
    ax.plot(xs, eclasses, "--", color="grey", label="e-classes", zorder=2)
    ax.scatter(xs[1:], enodes[1:], c=[colors[s.ruleset] for s in sat.steps], s=22, zorder=3)
    banned = [(x, n) for x, n, s in zip(xs[1:], enodes[1:], sat.steps) if s.banned]
    if banned:
        ax.scatter(*zip(*banned), marker="x", color="#d62728", s=60, zorder=4, label="banned (back-off)")
    limit = sat.limits.get("enodes")
    if limit:
        ax.axhline(limit, **LIMIT_STYLE, label=f"e-node limit ({limit:,})")
    iterations = sat.limits.get("iterations")
    if iterations and iterations <= 2 * sat.iterations + 2 and not sat.guided:  # guided: a limit per phase
        ax.axvline(iterations, **{**LIMIT_STYLE, "color": "#9467bd"}, label=f"iteration limit ({iterations})")
    ax.plot(xs[-1], enodes[-1], marker="*", color="gold", markeredgecolor="black", markersize=16, zorder=5,
            linestyle="none", label=f"stop: {sat.stop_reason}")
    ax.set_yscale("log")
    plain = FuncFormatter(lambda v, _: f"{v:,.0f}")  # 150, not 1.5 x 10^2
    ax.yaxis.set_major_formatter(plain)
    low, high = ax.get_ylim()
    if high < 10 * low:  # less than a decade shown: label the minor ticks too, else there are none
        ax.yaxis.set_minor_formatter(plain)
        ax.tick_params(axis="y", which="minor", labelsize=7)
    ax.set_xlabel("iteration (each dot: one rule set ran, coloured as on the right)")
    ax.set_ylabel("count (log scale)")
    ax.set_title("E-graph size after each step")
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(alpha=0.3)


def _added_panel(ax, sat: SaturationReport, sets: list[str], colors: dict[str, str]) -> None:
    added = per_iteration(sat, sets, lambda s, before: s.enodes - before)
    _stacked_bars(ax, added, colors)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xlabel("iteration")
    ax.set_ylabel("e-nodes added (net)")
    ax.set_title("New e-nodes per iteration, by rule set")
    if sets:
        ax.legend(title="rule set", fontsize=8, ncols=2)


def _matches_panel(ax, sat: SaturationReport, colors: dict[str, str], top: int) -> None:
    totals = sat.matches_per_rule()
    owner = {rule: s.ruleset for s in sat.steps for rule in s.matches}
    named = list(totals.items())[:top]
    rest = list(totals.items())[top:]
    if rest:
        named.append((f"other ({len(rest)} rules)", sum(n for _, n in rest)))
    labels = [rule for rule, _ in named]
    ax.barh(range(len(named)), [n for _, n in named], color=[colors.get(owner.get(r), "#bbbbbb") for r in labels])
    ax.set_yticks(range(len(named)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("matches, summed over all iterations (bar colour: its rule set)")
    ax.set_title(f"Matches per rule (top {top} named)" if rest else "Matches per rule")
    if not named:
        ax.text(0.5, 0.5, "no rule matched", transform=ax.transAxes, ha="center")


def _time_panel(ax, sat: SaturationReport, sets: list[str], colors: dict[str, str]) -> None:
    ms = per_iteration(sat, sets, lambda s, _: s.seconds * 1e3)
    _stacked_bars(ax, ms, colors)
    ax.set_ylim(top=ax.get_ylim()[1] * 1.25)  # room for the legend
    ax.set_xlabel("iteration")
    ax.set_ylabel("time per iteration (ms)")
    ax.set_title("Time per iteration, by rule set")
    cumulative = ax.twinx()
    xs, total = [0.0], [0.0]
    for x, s in zip(step_positions(sat.steps), sat.steps):
        xs.append(x + 0.5)  # bars are centred on the iteration number: steps of iteration i end at i + 0.5
        total.append(total[-1] + s.seconds)
    cumulative.plot(xs, total, color="black", label="cumulative time")
    limit = sat.limits.get("seconds")
    if limit:
        cumulative.axhline(limit, **LIMIT_STYLE, label=f"time limit ({limit:g} s)")
    cumulative.set_ylim(0, max(limit or 0, total[-1]) * 1.05 or 1)
    cumulative.set_ylabel("cumulative time (s)")
    cumulative.legend(loc="upper right", fontsize=8)


def _stacked_bars(ax, table: dict[str, list[float]], colors: dict[str, str]) -> None:
    """One bar per iteration stacked by rule set; positive parts stack up, negative ones down."""
    n = len(next(iter(table.values()), []))
    xs = range(1, n + 1)
    up, down = [0.0] * n, [0.0] * n
    for name, values in table.items():
        bottoms = [u if v >= 0 else d for v, u, d in zip(values, up, down)]
        ax.bar(xs, values, bottom=bottoms, color=colors[name], label=name, width=0.7)
        up = [u + max(v, 0) for u, v in zip(up, values)]
        down = [d + min(v, 0) for d, v in zip(down, values)]
    ax.set_xticks(list(xs))
