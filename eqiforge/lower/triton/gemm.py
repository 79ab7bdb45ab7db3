"""GEMM template: ``out[..., m, n] = epilogue(sum_k A[..., m, k] * B[..., k, n])`` as one Triton kernel.

The kernel is the tutorial's tiled matmul with the choices a plan needs made explicit:
- **Batch dims**, any number: grid axis 0 enumerates (batch, tile) pairs and the kernel unravels the flat
  batch index into one coordinate per batch dim, each with its own strides, so permuted or broadcast batches
  are read in place (no host-side copies or flattening). Batch dims of size 1 drop out.
- **Operand layouts** by strides only: a transposed operand (``a_transposed``: A given as [..., K, M]) is
  read in place; the launcher passes the strides of its last two dims swapped.
- **Tails**: M, N and K that are not tile multiples (1 included) are masked; no modulo wrap-around.
- **Grouped tile order** (GROUP_M): programs that run together share columns of B in the L2 cache.
- **Precision**: fp32 accumulation, fp64 for fp64 operands; the epilogue computes in the kernel's compute
  dtype (``kernels.compute_dtype``: fp64 when anything it touches is fp64). fp32 tiles go to ``tl.dot`` with
  ``input_precision`` (default ``"ieee"``: exact like PyTorch's fp32 matmul; ``"tf32"`` is the fast GPU
  choice). fp64 tiles are multiplied in fp64 (DMMA on sm_80 and later).
  fp16/bf16 tiles go to the tensor cores as they are, except under the Triton interpreter, whose bf16
  arithmetic is wrong: there the launcher sets ``UPCAST_BF16`` (from the tensors' device) and bf16 tiles are
  upcast to fp32 after loading.
- **Split-K** (deterministic, no atomics): program (tile, s) sums K slice s into a workspace
  [split_k, batch, M, N] of the accumulator's dtype; a second small kernel adds the slices in a fixed order, then
  applies the epilogue (so the epilogue always sees the full sum), casts and stores.
- **Epilogue**: an Epi over the accumulator tile and extra inputs loaded with broadcasting (stride 0 on
  size-1 dims), cast to the output dtype, stored under the tile mask.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ...ops.fused import format_expr
from ...ops import dtype_size
from ..kernels import GemmSpec, compute_dtype
from . import epilogue
from .source import (SIGNATURE_DTYPES, TL_DTYPES, Kernel, Param, UnsupportedSpec, check_broadcast, check_dtypes,
                     check_power_of_two, dot_constexprs, dot_offset, header, indent, launcher, load_value, module_text,
                     nbytes, pointer, sizes, store_value, strides, traffic, unravel)

DOT_DTYPES = ("float64", "float32", "float16", "bfloat16")


@dataclass(frozen=True)
class _Gemm:
    """The spec's problem read off its shapes: where M, N, K and the batch dims live in each operand."""

    spec: GemmSpec
    batch: tuple[int, ...]  # batch dims of size > 1
    M: int
    N: int
    K: int
    a_dims: dict  # {"m": dim, "k": dim}
    b_dims: dict  # {"k": dim, "n": dim}
    extras: tuple[int, ...]  # extra inputs the epilogue reads
    compute: str  # the epilogue's dtype

    @property
    def acc(self) -> str:
        """The accumulator's dtype: tl.dot sums fp64 tiles in fp64, all others in fp32."""
        return "float64" if self.spec.a.dtype == "float64" else "float32"

    @property
    def n_batch(self) -> int:
        return math.prod(self.spec.out.shape[:-2])

    @property
    def split(self) -> bool:
        return self.spec.split_k > 1

    @property
    def k_per_split(self) -> int:
        """K slice per split program, rounded up to a multiple of BLOCK_K."""
        block_k = self.spec.tile.block_k
        return math.ceil(math.ceil(self.K / self.spec.split_k) / block_k) * block_k

    def batch_coords(self) -> dict[str, int]:
        return {f"batch{d}": d for d in self.batch}

    def base(self, tensor: str) -> str:
        """The tensor's pointer moved to this program's batch."""
        return f"{tensor}_ptr + {tensor}_batch" if self.batch else f"{tensor}_ptr"

    def tile_dims(self, tensor: str, operand) -> dict[str, int]:
        """``{"m": dim, "n": dim}`` an out-shaped tensor varies along in a tile. An extra input broadcast along
        M is read as one BLOCK_N row (or one value: stride 0), one broadcast along N as one BLOCK_M column."""
        m, n = len(operand.shape) - 2, len(operand.shape) - 1
        if tensor == "out":
            return {"m": m, "n": n}
        if operand.shape[m] == 1:
            return {"n": n}
        return {"m": m} if operand.shape[n] == 1 else {"m": m, "n": n}

    def tile_load(self, tensor: str, operand) -> tuple[str, str]:
        """(pointers, mask) of this program's tile of an out-shaped tensor, in the shape ``tile_dims`` gives."""
        dims = self.tile_dims(tensor, operand)
        terms = {"m": f"offs_m[:, None] * stride_{tensor}_m", "n": f"offs_n[None, :] * stride_{tensor}_n"}
        masks = {"m": "mask_m[:, None]", "n": "mask_n[None, :]"}
        ptrs = " + ".join([self.base(tensor)] + [terms[d] for d in dims])
        return ptrs, "mask" if len(dims) == 2 else masks[next(iter(dims))]


def _analyse(spec: GemmSpec) -> _Gemm:
    """Check the spec and read M, N, K and the operand dims off its shapes."""
    out, rank = spec.out.shape, len(spec.out.shape)
    a_dims = {"m": rank - 1, "k": rank - 2} if spec.a_transposed else {"m": rank - 2, "k": rank - 1}
    b_dims = {"k": rank - 1, "n": rank - 2} if spec.b_transposed else {"k": rank - 2, "n": rank - 1}
    a, b = spec.a.shape, spec.b.shape
    if rank < 2 or len(a) != rank or len(b) != rank or a[:-2] != out[:-2] or b[:-2] != out[:-2] \
            or a[a_dims["k"]] != b[b_dims["k"]] or (a[a_dims["m"]], b[b_dims["n"]]) != out[-2:]:
        raise UnsupportedSpec(f"GEMM shapes do not agree: A {a}, B {b}, out {out} "
                              f"(a_transposed={spec.a_transposed}, b_transposed={spec.b_transposed})")
    if spec.a.dtype != spec.b.dtype or spec.a.dtype not in DOT_DTYPES:
        raise UnsupportedSpec(f"GEMM operands must share a dtype of {DOT_DTYPES}, got {spec.a.dtype}, {spec.b.dtype}")
    check_dtypes(spec.out, *spec.extras)
    t = spec.tile
    check_power_of_two(BLOCK_M=t.block_m, BLOCK_N=t.block_n, BLOCK_K=t.block_k)
    if min(t.block_m, t.block_n, t.block_k) < 16 or spec.split_k < 1:
        raise UnsupportedSpec(f"tl.dot needs tiles of at least 16 and split_k >= 1, got {t}, split_k={spec.split_k}")
    for i, extra in enumerate(spec.extras):
        check_broadcast(extra, out, f"epilogue input {i}")
    batch = tuple(d for d in range(rank - 2) if out[d] > 1)
    return _Gemm(spec, batch, out[-2], out[-1], a[a_dims["k"]], a_dims, b_dims,
                 tuple(epilogue.inputs(spec.epilogue, len(spec.extras))), compute_dtype(spec))


# ------------------------------------------------------------------------------------------- parameters

def _workspace(g: _Gemm) -> Param:
    kind = SIGNATURE_DTYPES[g.acc]
    return Param("ws_ptr", "ws", "*" + kind, note=f"{kind} partial sums [split_k, batch, M, N]")


def _ws_stride(g: _Gemm) -> Param:
    return Param("stride_ws_split", "ws.stride(0)", "i32", g.n_batch * g.M * g.N)


def _epilogue_params(g: _Gemm) -> tuple[list[Param], list[Param]]:
    """Pointers and strides of the tensors the epilogue touches: out and the extra inputs it reads."""
    named = [("out", g.spec.out, "out")] + [(f"in{i}", g.spec.extras[i], "epilogue input") for i in g.extras]
    return ([pointer(t, o, role) for t, o, role in named],
            [p for t, o, _ in named for p in strides(t, o, {**g.batch_coords(), **g.tile_dims(t, o)})])


def _batch_sizes(g: _Gemm) -> list[Param]:
    """Sizes the batch unravel divides by (all batch dims but the outermost)."""
    return sizes({f"size_batch{d}": g.spec.out.shape[d] for d in g.batch[1:]})


def _tile_constexprs(g: _Gemm) -> list[Param]:
    t = g.spec.tile
    return [Param("BLOCK_M", str(t.block_m), "constexpr", t.block_m),
            Param("BLOCK_N", str(t.block_n), "constexpr", t.block_n)]


def kernel_params(spec: GemmSpec, input_precision: str = "ieee") -> list[Param]:
    """Parameters of the main kernel (the split-K reduce kernel has its own)."""
    g = _analyse(spec)
    a_note = "A, read transposed" if spec.a_transposed else "A"
    b_note = "B, read transposed" if spec.b_transposed else "B"
    pointers = [pointer("a", spec.a, a_note), pointer("b", spec.b, b_note)]
    operand_strides = (strides("a", spec.a, {**g.batch_coords(), **g.a_dims})
                       + strides("b", spec.b, {**g.batch_coords(), **g.b_dims}))
    if g.split:
        pointers.append(_workspace(g))
        tail = [_ws_stride(g), Param("k_per_split", str(g.k_per_split), "i32", g.k_per_split, "a multiple of BLOCK_K")]
    else:
        epi_pointers, tail = _epilogue_params(g)
        pointers += epi_pointers
    consts = _tile_constexprs(g) + [Param("BLOCK_K", str(spec.tile.block_k), "constexpr", spec.tile.block_k),
                                    Param("GROUP_M", str(spec.tile.group_m), "constexpr", spec.tile.group_m)]
    consts += dot_constexprs(spec.a.dtype, input_precision, "a")
    shape = sizes({"M": g.M, "N": g.N, "K": g.K}, by_name=True) + _batch_sizes(g)
    return pointers + shape + operand_strides + tail + consts


def _reduce_params(g: _Gemm) -> list[Param]:
    epi_pointers, epi_strides = _epilogue_params(g)
    return ([_workspace(g)] + epi_pointers + sizes({"M": g.M, "N": g.N}, by_name=True) + _batch_sizes(g)
            + [_ws_stride(g)]
            + epi_strides + _tile_constexprs(g) + [Param("SPLIT_K", str(g.spec.split_k), "constexpr", g.spec.split_k)])


# ------------------------------------------------------------------------------------------- kernel bodies

def _program_ids(g: _Gemm, grouped: bool) -> list[str]:
    lines = ["pid = tl.program_id(axis=0)",
             "num_pid_m = tl.cdiv(M, BLOCK_M)",
             "num_pid_n = tl.cdiv(N, BLOCK_N)"]
    if g.batch:
        lines += ["batch = pid // (num_pid_m * num_pid_n)", "tile = pid % (num_pid_m * num_pid_n)"]
    else:
        lines += ["tile = pid"]
    if not grouped:
        return lines + ["pid_m = tile // num_pid_n", "pid_n = tile % num_pid_n"]
    return lines + [
        "# visit the tiles in groups of GROUP_M rows: programs running together share columns of B in L2",
        "num_pid_in_group = GROUP_M * num_pid_n",
        "first_pid_m = tile // num_pid_in_group * GROUP_M",
        "group_size_m = min(num_pid_m - first_pid_m, GROUP_M)",
        "pid_m = first_pid_m + tile % num_pid_in_group % group_size_m",
        "pid_n = tile % num_pid_in_group // group_size_m",
    ]


def _batch_offsets(g: _Gemm, tensors: list[str]) -> list[str]:
    if not g.batch:
        return []
    coords = list(g.batch_coords())
    lines = ["# flat batch index -> one coordinate per batch dim, each with its own strides"]
    lines += unravel("batch", coords, [f"size_{c}" for c in coords])
    return lines + [f"{t}_batch = " + dot_offset([(c, f"stride_{t}_{c}") for c in coords]) for t in tensors]


def _tile_offsets() -> list[str]:
    return ["offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)",
            "offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)",
            "mask_m = offs_m < M",
            "mask_n = offs_n < N",
            "mask = mask_m[:, None] & mask_n[None, :]"]


def _k_loop(g: _Gemm) -> list[str]:
    spec = g.spec
    if g.split:
        lines = ["# this program sums the K slice [k_start, k_end)",
                 "split = tl.program_id(axis=1)",
                 "k_start = split * k_per_split",
                 "k_end = tl.minimum(k_start + k_per_split, K)"]
        start, end, first_k = "k_start", "k_end", "(k_start + offs_k)"
    else:
        lines, start, end, first_k = [], "0", "K", "offs_k"
    lines += [
        "offs_k = tl.arange(0, BLOCK_K)",
        f"a_ptrs = {g.base('a')} + offs_m[:, None] * stride_a_m + {first_k}[None, :] * stride_a_k",
        f"b_ptrs = {g.base('b')} + {first_k}[:, None] * stride_b_k + offs_n[None, :] * stride_b_n",
        "# each step loads a BLOCK_M x BLOCK_K tile of A and a BLOCK_K x BLOCK_N tile of B for",
        "# 2 * BLOCK_M * BLOCK_N * BLOCK_K FLOPs; over the grid A is read cdiv(N, BLOCK_N) times and",
        "# B cdiv(M, BLOCK_M) times (the grouped order lets L2 absorb much of it)",
        f"acc = tl.zeros((BLOCK_M, BLOCK_N), dtype={TL_DTYPES[g.acc]})",
        f"for k in range({start}, {end}, BLOCK_K):",
    ]
    if g.K % spec.tile.block_k:
        lines += [f"    mask_k = offs_k < {end} - k",
                  "    a = tl.load(a_ptrs, mask=mask_m[:, None] & mask_k[None, :], other=0.0)",
                  "    b = tl.load(b_ptrs, mask=mask_k[:, None] & mask_n[None, :], other=0.0)"]
    else:
        lines += ["    # K is a multiple of BLOCK_K: only the M and N tails need masks",
                  "    a = tl.load(a_ptrs, mask=mask_m[:, None], other=0.0)",
                  "    b = tl.load(b_ptrs, mask=mask_n[None, :], other=0.0)"]
    if spec.a.dtype == "bfloat16":
        lines += ["    if UPCAST_BF16:  # the interpreter's bf16 arithmetic is wrong: compute in fp32 there",
                  "        a = a.to(tl.float32)",
                  "        b = b.to(tl.float32)"]
    precision = ", input_precision=DOT_PRECISION" if spec.a.dtype == "float32" else ""
    return lines + [f"    acc = tl.dot(a, b, acc{precision})",
                    "    a_ptrs += BLOCK_K * stride_a_k",
                    "    b_ptrs += BLOCK_K * stride_b_k"]


def _workspace_ptrs(g: _Gemm) -> str:
    batch = "batch * M * N + " if g.batch else ""
    return f"ws_ptr + {batch}offs_m[:, None] * N + offs_n[None, :]"


def _epilogue_and_store(g: _Gemm) -> list[str]:
    spec = g.spec
    lines = [f"# epilogue in {g.compute}: {format_expr(spec.epilogue)}, stored as {spec.out.dtype}"]
    if g.acc != g.compute:
        lines.append(f"acc = acc.to({TL_DTYPES[g.compute]})")
    for i in g.extras:
        ptrs, mask = g.tile_load(f"in{i}", spec.extras[i])
        lines += [f"in{i}_ptrs = {ptrs}",
                  f"in{i} = " + load_value(f"tl.load(in{i}_ptrs, mask={mask}, other=0.0)", g.compute)]
    leaves = {("acc",): "acc", **{("in", i): f"in{i}" for i in g.extras}}
    stmts, result = epilogue.render(spec.epilogue, leaves, "[BLOCK_M, BLOCK_N]", compute=g.compute)
    return lines + stmts + [f"out_ptrs = {g.tile_load('out', spec.out)[0]}",
                            f"tl.store(out_ptrs, {store_value(result, spec.out.dtype, g.compute)}, mask=mask)"]


def _main_body(g: _Gemm) -> list[str]:
    tensors = ["a", "b"] if g.split else ["a", "b", "out"] + [f"in{i}" for i in g.extras]
    lines = _program_ids(g, grouped=True) + _batch_offsets(g, tensors) + _tile_offsets() + _k_loop(g)
    if g.split:
        lines += [f"# this slice's partial sums go to the {g.acc} workspace; the reduce kernel adds the slices",
                  f"ws_ptrs = {_workspace_ptrs(g)} + split * stride_ws_split",
                  "tl.store(ws_ptrs, acc, mask=mask)"]
    else:
        lines += _epilogue_and_store(g)
    return indent(lines)


def _reduce_body(g: _Gemm) -> list[str]:
    lines = _program_ids(g, grouped=False) + _batch_offsets(g, ["out"] + [f"in{i}" for i in g.extras])
    lines += _tile_offsets() + [
        "# add the K slices in a fixed order: the result does not depend on scheduling",
        f"ws_ptrs = {_workspace_ptrs(g)}",
        f"acc = tl.zeros((BLOCK_M, BLOCK_N), dtype={TL_DTYPES[g.acc]})",
        "for split in range(SPLIT_K):",
        "    acc += tl.load(ws_ptrs + split * stride_ws_split, mask=mask, other=0.0)",
    ] + _epilogue_and_store(g)
    return indent(lines)


# --------------------------------------------------------------------------------------------- rendering

def kernels(spec: GemmSpec, name: str, input_precision: str = "ieee") -> list[Kernel]:
    """The main kernel, then (split-K only) the kernel that sums the slices and applies the epilogue."""
    g = _analyse(spec)
    t = spec.tile
    main = Kernel(f"{name}_kernel", kernel_params(spec, input_precision), _main_body(g), t.num_warps, t.num_stages)
    if not g.split:
        return [main]
    sum_slices = Kernel(f"{name}_reduce_kernel", _reduce_params(g), _reduce_body(g), t.num_warps,
                        doc="Sums the split-K partial products in order, applies the epilogue and stores.")
    return [main, sum_slices]


def _summary(g: _Gemm) -> list[str]:
    spec, t = g.spec, g.spec.tile
    ws = dtype_size(g.acc) * spec.split_k * g.n_batch * g.M * g.N if g.split else 0
    extras = [(f"in{i}", nbytes(spec.extras[i])) for i in g.extras]
    reads = [("A", nbytes(spec.a)), ("B", nbytes(spec.b))] + extras + ([("workspace", ws)] if ws else [])
    writes = [("out", nbytes(spec.out))] + ([("workspace", ws)] if ws else [])
    return [
        f"GEMM out{list(spec.out.shape)} {spec.out.dtype} = epilogue(A @ B): batch {g.n_batch}, "
        f"M={g.M}, N={g.N}, K={g.K}",
        f"A: {list(spec.a.shape)} {spec.a.dtype}{' (read transposed)' if spec.a_transposed else ''}; "
        f"B: {list(spec.b.shape)} {spec.b.dtype}{' (read transposed)' if spec.b_transposed else ''}",
        f"tile: BLOCK_M={t.block_m} BLOCK_N={t.block_n} BLOCK_K={t.block_k} GROUP_M={t.group_m}, "
        f"num_warps={t.num_warps} num_stages={t.num_stages}, split_k={spec.split_k}",
        f"epilogue: {format_expr(spec.epilogue)} -> {spec.out.dtype}",
    ] + traffic(reads, writes, 2 * g.n_batch * g.M * g.N * g.K)


def render(spec: GemmSpec, name: str, header_text: str = "", input_precision: str = "ieee") -> str:
    g = _analyse(spec)
    ks = kernels(spec, name, input_precision)
    t = spec.tile
    batches = f"{g.n_batch} * " if g.batch else ""
    body = [f"    M, N, K = {g.M}, {g.N}, {g.K}",
            f"    tiles = {batches}triton.cdiv(M, {t.block_m}) * triton.cdiv(N, {t.block_n})"]
    if g.split:
        body += [f"    ws = torch.empty(({spec.split_k}, {g.n_batch}, M, N), dtype=torch.{g.acc}, device=out.device)"]
        body += ks[0].launch(f"(tiles, {spec.split_k})") + ks[1].launch("(tiles,)")
    else:
        body += ks[0].launch("(tiles,)")
    args = ["out", "a", "b"] + [f"in{i}" for i in range(len(spec.extras))]
    checks = [("out", spec.out), ("a", spec.a), ("b", spec.b)] + [(f"in{i}", o) for i, o in enumerate(spec.extras)]
    doc = f"out = {format_expr(spec.epilogue)} with acc = a @ b; operands of any strides."
    return module_text(header(name, header_text, _summary(g)), ks, launcher(name, args, doc, checks, body))
