"""Draw a small e-graph: e-classes as boxes holding their e-nodes, arrows from each e-node to the e-classes
of its operands, the extracted e-nodes (and their arrows) highlighted, output e-classes framed in black.

Rows are e-class heights (the height of the shortest term in the class, leaves at the bottom, outputs on
top), so most arrows point down; an arrow going up or looping back to its own class is a cycle, which
e-graphs have (``x * 1 = x``). Large e-graphs get a summary figure instead: e-nodes per op and e-class sizes.
"""
from __future__ import annotations

import math
from collections import Counter

import networkx as nx
from matplotlib.patches import FancyBboxPatch, Patch

from ..egraph.snapshot import Snapshot
from . import layout
from .drawing import BOX_HEIGHT, Drawing, arrow, boxed_text, canvas, summary_message, vertical_ends
from .figures import new_figure, save
from .trace import EGraphTrace

MAX_NODES = 150  # past this an e-graph drawing is a hairball: draw a summary instead
NODE_WIDTH = 1.05  # inches per e-node inside its class box
PAD = 0.12
CHOSEN, CHOSEN_EDGE = "#ffbf69", "#c45f00"
OTHER_EDGE, CLASS_FACE = "#9a9a9a", "#edf2f7"
LABEL_CHARS = 14


def egraph_to_networkx(snap: Snapshot, chosen: set[int], node_cost=None) -> nx.DiGraph:
    """The e-graph as a bipartite networkx graph: ("class", c) and ("node", n) nodes, "member" edges from a
    class to its e-nodes and "child" edges from an e-node to its operand classes. ``chosen`` e-nodes carry
    ``chosen=True`` (the drawing highlights exactly those)."""
    g = nx.DiGraph()
    roots = set(snap.roots)
    for c in range(snap.num_classes):
        g.add_node(("class", c), kind="eclass", shape=snap.class_shape[c], dtype=snap.class_dtype[c], root=c in roots)
    for n in range(snap.num_nodes):
        c = snap.node_class[n]
        g.add_node(("node", n), kind="enode", op=snap.node_op[n], label=node_label(snap.node_op[n], snap.node_attrs[n]),
                   eclass=c, chosen=n in chosen, seconds=None if node_cost is None else float(node_cost[n]))
        g.add_edge(("class", c), ("node", n), kind="member")
        for k in snap.node_children[n]:
            g.add_edge(("node", n), ("class", k), kind="child", chosen=n in chosen)
    return g


def draw_egraph(trace: EGraphTrace, path=None, *, max_nodes: int = MAX_NODES, title: str = "") -> Drawing:
    """Draw ``trace``'s e-graph (or, past ``max_nodes`` e-nodes, a summary); save it when ``path`` is given."""
    snap = trace.snapshot
    g = egraph_to_networkx(snap, trace.chosen, trace.node_cost)
    what = f"E-graph of {title}" if title else "E-graph"
    headline = (f"{what}: {snap.num_nodes} e-nodes in {snap.num_classes} e-classes; {len(trace.chosen)} extracted "
                f"(predicted {trace.selection.cost * 1e6:.1f} us)")
    if snap.num_nodes > max_nodes:
        message = summary_message(what, snap.num_nodes, "e-nodes", max_nodes, "e-nodes per op, e-class sizes")
        drawing = Drawing(_summary(snap, trace.chosen, headline), g, True, message)
    else:
        drawing = Drawing(_draw(g, snap, headline), g)
    if path is not None:
        save(drawing.figure, path)
    return drawing


def node_label(op: str, attrs: tuple) -> str:
    """The op, and its attributes compactly on a second line (shortened past LABEL_CHARS)."""
    if not attrs:
        return op
    text = ",".join(f"{a:g}" if isinstance(a, float) else str(a).replace(" ", "") for a in attrs)
    return f"{op}\n{text if len(text) <= LABEL_CHARS else text[:LABEL_CHARS - 1] + '…'}"


def class_heights(snap: Snapshot) -> list[int]:
    """Height of the shortest term of every e-class (leaves 0); classes with no finite term go on top."""
    height = [math.inf] * snap.num_classes
    changed = True
    while changed:
        changed = False
        for n, kids in enumerate(snap.node_children):
            h = 1 + max((height[k] for k in kids), default=-1)
            if h < height[snap.node_class[n]]:
                height[snap.node_class[n]], changed = h, True
    top = max((h for h in height if h < math.inf), default=0) + 1
    return [h if h < math.inf else top for h in height]


def _draw(g: nx.DiGraph, snap: Snapshot, headline: str):
    members = snap.class_nodes()
    heights = class_heights(snap)
    widths = {c: len(members[c]) * NODE_WIDTH + 2 * PAD for c in range(snap.num_classes)}
    edges = [(snap.node_class[n], k) for n, kids in enumerate(snap.node_children) for k in kids]
    centres = layout.positions({c: max(heights) - heights[c] for c in range(snap.num_classes)}, edges, widths)
    fig, ax = canvas({c: (*centres[c], widths[c]) for c in centres}, headline)
    at = {}
    for c, (x, y) in centres.items():
        _class_box(ax, g.nodes[("class", c)], c, x, y, widths[c])
        for i, n in enumerate(members[c]):
            at[n] = (x - widths[c] / 2 + PAD + (i + 0.5) * NODE_WIDTH, y)
            node = g.nodes[("node", n)]
            boxed_text(ax, *at[n], node["label"], CHOSEN if node["chosen"] else "white",
                       CHOSEN_EDGE if node["chosen"] else OTHER_EDGE, bold=node["chosen"])
    for n, kids in enumerate(snap.node_children):
        chosen = g.nodes[("node", n)]["chosen"]
        for k in kids:
            start, end = vertical_ends(at[n], centres[k], BOX_HEIGHT / 2)
            arrow(ax, start, end, CHOSEN_EDGE if chosen else OTHER_EDGE, 1.4 if chosen else 0.6,
                  curve=0.6 if k == snap.node_class[n] else (0.25 if centres[k][1] >= at[n][1] else 0.0))
    ax.legend(handles=[Patch(facecolor=CHOSEN, edgecolor=CHOSEN_EDGE, label="extracted e-node"),
                       Patch(facecolor="white", edgecolor=OTHER_EDGE, label="other e-node"),
                       Patch(facecolor=CLASS_FACE, edgecolor="#b8c4d0", label="e-class (id, dtype, shape)"),
                       Patch(facecolor=CLASS_FACE, edgecolor="black", linewidth=2, label="output e-class")],
              loc="upper left", fontsize=7, framealpha=0.9)
    return fig


def _class_box(ax, attrs: dict, c: int, x: float, y: float, width: float) -> None:
    ax.add_patch(FancyBboxPatch((x - width / 2, y - BOX_HEIGHT / 2), width, BOX_HEIGHT, zorder=0,
                                boxstyle="round,pad=0.02", facecolor=CLASS_FACE,
                                edgecolor="black" if attrs["root"] else "#b8c4d0", linewidth=2 if attrs["root"] else 1))
    ax.text(x - width / 2 + 0.05, y - BOX_HEIGHT / 2 - 0.04, f"c{c} {attrs['dtype']}{list(attrs['shape'])}",
            fontsize=5.5, color="#555555", va="top", zorder=4,
            bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.7, "pad": 0.3})


def _summary(snap: Snapshot, chosen: set[int], headline: str):
    """E-nodes per op (extracted ones in orange) and how many e-nodes the e-classes hold."""
    fig = new_figure(12, 5.5)
    ops_ax, sizes_ax = fig.subplots(1, 2, width_ratios=[3, 2])
    per_op = Counter(snap.node_op).most_common()
    picked = Counter(snap.node_op[n] for n in chosen)
    ys = range(len(per_op))
    ops_ax.barh(ys, [k for _, k in per_op], color="#cfd8e3", label="all e-nodes")
    ops_ax.barh(ys, [picked[op] for op, _ in per_op], color=CHOSEN, height=0.5, label="extracted")
    ops_ax.set_yticks(list(ys), [op for op, _ in per_op], fontsize=7)
    ops_ax.invert_yaxis()
    ops_ax.set_xlabel("e-nodes")
    ops_ax.set_title("E-nodes per op")
    ops_ax.legend(loc="lower right", fontsize=8)
    sizes = [len(m) for m in snap.class_nodes()]
    sizes_ax.hist(sizes, bins=range(1, max(sizes, default=1) + 2), color="#1f77b4", align="left", rwidth=0.8)
    sizes_ax.set_yscale("log")
    sizes_ax.set_xlabel("e-nodes in the e-class (equivalent forms)")
    sizes_ax.set_ylabel("e-classes (log scale)")
    sizes_ax.set_title("E-class sizes")
    fig.suptitle(f"{headline}\nsummary: too many e-nodes to draw one by one", fontsize=10)
    return fig
