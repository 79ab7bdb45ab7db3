"""Read a saturated e-graph out of egglog (``freeze()``) into plain Python lists.

The snapshot is what extraction and costing work on: e-nodes with their op, attributes and child e-classes,
and every e-class's shape and dtype. It is picklable, so saturation can run in a child process.
Nodes whose e-class has no derived shape are dropped: they came from a rewrite whose shape guard did not
hold and cannot be part of a valid plan (their count is kept for the report). A fused kernel's inputs are
put in canonical order, and kernels that are then equal are one node (fusion reaches a kernel along many
paths); e-classes that then hold an equal e-node are one e-class.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..ops import fused
from .. import ops
from ..errors import EqiforgeError
from .encode import EPI_CONSTRUCTORS, node_name, output_name


@dataclass
class Snapshot:
    node_op: list[str] = field(default_factory=list)
    node_attrs: list[tuple] = field(default_factory=list)
    node_children: list[tuple[int, ...]] = field(default_factory=list)
    node_class: list[int] = field(default_factory=list)
    class_shape: list[ops.Shape] = field(default_factory=list)
    class_dtype: list[str] = field(default_factory=list)
    roots: list[int] = field(default_factory=list)  # e-class of each graph output
    bindings: dict[int, int] = field(default_factory=dict)  # IR node id -> e-class
    dropped_nodes: int = 0

    @property
    def num_nodes(self) -> int:
        return len(self.node_op)

    @property
    def num_classes(self) -> int:
        return len(self.class_shape)

    def class_nodes(self) -> list[list[int]]:
        members: list[list[int]] = [[] for _ in range(self.num_classes)]
        for n, c in enumerate(self.node_class):
            members[c].append(n)
        return members


def _primitive_decoder(egraph, sort: str):
    if sort == "String":
        return egraph.value_to_string
    if sort == "f64":
        return egraph.value_to_f64
    if sort == "i64":
        return egraph.value_to_i64
    if sort == "Dims":
        return lambda v: tuple(egraph.value_to_i64(x) for x in egraph.value_to_vec(v))
    raise ValueError(f"no decoder for sort {sort}")


def _term_decoder(egraph, frozen, sort: str, heads: dict[str, str]):
    """Decode values of a small term sort (Epi, Tile) into nested tuples ``(head, *args)``."""
    terms: dict = {}
    for head, constructor in heads.items():
        fn = frozen[constructor]
        for row in fn.rows:
            terms.setdefault(row.output, (head, fn.input_sorts, row.inputs))

    def decode(v):
        head, sorts, args = terms[v]
        return (head,) + tuple(decode(a) if s == sort else _primitive_decoder(egraph, s)(a)
                               for s, a in zip(sorts, args))
    return decode


def _arguments(egraph, sorts, values, decode):
    """(child e-class values, decoded attributes) of one e-node row."""
    children, attrs = [], []
    for s, v, dec in zip(sorts, values, decode):
        if s == "T":
            children.append(v)
        elif s == "TVec":
            children.extend(egraph.value_to_vec(v))
        else:
            attrs.append(dec(v))
    return children, attrs


def _canonical_inputs(op, children: list, attrs: list, rank: dict):
    """A kernel's extra inputs in their canonical order (``fused.canonical_inputs``): read-once, unread ones
    dropped, so the variants fusion makes of one kernel become one e-node. Tensors are told apart by their
    ``rank``, the order the snapshot first met their e-class in: egglog's values print as memory addresses,
    which would order commutative operands differently in each run."""
    where = [k for k, kind in enumerate(op.attrs) if kind == "epi"]
    if not where:  # extras read without an expression (an attention bias): all are read
        return children, attrs
    extras = children[op.arity:]
    exprs, kept = fused.canonical_inputs([attrs[k] for k in where], [rank[c] for c in extras])
    for k, expr in zip(where, exprs):
        attrs[k] = expr
    return children[:op.arity] + [extras[i] for i in kept], attrs


def from_egraph(egraph, num_outputs: int, node_ids: list[int]) -> Snapshot:
    """Freeze ``egraph`` (an egglog bindings EGraph) into a Snapshot with deterministic numbering."""
    frozen = egraph.freeze().functions
    shapes, dtypes = {}, {}
    dims, string = _primitive_decoder(egraph, "Dims"), _primitive_decoder(egraph, "String")
    for row in frozen["shape"].rows:
        shapes[row.inputs[0]] = dims(row.output)
    for row in frozen["dtype"].rows:
        dtypes[row.inputs[0]] = string(row.output)
    epi = _term_decoder(egraph, frozen, "Epi", EPI_CONSTRUCTORS)
    tile = _term_decoder(egraph, frozen, "Tile", {"none": "NoTile", "tile": "TileCfg"})
    decoders = {"Epi": epi, "Tile": lambda v: tile(v)[1:]}

    snap = Snapshot()
    class_ids: dict = {}
    seen: set = set()

    def class_of(v) -> int:
        if v not in class_ids:
            class_ids[v] = len(snap.class_shape)
            snap.class_shape.append(shapes[v])
            snap.class_dtype.append(dtypes[v])
        return class_ids[v]

    rows: list[tuple] = []  # (op, attrs, child values, output value) of every e-node kept
    rank: dict = {}  # e-class value -> when a kernel first read or made it (a deterministic order)
    for name in sorted(frozen):
        fn = frozen[name]
        if fn.is_let_binding or fn.output_sort != "T" or name not in ops.OPS:
            continue
        op = ops.OPS[name]
        sorts = fn.input_sorts
        decode = [None if s in ("T", "TVec") else decoders.get(s) or _primitive_decoder(egraph, s) for s in sorts]
        for row in fn.rows:
            if row.subsumed:
                continue
            try:
                children, attrs = _arguments(egraph, sorts, row.inputs, decode)
            except KeyError:  # a fused expression still being rewritten (Splice/Shift not yet resolved)
                children = None
            if children is not None and op.kind == "kernel":
                for v in (*children, row.output):
                    rank.setdefault(v, len(rank))
                children, attrs = _canonical_inputs(op, children, attrs, rank)
            if children is None or row.output not in shapes or any(c not in shapes for c in children):
                snap.dropped_nodes += 1
                continue
            rows.append((name, tuple(attrs), tuple(children), row.output))
    same = _equal_classes(rows, shapes, dtypes)
    for name, attrs, children, output in rows:
        key = (name, attrs, tuple(same(c) for c in children), same(output))
        if key in seen:  # a kernel reached along another fusion path
            continue
        seen.add(key)
        snap.node_op.append(name)
        snap.node_attrs.append(attrs)
        snap.node_children.append(tuple(class_of(c) for c in key[2]))
        snap.node_class.append(class_of(key[3]))
    lets = {name: fn.rows[0].output for name, fn in frozen.items() if fn.is_let_binding and fn.rows}
    snap.roots = [class_of(same(lets[output_name(k)])) for k in range(num_outputs)]
    snap.bindings = {i: class_of(same(lets[node_name(i)])) for i in node_ids if node_name(i) in lets}
    return snap


def _equal_classes(rows: list[tuple], shapes: dict, dtypes: dict):
    """The representative of each e-class value once e-classes holding an equal e-node are merged, to a
    fixed point (congruence: merging two classes can make their readers equal). egglog merged every such pair
    it saw, but canonical kernel inputs make two kernels equal that egglog held apart (one adds a + b, the
    other b + a): their e-classes compute the same tensor. Left apart, each copy doubles the e-nodes above
    it and the ILP must prove equal-cost alternatives apart (a ViT-base block: 725 -> 628 e-nodes)."""
    parent: dict = {}

    def find(v):
        while parent.get(v, v) != v:
            parent[v] = parent.get(parent[v], parent[v])
            v = parent[v]
        return v

    merged = True
    while merged:
        merged, holder = False, {}
        for name, attrs, children, output in rows:
            key = (name, attrs, tuple(find(c) for c in children))
            a, b = find(holder.setdefault(key, output)), find(output)  # the class met first stands for both
            if a != b:
                if (shapes[a], dtypes[a]) != (shapes[b], dtypes[b]):
                    raise EqiforgeError(f"two e-classes hold the e-node {name}{attrs} but differ in shape or dtype: "
                                        f"{shapes[a]} {dtypes[a]} vs {shapes[b]} {dtypes[b]} (a bug in the "
                                        f"kernels' canonical inputs, eqiforge/ops/fused.py)")
                parent[b] = a
                merged = True
    return find
