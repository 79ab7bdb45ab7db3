"""Pointwise template: ``out = expr(in0, in1, ...)`` elementwise, inputs broadcast along their size-1 dims.

One program per BLOCK_SIZE of the flattened output. The flat index is unravelled into one coordinate per output
dim of size > 1 (straight-line code for the spec's shape, any rank) and every tensor is addressed through
its own strides, so non-contiguous, transposed and expanded (stride 0) inputs are read in place. Inputs
are converted to the compute dtype (fp32; fp64 when the kernel touches float64) after loading; the result
is cast to the output dtype when stored.
"""
from __future__ import annotations

import math

from ...ops.fused import format_expr
from ..kernels import PointwiseSpec, compute_dtype
from . import epilogue
from .source import (Kernel, Param, check_broadcast, check_dtypes, check_power_of_two, dot_offset, header, indent,
                     launcher, load_value, module_text, nbytes, next_power_of_two, pointer, sizes, store_value, strides,
                     traffic, unravel, warps_for)


def _check(spec: PointwiseSpec) -> None:
    check_dtypes(spec.out, *spec.inputs)
    check_power_of_two(block=spec.block)
    for i, operand in enumerate(spec.inputs):
        check_broadcast(operand, spec.out.shape, f"input {i}")


def _coords(spec: PointwiseSpec) -> dict[str, int | None]:
    """``{label: dim}`` of the output dims the index math walks: those of size > 1 (or one of size 1)."""
    dims = {str(d): d for d, n in enumerate(spec.out.shape) if n > 1}
    return dims or {"0": None}


def _used(spec: PointwiseSpec) -> list[int]:
    return epilogue.inputs(spec.expr, len(spec.inputs))


def _block(spec: PointwiseSpec) -> int:
    return min(spec.block, next_power_of_two(math.prod(spec.out.shape)))


def _tensors(spec: PointwiseSpec) -> list[tuple[str, object, str]]:
    """(name, operand, role) of the tensors the kernel touches: out and the inputs the expression reads."""
    return [("out", spec.out, "out")] + [(f"in{i}", spec.inputs[i], "input") for i in _used(spec)]


def kernel_params(spec: PointwiseSpec) -> list[Param]:
    _check(spec)
    coords = _coords(spec)
    inner = {f"size_{label}": spec.out.shape[d] for label, d in list(coords.items())[1:]}
    tensors = _tensors(spec)
    return ([pointer(t, o, role) for t, o, role in tensors]
            + sizes({"n_elements": math.prod(spec.out.shape)}, by_name=True) + sizes(inner)
            + [p for t, o, _ in tensors for p in strides(t, o, coords)]
            + [Param("BLOCK_SIZE", str(_block(spec)), "constexpr", _block(spec))])


def _body(spec: PointwiseSpec) -> list[str]:
    labels = list(_coords(spec))
    used = _used(spec)
    compute = compute_dtype(spec)

    def ptrs(t: str) -> str:
        return f"{t}_ptr + " + dot_offset([(f"i{label}", f"stride_{t}_{label}") for label in labels])

    lines = ["# one program per BLOCK_SIZE of the flattened output; every element is read and written once",
             "offs = tl.program_id(axis=0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)",
             "mask = offs < n_elements",
             "# flat output index -> coordinates (row-major); size-1 dims broadcast through stride 0"]
    lines += unravel("offs", [f"i{label}" for label in labels], [f"size_{label}" for label in labels])
    lines += [f"in{i} = " + load_value(f"tl.load({ptrs(f'in{i}')}, mask=mask, other=0.0)", compute) for i in used]
    stmts, result = epilogue.render(spec.expr, {("in", i): f"in{i}" for i in used}, "[BLOCK_SIZE]", compute=compute)
    lines += [f"# {format_expr(spec.expr)}, in {compute}"] + stmts
    lines.append(f"tl.store({ptrs('out')}, {store_value(result, spec.out.dtype, compute)}, mask=mask)")
    return indent(lines)


def kernels(spec: PointwiseSpec, name: str) -> list[Kernel]:
    return [Kernel(f"{name}_kernel", kernel_params(spec), _body(spec), warps_for(_block(spec)))]


def render(spec: PointwiseSpec, name: str, header_text: str = "") -> str:
    (kernel,) = kernels(spec, name)
    block = _block(spec)
    reads = [(t, nbytes(o)) for t, o, _ in _tensors(spec)[1:]]
    summary = [f"pointwise out{list(spec.out.shape)} {spec.out.dtype} = {format_expr(spec.expr)}",
               "inputs: " + (", ".join(f"in{i} {list(o.shape)} {o.dtype}" for i, o in enumerate(spec.inputs))
                             or "none"),
               f"BLOCK_SIZE={block}, num_warps={kernel.num_warps}"] + traffic(reads, [("out", nbytes(spec.out))])
    body = [f"    n_elements = {math.prod(spec.out.shape)}"] + kernel.launch(f"(triton.cdiv(n_elements, {block}),)")
    args = ["out"] + [f"in{i}" for i in range(len(spec.inputs))]
    checks = [("out", spec.out)] + [(f"in{i}", o) for i, o in enumerate(spec.inputs)]
    doc = f"out = {format_expr(spec.expr)} elementwise; inputs of any strides, broadcast along size-1 dims."
    return module_text(header(name, header_text, summary), [kernel], launcher(name, args, doc, checks, body))
