"""EqiForge plan of gemm_bias_gelu: 5 nodes, predicted 8.9 us (roofline prior (H100; published-time fit: held-out level 3 1.04x, 78% within 1.5x)).
rule sets: attention, broadcast, composite, concat, conv, distributive, fusion, layout, matmul, reduction, reorder, reshape, scalar, softmax, structure, synthesized, tiling, transpose
1 Triton kernel.

Generated code: imports only torch and triton. Call forward(x, w, b, params) with params a dict of tensors.
"""
import torch
import triton
import triton.language as tl


# ----------------------------------------------------------------------------------------------------
# gemm0
# GEMM (8, 16) x (16, 32) -> (8, 32), epilogue gelu(add(acc, in0))
# rule sets (inferred from its form): fusion, tiling
# predicted: 6.76 us
#
# GEMM out[8, 32] float32 = epilogue(A @ B): batch 1, M=8, N=32, K=16
# A: [8, 16] float32; B: [16, 32] float32
# tile: BLOCK_M=32 BLOCK_N=32 BLOCK_K=32 GROUP_M=8, num_warps=4 num_stages=4, split_k=1
# epilogue: gelu(add(acc, in0)) -> float32
# memory traffic: 3,712 B
#   reads  A 512 B, B 2,048 B, in0 128 B
#   writes out 1,024 B
# compute: 8,192 FLOPs (2.2 FLOPs per byte)
# ----------------------------------------------------------------------------------------------------


@triton.jit
def gemm0_kernel(
    a_ptr,                              # A: [8, 16] float32
    b_ptr,                              # B: [16, 32] float32
    out_ptr,                            # out: [8, 32] float32
    in0_ptr,                            # epilogue input: [1, 32] float32
    M,
    N,
    K,
    stride_a_m,
    stride_a_k,
    stride_b_k,
    stride_b_n,
    stride_out_m,
    stride_out_n,
    stride_in0_n,
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
    # epilogue in float32: gelu(add(acc, in0)), stored as float32
    in0_ptrs = in0_ptr + offs_n[None, :] * stride_in0_n
    in0 = tl.load(in0_ptrs, mask=mask_n[None, :], other=0.0).to(tl.float32)
    e0 = acc + in0
    e1 = 0.5 * e0 * (1.0 + tl.erf(e0 * 0.7071067811865476))
    out_ptrs = out_ptr + offs_m[:, None] * stride_out_m + offs_n[None, :] * stride_out_n
    tl.store(out_ptrs, e1, mask=mask)


def gemm0(out, a, b, in0):
    """out = gelu(add(acc, in0)) with acc = a @ b; operands of any strides."""
    for arg, t, shape, dtype in (
        ("out", out, (8, 32), torch.float32),
        ("a", a, (8, 16), torch.float32),
        ("b", b, (16, 32), torch.float32),
        ("in0", in0, (1, 32), torch.float32),
    ):
        if tuple(t.shape) != shape or t.dtype != dtype:
            raise ValueError(f"gemm0: {arg} must be {dtype} of shape {shape}, got {t.dtype} of shape {tuple(t.shape)}")
        if sum((n - 1) * abs(s) for n, s in zip(t.shape, t.stride())) >= 2**31:
            raise ValueError(f"gemm0: {arg} spans 2**31 elements or more; the kernel indexes with int32")
    M, N, K = 8, 32, 16
    tiles = triton.cdiv(M, 32) * triton.cdiv(N, 32)
    gemm0_kernel[(tiles,)](
        a_ptr=a,
        b_ptr=b,
        out_ptr=out,
        in0_ptr=in0,
        M=M,
        N=N,
        K=K,
        stride_a_m=a.stride(0),
        stride_a_k=a.stride(1),
        stride_b_k=b.stride(0),
        stride_b_n=b.stride(1),
        stride_out_m=out.stride(0),
        stride_out_n=out.stride(1),
        stride_in0_n=in0.stride(1),
        BLOCK_M=32,
        BLOCK_N=32,
        BLOCK_K=32,
        GROUP_M=8,
        DOT_PRECISION='ieee',
        num_warps=4,
        num_stages=4,
    )
    return out


def forward(x, w, b, params, externs=None):
    t3 = b.reshape(1, 32)
    t4 = torch.empty((8, 32), dtype=torch.float32, device=x.device)
    gemm0(t4, x, w, t3)
    del t3
    return (t4, )
