"""Where to put the boxes of a layered drawing (e-classes of an e-graph, nodes of a plan).

Graphviz ``dot`` draws layered graphs best, so it is used (through networkx) when both the ``dot`` program
and pydot or pygraphviz are installed. Otherwise a small Sugiyama-style layout computed here: the caller
gives every item a layer (its row), items are ordered within rows by the mean position of their neighbours
(a few sweeps, ties broken by the given order, so the result is deterministic) and packed side by side.
Coordinates are in inches: a drawing can size its figure from them.
"""
from __future__ import annotations

import shutil
from collections.abc import Hashable

import networkx as nx

ROW_HEIGHT = 1.3  # inches between layers
GAP = 0.35  # inches between neighbouring boxes
SWEEPS = 4


def positions(layers: dict[Hashable, int], edges: list[tuple], widths: dict[Hashable, float]
              ) -> dict[Hashable, tuple[float, float]]:
    """Centre (x, y) of every item: layer 0 at the top, higher layers below. Graphviz when installed."""
    return _dot(layers, edges, widths) or layered(layers, edges, widths)


def layered(layers: dict[Hashable, int], edges: list[tuple], widths: dict[Hashable, float]
            ) -> dict[Hashable, tuple[float, float]]:
    """The layout computed here: rows by layer, barycentre ordering, boxes packed and centred per row.

    Sweeps go down (each row ordered by its neighbours in the rows above) and up (by those below),
    re-packing a row as soon as it is ordered so that the next row sees its new positions."""
    rows: dict[int, list] = {}
    for item in layers:  # dict order: the caller's stable order
        rows.setdefault(layers[item], []).append(item)
    above: dict[Hashable, list] = {item: [] for item in layers}
    below: dict[Hashable, list] = {item: [] for item in layers}
    for a, b in edges:
        if layers[a] != layers[b]:
            top, bottom = (a, b) if layers[a] < layers[b] else (b, a)
            below[top].append(bottom)
            above[bottom].append(top)
    x: dict[Hashable, float] = {}
    for items in rows.values():
        _pack(items, widths, x)
    for sweep in range(SWEEPS):
        down = sweep % 2 == 0
        for layer in sorted(rows, reverse=not down):
            items = rows[layer]
            rank = {item: k for k, item in enumerate(items)}
            near = above if down else below
            items.sort(key=lambda item: (_barycentre(item, near[item], x), rank[item]))
            _pack(items, widths, x)
    return {item: (x[item], -layers[item] * ROW_HEIGHT) for item in layers}


def _barycentre(item, near: list, x: dict) -> float:
    """Mean x of ``near`` (the item's own x when it has none there)."""
    return sum(x[n] for n in near) / len(near) if near else x[item]


def _pack(items: list, widths, x: dict) -> None:
    """Set the x centres of one row: boxes side by side in order, the row centred on 0."""
    left = -(sum(widths[i] for i in items) + GAP * (len(items) - 1)) / 2
    for item in items:
        x[item] = left + widths[item] / 2
        left += widths[item] + GAP


def _graphviz_layout():
    """networkx's Graphviz layout function, or None when Graphviz cannot be used here."""
    if shutil.which("dot") is None:
        return None
    try:
        import pygraphviz  # noqa: F401 - nx_agraph needs it
        from networkx.drawing.nx_agraph import graphviz_layout
        return graphviz_layout
    except ImportError:
        pass
    try:
        import pydot  # noqa: F401 - nx_pydot needs it
        from networkx.drawing.nx_pydot import graphviz_layout
        return graphviz_layout
    except ImportError:
        return None


def _dot(layers, edges, widths):
    """Positions from Graphviz dot (points converted to inches), or None when it is not installed.

    Items are given to dot as boxes of their width, ranked so that each layer is one dot rank."""
    layout = _graphviz_layout()
    if layout is None:
        return None
    names = {item: f"n{k}" for k, item in enumerate(layers)}
    g = nx.DiGraph()
    for item, name in names.items():
        g.add_node(name, shape="box", fixedsize="true", width=f"{widths[item]:.2f}", height="0.5")
    for a, b in edges:  # pointing down the rows; edges within a row would push rows apart
        if layers[a] != layers[b]:
            g.add_edge(*(names[a], names[b]) if layers[a] < layers[b] else (names[b], names[a]))
    points = layout(g, prog="dot")
    return {item: (points[name][0] / 72.0, points[name][1] / 72.0) for item, name in names.items()}
