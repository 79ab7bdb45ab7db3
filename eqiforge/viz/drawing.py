"""What the e-graph and plan drawings share: the returned Drawing, a canvas sized to a layout, boxed labels
and arrows between boxes. Coordinates are inches (see ``layout``), so text keeps its size on any graph."""
from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
from matplotlib.figure import Figure

from .figures import new_figure

MAX_INCHES = (40.0, 30.0)  # the largest canvas (width, height)
MARGIN = 0.8  # inches around the drawing
BOX_HEIGHT = 0.62
TITLE_INCHES_PER_CHAR = 0.075  # at the 10 pt title size


@dataclass
class Drawing:
    """A drawn figure and the graph it shows (node attributes say how each node was drawn)."""

    figure: Figure
    graph: nx.DiGraph
    summarised: bool = False
    message: str = ""  # why a summary was drawn instead of the graph


def summary_message(what: str, count: int, unit: str, limit: int, instead: str) -> str:
    """Why a summary was drawn, and how to get the whole drawing."""
    return (f"{what} has {count:,} {unit}, more than {limit}: drew a summary ({instead}) instead of an unreadable "
            f"drawing; use a smaller program, fewer rule sets or a larger max_nodes (--max-nodes) to draw it whole")


def canvas(boxes: dict, title: str, extra_width: float = 0.0):
    """A figure and axes framing ``boxes`` (item -> (x, y, width)) at one data unit per inch (capped), wide
    enough for the title; ``extra_width`` inches are added for a colour bar beside the axes."""
    xs = [x - w / 2 for x, _, w in boxes.values()] + [x + w / 2 for x, _, w in boxes.values()]
    ys = [y for _, y, _ in boxes.values()]
    width = max(max(xs) - min(xs) + 2 * MARGIN, TITLE_INCHES_PER_CHAR * len(title), 6.0) + extra_width
    height = max(ys) - min(ys) + BOX_HEIGHT + 1.5 * MARGIN + 0.4  # and room for the title
    fig = new_figure(min(width, MAX_INCHES[0]), min(max(height, 3.0), MAX_INCHES[1]))
    ax = fig.add_subplot()
    ax.set_xlim(min(xs) - MARGIN, max(xs) + MARGIN)
    ax.set_ylim(min(ys) - BOX_HEIGHT / 2 - MARGIN, max(ys) + BOX_HEIGHT / 2 + MARGIN / 2)  # captions below
    ax.set_axis_off()
    ax.set_title(title, fontsize=10)
    return fig, ax


def boxed_text(ax, x: float, y: float, text: str, face: str, edge: str, bold: bool = False, size: float = 7):
    """A label in a rounded box centred on (x, y)."""
    ax.text(x, y, text, ha="center", va="center", fontsize=size, zorder=3,
            fontweight="bold" if bold else "normal",
            bbox={"boxstyle": "round,pad=0.3", "facecolor": face, "edgecolor": edge, "linewidth": 1.6 if bold else 0.8})


def arrow(ax, start: tuple[float, float], end: tuple[float, float], color: str, width: float, curve: float = 0.0):
    """An arrow from ``start`` to ``end``; ``curve`` bends it (for loops and edges going back up)."""
    ax.annotate("", xy=end, xytext=start, zorder=2 if width > 1 else 1,
                arrowprops={"arrowstyle": "-|>", "color": color, "linewidth": width, "shrinkA": 0, "shrinkB": 2,
                            "mutation_scale": 8, "connectionstyle": f"arc3,rad={curve}"})


def vertical_ends(a: tuple[float, float], b: tuple[float, float], half: float):
    """Where an arrow from a box at ``a`` to a box at ``b`` leaves and arrives (the facing edges)."""
    down = b[1] < a[1]
    return (a[0], a[1] - half if down else a[1] + half), (b[0], b[1] + half if down else b[1] - half)
