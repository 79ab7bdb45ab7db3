"""Draw a plan: one box per node (kernels coloured by predicted time, inputs, parameters and constants in
grey) with arrows along the data flow, in rows by topological depth. Each node sits one row above its first
consumer, so weights and their preparation do not send long arrows down from the top. Large plans get a
summary instead: predicted time and kernel count per op.
"""
from __future__ import annotations

from collections import Counter

import networkx as nx
from matplotlib import colormaps
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize

from ..lower.plan import Plan
from . import layout
from .drawing import Drawing, arrow, boxed_text, canvas, summary_message, vertical_ends
from .figures import new_figure, save

MAX_NODES = 80  # plans are deep chains: past this, boxes get too small to read
LEAVES = {"Input": "input", "Param": "param", "Fill": "constant"}
WIDTH = {"kernel": 1.7, "input": 1.5, "param": 1.5, "constant": 0.7}
HALF_HEIGHT = 0.22  # inches from a label's centre to its box edge (three lines of text)
LEAF_FACE, EDGE = "#e8e8e8", "#7a7a7a"
CMAP = colormaps["YlOrRd"]
DARKEST = 0.65  # of the colour map: black text stays readable on the slowest kernel
COLORBAR_INCHES = 1.2


def plan_to_networkx(plan: Plan) -> nx.DiGraph:
    """The plan's live nodes with op, kind (kernel, input, param, constant), shape, dtype, predicted seconds
    and the label drawn; edges go from producer to consumer."""
    g = nx.DiGraph()
    for i in plan.graph.live_nodes():
        n = plan.graph.nodes[i]
        kind = LEAVES.get(n.op, "kernel")
        seconds = plan.node_seconds.get(i, 0.0)
        g.add_node(i, op=n.op, kind=kind, shape=n.shape, dtype=n.dtype, seconds=seconds,
                   label=_label(i, n, kind, seconds))
        g.add_edges_from((j, i) for j in dict.fromkeys(n.inputs))
    return g


def draw_plan(plan: Plan, path=None, *, max_nodes: int = MAX_NODES, title: str = "") -> Drawing:
    """Draw ``plan`` (or, past ``max_nodes`` nodes, a summary); save it when ``path`` is given."""
    g = plan_to_networkx(plan)
    kernels = sum(1 for _, kind in g.nodes(data="kind") if kind == "kernel")
    what = f"Plan of {title}" if title else "Plan"
    headline = f"{what}: {kernels} kernels, predicted {plan.predicted_seconds * 1e6:.1f} us ({plan.cost_model})"
    if plan.folded:
        headline += f"; {plan.folded} nodes folded into constants"
    if g.number_of_nodes() > max_nodes:
        message = summary_message(what, g.number_of_nodes(), "nodes", max_nodes, "predicted time and count per op")
        drawing = Drawing(_summary(g, headline), g, True, message)
    else:
        drawing = Drawing(_draw(g, headline), g)
    if path is not None:
        save(drawing.figure, path)
    return drawing


def _label(i: int, node, kind: str, seconds: float) -> str:
    shape = f"{node.dtype}{list(node.shape)}"
    if kind == "constant":
        return f"{node.attrs[0]:g}"
    if kind in ("input", "param"):
        name = node.attrs[0] if len(node.attrs[0]) <= 18 else node.attrs[0][:17] + "…"
        return f"{name}\n{shape}"
    return f"%{i} {node.op}\n{shape}\n{seconds * 1e6:.2f} us"


def depths(g: nx.DiGraph) -> dict[int, int]:
    """Row of every node: outputs as deep as their longest operand chain, every other node one row above
    its first consumer (as late as possible), so weights and their preparation sit beside their use."""
    order = list(nx.topological_sort(g))
    depth: dict[int, int] = {}
    for i in order:
        depth[i] = 1 + max((depth[j] for j in g.predecessors(i)), default=-1)
    for i in reversed(order):
        users = list(g.successors(i))
        if users:
            depth[i] = min(depth[k] for k in users) - 1
    return depth


def _draw(g: nx.DiGraph, headline: str):
    rows = depths(g)
    order = sorted(g)  # plan node ids: the stable order within a row
    widths = {i: WIDTH[g.nodes[i]["kind"]] for i in order}
    centres = layout.positions({i: rows[i] for i in order}, list(g.edges), widths)
    fig, ax = canvas({i: (*centres[i], widths[i]) for i in order}, headline, extra_width=COLORBAR_INCHES)
    slowest = max((s for _, s in g.nodes(data="seconds")), default=0.0) or 1e-9
    norm = Normalize(0, slowest * 1e6)
    for i in order:
        node = g.nodes[i]
        face = CMAP(norm(node["seconds"] * 1e6) * DARKEST) if node["kind"] == "kernel" else LEAF_FACE
        boxed_text(ax, *centres[i], node["label"], face, EDGE, size=7 if node["kind"] == "kernel" else 6.5)
    for a, b in g.edges:
        arrow(ax, *vertical_ends(centres[a], centres[b], HALF_HEIGHT), EDGE, 0.8)
    scale = ScalarMappable(Normalize(0, slowest * 1e6 / DARKEST), CMAP)  # the colours used, 0 to slowest
    fig.colorbar(scale, ax=ax, shrink=0.5, label="predicted time per kernel (us)").ax.set_ylim(0, slowest * 1e6)
    return fig


def _summary(g: nx.DiGraph, headline: str):
    """Total predicted time per op (bars) with the kernel count per op as labels."""
    fig = new_figure(10, 6)
    ax = fig.add_subplot()
    seconds: Counter = Counter()
    count: Counter = Counter()
    for _, node in g.nodes(data=True):
        if node["kind"] == "kernel":
            seconds[node["op"]] += node["seconds"] * 1e6
            count[node["op"]] += 1
    ranked = seconds.most_common()
    ax.barh(range(len(ranked)), [us for _, us in ranked], color=CMAP(0.6))
    for y, (op, us) in enumerate(ranked):
        ax.text(us, y, f" {us:.1f} us, {count[op]} kernels", va="center", fontsize=7)
    ax.set_yticks(range(len(ranked)), [op for op, _ in ranked], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, max((us for _, us in ranked), default=1) * 1.35)
    ax.set_xlabel("predicted time, summed over the op's kernels (us)")
    ax.set_title(f"{headline}\nsummary: too many nodes to draw one by one", fontsize=10)
    return fig
