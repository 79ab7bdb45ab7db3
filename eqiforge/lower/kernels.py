"""Kernel specifications: what one generated kernel computes, independent of how it is rendered.

The kernel layer of the e-graph (GemmK, PointwiseK, RowReduceK, AttentionK nodes) is read back into these
plain records (``kernel_spec``); the Triton templates render them, profiling measures them. Tensor operands
are referred to by position; their shapes and dtypes travel with the spec so that a template needs nothing
else.

Fused expressions (``Epi``) are nested tuples, evaluated elementwise over the kernel's output tile:
    ("acc",)                      the GEMM accumulator or the reduction's result
    ("x",)                        the row-reduction kernel's current input element (prologue only)
    ("in", i)                     extra input i, broadcast to the output shape
    ("const", value)              a scalar
    ("un", name, e)               name in UNARY (eqiforge.ops.fused, from the op table)
    ("bin", name, e1, e2)         name in BINARY
    ("cast", dtype, e)            a dtype name of eqiforge.ops.DTYPES
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields

from ..cost.roofline import ATTENTION_BLOCK, ROW_BLOCK, attention_split  # the tiles priced are the tiles run
from ..ops.fused import BINARY, UNARY  # noqa: F401  (the operator names the forms below take)
from ..ir import Graph

ACC = ("acc",)


@dataclass(frozen=True)
class Operand:
    """A tensor a kernel reads or writes: its (logical) shape and dtype. Strides are taken at run time."""

    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True)
class Tile:
    block_m: int
    block_n: int
    block_k: int
    group_m: int = 8
    num_warps: int = 4
    num_stages: int = 3


@dataclass(frozen=True)
class GemmSpec:
    """out[..., m, n] = epilogue(sum_k A[..., m, k] * B[..., k, n]) over equal batch dims.

    ``a_transposed`` means operand A is given as a tensor of shape [..., K, M] and read transposed in place
    (likewise ``b_transposed``: B given as [..., N, K]); ``a.shape``/``b.shape`` are the given shapes.
    ``split_k`` > 1 splits the K loop across programs and sums the partial results (deterministically).
    Extra inputs have the output's rank and broadcast along their size-1 dims.
    """

    a: Operand
    b: Operand
    out: Operand
    a_transposed: bool = False
    b_transposed: bool = False
    tile: Tile = Tile(64, 64, 32)
    split_k: int = 1
    epilogue: tuple = ACC
    extras: tuple[Operand, ...] = ()


@dataclass(frozen=True)
class PointwiseSpec:
    """out = expr(inputs...) elementwise; inputs have the output's rank and broadcast along size-1 dims."""

    inputs: tuple[Operand, ...]
    out: Operand
    expr: tuple
    block: int = 1024


@dataclass(frozen=True)
class RowReduceSpec:
    """A reduction over the LAST dim of ``x`` (all other dims are rows), with fused prologue and epilogue.

    prologue: an Epi over ("x",) and extras (broadcast to x's shape) applied to each element before reducing.
    kind: sum | max | min | logsumexp produce one value per row (out shape: x's with last dim 1);
          moments: a layer norm's statistics, mean and 1/sqrt(biased variance + eps) (out: last dim 2);
          softmax | log_softmax | layer_norm | rms_norm produce a full row (out shape: x's shape);
          layer_norm/rms_norm take optional weight/bias as extras named by ``weight``/``bias`` (extra index).
    epilogue: an Epi over ("acc",) (the kernel's result element) and extras, broadcast to the out shape.
    """

    kind: str
    x: Operand
    out: Operand
    prologue: tuple = ("x",)
    epilogue: tuple = ACC
    extras: tuple[Operand, ...] = ()
    eps: float = 1e-5
    weight: int | None = None
    bias: int | None = None
    block: int = ROW_BLOCK


@dataclass(frozen=True)
class AttentionSpec:
    """Fused attention forward (online softmax over tiles of the key axis; S and P never reach memory):

        out[..., i, :] = sum_j softmax_j(scale * q_i . k_j + bias[..., i, j]) v_j

    q: [..., Sq, D]; k: [..., Sk, D] (``k_transposed``: given as [..., D, Sk] and read in place); v: [..., Sk, Dv];
    out: [..., Sq, Dv]. Batch dims: q's are the output's; k's and v's may have fewer heads in the
    last batch dim (grouped-query attention: head h reads key/value head h // (H // Hkv)); size-1
    batch dims of k, v and bias broadcast. ``causal``: key j is masked for query i when j > i + (Sk - Sq),
    and key tiles entirely above the diagonal are skipped, not just masked. ``bias``: an additive mask with
    the output's rank whose last two dims are [Sq, Sk] (size-1 dims broadcast).
    """

    q: Operand
    k: Operand
    v: Operand
    out: Operand
    scale: float
    causal: bool = False
    k_transposed: bool = False
    bias: Operand | None = None
    block_m: int = ATTENTION_BLOCK
    block_n: int = ATTENTION_BLOCK
    split: int = 1  # shares of the key axis run by separate programs, then combined (flash-decoding)


def compute_dtype(spec) -> str:
    """The dtype a kernel computes in: float64 when a tensor it touches or a cast in its expressions is
    float64, else float32 (half-precision tensors accumulate in float32, as ATen's kernels do). Never
    narrower than the program, so no float64 value is silently rounded to float32."""
    return "float64" if "float64" in _dtypes(tuple(getattr(spec, f.name) for f in fields(spec))) else "float32"


def _dtypes(value) -> set[str]:
    """The dtype names in a spec's field values: operands' dtypes and the dtypes expressions cast to."""
    if isinstance(value, Operand):
        return {value.dtype}
    if not isinstance(value, tuple):
        return set()
    cast = {value[1]} if value[:1] == ("cast",) else set()
    return cast.union(*(_dtypes(v) for v in value))


def kernel_spec(graph: Graph, i: int, sms: int | None = None):
    """(spec, operand node ids in launcher order) of kernel node ``i`` (its inputs are all read: the
    snapshot drops inputs that fused expressions do not read). ``sms``: the SMs of the device the plan was
    priced for, which choose an attention kernel's key-axis split as the cost model priced it."""
    n = graph.nodes[i]
    a, out = n.a, Operand(n.shape, n.dtype)
    operands = [Operand(graph.nodes[j].shape, graph.nodes[j].dtype) for j in n.inputs]
    if n.op == "GemmK":
        spec = GemmSpec(operands[0], operands[1], out, a.layout_a == "T", a.layout_b == "T", Tile(*a.tile),
                        a.split_k, a.epilogue, tuple(operands[2:]))
    elif n.op == "PointwiseK":
        spec = PointwiseSpec(tuple(operands), out, a.expr)
    elif n.op == "AttentionK":
        *batch, sq, _ = n.shape
        sk = operands[2].shape[-2]
        split = attention_split(math.prod(batch), sq, sk, sms) if sms else 1
        spec = AttentionSpec(*operands[:3], out, a.scale, bool(a.causal), a.layout_k == "T",
                             operands[3] if len(operands) > 3 else None, split=split)
    else:
        spec = RowReduceSpec(a.kind, operands[0], out, a.prologue, a.epilogue, tuple(operands[1:]), a.eps)
    return spec, list(n.inputs)
