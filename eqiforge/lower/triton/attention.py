"""Attention template: ``out[..., i, :] = sum_j softmax_j(scale * q_i . k_j + bias[..., i, j]) v_j`` as one kernel.

Flash-attention forward: one program per (batch, BLOCK_M query tile); it walks the key axis in tiles of
BLOCK_N keys and keeps an online softmax, so neither the scores S nor the probabilities P reach memory:
- **Online softmax**: a running row max ``m_i``, a running sum ``l_i`` of exponentials relative to it and an
  accumulator ``acc`` of P @ V; when a tile raises the max, ``l_i`` and ``acc`` are rescaled by
  ``exp(m_old - m_new)``. The output is ``acc / l_i``, cast to the output dtype.
- **Batch dims**, any number, as in the GEMM: the flat batch index is unravelled into one coordinate per
  batch dim of size > 1 and every tensor has its own strides, so permuted q/k/v are read in place; size-1
  dims of k, v and bias broadcast (stride 0).
- **Grouped-query attention**: k and v may have Hkv heads in the last batch dim (the dim before the
  sequence) where q has H, H % Hkv == 0: query head h reads key/value head ``h // kv_group`` with
  kv_group = H // Hkv. Index math only; k and v are never repeated in memory.
- **Layouts** by strides only: ``k_transposed`` (k given as [..., D, Sk]) swaps k's stride parameters.
- **Causal** (key j masked for query i when j > i + (Sk - Sq), the bottom-right diagonal): the key loop of a
  query tile stops at the last key its last row may see, so tiles entirely above the diagonal are never
  loaded; the tiles it does visit are masked elementwise.
- **Head dims** D and Dv up to 128: BLOCK_D / BLOCK_DV are the next power of two (at least 16, for
  ``tl.dot``) and the tail is masked.
- **Precision**: scores, softmax and accumulator in fp32, or in fp64 for fp64 q, k, v (whose tiles are
  multiplied in fp64). fp32 tiles go to ``tl.dot`` with ``input_precision`` (default ``"ieee"``); fp16/bf16
  tiles go to the tensor cores as they are (P is cast to v's dtype for P @ V), except bf16 under the Triton
  interpreter, which is upcast to fp32 after loading.
- **Rows with no visible key** (every key masked by -inf bias, or causal with Sq > Sk) give 0, like
  ``torch.nn.functional.scaled_dot_product_attention`` (an explicit softmax would give NaN).
- **Split key axis** (``spec.split`` > 1, for few query tiles and many keys, as in decoding): program
  (tile, s) runs the online softmax over its share of the keys and writes its unnormalised accumulator,
  row max and row sum to workspaces of the compute dtype; a combine kernel merges the shares per row,
  rescaling each to the overall max (the same online-softmax step, across programs), and stores ``acc / l``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ...ops import dtype_size
from ..kernels import AttentionSpec, compute_dtype
from .source import (SIGNATURE_DTYPES, TL_DTYPES, Kernel, Param, UnsupportedSpec, check_broadcast, check_dtypes,
                     check_power_of_two, dot_constexprs, dot_offset, header, indent, launcher, load_value, module_text,
                     nbytes, next_power_of_two, pointer, scalar_kind, sizes, store_value, strides, traffic, unravel)

DOT_DTYPES = ("float64", "float32", "float16", "bfloat16")
MAX_HEAD_DIM = 128
NEG_INF = '-float("inf")'


@dataclass(frozen=True)
class _Attention:
    """The spec's problem read off its shapes."""

    spec: AttentionSpec
    batch: tuple[int, ...]  # batch dims of the output of size > 1
    Sq: int
    Sk: int
    D: int
    Dv: int
    kv_group: int  # query heads per key/value head (1: no grouping)
    compute: str  # the dtype of scores, softmax statistics and accumulator

    @property
    def n_batch(self) -> int:
        return math.prod(self.spec.out.shape[:-2])

    @property
    def split(self) -> bool:
        return self.spec.split > 1

    @property
    def keys_per_split(self) -> int:
        """Keys each share of the key axis covers: whole BLOCK_N tiles."""
        return math.ceil(math.ceil(self.Sk / self.spec.block_n) / self.spec.split) * self.spec.block_n

    @property
    def head_dim(self) -> int:
        return len(self.spec.out.shape) - 3

    @property
    def block_d(self) -> int:
        return max(16, next_power_of_two(self.D))

    @property
    def block_dv(self) -> int:
        return max(16, next_power_of_two(self.Dv))

    def tensors(self) -> list[tuple[str, object, str]]:
        s = self.spec
        k_role = "k, read transposed" if s.k_transposed else "k"
        named = [("q", s.q, "q"), ("k", s.k, k_role), ("v", s.v, "v")]
        named += [("bias", s.bias, "additive bias")] if s.bias is not None else []
        return named + [("out", s.out, "out")]

    def coord(self, tensor: str, d: int) -> str:
        """The coordinate ``tensor`` is read at along batch dim ``d``: k/v of a grouped head dim map h -> kv head."""
        grouped = self.kv_group > 1 and tensor in ("k", "v") and d == self.head_dim
        return "kv_head" if grouped else f"batch{d}"

    def tile_dims(self, tensor: str) -> dict[str, int]:
        """``{label: dim}`` of the two tile dims of ``tensor``."""
        r = len(self.spec.out.shape)
        if tensor == "k":
            return {"n": r - 1, "d": r - 2} if self.spec.k_transposed else {"n": r - 2, "d": r - 1}
        return {"q": {"m": r - 2, "d": r - 1}, "v": {"n": r - 2, "dv": r - 1}, "bias": {"m": r - 2, "n": r - 1},
                "out": {"m": r - 2, "dv": r - 1}}[tensor]

    def visible_pairs(self) -> int:
        """(query, key) pairs the softmax sees, per batch: all of them, or the causal lower triangle."""
        if not self.spec.causal:
            return self.Sq * self.Sk
        return sum(min(self.Sk, max(0, i + self.Sk - self.Sq + 1)) for i in range(self.Sq))


def _analyse(spec: AttentionSpec) -> _Attention:
    """Check the spec and read the sequence lengths, head dims and head grouping off its shapes."""
    q, k, v, out = spec.q.shape, spec.k.shape, spec.v.shape, spec.out.shape
    r = len(out)
    if r < 2 or any(len(t) != r for t in (q, k, v)):
        raise UnsupportedSpec(f"attention operands need one rank >= 2: q {q}, k {k}, v {v}, out {out}")
    Sq, D = q[-2:]
    Sk, Dk = (k[-1], k[-2]) if spec.k_transposed else (k[-2], k[-1])
    Dv = v[-1]
    if Dk != D or v[-2] != Sk or out[-2:] != (Sq, Dv) or q[:-2] != out[:-2] or min(Sq, Sk, D, Dv) < 1:
        raise UnsupportedSpec(f"attention shapes do not agree: q {q}, k {k}, v {v}, out {out} "
                              f"(k_transposed={spec.k_transposed})")
    if max(D, Dv) > MAX_HEAD_DIM:
        raise UnsupportedSpec(f"head dims up to {MAX_HEAD_DIM} are supported, got D={D}, Dv={Dv}")
    if len({spec.q.dtype, spec.k.dtype, spec.v.dtype}) != 1 or spec.q.dtype not in DOT_DTYPES:
        raise UnsupportedSpec(f"q, k, v must share a dtype of {DOT_DTYPES}, "
                              f"got {spec.q.dtype}, {spec.k.dtype}, {spec.v.dtype}")
    check_dtypes(spec.out, *([spec.bias] if spec.bias is not None else []))
    compute = compute_dtype(spec)
    if compute == "float64" and spec.q.dtype != "float64":
        raise UnsupportedSpec(f"attention on {spec.q.dtype} q, k, v with a float64 bias or output")
    check_power_of_two(BLOCK_M=spec.block_m, BLOCK_N=spec.block_n)
    if spec.split < 1:
        raise UnsupportedSpec(f"split must be at least 1, got {spec.split}")
    if min(spec.block_m, spec.block_n) < 16:
        raise UnsupportedSpec(f"tl.dot needs tiles of at least 16, got BLOCK_M={spec.block_m}, "
                              f"BLOCK_N={spec.block_n}")
    kv_group = 1
    for d in range(r - 2):
        H, Hk, Hv = out[d], k[d], v[d]
        if d == r - 3 and Hk == Hv and 1 < Hk < H and H % Hk == 0:
            kv_group = H // Hk  # grouped-query attention
        elif Hk not in (1, H) or Hv not in (1, H):
            raise UnsupportedSpec(f"batch dim {d} of k ({Hk}) or v ({Hv}) neither equals nor broadcasts to q's "
                                  f"({H}); grouped heads need k and v with equal head counts dividing H")
    if spec.bias is not None:
        check_broadcast(spec.bias, out[:-2] + (Sq, Sk), "attention bias")
    batch = tuple(d for d in range(r - 2) if out[d] > 1)
    return _Attention(spec, batch, Sq, Sk, D, Dv, kv_group, compute)


# ------------------------------------------------------------------------------------------- parameters

def _workspaces(a: _Attention) -> list[Param]:
    kind = "*" + SIGNATURE_DTYPES[a.compute]
    return [Param("ws_acc_ptr", "ws_acc", kind, note="unnormalised P @ V per key share [split, batch, Sq, Dv]"),
            Param("ws_m_ptr", "ws_m", kind, note="row max per key share [split, batch, Sq]"),
            Param("ws_l_ptr", "ws_l", kind, note="row sum of exp(s - max) per key share [split, batch, Sq]")]


def kernel_params(spec: AttentionSpec, input_precision: str = "ieee") -> list[Param]:
    a = _analyse(spec)
    batch_coords = {f"batch{d}": d for d in a.batch}
    tensors = [(t, o, role) for t, o, role in a.tensors() if not (a.split and t == "out")]
    pointers = [pointer(t, o, role) for t, o, role in tensors] + (_workspaces(a) if a.split else [])
    shape = sizes({"Sq": a.Sq, "Sk": a.Sk, "D": a.D, "Dv": a.Dv}, by_name=True)
    shape += sizes({f"size_batch{d}": spec.out.shape[d] for d in a.batch[1:]})
    if a.kv_group > 1:
        shape.append(Param("kv_group", str(a.kv_group), "i32", a.kv_group, "query heads per key/value head"))
    if a.split:
        shape.append(Param("keys_per_split", str(a.keys_per_split), "i32", a.keys_per_split, "a multiple of BLOCK_N"))
    stride_params = [p for t, o, _ in tensors for p in strides(t, o, {**batch_coords, **a.tile_dims(t)})]
    consts = [Param("BLOCK_M", str(spec.block_m), "constexpr", spec.block_m),
              Param("BLOCK_N", str(spec.block_n), "constexpr", spec.block_n),
              Param("BLOCK_D", str(a.block_d), "constexpr", a.block_d),
              Param("BLOCK_DV", str(a.block_dv), "constexpr", a.block_dv)]
    consts += dot_constexprs(spec.q.dtype, input_precision, "q")
    scale = [Param("scale", repr(float(spec.scale)), scalar_kind(a.compute), float(spec.scale), "multiplies q . k")]
    return pointers + shape + stride_params + scale + consts


def _combine_params(a: _Attention) -> list[Param]:
    out = a.spec.out
    dims = {**{f"batch{d}": d for d in a.batch}, **a.tile_dims("out")}
    return (_workspaces(a) + [pointer("out", out, "out")] + sizes({"Sq": a.Sq, "Dv": a.Dv}, by_name=True)
            + sizes({f"size_batch{d}": out.shape[d] for d in a.batch[1:]}) + strides("out", out, dims)
            + [Param("SPLIT", str(a.spec.split), "constexpr", a.spec.split),
               Param("BLOCK_M", str(a.spec.block_m), "constexpr", a.spec.block_m),
               Param("BLOCK_DV", str(a.block_dv), "constexpr", a.block_dv)])


# ------------------------------------------------------------------------------------------- kernel body

def _program_ids(a: _Attention, tensors=None) -> list[str]:
    """Query tile and batch coordinates of this program, and each of ``tensors``' batch offset."""
    tensors = [t for t, _, _ in a.tensors()] if tensors is None else tensors
    lines = ["pid = tl.program_id(axis=0)", "num_pid_m = tl.cdiv(Sq, BLOCK_M)"]
    if not a.batch:
        return lines + ["pid_m = pid", "batch = 0"]
    lines += ["batch = pid // num_pid_m", "pid_m = pid % num_pid_m",
              "# flat batch index -> one coordinate per batch dim, each with its own strides"]
    coords = [f"batch{d}" for d in a.batch]
    lines += unravel("batch", coords, [f"size_{c}" for c in coords])
    if a.kv_group > 1 and {"k", "v"} & set(tensors):
        lines.append(f"kv_head = batch{a.head_dim} // kv_group  # grouped-query attention: k/v head of this q head")
    return lines + [f"{t}_batch = " + dot_offset([(a.coord(t, d), f"stride_{t}_batch{d}") for d in a.batch])
                    for t in tensors]


def _base(a: _Attention, tensor: str) -> str:
    return f"{tensor}_ptr + {tensor}_batch" if a.batch else f"{tensor}_ptr"


def _upcast(a: _Attention, names: list[str], pad: str = "") -> list[str]:
    if a.spec.q.dtype != "bfloat16":
        return []
    return [f"{pad}if UPCAST_BF16:  # the interpreter's bf16 arithmetic is wrong: compute in fp32 there"] + [
        f"{pad}    {n} = {n}.to(tl.float32)" for n in names]


def _running_statistics(a: _Attention) -> list[str]:
    """The online softmax's running row max and sum and the P @ V accumulator, before any key."""
    dtype = TL_DTYPES[a.compute]
    return [f"m_i = tl.full([BLOCK_M], {NEG_INF}, {dtype})",
            f"l_i = tl.zeros([BLOCK_M], dtype={dtype})",
            f"acc = tl.zeros([BLOCK_M, BLOCK_DV], dtype={dtype})"]


def _key_loop(a: _Attention) -> list[str]:
    spec = a.spec
    precision = ", input_precision=DOT_PRECISION" if spec.q.dtype == "float32" else ""
    lines = [f"# running row max, running sum of exp(s - m_i), {a.compute} accumulator of P @ V (online softmax)"]
    lines += _running_statistics(a)
    if spec.causal:
        lines += ["# causal: query i sees keys j <= i + (Sk - Sq); the tile's last row sees keys below",
                  "# (pid_m + 1) * BLOCK_M + Sk - Sq, so key tiles from there on (above the diagonal) are skipped",
                  "hi = tl.minimum((pid_m + 1) * BLOCK_M + Sk - Sq, Sk)"]
        end = "hi"
    else:
        end = "Sk"
    start = "0"
    if a.split:
        lines += ["# this program's share of the key axis (a share above a causal diagonal is empty)",
                  "lo = split * keys_per_split", f"end = tl.minimum(lo + keys_per_split, {end})"]
        start, end = "lo", "end"
    lines += [
        "# each step loads a BLOCK_N x BLOCK_D tile of k and a BLOCK_N x BLOCK_DV tile of v for",
        "# 2 * BLOCK_M * BLOCK_N * (BLOCK_D + BLOCK_DV) FLOPs; over the grid k and v are read cdiv(Sq, BLOCK_M) times",
        f"for start_n in range({start}, {end}, BLOCK_N):",
    ]
    body = [
        "offs_n = start_n + tl.arange(0, BLOCK_N)",
        "mask_n = offs_n < Sk",
        f"kt_ptrs = {_base(a, 'k')} + offs_d[:, None] * stride_k_d + offs_n[None, :] * stride_k_n",
        "kt = tl.load(kt_ptrs, mask=mask_d[:, None] & mask_n[None, :], other=0.0)  # k tile, transposed: [D, N]",
        f"v_ptrs = {_base(a, 'v')} + offs_n[:, None] * stride_v_n + offs_dv[None, :] * stride_v_dv",
        "v = tl.load(v_ptrs, mask=mask_n[:, None] & mask_dv[None, :], other=0.0)",
    ] + _upcast(a, ["kt", "v"]) + [f"s = tl.dot(q, kt{precision}) * scale"]
    if spec.bias is not None:
        body += [f"bias_ptrs = {_base(a, 'bias')} + offs_m[:, None] * stride_bias_m + offs_n[None, :] * stride_bias_n",
                 "s += " + load_value("tl.load(bias_ptrs, mask=mask_m[:, None] & mask_n[None, :], other=0.0)",
                                      a.compute)]
    if spec.causal:
        body += ["visible = mask_n[None, :] & (offs_n[None, :] <= offs_m[:, None] + (Sk - Sq))"]
    else:
        body += ["visible = mask_n[None, :]"]
    body += [
        f"s = tl.where(visible, s, {NEG_INF})",
        "m_new = tl.maximum(m_i, tl.max(s, axis=1))",
        "# a row with no visible key yet keeps m = -inf: subtract 0 there so exp gives 0, not nan",
        f"m_ref = tl.where(m_new == {NEG_INF}, 0.0, m_new)",
        "alpha = tl.exp(m_i - m_ref)  # rescales what was summed against the old max",
        "p = tl.exp(s - m_ref[:, None])",
        "l_i = l_i * alpha + tl.sum(p, axis=1)",
        f"acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None]{precision})",
        "m_i = m_new",
    ]
    return lines + indent(body)


def _body(a: _Attention) -> list[str]:
    tensors = [t for t, _, _ in a.tensors() if not (a.split and t == "out")]
    split = ["split = tl.program_id(axis=1)"] if a.split else []
    lines = _program_ids(a, tensors) + split + [
        "offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)",
        "offs_d = tl.arange(0, BLOCK_D)",
        "offs_dv = tl.arange(0, BLOCK_DV)",
        "mask_m = offs_m < Sq",
        "mask_d = offs_d < D",
        "mask_dv = offs_dv < Dv",
        "# the query tile stays in registers for the whole key loop",
        f"q_ptrs = {_base(a, 'q')} + offs_m[:, None] * stride_q_m + offs_d[None, :] * stride_q_d",
        "q = tl.load(q_ptrs, mask=mask_m[:, None] & mask_d[None, :], other=0.0)",
    ] + _upcast(a, ["q"]) + _key_loop(a)
    if a.split:
        return indent(lines + [
            "# this share's unnormalised accumulator, row max and row sum, for the combine kernel",
            "row = (split * (tl.num_programs(axis=0) // num_pid_m) + batch) * Sq + offs_m",
            "tl.store(ws_acc_ptr + row[:, None] * Dv + offs_dv[None, :], acc, mask=mask_m[:, None] & mask_dv[None, :])",
            "tl.store(ws_m_ptr + row, m_i, mask=mask_m)",
            "tl.store(ws_l_ptr + row, l_i, mask=mask_m)"])
    return indent(lines + _normalise_and_store(a))


def _normalise_and_store(a: _Attention) -> list[str]:
    return [
        "# rows with no visible key have l_i = 0 and acc = 0: they give 0, like torch's scaled_dot_product_attention",
        "l_i = tl.where(l_i == 0.0, 1.0, l_i)",
        "o = acc / l_i[:, None]",
        f"out_ptrs = {_base(a, 'out')} + offs_m[:, None] * stride_out_m + offs_dv[None, :] * stride_out_dv",
        f"tl.store(out_ptrs, {store_value('o', a.spec.out.dtype, a.compute)}, mask=mask_m[:, None] & mask_dv[None, :])",
    ]


def _combine_body(a: _Attention) -> list[str]:
    lines = _program_ids(a, ["out"]) + [
        "offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)",
        "offs_dv = tl.arange(0, BLOCK_DV)",
        "mask_m = offs_m < Sq",
        "mask_dv = offs_dv < Dv",
        "# merge the key shares in a fixed order: each rescaled to the running max (online softmax across programs)",
    ] + _running_statistics(a) + ["for split in range(SPLIT):"] + indent([
        "row = (split * (tl.num_programs(axis=0) // num_pid_m) + batch) * Sq + offs_m",
        f"m_s = tl.load(ws_m_ptr + row, mask=mask_m, other={NEG_INF})",
        "l_s = tl.load(ws_l_ptr + row, mask=mask_m, other=0.0)",
        "acc_s = tl.load(ws_acc_ptr + row[:, None] * Dv + offs_dv[None, :], mask=mask_m[:, None] & mask_dv[None, :], "
        "other=0.0)",
        "m_new = tl.maximum(m_i, m_s)",
        f"m_ref = tl.where(m_new == {NEG_INF}, 0.0, m_new)",
        "alpha, beta = tl.exp(m_i - m_ref), tl.exp(m_s - m_ref)",
        "l_i = l_i * alpha + l_s * beta",
        "acc = acc * alpha[:, None] + acc_s * beta[:, None]",
        "m_i = m_new",
    ]) + _normalise_and_store(a)
    return indent(lines)


# --------------------------------------------------------------------------------------------- rendering

def _num_warps(spec: AttentionSpec) -> int:
    return 8 if spec.block_m * spec.block_n >= 128 * 64 else 4


def _num_stages(a: _Attention) -> int | None:
    """Software pipelining depth; None: Triton's default. fp64 tiles of head dims above 64 fit Hopper's 227 KiB
    of shared memory only unpipelined (64x64 tiles, head dim 128, compiled for sm_90: 353 KiB with the
    default 3 stages, 224 KiB with 2 but 257 KiB with a bias, 192 KiB with 1)."""
    return 1 if a.compute == "float64" and max(a.block_d, a.block_dv) > 64 else None


def kernels(spec: AttentionSpec, name: str, input_precision: str = "ieee") -> list[Kernel]:
    """The attention kernel, then (split key axis only) the kernel that combines the key shares."""
    a = _analyse(spec)
    main = Kernel(f"{name}_kernel", kernel_params(spec, input_precision), _body(a), _num_warps(spec), _num_stages(a))
    if not a.split:
        return [main]
    return [main, Kernel(f"{name}_combine_kernel", _combine_params(a), _combine_body(a), 4,
                         doc="Merges the key shares' partial softmax results per row and stores the output.")]


def _summary(a: _Attention) -> list[str]:
    spec = a.spec
    mask = "causal (bottom-right diagonal), tiles above it skipped" if spec.causal else "none"
    grouping = f", grouped-query: {a.kv_group} q heads per k/v head" if a.kv_group > 1 else ""
    reads = [("q", nbytes(spec.q)), ("k", nbytes(spec.k)), ("v", nbytes(spec.v))]
    reads += [("bias", nbytes(spec.bias))] if spec.bias is not None else []
    workspace = [("workspace", dtype_size(a.compute) * spec.split * a.n_batch * a.Sq * (a.Dv + 2))] if a.split else []
    flops = 2 * a.n_batch * a.visible_pairs() * (a.D + a.Dv)
    return [
        f"attention out{list(spec.out.shape)} {spec.out.dtype} = softmax(scale * q @ k^T"
        f"{' + bias' if spec.bias is not None else ''}) @ v: batch {a.n_batch}, Sq={a.Sq}, Sk={a.Sk}, "
        f"D={a.D}, Dv={a.Dv}, scale={spec.scale!r}",
        f"q: {list(spec.q.shape)}; k: {list(spec.k.shape)}{' (read transposed)' if spec.k_transposed else ''}; "
        f"v: {list(spec.v.shape)}; {spec.q.dtype}{grouping}",
        f"mask: {mask}; bias: {list(spec.bias.shape) if spec.bias is not None else 'none'}",
        f"tile: BLOCK_M={spec.block_m} BLOCK_N={spec.block_n} BLOCK_D={a.block_d} BLOCK_DV={a.block_dv}, "
        f"num_warps={_num_warps(spec)}; S and P stay on chip (online softmax)"
        + (f"; key axis split in {spec.split} shares of {a.keys_per_split} keys, then combined" if a.split else ""),
    ] + traffic(reads + workspace, [("out", nbytes(spec.out))] + workspace, flops)


def render(spec: AttentionSpec, name: str, header_text: str = "", input_precision: str = "ieee") -> str:
    a = _analyse(spec)
    ks = kernels(spec, name, input_precision)
    batches = f"{a.n_batch} * " if a.batch else ""
    body = [f"    Sq, Sk, D, Dv = {a.Sq}, {a.Sk}, {a.D}, {a.Dv}",
            f"    tiles = {batches}triton.cdiv(Sq, {spec.block_m})"]
    if a.split:
        rows = f"({spec.split}, {a.n_batch}, Sq)"
        dtype = f"torch.{a.compute}"
        body += [f"    ws_acc = torch.empty({rows[:-1]}, Dv), dtype={dtype}, device=out.device)",
                 f"    ws_m = torch.empty({rows}, dtype={dtype}, device=out.device)",
                 f"    ws_l = torch.empty({rows}, dtype={dtype}, device=out.device)"]
        body += ks[0].launch(f"(tiles, {spec.split})") + ks[1].launch("(tiles,)")
    else:
        body += ks[0].launch("(tiles,)")
    args = [t for t, _, _ in a.tensors() if t != "out"]
    checks = [("out", spec.out)] + [(t, o) for t, o, _ in a.tensors() if t != "out"]
    doc = (f"out = softmax(scale * q @ k^T{' + bias' if spec.bias is not None else ''}"
           f"{', causal' if spec.causal else ''}) @ v; operands of any strides.")
    return module_text(header(name, header_text, _summary(a)), ks, launcher(name, ["out"] + args, doc, checks, body))
