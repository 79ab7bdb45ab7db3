"""EqiForge plan of layer_norm_residual: 7 nodes, predicted 11.0 us (roofline prior (H100; published-time fit: held-out level 3 1.04x, 78% within 1.5x)).
rule sets: attention, broadcast, composite, concat, conv, distributive, fusion, layout, matmul, reduction, reorder, reshape, scalar, softmax, structure, synthesized, tiling, transpose
1 Triton kernel.

Generated code: imports only torch and triton. Call forward(x, r, weight, bias, params) with params a dict of tensors.
"""
import torch
import triton
import triton.language as tl


# ----------------------------------------------------------------------------------------------------
# row_layer_norm0
# row layer_norm of add(in0, in1), epilogue mul(add(mul(acc, in2), in3), 2) -> (4, 16)
# rule sets (inferred from its form): fusion, composite
# predicted: 6.70 us
#
# row reduction layer_norm over the last dim of x[4, 16] float32 -> out[4, 16] float32: 4 rows of 16
# prologue: add(in0, in1); epilogue: mul(add(mul(acc, in2), in3), 2); , eps=1e-05
# BLOCK_ROWS=4 BLOCK_COLS=16 (one chunk), num_warps=1
# memory traffic: 1,152 B
#   reads  x 256 B, in0 256 B, in1 256 B, in2 64 B, in3 64 B
#   writes out 256 B
# ----------------------------------------------------------------------------------------------------


@triton.jit
def row_layer_norm0_kernel(
    x_ptr,                              # x: [4, 16] float32
    out_ptr,                            # out: [4, 16] float32
    in0_ptr,                            # extra input: [4, 16] float32
    in1_ptr,                            # extra input: [4, 16] float32
    in2_ptr,                            # extra input: [1, 16] float32
    in3_ptr,                            # extra input: [1, 16] float32
    n_rows,
    n_cols,
    stride_x_0,
    stride_x_col,
    stride_out_0,
    stride_out_col,
    stride_in0_0,
    stride_in0_col,
    stride_in1_0,
    stride_in1_col,
    stride_in2_col,
    stride_in3_col,
    eps,
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
    in1_row = r0 * stride_in1_0
    # the row fits one chunk: x is read once and stays in registers
    cols = tl.arange(0, BLOCK_COLS)
    mask_cols = cols < n_cols
    mask = mask_rows[:, None] & mask_cols[None, :]
    x = tl.load(x_ptr + x_row[:, None] + cols[None, :] * stride_x_col, mask=mask, other=0.0).to(tl.float32)
    in0 = tl.load(in0_ptr + in0_row[:, None] + cols[None, :] * stride_in0_col, mask=mask, other=0.0).to(tl.float32)
    in1 = tl.load(in1_ptr + in1_row[:, None] + cols[None, :] * stride_in1_col, mask=mask, other=0.0).to(tl.float32)
    q0 = in0 + in1
    p = tl.where(mask, q0, 0.0)  # prologue: add(in0, in1)
    mean = tl.sum(p, axis=1) / n_cols
    diff = tl.where(mask, p - mean[:, None], 0.0)
    var = tl.sum(diff * diff, axis=1) / n_cols  # biased variance, like torch
    inv_std = tl.rsqrt(var + eps)
    acc = (p - mean[:, None]) * inv_std[:, None]
    in2 = tl.load(in2_ptr + cols[None, :] * stride_in2_col, mask=mask_cols[None, :], other=0.0).to(tl.float32)
    in3 = tl.load(in3_ptr + cols[None, :] * stride_in3_col, mask=mask_cols[None, :], other=0.0).to(tl.float32)
    # epilogue: mul(add(mul(acc, in2), in3), 2), stored as float32
    e0 = acc * in2
    e1 = e0 + in3
    e2 = e1 * 2.0
    tl.store(out_ptr + out_row[:, None] + cols[None, :] * stride_out_col, e2, mask=mask)


def row_layer_norm0(out, x, in0, in1, in2, in3):
    """out = layer_norm over the last dim of x, with fused prologue and epilogue; x of any strides."""
    for arg, t, shape, dtype in (
        ("out", out, (4, 16), torch.float32),
        ("x", x, (4, 16), torch.float32),
        ("in0", in0, (4, 16), torch.float32),
        ("in1", in1, (4, 16), torch.float32),
        ("in2", in2, (1, 16), torch.float32),
        ("in3", in3, (1, 16), torch.float32),
    ):
        if tuple(t.shape) != shape or t.dtype != dtype:
            raise ValueError(f"row_layer_norm0: {arg} must be {dtype} of shape {shape}, got {t.dtype} of shape {tuple(t.shape)}")
        if sum((n - 1) * abs(s) for n, s in zip(t.shape, t.stride())) >= 2**31:
            raise ValueError(f"row_layer_norm0: {arg} spans 2**31 elements or more; the kernel indexes with int32")
    n_rows, n_cols = 4, 16
    row_layer_norm0_kernel[(triton.cdiv(n_rows, 4),)](
        x_ptr=x,
        out_ptr=out,
        in0_ptr=in0,
        in1_ptr=in1,
        in2_ptr=in2,
        in3_ptr=in3,
        n_rows=n_rows,
        n_cols=n_cols,
        stride_x_0=x.stride(0),
        stride_x_col=x.stride(1),
        stride_out_0=out.stride(0),
        stride_out_col=out.stride(1),
        stride_in0_0=in0.stride(0),
        stride_in0_col=in0.stride(1),
        stride_in1_0=in1.stride(0),
        stride_in1_col=in1.stride(1),
        stride_in2_col=in2.stride(1),
        stride_in3_col=in3.stride(1),
        eps=1e-05,
        BLOCK_ROWS=4,
        BLOCK_COLS=16,
        num_warps=1,
    )
    return out


def forward(x, r, weight, bias, params, externs=None):
    t3 = weight.reshape(1, 16)
    t5 = bias.reshape(1, 16)
    t6 = torch.empty((4, 16), dtype=torch.float32, device=x.device)
    row_layer_norm0(t6, x, x, r, t3, t5)
    del t3, t5
    return (t6, )
