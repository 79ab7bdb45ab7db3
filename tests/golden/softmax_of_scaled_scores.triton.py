"""EqiForge plan of softmax_of_scaled_scores: 4 nodes, predicted 13.5 us (roofline prior (H100; published-time fit: held-out level 3 1.04x, 78% within 1.5x)).
rule sets: attention, broadcast, composite, concat, conv, distributive, fusion, layout, matmul, reduction, reorder, reshape, scalar, softmax, structure, synthesized, tiling, transpose
2 Triton kernels.

Generated code: imports only torch and triton. Call forward(q, k, params) with params a dict of tensors.
"""
import torch
import triton
import triton.language as tl


# ----------------------------------------------------------------------------------------------------
# gemm0
# GEMM (16, 8) x (16, 8) -> (16, 16), epilogue acc
# rule sets (inferred from its form): fusion, layout, tiling
# predicted: 6.76 us
#
# GEMM out[16, 16] float32 = epilogue(A @ B): batch 1, M=16, N=16, K=8
# A: [16, 8] float32; B: [16, 8] float32 (read transposed)
# tile: BLOCK_M=16 BLOCK_N=16 BLOCK_K=32 GROUP_M=8, num_warps=2 num_stages=2, split_k=1
# epilogue: acc -> float32
# memory traffic: 2,048 B
#   reads  A 512 B, B 512 B
#   writes out 1,024 B
# compute: 4,096 FLOPs (2.0 FLOPs per byte)
# ----------------------------------------------------------------------------------------------------


@triton.jit
def gemm0_kernel(
    a_ptr,                              # A: [16, 8] float32
    b_ptr,                              # B, read transposed: [16, 8] float32
    out_ptr,                            # out: [16, 16] float32
    M,
    N,
    K,
    stride_a_m,
    stride_a_k,
    stride_b_k,
    stride_b_n,
    stride_out_m,
    stride_out_n,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    tile = pid
    # visit the tiles in groups of GROUP_M rows: programs running together share columns of B in L2
    num_pid_in_group = GROUP_M * num_pid_n
    first_pid_m = tile // num_pid_in_group * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + tile % num_pid_in_group % group_size_m
    pid_n = tile % num_pid_in_group // group_size_m
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_m = offs_m < M
    mask_n = offs_n < N
    mask = mask_m[:, None] & mask_n[None, :]
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_a_m + offs_k[None, :] * stride_a_k
    b_ptrs = b_ptr + offs_k[:, None] * stride_b_k + offs_n[None, :] * stride_b_n
    # each step loads a BLOCK_M x BLOCK_K tile of A and a BLOCK_K x BLOCK_N tile of B for
    # 2 * BLOCK_M * BLOCK_N * BLOCK_K FLOPs; over the grid A is read cdiv(N, BLOCK_N) times and
    # B cdiv(M, BLOCK_M) times (the grouped order lets L2 absorb much of it)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        mask_k = offs_k < K - k
        a = tl.load(a_ptrs, mask=mask_m[:, None] & mask_k[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=mask_k[:, None] & mask_n[None, :], other=0.0)
        acc = tl.dot(a, b, acc, input_precision=DOT_PRECISION)
        a_ptrs += BLOCK_K * stride_a_k
        b_ptrs += BLOCK_K * stride_b_k
    # epilogue in float32: acc, stored as float32
    out_ptrs = out_ptr + offs_m[:, None] * stride_out_m + offs_n[None, :] * stride_out_n
    tl.store(out_ptrs, acc, mask=mask)


def gemm0(out, a, b):
    """out = acc with acc = a @ b; operands of any strides."""
    for arg, t, shape, dtype in (
        ("out", out, (16, 16), torch.float32),
        ("a", a, (16, 8), torch.float32),
        ("b", b, (16, 8), torch.float32),
    ):
        if tuple(t.shape) != shape or t.dtype != dtype:
            raise ValueError(f"gemm0: {arg} must be {dtype} of shape {shape}, got {t.dtype} of shape {tuple(t.shape)}")
        if sum((n - 1) * abs(s) for n, s in zip(t.shape, t.stride())) >= 2**31:
            raise ValueError(f"gemm0: {arg} spans 2**31 elements or more; the kernel indexes with int32")
    M, N, K = 16, 16, 8
    tiles = triton.cdiv(M, 16) * triton.cdiv(N, 16)
    gemm0_kernel[(tiles,)](
        a_ptr=a,
        b_ptr=b,
        out_ptr=out,
        M=M,
        N=N,
        K=K,
        stride_a_m=a.stride(0),
        stride_a_k=a.stride(1),
        stride_b_k=b.stride(1),
        stride_b_n=b.stride(0),
        stride_out_m=out.stride(0),
        stride_out_n=out.stride(1),
        BLOCK_M=16,
        BLOCK_N=16,
        BLOCK_K=32,
        GROUP_M=8,
        DOT_PRECISION='ieee',
        num_warps=2,
        num_stages=2,
    )
    return out


# ----------------------------------------------------------------------------------------------------
# row_softmax1
# row softmax of mul(in0, 0.125), epilogue acc -> (16, 16)
# rule sets (inferred from its form): fusion, composite
# predicted: 6.73 us
#
# row reduction softmax over the last dim of x[16, 16] float32 -> out[16, 16] float32: 16 rows of 16
# prologue: mul(in0, 0.125); epilogue: acc
# BLOCK_ROWS=16 BLOCK_COLS=16 (one chunk), num_warps=1
# memory traffic: 3,072 B
#   reads  x 1,024 B, in0 1,024 B
#   writes out 1,024 B
# ----------------------------------------------------------------------------------------------------


@triton.jit
def row_softmax1_kernel(
    x_ptr,                              # x: [16, 16] float32
    out_ptr,                            # out: [16, 16] float32
    in0_ptr,                            # extra input: [16, 16] float32
    n_rows,
    n_cols,
    stride_x_0,
    stride_x_col,
    stride_out_0,
    stride_out_col,
    stride_in0_0,
    stride_in0_col,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_COLS: tl.constexpr,
):
    rows = tl.program_id(axis=0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    mask_rows = rows < n_rows
    # row index -> coordinates of the leading dims; size-1 dims broadcast through stride 0
    r0 = rows
    x_row = r0 * stride_x_0
    out_row = r0 * stride_out_0
    in0_row = r0 * stride_in0_0
    # the row fits one chunk: x is read once and stays in registers
    cols = tl.arange(0, BLOCK_COLS)
    mask_cols = cols < n_cols
    mask = mask_rows[:, None] & mask_cols[None, :]
    x = tl.load(x_ptr + x_row[:, None] + cols[None, :] * stride_x_col, mask=mask, other=0.0).to(tl.float32)
    in0 = tl.load(in0_ptr + in0_row[:, None] + cols[None, :] * stride_in0_col, mask=mask, other=0.0).to(tl.float32)
    q0 = in0 * 0.125
    p = tl.where(mask, q0, -float("inf"))  # prologue: mul(in0, 0.125)
    row_max = tl.max(p, axis=1)
    row_sum = tl.sum(tl.exp(p - row_max[:, None]), axis=1)
    acc = tl.exp(p - row_max[:, None]) / row_sum[:, None]
    # epilogue: acc, stored as float32
    tl.store(out_ptr + out_row[:, None] + cols[None, :] * stride_out_col, acc, mask=mask)


def row_softmax1(out, x, in0):
    """out = softmax over the last dim of x, with fused prologue and epilogue; x of any strides."""
    for arg, t, shape, dtype in (
        ("out", out, (16, 16), torch.float32),
        ("x", x, (16, 16), torch.float32),
        ("in0", in0, (16, 16), torch.float32),
    ):
        if tuple(t.shape) != shape or t.dtype != dtype:
            raise ValueError(f"row_softmax1: {arg} must be {dtype} of shape {shape}, got {t.dtype} of shape {tuple(t.shape)}")
        if sum((n - 1) * abs(s) for n, s in zip(t.shape, t.stride())) >= 2**31:
            raise ValueError(f"row_softmax1: {arg} spans 2**31 elements or more; the kernel indexes with int32")
    n_rows, n_cols = 16, 16
    row_softmax1_kernel[(triton.cdiv(n_rows, 16),)](
        x_ptr=x,
        out_ptr=out,
        in0_ptr=in0,
        n_rows=n_rows,
        n_cols=n_cols,
        stride_x_0=x.stride(0),
        stride_x_col=x.stride(1),
        stride_out_0=out.stride(0),
        stride_out_col=out.stride(1),
        stride_in0_0=in0.stride(0),
        stride_in0_col=in0.stride(1),
        BLOCK_ROWS=16,
        BLOCK_COLS=16,
        num_warps=1,
    )
    return out


def forward(q, k, params, externs=None):
    t2 = torch.empty((16, 16), dtype=torch.float32, device=q.device)
    gemm0(t2, q, k)
    t3 = torch.empty((16, 16), dtype=torch.float32, device=q.device)
    row_softmax1(t3, t2, t2)
    del t2
    return (t3, )
