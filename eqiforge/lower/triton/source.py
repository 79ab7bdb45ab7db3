"""Shared pieces of the Triton templates: kernel parameters, signatures, launches, headers and index math.

A template describes each kernel's parameters once, as ``Param`` records. The kernel signature, the
launcher's call and the GPU-less static compilation (``resources.py``) all read that one list, so they
cannot disagree about order, names or types.

Conventions of the generated code:
- every tensor dim of size 1 broadcasts: the launcher passes stride 0 for it, so one index expression
  serves full and broadcast operands alike; only where a whole tile dim broadcasts (a GEMM bias, a norm
  weight) do the templates load one row or column instead, which saves registers and address math;
- dims of size 1 in the output are dropped from the index math (their coordinate is always 0);
- sizes and strides are runtime arguments; tile sizes are ``BLOCK_*`` constexprs;
- arithmetic runs in the kernel's compute dtype (``kernels.compute_dtype``): fp64 where the kernel touches
  fp64, else fp32; values are converted to it when loaded and to the stored dtype when stored.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ...ops import dtype_size
from ..kernels import Operand

TL_DTYPES = {"float64": "tl.float64", "float32": "tl.float32", "float16": "tl.float16", "bfloat16": "tl.bfloat16",
             "int64": "tl.int64", "int32": "tl.int32", "bool": "tl.int1"}
SIGNATURE_DTYPES = {"float64": "fp64", "float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "int64": "i64",
                    "int32": "i32", "bool": "i1"}
RULE = "# " + "-" * 100
PRECISIONS = ("ieee", "tf32", "tf32x3")  # tl.dot input precisions for fp32 operands


class UnsupportedSpec(ValueError):
    """A spec the templates cannot render; the runtime runs that kernel through PyTorch instead."""


@dataclass(frozen=True)
class Param:
    """One kernel parameter: its name, what the launcher passes, and its Triton signature type."""

    name: str
    host: str  # the launcher's argument expression
    kind: str  # "*fp16" (pointer), "i32", "fp32", "fp64" or "constexpr"
    value: object = None  # constexprs: the value; scalars: what a launch on contiguous tensors passes
    note: str = ""

    @property
    def is_constexpr(self) -> bool:
        return self.kind == "constexpr"


@dataclass
class Kernel:
    """A @triton.jit function: parameters, body statements (indented one level) and launch options."""

    name: str
    params: list[Param]
    body: list[str]
    num_warps: int = 4
    num_stages: int | None = None
    doc: str = ""

    def source(self) -> list[str]:
        lines = ["@triton.jit", f"def {self.name}("]
        for p in self.params:
            lines.append(_with_note(f"    {p.name}{_annotation(p)},", p.note))
        lines.append("):")
        if self.doc:
            lines.append(f'    """{self.doc}"""')
        return lines + self.body

    def launch(self, grid: str) -> list[str]:
        """The launcher's call: one keyword argument per line, then the launch options."""
        lines = [f"    {self.name}[{grid}]("]
        lines += [_with_note(f"        {p.name}={p.host},", p.note if p.host == "0" else "") for p in self.params]
        lines.append(f"        num_warps={self.num_warps},")
        if self.num_stages is not None:
            lines.append(f"        num_stages={self.num_stages},")
        return lines + ["    )"]


def _annotation(p: Param) -> str:
    """A parameter's type annotation: constexprs, and fp64 scalars (Triton passes a Python float as fp32
    unless the parameter is annotated)."""
    return {"constexpr": ": tl.constexpr", "fp64": ": tl.float64"}.get(p.kind, "")


def _with_note(code: str, note: str) -> str:
    return f"{code:<40}# {note}" if note else code


def check_power_of_two(**blocks: int) -> None:
    for label, block in blocks.items():
        if block < 1 or block & (block - 1):
            raise UnsupportedSpec(f"{label}={block} is not a power of two (tl.arange needs one)")


def check_dtypes(*operands: Operand) -> None:
    for o in operands:
        if o.dtype not in TL_DTYPES:
            raise UnsupportedSpec(f"dtype {o.dtype} is not supported by the Triton templates")


def check_broadcast(operand: Operand, shape: tuple[int, ...], what: str) -> None:
    """``operand`` must have ``shape``'s rank and broadcast to it along its size-1 dims."""
    if len(operand.shape) != len(shape) or any(a not in (1, b) for a, b in zip(operand.shape, shape)):
        raise UnsupportedSpec(f"{what} of shape {operand.shape} does not broadcast to {shape}")


def next_power_of_two(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def warps_for(elements: int) -> int:
    """num_warps for a tile of ``elements`` values: about 256 per warp, between 1 and 16 warps."""
    return min(max(elements // 256, 1), 16)


def pointer(tensor: str, operand: Operand, role: str) -> Param:
    return Param(f"{tensor}_ptr", tensor, "*" + SIGNATURE_DTYPES[operand.dtype],
                 note=f"{role}: {list(operand.shape)} {operand.dtype}")


def sizes(values: dict[str, int], by_name: bool = False) -> list[Param]:
    """i32 size parameters ``{name: value}``; the launcher passes the value, or its variable ``name``."""
    return [Param(name, name if by_name else str(value), "i32", value) for name, value in values.items()]


def strides(tensor: str, operand: Operand, dims: dict[str, int | None]) -> list[Param]:
    """One stride parameter per ``{label: dim}``; a size-1 dim (or ``None``) gets stride 0: it broadcasts."""
    params = []
    for label, dim in dims.items():
        broadcast = dim is None or operand.shape[dim] == 1
        host = "0" if broadcast else f"{tensor}.stride({dim})"
        contiguous = 0 if broadcast else math.prod(operand.shape[dim + 1:])
        params.append(Param(f"stride_{tensor}_{label}", host, "i32", contiguous,
                            note="size 1: broadcast" if broadcast else ""))
    return params


def unravel(flat: str, coords: list[str], extents: list[str]) -> list[str]:
    """Statements that split a row-major flat index into coordinates (``extents[i]`` is coords[i]'s size)."""
    if len(coords) == 1:
        return [f"{coords[0]} = {flat}"]
    lines, rest = [], flat
    for coord, extent in zip(coords[:1:-1], extents[:1:-1]):  # innermost first, down to the third
        lines += [f"{coord} = {rest} % {extent}", f"rest = {rest} // {extent}"]
        rest = "rest"
    return lines + [f"{coords[1]} = {rest} % {extents[1]}", f"{coords[0]} = {rest} // {extents[1]}"]


def indent(lines: list[str]) -> list[str]:
    return ["    " + line for line in lines]


def dot_offset(terms: list[tuple[str, str]]) -> str:
    """``c0 * s0 + c1 * s1`` for ``[(coord, stride), ...]``."""
    return " + ".join(f"{coord} * {stride}" for coord, stride in terms)


def header(name: str, text: str, summary: list[str]) -> list[str]:
    """The comment block above a kernel: the caller's text (source term, rules, prediction) and the spec."""
    lines = [RULE, f"# {name}"]
    lines += [f"# {line}".rstrip() for line in text.strip().splitlines()] if text.strip() else []
    lines += ["#"] + [f"# {line}".rstrip() for line in summary] + [RULE]
    return lines


def traffic(reads: list[tuple[str, int]], writes: list[tuple[str, int]], flops: int = 0) -> list[str]:
    """Summary lines counting the bytes a launch moves at the least (each tensor touched once)."""
    def fmt(items):
        return ", ".join(f"{what} {nbytes:,} B" for what, nbytes in items)
    total = sum(b for _, b in reads) + sum(b for _, b in writes)
    lines = [f"memory traffic: {total:,} B", f"  reads  {fmt(reads)}", f"  writes {fmt(writes)}"]
    if flops:
        lines.append(f"compute: {flops:,} FLOPs ({flops / max(total, 1):.1f} FLOPs per byte)")
    return lines


def store_value(expr: str, dtype: str, compute: str) -> str:
    """``expr`` (in the ``compute`` dtype) as the stored dtype."""
    return expr if dtype == compute else f"{expr}.to({TL_DTYPES[dtype]})"


def load_value(load: str, compute: str) -> str:
    """A ``tl.load`` expression converted to the ``compute`` dtype."""
    return f"{load}.to({TL_DTYPES[compute]})"


def scalar_kind(compute: str) -> str:
    """The signature type of a float scalar parameter (eps, scale): fp64 kernels take it unrounded."""
    return SIGNATURE_DTYPES[compute]


def rsqrt(x: str, compute: str) -> str:
    """1 / sqrt(x): fp64 divides by the correctly rounded square root, because ``tl.rsqrt`` lowers to
    ``rsqrt.approx.f64`` on NVIDIA GPUs (the interpreter's rsqrt is exact and would not show it)."""
    return f"(1.0 / tl.sqrt({x}))" if compute == "float64" else f"tl.rsqrt({x})"


def nbytes(operand: Operand) -> int:
    return math.prod(operand.shape) * dtype_size(operand.dtype)


def launcher(name: str, args: list[str], doc: str, checks: list[tuple[str, Operand]], body: list[str]) -> list[str]:
    """``def name(out, *operands)``: checks shapes, dtypes and int32 reach (never silent garbage), then ``body``."""
    return [
        f"def {name}({', '.join(args)}):",
        f'    """{doc}"""',
        "    for arg, t, shape, dtype in (",
        *(f'        ("{arg}", {arg}, {tuple(o.shape)}, torch.{o.dtype}),' for arg, o in checks),
        "    ):",
        "        if tuple(t.shape) != shape or t.dtype != dtype:",
        f'            raise ValueError(f"{name}: {{arg}} must be {{dtype}} of shape {{shape}}, '
        f'got {{t.dtype}} of shape {{tuple(t.shape)}}")',
        "        if sum((n - 1) * abs(s) for n, s in zip(t.shape, t.stride())) >= 2**31:",
        f'            raise ValueError(f"{name}: {{arg}} spans 2**31 elements or more; the kernel indexes with int32")',
        *body,
        "    return out",
    ]


def module_text(head: list[str], kernels: list[Kernel], launch: list[str]) -> str:
    parts = [head]
    for k in kernels:
        parts += [["", ""], k.source()]
    parts += [["", ""], launch]
    return "\n".join(line for part in parts for line in part) + "\n"


def dot_constexprs(dtype: str, input_precision: str, operand: str) -> list[Param]:
    """The constexprs of a kernel built on tl.dot: fp32 dots take a precision (ieee, tf32, tf32x3), and bf16
    tiles are upcast when ``operand`` lives on the CPU (the interpreter's bf16 dot is wrong). fp64 dots take
    none: they are fp64 FMAs (DMMA on sm_80 and later)."""
    if dtype == "float32":
        if input_precision not in PRECISIONS:
            raise UnsupportedSpec(f"input_precision must be one of {PRECISIONS}, got {input_precision!r}")
        return [Param("DOT_PRECISION", repr(input_precision), "constexpr", input_precision)]
    if dtype == "bfloat16":
        return [Param("UPCAST_BF16", f'{operand}.device.type == "cpu"', "constexpr", False)]
    return []
