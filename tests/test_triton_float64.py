"""float64 programs through the triton backend compute in float64 (issue 10: never silently wrong).

Every kernel kind (GEMM with fused epilogue, pointwise, row reductions, attention with and without a split
key axis) renders a float64 template when the program is float64, and a kernel that runs in PyTorch
instead computes in float64 too. Results match eager float64 to about 1e-12; the generated module holds no
float32 arithmetic. The kernel kinds are asserted as well: the plan check would otherwise hide a wrong
kernel by excluding it from the plan.
"""
import re

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import eqiforge
from eqiforge.lower.triton_module import generate
from eqiforge.lower.kernels import AttentionSpec, GemmSpec, Operand, RowReduceSpec, Tile
from eqiforge.lower.triton import (StaticCompileUnavailable, UnsupportedSpec, build, load_module, render,
                                   static_resources)

F64 = torch.float64
KERNEL_OPS = ("GemmK", "PointwiseK", "RowReduceK", "AttentionK")


def randn(*shape):
    return torch.randn(*shape, dtype=F64)


def relative_error(got, want) -> float:
    return ((got - want).abs().max() / want.abs().max()).item()


def kernel_kinds(opt) -> list[str]:
    """The plan's kernels: op, and a row reduction's kind."""
    g = opt.plan.graph
    nodes = [g.nodes[i] for i in g.live_nodes() if g.nodes[i].op in KERNEL_OPS]
    return [n.op + (f":{n.attrs[0]}" if n.op == "RowReduceK" else "") for n in nodes]


def layer_norm(n):
    w, b = randn(n), randn(n)
    return lambda x: F.layer_norm(x, (n,), w, b), (randn(3, 2, n) if n < 1024 else randn(3, n),)


def rms_norm():
    w = randn(48)
    return lambda x: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w, (randn(4, 48),)


def pointwise_chain():
    fn = lambda x, y: torch.sigmoid(x) * y + torch.exp(-x) * (y.abs() + 1.0) ** -0.5 - torch.tanh(y) * 0.1  # noqa: E731
    return fn, (randn(8, 33), randn(8, 33))


def sdpa(sq=32, sk=32, causal=False):
    fn = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # noqa: E731
    return fn, (randn(1, 2, sq, 16), randn(1, 2, sk, 16), randn(1, 2, sk, 16))


# name: (() -> (program, inputs), optimize options, kernels the plan must hold; None: pointwise kernels only)
CASES = {
    "matmul": (lambda: (lambda x, w: x @ w, (randn(8, 16), randn(16, 16))), {}, ["GemmK"]),
    "linear_bias_gelu": (lambda: (nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16)).double().eval(),
                                  (randn(8, 16),)), {}, ["GemmK", "GemmK"]),
    "softmax_of_matmul": (lambda: (lambda x, w: torch.softmax(x @ w, -1), (randn(8, 16), randn(16, 16))), {},
                          ["GemmK", "RowReduceK:softmax"]),
    "layer_norm_affine": (lambda: layer_norm(48), {}, ["RowReduceK:layer_norm"]),
    "layer_norm_long_rows": (lambda: layer_norm(1500), {}, ["RowReduceK:layer_norm"]),  # chunk statistics merged
    "rms_norm_by_hand": (rms_norm, {}, ["RowReduceK:rms_norm"]),
    "pointwise_chain": (pointwise_chain, {}, None),
    "long_row_sum": (lambda: (lambda a, b: (a * b).sum(-1), (randn(2, 1 << 14), randn(2, 1 << 14))),
                     {"priced_device": "H200"}, ["RowReduceK:sum"]),
    "sdpa": (sdpa, {}, ["AttentionK"]),
    "sdpa_causal": (lambda: sdpa(causal=True), {}, ["AttentionK"]),
    "sdpa_decode_split_keys": (lambda: sdpa(sq=1, sk=1024), {"priced_device": "H200"}, ["AttentionK"]),
}


def optimize(name):
    """(program, inputs, kernels expected, the program optimized for the triton backend)."""
    make, options, expected = CASES[name]
    torch.manual_seed(0)
    fn, inputs = make()
    return fn, inputs, expected, eqiforge.optimize(fn, inputs, backend="triton", **options)


@pytest.mark.parametrize("name", sorted(CASES))
def test_float64_program_runs_float64_kernels(name):
    fn, inputs, expected, opt = optimize(name)
    with torch.no_grad():
        got, want = opt(*inputs), fn(*inputs)
    assert got.dtype == F64 and relative_error(got, want) <= 1e-12
    kinds = kernel_kinds(opt)
    if expected is None:
        assert kinds and set(kinds) == {"PointwiseK"}
    else:
        assert kinds == expected
    assert opt.report.lowering_notes == [] and opt.source.count("@triton.jit") >= len(kinds)
    assert "float32" not in opt.source and "fp32" not in opt.source  # no float32 tensor, cast or accumulator
    assert "tl.rsqrt" not in opt.source  # rsqrt.approx.f64 on NVIDIA GPUs
    assert not re.search(r"^ +(eps|scale),", opt.source, re.M)  # unannotated, a Python float is passed as fp32
    if name == "sdpa_decode_split_keys":
        assert "_combine_kernel" in opt.source  # the key shares' workspaces are float64 too


def test_float32_program_is_unchanged():
    """A float32 program keeps float32 accumulators, fp32 scalars and the ieee dot; nothing becomes float64."""
    torch.manual_seed(0)
    x, w, gamma = torch.randn(8, 16), torch.randn(16, 48), torch.randn(48)
    fn = lambda x, w: F.layer_norm(torch.softmax(x @ w, -1), (48,), gamma)  # noqa: E731
    opt = eqiforge.optimize(fn, (x, w), backend="triton")
    with torch.no_grad():
        assert relative_error(opt(x, w), fn(x, w)) <= 1e-5
    assert kernel_kinds(opt) == ["GemmK", "RowReduceK:softmax", "RowReduceK:layer_norm"]
    assert "dtype=tl.float32" in opt.source and "input_precision=DOT_PRECISION" in opt.source
    assert "tl.rsqrt(" in opt.source and re.search(r"^ +eps,$", opt.source, re.M)  # an fp32 scalar
    assert "float64" not in opt.source and "fp64" not in opt.source and ".double()" not in opt.source


@pytest.mark.parametrize("name", ["softmax_of_matmul", "linear_bias_gelu", "layer_norm_affine", "sdpa"])
def test_kernels_run_in_pytorch_compute_in_float64(name):
    """The PyTorch code of a kernel with no Triton rendering (or one that failed to build) keeps float64."""
    fn, inputs, _, opt = optimize(name)
    in_torch = {k: "forced by the test" for k in opt.runner.generated.kernels}
    gen = generate(opt.plan, [input_name for input_name, _, _ in opt.input_specs], in_torch=in_torch)
    assert set(gen.fallbacks) == set(in_torch) and "@triton.jit" not in gen.source
    assert ".float()" not in gen.source and "float32" not in gen.source
    module = load_module(gen.source, f"test_float64_in_torch_{name}")
    with torch.no_grad():
        got = module.forward(*inputs, params=opt.runner.params)[0]
        assert got.dtype == F64 and relative_error(got, fn(*inputs)) <= 1e-12


def f64(*shape):
    return Operand(shape, "float64")


@pytest.mark.parametrize("split_k", [1, 2])
def test_float32_product_with_a_float64_epilogue(split_k):
    """(a @ b) + bias64 as eager computes it: the product of float32 tiles in float32, the epilogue in float64.
    Attention has no such template (its dots would mix dtypes): it runs in PyTorch.

    The operands are small integers, so every float32 product and partial sum is exact whatever order a
    library sums in (float32 rounding would otherwise differ between the BLAS and the interpreter by ~1e-7);
    a float64 bias that a float32 epilogue would round is then the only thing the 1e-12 bound can see."""
    torch.manual_seed(0)
    f32 = lambda *shape: Operand(shape, "float32")  # noqa: E731
    spec = GemmSpec(f32(32, 16), f32(16, 32), f64(32, 32), tile=Tile(16, 16, 16), split_k=split_k,
                    epilogue=("bin", "add", ("acc",), ("in", 0)), extras=(f64(1, 32),))
    a, b, bias = torch.randint(-4, 5, (32, 16)).float(), torch.randint(-4, 5, (16, 32)).float(), randn(1, 32)
    out = build(spec, f"gemm_f32_f64_{split_k}")(torch.empty(32, 32, dtype=F64), a, b, bias)
    assert relative_error(out, (a @ b).double() + bias) <= 1e-12
    assert "acc = acc.to(tl.float64)" in render(spec, "g")
    with pytest.raises(UnsupportedSpec, match="float64 bias"):
        render(AttentionSpec(f32(1, 16, 16), f32(1, 16, 16), f32(1, 16, 16), f32(1, 16, 16), 0.25,
                             bias=f64(1, 16, 16)), "a")


HOPPER_SPECS = {
    "gemm_bias_gelu": GemmSpec(f64(256, 128), f64(128, 256), f64(256, 256), tile=Tile(128, 128, 32, 8, 8, 3),
                               epilogue=("un", "gelu", ("bin", "add", ("acc",), ("in", 0))), extras=(f64(1, 256),)),
    "attention_head_dim_128_bias": AttentionSpec(f64(1, 4, 128, 128), f64(1, 4, 128, 128), f64(1, 4, 128, 128),
                                                 f64(1, 4, 128, 128), 0.125, causal=True, bias=f64(1, 1, 128, 128)),
    "layer_norm_long_rows": RowReduceSpec("layer_norm", f64(64, 4096), f64(64, 4096)),
}


@pytest.mark.parametrize("name", sorted(HOPPER_SPECS))
def test_float64_kernels_compile_for_hopper(name):
    """Triton takes the float64 templates for sm_90 (tl.dot on fp64 tiles: DMMA), within its shared memory."""
    try:
        res = static_resources(HOPPER_SPECS[name], name)
    except StaticCompileUnavailable as err:
        pytest.skip(f"this triton cannot target CUDA: {err}")
    assert res["n_regs"] > 0 and res["shared"] <= 227 * 1024
