"""Read a saturated e-graph out of egglog (``freeze()``) into plain Python lists.

The snapshot is what extraction and costing work on: e-nodes with their op, attributes and child e-classes,
and every e-class's shape and dtype. It is picklable, so saturation can run in a child process.
Nodes whose e-class has no derived shape are dropped: they came from a rewrite whose shape guard did not
hold and cannot be part of a valid plan (their count is kept for the report).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .. import ops


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


def _decoder(egraph, sort: str):
    if sort == "String":
        return egraph.value_to_string
    if sort == "f64":
        return egraph.value_to_f64
    if sort == "i64":
        return egraph.value_to_i64
    if sort == "Dims":
        return lambda v: tuple(egraph.value_to_i64(x) for x in egraph.value_to_vec(v))
    raise ValueError(f"no decoder for sort {sort}")


def from_egraph(egraph, num_outputs: int, node_ids: list[int]) -> Snapshot:
    """Freeze ``egraph`` (an egglog bindings EGraph) into a Snapshot with deterministic numbering."""
    frozen = egraph.freeze().functions
    shapes, dtypes = {}, {}
    dims, string = _decoder(egraph, "Dims"), _decoder(egraph, "String")
    for row in frozen["shape"].rows:
        shapes[row.inputs[0]] = dims(row.output)
    for row in frozen["dtype"].rows:
        dtypes[row.inputs[0]] = string(row.output)
    # extern operand lists
    tlists = {row.output: () for row in frozen["TNil"].rows}
    cons = {row.output: (row.inputs[0], row.inputs[1]) for row in frozen["TCons"].rows}

    def operand_list(v):
        items = []
        while v in cons:
            head, v = cons[v]
            items.append(head)
        return items if v in tlists else None

    snap = Snapshot()
    class_ids: dict = {}

    def class_of(v) -> int:
        if v not in class_ids:
            class_ids[v] = len(snap.class_shape)
            snap.class_shape.append(shapes[v])
            snap.class_dtype.append(dtypes[v])
        return class_ids[v]

    for name in sorted(frozen):
        fn = frozen[name]
        if fn.is_let_binding or fn.output_sort != "T" or name not in ops.OPS:
            continue
        sorts = fn.input_sorts
        decode = {i: _decoder(egraph, s) for i, s in enumerate(sorts) if s not in ("T", "TList")}
        for row in fn.rows:
            if row.subsumed:
                continue
            children = []
            if row.output not in shapes or any(s == "T" and v not in shapes for s, v in zip(sorts, row.inputs)):
                snap.dropped_nodes += 1
                continue
            attrs = []
            for i, (s, v) in enumerate(zip(sorts, row.inputs)):
                if s == "T":
                    children.append(v)
                elif s == "TList":
                    children.extend(operand_list(v) or [])
                else:
                    attrs.append(decode[i](v))
            if any(c not in shapes for c in children):
                snap.dropped_nodes += 1
                continue
            snap.node_op.append(name)
            snap.node_attrs.append(tuple(attrs))
            snap.node_children.append(tuple(class_of(c) for c in children))
            snap.node_class.append(class_of(row.output))
    lets = {name: fn.rows[0].output for name, fn in frozen.items() if fn.is_let_binding and fn.rows}
    snap.roots = [class_of(lets[f"$out{k}"]) for k in range(num_outputs)]
    snap.bindings = {i: class_of(lets[f"$n{i}"]) for i in node_ids if f"$n{i}" in lets}
    return snap
