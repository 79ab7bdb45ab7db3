"""Repeated blocks: a deep model's identical layers are saturated and extracted once.

An LLM is K copies of one layer with different weights. ``find`` looks for them in the captured graph: every
node gets a structural signature that ignores which parameter a Param leaf is and which call site an Extern
is (its shape and dtype count, and constants' values and facts), the compute nodes that read the program's
inputs are listed in order (see ``find``), and the longest run of K >= 2 equal periods of that list is taken
as K blocks. The candidate is then checked exactly: each block reads only itself, the block before it (the
residual stream, any number of tensors) and values from before the first block (shared ones, or its own:
weights passed as inputs), all in the same places, and its parameters correspond one to one with the first
block's. Anything else (the embedding, the final norm, the head) is the *rest*.

``optimize_once`` saturates and extracts the first block as a graph of its own (inputs: what it reads from
outside, outputs: what others read from it) and the rest as another, then glues the e-graphs into one
Snapshot of the whole program: K copies of the block's e-graph, each with its block's parameters, their
entry e-classes merged with the e-classes that feed them. The block's choice is the choice of every copy,
so the Plan built from it recomputes each block's folded constants from that block's weights, and the plan
check, retries and drawings work on it as on a saturated whole graph. When nothing repeats or the parts do
not glue, the caller optimizes the whole graph as before; ``Shared.note`` says which happened.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ..egraph.snapshot import Snapshot
from ..errors import EqiforgeError
from ..extract.dag import select
from ..ir import Graph
from .search import Searched

MIN_BLOCK_NODES = 12  # smaller repeats (a chain of Adds) gain nothing and would cut fusion across them
ENTRY, GLUE = "eqiforge_entry", "eqiforge_block"  # names of the pieces' stand-in inputs


@dataclass
class Blocks:
    """K identical blocks: ``nodes[k]`` are block k's compute nodes in block order (position t of every
    block is the same computation), ``mapping[k]`` maps every node of block 0 (compute nodes and the
    constants they read) to block k's counterpart."""

    nodes: list[list[int]]
    entries: list[list[int]]  # entries[k][e]: the node block k reads in entry slot e
    exits: list[int]  # positions read from outside some block (or graph outputs)
    uses: dict[tuple[int, int], int]  # (position, operand index) of block 0 -> entry slot it reads
    mapping: list[dict[int, int]]

    @property
    def count(self) -> int:
        return len(self.nodes)

    @property
    def covered(self) -> int:
        return sum(map(len, self.nodes))

    @property
    def crossing(self) -> int:
        """Tensors a block boundary cuts: what a block reads from outside and what others read from it."""
        return len(self.entries[0]) + len(self.exits)


@dataclass
class Shared:
    """What ``optimize_once`` returns: the glued results, or None and why the whole graph is optimized."""

    note: str
    result: Searched | None = None  # the whole program's, glued; the saturation report is the block's
    found: bool = False  # repeated blocks were found (shared, or not where the pieces did not glue)


# ------------------------------------------------------------------------------------------ detection

def find(graph: Graph) -> tuple[Blocks | None, str]:
    """The repeated blocks of ``graph`` and a note, or None and why there are none.

    Two orders of the compute nodes are tried. By depth (the longest path from an input) first: a value
    computed once before the layers but hash-consed into the first one where it is first read (a shared
    rotary table's view) comes before the layers there. Then program order, with the values every block of
    the first answer reads from before the blocks (and what they are computed from) moved to the front:
    program order keeps each layer's first nodes together. The exact answer covering the most nodes wins."""
    program = _Program(graph)
    found, why = program.detect(sorted(program.compute, key=program.depth.get))
    shared = program.shared_before(found) if found else set()
    again, why_again = program.detect(sorted(shared) + [i for i in program.compute if i not in shared])
    if again and (not found or again.covered >= found.covered):
        found = again
    return (found, "") if found else (None, f"no repeated blocks: {why_again or why}")


class _Program:
    """What detection reads from the graph: which live nodes depend on an input (externs count as such:
    they are never treated as constants), their structural signatures, depths and readers."""

    def __init__(self, graph: Graph):
        self.graph, self.live = graph, graph.live_nodes()
        self.data: dict[int, bool] = {}
        self.depth: dict[int, tuple[int, int]] = {}
        self.readers: dict[int, set[int]] = {}
        for i in self.live:
            n = graph.nodes[i]
            self.data[i] = n.op in ("Input", "Extern") or any(self.data[j] for j in n.inputs)
            self.depth[i] = (max((self.depth[j][0] + 1 for j in n.inputs if self.data[j]), default=0), i)
            for j in n.inputs:
                self.readers.setdefault(j, set()).add(i)
        self.compute = [i for i in self.live if self.data[i] and graph.nodes[i].op != "Input"]
        self.sig = _signatures(graph, self.live, self.data)
        self.const_sig = {i: s for i, s in self.sig.items() if not self.data[i]}

    def detect(self, order: list[int]) -> tuple[Blocks | None, str]:
        """The exact blocks of the longest periodic run of ``order``, at the phase (where in the run the
        first block starts) that cuts the fewest tensors (a layer boundary), or None and why."""
        found = _longest_period(np.array([self.sig[i] for i in order], dtype=np.int64))
        if found is None:
            return None, "no layer structure repeats"
        start, period, count, slack = found
        best, first_why = None, ""
        for phase in range(min(slack, period - 1) + 1):
            at = start + phase
            blocks, why = _check(self, [order[at + k * period: at + (k + 1) * period] for k in range(count)])
            first_why = first_why or why
            if blocks and (best is None or blocks.crossing < best.crossing):
                best = blocks
        if best is None:
            return None, f"{count} candidate blocks of {period} nodes are not identical ({first_why})"
        return best, ""

    def shared_before(self, blocks: Blocks) -> set[int]:
        """Compute nodes every block reads from before the blocks, and the compute nodes they read."""
        shared = [j for e, j in enumerate(blocks.entries[0]) if all(entries[e] == j for entries in blocks.entries)]
        found, stack = set(), [j for j in shared if self.graph.nodes[j].op != "Input"]
        while stack:
            j = stack.pop()
            if j not in found:
                found.add(j)
                stack.extend(k for k in self.graph.nodes[j].inputs
                             if self.data[k] and self.graph.nodes[k].op != "Input")
        return found


def _signatures(graph: Graph, live: list[int], data: dict[int, bool]) -> dict[int, int]:
    """Interned structural signatures: a constant's covers its whole sub-expression (a Param by shape and
    dtype only), a compute node's its own op, attributes, shape, dtype, facts and its operands' kinds
    (any value of the program, or which constant)."""
    table: dict[tuple, int] = {}
    sig: dict[int, int] = {}
    for i in live:
        n = graph.nodes[i]
        attrs = () if n.op == "Param" else _extern_call(graph, n) if n.op == "Extern" else n.attrs
        operands = tuple(-1 if data[j] else sig[j] for j in n.inputs)
        key = (n.op, attrs, n.shape, n.dtype, graph.facts.get(i, ()), operands)
        sig[i] = table.setdefault(key, len(table))
    return sig


def _extern_call(graph: Graph, node) -> tuple:
    """What an Extern computes, without its name (unique per call site: each layer's cache update is its own
    ``cat``): the function, its non-tensor arguments and which of its outputs."""
    call = graph.externs[node.attrs[0]]
    return (repr(call.fn), repr(call.args), repr(sorted(call.kwargs.items())), *node.attrs[1:])


def _longest_period(seq: np.ndarray) -> tuple[int, int, int, int] | None:
    """(start, period, count, slack) of the run of count >= 2 equal periods covering the most of ``seq``
    (ties: the shortest period, then the earliest start; slack: how much longer than count periods the run
    is, so how much later the first block could start), or None."""
    best = None
    for period in range(MIN_BLOCK_NODES, len(seq) // 2 + 1):
        same = np.concatenate(([0], (seq[:-period] == seq[period:]).astype(np.int8), [0]))
        edges = np.flatnonzero(np.diff(same))
        begins, ends = edges[::2], edges[1::2]
        if not len(begins):
            continue
        counts = (ends - begins + period) // period
        k = int(np.argmax(counts))  # the first of the longest runs
        if counts[k] >= 2 and (best is None or counts[k] * period > best[0]):
            slack = int(ends[k] - begins[k]) + period - int(counts[k]) * period
            best = (int(counts[k]) * period, int(begins[k]), period, int(counts[k]), slack)
    return None if best is None else best[1:]


def _check(program: _Program, candidate: list[list[int]]) -> tuple[Blocks | None, str]:
    """Blocks when the candidate is exact (see the module docstring), else None and the first difference."""
    graph, data, count = program.graph, program.data, len(candidate)
    where = {i: (k, t) for k, nodes in enumerate(candidate) for t, i in enumerate(nodes)}
    slots: dict[tuple, int] = {}  # ("prev", position) or ("ext", node) -> entry slot
    uses: dict[tuple[int, int], int] = {}
    described = []
    for k, nodes in enumerate(candidate):
        desc, outside = [], {}
        for t, i in enumerate(nodes):
            for x, j in enumerate(graph.nodes[i].inputs):
                if not data[j]:
                    desc.append(("const",))
                elif j in where and where[j][0] == k:
                    desc.append(("in", where[j][1]))
                elif j in where and where[j][0] == k - 1:
                    desc.append(("prev", where[j][1]))
                elif j not in where:  # an input or a value computed before the blocks (order is topological);
                    desc.append(("ext", outside.setdefault(j, len(outside))))  # numbered in order of reading
                else:
                    return None, f"block {k} reads node {j} of block {where[j][0]}"
        described.append(desc)
    reference = described[1]
    entries: list[list[int]] = [[] for _ in range(count)]
    for k, desc in enumerate(described):
        flat = 0
        for t, i in enumerate(candidate[k]):
            for x, j in enumerate(graph.nodes[i].inputs):
                want, got = reference[flat], desc[flat]
                flat += 1
                if want[0] in ("prev", "ext"):  # block 0 reads from before the blocks what the others read
                    if want != got and not (k == 0 and got[0] == "ext"):  # from the block before them
                        return None, f"block {k} position {t} reads {got}, block 1 reads {want}"
                    slot = slots.setdefault(want, len(slots))
                    if len(entries[k]) == slot:
                        entries[k].append(j)
                    elif entries[k][slot] != j:
                        return None, f"block {k} feeds entry {want} from two nodes"
                    if k == 0:
                        uses[(t, x)] = slot
                elif want != got:
                    return None, f"block {k} position {t} reads {got}, block 1 reads {want}"
    mapping = []
    for k in range(count):
        m, why = _correspond(graph, candidate[0], candidate[k], program.const_sig)
        if m is None:
            return None, f"block {k}: {why}"
        mapping.append(m)
    outputs = set(graph.outputs)
    exits = sorted({t for k, nodes in enumerate(candidate) for t, i in enumerate(nodes)
                    if i in outputs or any(where.get(r, (None,))[0] != k for r in program.readers.get(i, ()))})
    return Blocks(candidate, entries, exits, uses, mapping), ""


def _correspond(graph, first: list[int], other: list[int], const_sig) -> tuple[dict[int, int] | None, str]:
    """Block 0's compute nodes and constants -> ``other``'s, walking equal structures side by side; None when
    two parameters of one block stand for one of the other (or the constants differ)."""
    mapping: dict[int, int] = {}
    params_back: dict[int, int] = {}
    stack = list(zip(first, other))
    while stack:
        a, b = stack.pop()
        if a in mapping:
            if mapping[a] != b:
                return None, f"node {a} of block 0 stands for nodes {mapping[a]} and {b}"
            continue
        mapping[a] = b
        na, nb = graph.nodes[a], graph.nodes[b]
        if na.op == "Param":
            if params_back.setdefault(b, a) != a:
                return None, f"parameter {nb.attrs[0]!r} stands for two parameters of block 0"
            continue
        for ja, jb in zip(na.inputs, nb.inputs):
            if ja in const_sig:
                if const_sig[ja] != const_sig.get(jb):
                    return None, f"constants {ja} and {jb} differ"
                stack.append((ja, jb))
    return mapping, ""


# ------------------------------------------------------------------------------------------ the pieces

def block_graph(graph: Graph, blocks: Blocks) -> tuple[Graph, dict[int, int], dict[int, int]]:
    """Block 0 as a graph of its own: its entry slots are inputs, its exits outputs. Returns the graph, its
    node ids -> block 0's nodes, and its input nodes -> their entry slots. Nodes are added in program
    order, which rules that combine siblings in program order read."""
    out = Graph(externs=dict(graph.externs))
    first, members = blocks.nodes[0], set(blocks.nodes[0])
    pos = {i: t for t, i in enumerate(first)}
    entry_node: dict[int, int] = {}  # slot -> input node of the piece
    made: dict[int, int] = {}
    back: dict[int, int] = {}
    pending = sorted(range(len(blocks.entries[0])), key=lambda e: (blocks.entries[0][e], e))  # slots, in order
    for i in sorted(blocks.mapping[0]):
        while pending and blocks.entries[0][pending[0]] < i:
            e = pending.pop(0)
            node = graph.nodes[blocks.entries[0][e]]
            entry_node[e] = out.input(f"{ENTRY}{e}", node.shape, node.dtype)
        n = graph.nodes[i]
        if n.op == "Param":
            made[i] = out.param(n.attrs[0], graph.params[n.attrs[0]])
        else:
            kids = tuple(entry_node[blocks.uses[(pos[i], x)]] if i in members and (pos[i], x) in blocks.uses
                         else made[j] for x, j in enumerate(n.inputs))
            size = len(out.nodes)
            made[i] = out.add(n.op, kids, n.attrs, shape=n.shape, dtype=n.dtype)
            if len(out.nodes) == size:
                raise EqiforgeError(f"node {i} of block 0 collapsed into another when taken apart")
        if i in graph.facts:
            out.facts[made[i]] = graph.facts[i]
        back[made[i]] = i
    out.outputs = [made[first[t]] for t in blocks.exits]
    return out, back, {node: e for e, node in entry_node.items()}


def rest_graph(graph: Graph, blocks: Blocks) -> tuple[Graph, dict[int, int]]:
    """Everything outside the blocks: reads of a block's node are inputs, what the blocks read from before
    them are extra outputs. Returns the graph and its node ids -> the original nodes."""
    inside = {i: (k, t) for k, nodes in enumerate(blocks.nodes) for t, i in enumerate(nodes)}
    wanted = list(graph.outputs) + sorted({j for entries in blocks.entries for j in entries if j not in inside})
    needed, stack = set(), list(wanted)
    while stack:
        i = stack.pop()
        if i not in needed:
            needed.add(i)
            if i not in inside:
                stack.extend(graph.nodes[i].inputs)
    out = Graph(externs=dict(graph.externs))
    made: dict[int, int] = {}
    for i in sorted(needed):
        n = graph.nodes[i]
        if i in inside:
            made[i] = out.input(f"{GLUE}{inside[i][0]}_{inside[i][1]}", n.shape, n.dtype)
        elif n.op == "Param":
            made[i] = out.param(n.attrs[0], graph.params[n.attrs[0]])
        else:
            made[i] = out.add(n.op, tuple(made[j] for j in n.inputs), n.attrs, shape=n.shape, dtype=n.dtype)
        if i in graph.facts:
            out.facts[made[i]] = graph.facts[i]
    out.outputs = [made[i] for i in wanted]
    return out, {m: i for i, m in made.items()}


# ------------------------------------------------------------------------------------------ optimizing

@dataclass
class _Piece:
    """One optimized piece: its snapshot, prices and choice, and how its IR nodes map to the program's."""

    snap: Snapshot
    node_cost: list[float]
    choice: dict[int, int]
    to_program: dict[int, int]  # piece IR node -> program node
    rename: dict[str, str] = field(default_factory=dict)  # parameter and extern names of block 0 -> this copy's


def optimize_once(graph: Graph, search, timer, on_step=None) -> Shared:
    """Saturate and extract one block and the rest; the glued whole (see the module docstring), or why not.
    The saturation report returned is the block's (the rest's is usually a few nodes). ``search``: how each
    piece is saturated, priced and extracted (pipeline/search.py)."""
    blocks, why = find(graph)
    if blocks is None:
        return Shared(why)
    try:
        block, block_back, entry_slot = block_graph(graph, blocks)
        rest, rest_back = rest_graph(graph, blocks)
        first, others = search.run(block, timer, on_step), search.run(rest, timer, on_step)
        bsel, rsel = first.selection, others.selection
        pieces = [_Piece(others.snap, others.node_cost, rsel.choice, rest_back)]
        for k in range(blocks.count):
            to_program = {b: blocks.mapping[k][i] for b, i in block_back.items()}
            to_program.update({b: blocks.entries[k][e] for b, e in entry_slot.items()})
            rename = {graph.nodes[i].attrs[0]: graph.nodes[blocks.mapping[k][i]].attrs[0]
                      for i in blocks.mapping[0] if graph.nodes[i].op in ("Param", "Extern")}
            pieces.append(_Piece(first.snap, first.node_cost, bsel.choice, to_program, rename))
        with timer("extract"):
            started = time.perf_counter() - bsel.seconds - rsel.seconds  # the selection's time: all extraction
            snap, node_cost, choice = glue(pieces, graph)
            selection = select(snap, node_cost, choice, snap.roots, f"{bsel.method} (one block), {rsel.method} "
                               f"(the rest)", started)
    except Exception as err:  # noqa: BLE001 - whatever failed, the whole graph is optimized instead (the note says why)
        return Shared(f"{blocks.count} repeated blocks found but not shared ({type(err).__name__}: {err}); the "
                      f"whole graph was optimized", found=True)
    size = sum(1 for n in block.nodes if n.op not in ("Input", "Param", "Fill"))
    note = f"{blocks.count} repeated blocks of {size} nodes optimized once"
    return Shared(note, Searched(snap, first.saturation, node_cost, selection), found=True)


def glue(pieces: list[_Piece], graph: Graph) -> tuple[Snapshot, list[float], dict[int, int]]:
    """One snapshot of the program from its pieces: e-classes bound to the same program node are one e-class,
    the pieces' stand-in inputs are dropped, equal e-nodes kept once. Returns it, its e-node prices and the
    pieces' choices (the first piece's that chose a kept e-node wins)."""
    parent: list[int] = []

    def find_root(c: int) -> int:
        while parent[c] != c:
            parent[c] = parent[parent[c]]
            c = parent[c]
        return c

    bases, bound = [], {}
    for piece in pieces:
        bases.append(len(parent))
        parent.extend(range(len(parent), len(parent) + piece.snap.num_classes))
        for i, c in piece.snap.bindings.items():
            c, program = bases[-1] + c, piece.to_program[i]
            if program in bound:
                parent[find_root(c)] = find_root(bound[program])
            else:
                bound[program] = c
    snap, cost_of, new_class, node_index = Snapshot(), [], {}, {}

    def class_id(piece_no: int, c: int) -> int:
        root = find_root(bases[piece_no] + c)
        if root not in new_class:
            new_class[root] = len(snap.class_shape)
            snap.class_shape.append(pieces[piece_no].snap.class_shape[c])
            snap.class_dtype.append(pieces[piece_no].snap.class_dtype[c])
        shape = pieces[piece_no].snap.class_shape[c], pieces[piece_no].snap.class_dtype[c]
        if shape != (snap.class_shape[new_class[root]], snap.class_dtype[new_class[root]]):
            raise EqiforgeError(f"glued e-classes disagree on shape: {shape} vs "
                                f"{snap.class_shape[new_class[root]]}")
        return new_class[root]

    kept: dict[tuple, int] = {}
    for p, piece in enumerate(pieces):
        s = piece.snap
        for n, op in enumerate(s.node_op):
            attrs = s.node_attrs[n]
            if op == "Input" and attrs[0].startswith((ENTRY, GLUE)):
                continue
            if op in ("Param", "Extern"):  # this copy's own weights and calls
                attrs = (piece.rename.get(attrs[0], attrs[0]), *attrs[1:])
            key = (op, attrs, tuple(class_id(p, k) for k in s.node_children[n]), class_id(p, s.node_class[n]))
            if key not in kept:
                kept[key] = len(snap.node_op)
                snap.node_op.append(op)
                snap.node_attrs.append(attrs)
                snap.node_children.append(key[2])
                snap.node_class.append(key[3])
                cost_of.append(piece.node_cost[n])
            node_index[(p, n)] = kept[key]
        snap.dropped_nodes += s.dropped_nodes
    choice: dict[int, int] = {}
    for p, piece in enumerate(pieces):
        for c, n in piece.choice.items():
            c = class_id(p, c)
            if c not in choice and (p, n) in node_index:
                choice[c] = node_index[(p, n)]
    snap.bindings = {i: new_class[find_root(c)] for i, c in bound.items()}
    snap.roots = [snap.bindings[o] for o in graph.outputs]
    if any(i not in snap.bindings for i in graph.live_nodes()):
        raise EqiforgeError("the pieces do not cover the program")
    return snap, cost_of, choice
