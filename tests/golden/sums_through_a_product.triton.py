"""EqiForge plan of sums_through_a_product: 5 nodes, predicted 15.6 us (roofline prior (H100; published-time fit: held-out level 3 1.04x, 78% within 1.5x)).
rule sets: attention, broadcast, composite, concat, conv, distributive, fusion, layout, matmul, reduction, reorder, reshape, scalar, softmax, structure, synthesized, tiling, transpose
2 Triton kernels.

Generated code: imports only torch and triton. Call forward(a, b, params) with params a dict of tensors.
"""
import torch
import triton
import triton.language as tl


# ----------------------------------------------------------------------------------------------------
# row_sum0
# row sum of x, epilogue acc -> (16, 1)
# rule sets (inferred from its form): fusion
# predicted: 6.73 us
#
# row reduction sum over the last dim of x[16, 32] float32 -> out[16, 1] float32: 16 rows of 32
# prologue: x; epilogue: acc
# BLOCK_ROWS=16 BLOCK_COLS=32 (one chunk), num_warps=2
# memory traffic: 2,112 B
#   reads  x 2,048 B
#   writes out 64 B
# ----------------------------------------------------------------------------------------------------


@triton.jit
def row_sum0_kernel(
    x_ptr,                              # x: [16, 32] float32
    out_ptr,                            # out: [16, 1] float32
    n_rows,
    n_cols,
    stride_x_0,
    stride_x_col,
    stride_out_0,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_COLS: tl.constexpr,
):
    rows = tl.program_id(axis=0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    mask_rows = rows < n_rows
    # row index -> coordinates of the leading dims; size-1 dims broadcast through stride 0
    r0 = rows
    x_row = r0 * stride_x_0
    out_row = r0 * stride_out_0
    # x is read once, BLOCK_COLS columns of BLOCK_ROWS rows per step, into an elementwise sum
    acc = tl.full([BLOCK_ROWS, BLOCK_COLS], 0.0, tl.float32)
    for start in range(0, n_cols, BLOCK_COLS):
        cols = start + tl.arange(0, BLOCK_COLS)
        mask_cols = cols < n_cols
        mask = mask_rows[:, None] & mask_cols[None, :]
        x = tl.load(x_ptr + x_row[:, None] + cols[None, :] * stride_x_col, mask=mask, other=0.0).to(tl.float32)
        p = tl.where(mask, x, 0.0)  # prologue: x
        acc = acc + p
    acc = tl.sum(acc, axis=1)
    # epilogue: acc, stored as float32
    tl.store(out_ptr + out_row, acc, mask=mask_rows)


def row_sum0(out, x):
    """out = sum over the last dim of x, with fused prologue and epilogue; x of any strides."""
    for arg, t, shape, dtype in (
        ("out", out, (16, 1), torch.float32),
        ("x", x, (16, 32), torch.float32),
    ):
        if tuple(t.shape) != shape or t.dtype != dtype:
            raise ValueError(f"row_sum0: {arg} must be {dtype} of shape {shape}, got {t.dtype} of shape {tuple(t.shape)}")
        if sum((n - 1) * abs(s) for n, s in zip(t.shape, t.stride())) >= 2**31:
            raise ValueError(f"row_sum0: {arg} spans 2**31 elements or more; the kernel indexes with int32")
    n_rows, n_cols = 16, 32
    row_sum0_kernel[(triton.cdiv(n_rows, 16),)](
        x_ptr=x,
        out_ptr=out,
        n_rows=n_rows,
        n_cols=n_cols,
        stride_x_0=x.stride(0),
        stride_x_col=x.stride(1),
        stride_out_0=out.stride(0),
        BLOCK_ROWS=16,
        BLOCK_COLS=32,
        num_warps=2,
    )
    return out


# ----------------------------------------------------------------------------------------------------
# gemm1
# GEMM (8, 16) x (16, 1) -> (8, 1), epilogue acc
# rule sets (inferred from its form): fusion, tiling
# predicted: 6.69 us
#
# GEMM out[8, 1] float32 = epilogue(A @ B): batch 1, M=8, N=1, K=16
# A: [8, 16] float32; B: [16, 1] float32
# tile: BLOCK_M=16 BLOCK_N=16 BLOCK_K=32 GROUP_M=8, num_warps=2 num_stages=2, split_k=1
# epilogue: acc -> float32
# memory traffic: 608 B
#   reads  A 512 B, B 64 B
#   writes out 32 B
# compute: 256 FLOPs (0.4 FLOPs per byte)
# ----------------------------------------------------------------------------------------------------


@triton.jit
def gemm1_kernel(
    a_ptr,                              # A: [8, 16] float32
    b_ptr,                              # B: [16, 1] float32
    out_ptr,                            # out: [8, 1] float32
    M,
    N,
    K,
    stride_a_m,
    stride_a_k,
    stride_b_k,
    stride_b_n,                         # size 1: broadcast
    stride_out_m,
    stride_out_n,                       # size 1: broadcast
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


def gemm1(out, a, b):
    """out = acc with acc = a @ b; operands of any strides."""
    for arg, t, shape, dtype in (
        ("out", out, (8, 1), torch.float32),
        ("a", a, (8, 16), torch.float32),
        ("b", b, (16, 1), torch.float32),
    ):
        if tuple(t.shape) != shape or t.dtype != dtype:
            raise ValueError(f"gemm1: {arg} must be {dtype} of shape {shape}, got {t.dtype} of shape {tuple(t.shape)}")
        if sum((n - 1) * abs(s) for n, s in zip(t.shape, t.stride())) >= 2**31:
            raise ValueError(f"gemm1: {arg} spans 2**31 elements or more; the kernel indexes with int32")
    M, N, K = 8, 1, 16
    tiles = triton.cdiv(M, 16) * triton.cdiv(N, 16)
    gemm1_kernel[(tiles,)](
        a_ptr=a,
        b_ptr=b,
        out_ptr=out,
        M=M,
        N=N,
        K=K,
        stride_a_m=a.stride(0),
        stride_a_k=a.stride(1),
        stride_b_k=b.stride(0),
        stride_b_n=0,                   # size 1: broadcast
        stride_out_m=out.stride(0),
        stride_out_n=0,                 # size 1: broadcast
        BLOCK_M=16,
        BLOCK_N=16,
        BLOCK_K=32,
        GROUP_M=8,
        DOT_PRECISION='ieee',
        num_warps=2,
        num_stages=2,
    )
    return out


def forward(a, b, params, externs=None):
    t2 = torch.empty((16, 1), dtype=torch.float32, device=a.device)
    row_sum0(t2, b)
    t3 = torch.empty((8, 1), dtype=torch.float32, device=a.device)
    gemm1(t3, a, t2)
    del t2
    t4 = t3.reshape(8)
    del t3
    return (t4, )
