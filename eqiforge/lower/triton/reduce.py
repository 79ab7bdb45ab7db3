"""Row-reduction template: a reduction over the last dim of ``x`` with a fused prologue and epilogue.

Each program handles BLOCK_ROWS rows; the leading dims of any strides are addressed by unravelling the row
index (straight-line code for the spec's shape). A row is read in chunks of BLOCK_COLS columns:
- sum / max / min: one pass, an elementwise running accumulator reduced at the end (one value per row);
- softmax, log_softmax, layer_norm, rms_norm: when the row fits one chunk it stays in registers (x read
  once); longer rows take two passes: statistics first (online softmax: running max and rescaled sum;
  layer_norm: per-chunk mean and squared deviations merged with Chan's formula, numerically like
  two-pass; rms_norm: sum of squares), then normalize and store (x read twice);
- logsumexp: one value per row, the sum of exponentials shifted by the running max (x read once);
- moments: layer_norm's statistics alone, mean and 1/std, stored side by side (out[..., 0:2]); x is read
  once (long rows: the chunk statistics merged with Chan's formula), so a GEMM that normalises in its
  epilogue (rules/softmax.egg) never needs the normalised rows written.
BLOCK_COLS is the next power of two of the row length, capped by ``spec.block``; BLOCK_ROWS fills the rest
of the block. The prologue runs on each loaded element, layer_norm/rms_norm apply the optional weight and
bias extras (biased variance, like torch), then the epilogue runs on each result element; all in the
compute dtype (fp32; fp64 when the kernel touches float64).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ...ops.fused import format_expr
from ..kernels import RowReduceSpec, compute_dtype
from . import epilogue
from .source import (TL_DTYPES, Kernel, Param, UnsupportedSpec, check_broadcast, check_dtypes, check_power_of_two,
                     dot_offset, header, indent, launcher, load_value, module_text, nbytes, next_power_of_two, pointer,
                     rsqrt, scalar_kind, sizes, store_value, strides, traffic, unravel, warps_for)

NEG_INF, POS_INF = '-float("inf")', 'float("inf")'


@dataclass(frozen=True)
class _Reduction:
    """sum / max / min: identity, elementwise combine into ``acc``, final reduction over the columns."""

    identity: str
    combine: str
    reduce: str


@dataclass(frozen=True)
class _Normalization:
    """A full-row kind: row statistics (in registers, or looped in pass 1) and the value they give.

    Statements write ``{acc}`` for the Triton compute dtype; ``inverse`` = (name, x) ends the statistics
    with ``name = 1 / sqrt(x)`` (``source.rsqrt``: its form depends on the compute dtype)."""

    identity: str  # what masked columns hold
    registers: tuple[str, ...]  # statistics of a row held in registers (as ``p``)
    init: tuple[str, ...]  # looped: running statistics before pass 1
    update: tuple[str, ...]  # looped: merge one chunk ``p`` at column ``start``
    after: tuple[str, ...]  # looped: after pass 1
    value: str  # the result element from ``p`` and the statistics
    pass1: str  # what pass 1 computes, for the comment
    inverse: tuple[str, str] | None = None

    def in_registers(self, compute: str) -> list[str]:
        return self._finished(self.registers, compute)

    def looped(self, compute: str) -> tuple[list[str], list[str], list[str]]:
        """(init, update, after) statements of pass 1."""
        return (_typed(self.init, compute), _typed(self.update, compute), self._finished(self.after, compute))

    def _finished(self, lines: tuple[str, ...], compute: str) -> list[str]:
        inverse = [f"{self.inverse[0]} = {rsqrt(self.inverse[1], compute)}"] if self.inverse else []
        return _typed(lines, compute) + inverse


def _typed(lines: tuple[str, ...], compute: str) -> list[str]:
    """Template statements with ``{acc}`` replaced by the Triton compute dtype."""
    return [line.format(acc=TL_DTYPES[compute]) for line in lines]


REDUCTIONS = {
    "sum": _Reduction("0.0", "acc + p", "tl.sum"),
    "max": _Reduction(NEG_INF, "tl.maximum(acc, p)", "tl.max"),
    "min": _Reduction(POS_INF, "tl.minimum(acc, p)", "tl.min"),
}
_SOFTMAX = _Normalization(
    identity=NEG_INF,
    registers=("row_max = tl.max(p, axis=1)", "row_sum = tl.sum(tl.exp(p - row_max[:, None]), axis=1)"),
    init=(f"row_max = tl.full([BLOCK_ROWS], {NEG_INF}, {{acc}})",
          "row_sum = tl.zeros([BLOCK_ROWS], dtype={acc})"),
    update=("new_max = tl.maximum(row_max, tl.max(p, axis=1))",
            "row_sum = row_sum * tl.exp(row_max - new_max) + tl.sum(tl.exp(p - new_max[:, None]), axis=1)",
            "row_max = new_max"),
    after=(),
    value="tl.exp(p - row_max[:, None]) / row_sum[:, None]",
    pass1="the running max and the sum of exponentials rescaled to it (online softmax)")
NORMALIZATIONS = {
    "softmax": _SOFTMAX,
    "log_softmax": replace(_SOFTMAX, value="p - row_max[:, None] - tl.log(row_sum)[:, None]"),
    "layer_norm": _Normalization(
        identity="0.0",
        registers=("mean = tl.sum(p, axis=1) / n_cols",
                   "diff = tl.where(mask, p - mean[:, None], 0.0)",
                   "var = tl.sum(diff * diff, axis=1) / n_cols  # biased variance, like torch"),
        init=("mean = tl.zeros([BLOCK_ROWS], dtype={acc})",
              "m2 = tl.zeros([BLOCK_ROWS], dtype={acc})  # sum of squared deviations from the mean"),
        update=("n_chunk = tl.minimum(n_cols - start, BLOCK_COLS)",
                "chunk_mean = tl.sum(p, axis=1) / n_chunk",
                "diff = tl.where(mask, p - chunk_mean[:, None], 0.0)",
                "delta = chunk_mean - mean",
                "share = n_chunk.to({acc}) / (start + n_chunk)  # this chunk's share of the columns seen so far",
                "mean += delta * share",
                "m2 += tl.sum(diff * diff, axis=1) + delta * delta * start * share"),
        after=("var = m2 / n_cols  # biased variance, like torch",),
        value="(p - mean[:, None]) * inv_std[:, None]",
        pass1="mean and variance, each chunk's statistics merged into the running ones (Chan et al.)",
        inverse=("inv_std", "var + eps")),
    "rms_norm": _Normalization(
        identity="0.0",
        registers=("mean_sq = tl.sum(p * p, axis=1) / n_cols",),
        init=("sum_sq = tl.zeros([BLOCK_ROWS], dtype={acc})",),
        update=("sum_sq += tl.sum(p * p, axis=1)",),
        after=("mean_sq = sum_sq / n_cols",),
        value="p * inv_rms[:, None]",
        pass1="the sum of squares",
        inverse=("inv_rms", "mean_sq + eps")),
}


@dataclass(frozen=True)
class _Rows:
    """The spec's problem: row dims, block shape, and which extras each phase reads."""

    spec: RowReduceSpec
    rows: dict  # {label: dim} of the leading dims of size > 1 (or one of size 1)
    n_rows: int
    n_cols: int
    block_rows: int
    block_cols: int
    prologue_inputs: tuple[int, ...]
    row_inputs: tuple[int, ...]  # weight, bias, then the epilogue's inputs: read per result element
    compute: str  # the dtype the kernel computes in

    @property
    def full_row(self) -> bool:
        return self.spec.kind in NORMALIZATIONS

    @property
    def moments(self) -> bool:
        return self.spec.kind == "moments"

    @property
    def looped(self) -> bool:
        return self.n_cols > self.block_cols

    @property
    def affine(self) -> list[tuple[str, int]]:
        """(operator, extra index) of the norm's weight and bias."""
        s = self.spec
        return [(op, i) for op, i in (("*", s.weight), ("+", s.bias)) if i is not None]

    def column_tensors(self) -> set[str]:
        """Tensors read or written per column (all but a sum/max/min's out and epilogue inputs)."""
        per_column = set(self.prologue_inputs) | (set(self.row_inputs) if self.full_row else set())
        return {"x"} | ({"out"} if self.full_row or self.moments else set()) | {f"in{i}" for i in per_column}

    def row_invariant(self, t: str) -> bool:
        """A per-column input that every row shares (a norm's weight): read as one row of BLOCK_COLS."""
        if not t.startswith("in") or t not in self.column_tensors():
            return False
        i = int(t[2:])
        shared = all(n == 1 for n in self.spec.extras[i].shape[:-1])
        return shared and (self.full_row or i not in self.row_inputs)

    def layout(self, t: str, operand) -> dict:
        """``{label: dim}`` of the strides ``t`` is addressed with."""
        col = {"col": len(operand.shape) - 1} if t in self.column_tensors() else {}
        return col if self.row_invariant(t) else {**self.rows, **col}

    def tensors(self) -> list[tuple[str, object, str]]:
        used = sorted(set(self.prologue_inputs) | set(self.row_inputs))
        return [("x", self.spec.x, "x"), ("out", self.spec.out, "out")] + [
            (f"in{i}", self.spec.extras[i], "extra input") for i in used]


def _analyse(spec: RowReduceSpec) -> _Rows:
    if spec.kind not in REDUCTIONS and spec.kind not in NORMALIZATIONS and spec.kind not in ("moments", "logsumexp"):
        raise UnsupportedSpec(f"unknown row reduction {spec.kind!r}")
    if spec.kind == "moments" and spec.epilogue != ("acc",):
        raise UnsupportedSpec("moments stores its two statistics as they are (no epilogue)")
    check_dtypes(spec.x, spec.out, *spec.extras)
    check_power_of_two(block=spec.block)
    x = spec.x.shape
    full_row = spec.kind in NORMALIZATIONS
    out = x if full_row else x[:-1] + (2 if spec.kind == "moments" else 1,)
    if not x or spec.out.shape != out:
        raise UnsupportedSpec(f"{spec.kind} of x {x} cannot give out {spec.out.shape}")
    if not full_row and (spec.weight, spec.bias) != (None, None):
        raise UnsupportedSpec(f"{spec.kind} takes no weight or bias")
    affine = [i for i in (spec.weight, spec.bias) if i is not None]
    if any(not 0 <= i < len(spec.extras) for i in affine):
        raise UnsupportedSpec(f"weight/bias {affine} out of range of {len(spec.extras)} extra inputs")
    prologue_inputs = epilogue.inputs(spec.prologue, len(spec.extras))
    epilogue_inputs = epilogue.inputs(spec.epilogue, len(spec.extras))
    for i in prologue_inputs + affine:
        check_broadcast(spec.extras[i], x, f"extra input {i}")
    for i in epilogue_inputs:
        check_broadcast(spec.extras[i], spec.out.shape, f"extra input {i}")
    rows = {str(d): d for d in range(len(x) - 1) if x[d] > 1} or {"0": None}
    n_rows, n_cols = math.prod(x[:-1]), x[-1]
    block_cols = min(spec.block, next_power_of_two(n_cols))
    block_rows = min(next_power_of_two(n_rows), max(spec.block // block_cols, 1))
    row_inputs = tuple(dict.fromkeys(affine + epilogue_inputs))
    return _Rows(spec, rows, n_rows, n_cols, block_rows, block_cols, tuple(prologue_inputs), row_inputs,
                 compute_dtype(spec))


def _takes_eps(spec: RowReduceSpec) -> bool:
    return spec.kind.endswith("norm") or spec.kind == "moments"


def kernel_params(spec: RowReduceSpec) -> list[Param]:
    r = _analyse(spec)
    inner = {f"size_{label}": spec.x.shape[d] for label, d in list(r.rows.items())[1:]}
    stride_params = []
    for t, operand, _ in r.tensors():
        stride_params += strides(t, operand, r.layout(t, operand))
    eps = [Param("eps", repr(float(spec.eps)), scalar_kind(r.compute), float(spec.eps))] if _takes_eps(spec) else []
    blocks = [Param("BLOCK_ROWS", str(r.block_rows), "constexpr", r.block_rows),
              Param("BLOCK_COLS", str(r.block_cols), "constexpr", r.block_cols)]
    return ([pointer(t, o, role) for t, o, role in r.tensors()]
            + sizes({"n_rows": r.n_rows, "n_cols": r.n_cols}, by_name=True) + sizes(inner)
            + stride_params + eps + blocks)


# ------------------------------------------------------------------------------------------- kernel bodies

def _load_tile(r: _Rows, t: str) -> str:
    if r.row_invariant(t):
        return load_value(f"tl.load({t}_ptr + cols[None, :] * stride_{t}_col, mask=mask_cols[None, :], other=0.0)",
                          r.compute)
    return load_value(f"tl.load({t}_ptr + {t}_row[:, None] + cols[None, :] * stride_{t}_col, mask=mask, other=0.0)",
                      r.compute)


def _preamble(r: _Rows) -> list[str]:
    labels = list(r.rows)
    lines = ["rows = tl.program_id(axis=0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)",
             "mask_rows = rows < n_rows",
             "# row index -> coordinates of the leading dims; size-1 dims broadcast through stride 0"]
    lines += unravel("rows", [f"r{label}" for label in labels], [f"size_{label}" for label in labels])
    return lines + [f"{t}_row = " + dot_offset([(f"r{label}", f"stride_{t}_{label}") for label in labels])
                    for t, _, _ in r.tensors() if not r.row_invariant(t)]


def _chunk(r: _Rows, start: str | None, identity: str) -> list[str]:
    """Load BLOCK_COLS columns (from ``start``) of x and the prologue's inputs; ``p`` = prologue, masked."""
    lines = [f"cols = {start} + tl.arange(0, BLOCK_COLS)" if start else "cols = tl.arange(0, BLOCK_COLS)",
             "mask_cols = cols < n_cols",
             "mask = mask_rows[:, None] & mask_cols[None, :]",
             f"x = {_load_tile(r, 'x')}"]
    lines += [f"in{i} = {_load_tile(r, f'in{i}')}" for i in r.prologue_inputs]
    leaves = {("x",): "x", **{("in", i): f"in{i}" for i in r.prologue_inputs}}
    stmts, result = epilogue.render(r.spec.prologue, leaves, "[BLOCK_ROWS, BLOCK_COLS]", prefix="q", compute=r.compute)
    return lines + stmts + [f"p = tl.where(mask, {result}, {identity})  # prologue: "
                            f"{format_expr(r.spec.prologue)}"]


def _finish_rows(r: _Rows) -> list[str]:
    """sum/max/min: the epilogue on one value per row, stored under the row mask."""
    s = r.spec
    lines = [f"# epilogue: {format_expr(s.epilogue)}, stored as {s.out.dtype}"]
    lines += [f"in{i} = " + load_value(f"tl.load(in{i}_ptr + in{i}_row, mask=mask_rows, other=0.0)", r.compute)
              for i in r.row_inputs]
    stmts, result = epilogue.render(s.epilogue, _epilogue_leaves(r), "[BLOCK_ROWS]", compute=r.compute)
    stored = store_value(result, s.out.dtype, r.compute)
    return lines + stmts + [f"tl.store(out_ptr + out_row, {stored}, mask=mask_rows)"]


def _finish_tile(r: _Rows) -> list[str]:
    """Full-row kinds: weight, bias and epilogue on ``acc``, stored under the tile mask."""
    s = r.spec
    lines = [f"in{i} = {_load_tile(r, f'in{i}')}" for i in r.row_inputs if i not in r.prologue_inputs]
    lines += [f"acc = acc {op} in{i}" for op, i in r.affine]
    stmts, result = epilogue.render(s.epilogue, _epilogue_leaves(r), "[BLOCK_ROWS, BLOCK_COLS]", compute=r.compute)
    return lines + [f"# epilogue: {format_expr(s.epilogue)}, stored as {s.out.dtype}"] + stmts + [
        f"tl.store(out_ptr + out_row[:, None] + cols[None, :] * stride_out_col, "
        f"{store_value(result, s.out.dtype, r.compute)}, mask=mask)"]


def _epilogue_leaves(r: _Rows) -> dict:
    return {("acc",): "acc", **{("in", i): f"in{i}" for i in r.row_inputs}}


def _loop(body: list[str]) -> list[str]:
    return ["for start in range(0, n_cols, BLOCK_COLS):"] + indent(body)


def _reduction_body(r: _Rows) -> list[str]:
    k = REDUCTIONS[r.spec.kind]
    return ([f"# x is read once, BLOCK_COLS columns of BLOCK_ROWS rows per step, into an elementwise {r.spec.kind}",
             f"acc = tl.full([BLOCK_ROWS, BLOCK_COLS], {k.identity}, {TL_DTYPES[r.compute]})"]
            + _loop(_chunk(r, "start", k.identity) + [f"acc = {k.combine}"])
            + [f"acc = {k.reduce}(acc, axis=1)"] + _finish_rows(r))


def _normalization_body(r: _Rows) -> list[str]:
    k = NORMALIZATIONS[r.spec.kind]
    if not r.looped:
        return (["# the row fits one chunk: x is read once and stays in registers"]
                + _chunk(r, None, k.identity) + k.in_registers(r.compute) + [f"acc = {k.value}"] + _finish_tile(r))
    init, update, after = k.looped(r.compute)
    return (init + ["# pass 1 of 2 over the row (x is read twice in all):", f"# {k.pass1}"]
            + _loop(_chunk(r, "start", k.identity) + update) + after
            + ["# pass 2 of 2: normalize, apply the epilogue, store"]
            + _loop(_chunk(r, "start", k.identity) + [f"acc = {k.value}"] + _finish_tile(r)))


def _logsumexp_body(r: _Rows) -> list[str]:
    """log(sum(exp(x - shift))) + shift, shift = the row's max, or 0 where that is infinite (as PyTorch: a row
    of -inf gives -inf, a row holding +inf gives +inf). x is read once; a longer row rescales the running sum
    whenever a chunk raises the max."""
    shift = 'tl.where(tl.abs({m}) == float("inf"), 0.0, {m})'
    if not r.looped:
        stats = (["# the row fits one chunk: x is read once"] + _chunk(r, None, NEG_INF)
                 + ["row_max = tl.max(p, axis=1)", f"shift = {shift.format(m='row_max')}",
                    "row_sum = tl.sum(tl.exp(p - shift[:, None]), axis=1)"])
    else:
        acc = TL_DTYPES[r.compute]
        stats = ([f"row_max = tl.full([BLOCK_ROWS], {NEG_INF}, {acc})", f"shift = tl.zeros([BLOCK_ROWS], dtype={acc})",
                  f"row_sum = tl.zeros([BLOCK_ROWS], dtype={acc})",
                  "# one pass over the row: the running max, and the sum of exponentials rescaled to it"]
                 + _loop(_chunk(r, "start", NEG_INF)
                         + ["row_max = tl.maximum(row_max, tl.max(p, axis=1))",
                            f"new_shift = {shift.format(m='row_max')}",
                            "row_sum = row_sum * tl.exp(shift - new_shift) "
                            "+ tl.sum(tl.exp(p - new_shift[:, None]), axis=1)",
                            "shift = new_shift"]))
    return stats + ["acc = tl.log(row_sum) + shift"] + _finish_rows(r)


def _moments_body(r: _Rows) -> list[str]:
    k = NORMALIZATIONS["layer_norm"]
    if r.looped:
        init, update, after = k.looped(r.compute)
        stats = (init + ["# one pass over the row:", f"# {k.pass1}"]
                 + _loop(_chunk(r, "start", k.identity) + update) + after)
    else:
        stats = ["# the row fits one chunk: x is read once"] + _chunk(r, None, k.identity) + k.in_registers(r.compute)
    dtype = r.spec.out.dtype
    return stats + [f"# mean and 1/std of each row, side by side, stored as {dtype}",
                    f"tl.store(out_ptr + out_row, {store_value('mean', dtype, r.compute)}, mask=mask_rows)",
                    f"tl.store(out_ptr + out_row + stride_out_col, {store_value('inv_std', dtype, r.compute)}, "
                    "mask=mask_rows)"]


def kernels(spec: RowReduceSpec, name: str) -> list[Kernel]:
    r = _analyse(spec)
    special = {"moments": _moments_body, "logsumexp": _logsumexp_body}.get(spec.kind)
    body = _preamble(r) + (_normalization_body(r) if r.full_row else special(r) if special else _reduction_body(r))
    return [Kernel(f"{name}_kernel", kernel_params(spec), indent(body), warps_for(r.block_rows * r.block_cols))]


def render(spec: RowReduceSpec, name: str, header_text: str = "") -> str:
    r = _analyse(spec)
    (kernel,) = kernels(spec, name)
    x_reads = 2 if r.full_row and r.looped else 1
    reads = [("x" if x_reads == 1 else "x (twice)", x_reads * nbytes(spec.x))] + [
        (t, nbytes(o)) for t, o, _ in r.tensors()[2:]]
    names = {"weight": spec.weight, "bias": spec.bias}
    affine = ", ".join(f"{k}=in{i}" for k, i in names.items() if i is not None)
    summary = [f"row reduction {spec.kind} over the last dim of x{list(spec.x.shape)} {spec.x.dtype} "
               f"-> out{list(spec.out.shape)} {spec.out.dtype}: {r.n_rows} rows of {r.n_cols}",
               f"prologue: {format_expr(spec.prologue)}; epilogue: {format_expr(spec.epilogue)}"
               + (f"; {affine}, eps={spec.eps}" if _takes_eps(spec) else ""),
               f"BLOCK_ROWS={r.block_rows} BLOCK_COLS={r.block_cols} ({'looped' if r.looped else 'one chunk'}), "
               f"num_warps={kernel.num_warps}"] + traffic(reads, [("out", nbytes(spec.out))])
    body = [f"    n_rows, n_cols = {r.n_rows}, {r.n_cols}"] + kernel.launch(f"(triton.cdiv(n_rows, {r.block_rows}),)")
    args = ["out", "x"] + [f"in{i}" for i in range(len(spec.extras))]
    checks = [("out", spec.out), ("x", spec.x)] + [(f"in{i}", o) for i, o in enumerate(spec.extras)]
    doc = f"out = {spec.kind} over the last dim of x, with fused prologue and epilogue; x of any strides."
    return module_text(header(name, header_text, summary), [kernel], launcher(name, args, doc, checks, body))
