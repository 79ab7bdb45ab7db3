"""The attention template under the Triton interpreter, against PyTorch.

References: an explicit ``softmax(q k^T * scale + bias) v`` in float64, and
``torch.nn.functional.scaled_dot_product_attention`` with an explicit boolean mask for causal attention (the
spec's causal diagonal is bottom-right, ``j <= i + (Sk - Sq)``; SDPA's ``is_causal`` is top-left). Grids stay
at a few dozen programs: the interpreter costs about 1 ms per program and a few ms per key tile.
"""
import os
import tempfile

os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("EQIFORGE_CACHE_DIR", os.path.join(tempfile.gettempdir(), "eqiforge-test-kernels"))

import math  # noqa: E402
import re  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402

from eqiforge.lower.kernels import AttentionSpec, Operand  # noqa: E402
from eqiforge.lower.triton import UnsupportedSpec, build, render  # noqa: E402
from eqiforge.lower.triton.templates import template  # noqa: E402
from eqiforge.ops import DTYPE_NAMES, DTYPES  # noqa: E402

if isinstance(triton.language.sigmoid, triton.runtime.JITFunction):  # compiled, not interpreted
    pytest.skip("Triton is not interpreting: TRITON_INTERPRET is 0, or triton was imported before it was set",
                allow_module_level=True)

# masked lanes compute on the loads' `other` values (exp(-inf), ...) and are never stored; numpy warns
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

TOLERANCE = {"float32": 1e-5, "float16": 1e-2, "bfloat16": 2e-2}


def operand(t: torch.Tensor) -> Operand:
    return Operand(tuple(t.shape), DTYPE_NAMES[t.dtype])


def randn(*shape, dtype=torch.float32):
    return torch.randn(*shape).to(dtype)


def causal_mask(sq: int, sk: int) -> torch.Tensor:
    """True where query i may see key j: j <= i + (Sk - Sq)."""
    return torch.ones(sq, sk, dtype=torch.bool).tril(sk - sq)


def reference(q, k, v, scale, bias=None, causal=False, k_t=False):
    """Explicit softmax attention in float64; GQA by repeating k/v heads (the kernel must not)."""
    q, k, v = q.double(), k.double(), v.double()
    k = k.transpose(-1, -2) if k_t else k
    if q.dim() >= 3 and k.shape[-3] not in (1, q.shape[-3]):
        k = k.repeat_interleave(q.shape[-3] // k.shape[-3], dim=-3)
        v = v.repeat_interleave(q.shape[-3] // v.shape[-3], dim=-3)
    s = q @ k.transpose(-1, -2) * scale
    if bias is not None:
        s = s + bias.double()
    if causal:
        s = s.masked_fill(~causal_mask(q.shape[-2], k.shape[-2]), float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def check(out, ref, dtype):
    tol = TOLERANCE[dtype]
    out, ref = out.double(), ref.double()
    assert torch.equal(out.isnan(), ref.isnan()), "nan pattern differs"
    finite = ref.isfinite()
    err = ((out - ref)[finite].abs().max() / ref[finite].abs().max().clamp_min(1e-30)).item()
    assert err <= tol, f"relative error {err:.2e} > {tol:.0e}"


def attention(q, k, v, scale=None, bias=None, causal=False, k_t=False, block_m=16, block_n=16, out_dtype=None,
              split=1, **options):
    """Build the kernel for these tensors, run it, return its output."""
    d = q.shape[-1]
    scale = 1 / math.sqrt(d) if scale is None else scale
    out_shape = tuple(q.shape[:-1]) + (v.shape[-1],)
    out_dtype = out_dtype or q.dtype
    spec = AttentionSpec(operand(q), operand(k), operand(v), Operand(out_shape, DTYPE_NAMES[out_dtype]), scale,
                         causal, k_t, operand(bias) if bias is not None else None, block_m, block_n, split)
    out = torch.empty(out_shape, dtype=out_dtype)
    return build(spec, "attn", **options)(out, q, k, v, *([bias] if bias is not None else []))


def run_check(q, k, v, scale=None, bias=None, causal=False, k_t=False, **kwargs):
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    out = attention(q, k, v, scale, bias, causal, k_t, **kwargs)
    check(out, reference(q, k, v, scale, bias, causal, k_t), DTYPE_NAMES[q.dtype])
    return out


# ------------------------------------------------------------------------------------------- numerics

@pytest.mark.parametrize("sq, sk", [(1, 1), (5, 17), (17, 40), (64, 5), (40, 64)])
@pytest.mark.parametrize("blocks", [(16, 16), (32, 16), (16, 32)])
def test_attention_fp32_sequence_tails(sq, sk, blocks):
    torch.manual_seed(0)
    run_check(randn(2, sq, 16), randn(2, sk, 16), randn(2, sk, 16), block_m=blocks[0], block_n=blocks[1])


@pytest.mark.parametrize("d", [16, 64, 128])
def test_attention_head_dims(d):
    torch.manual_seed(1)
    run_check(randn(1, 2, 17, d), randn(1, 2, 40, d), randn(1, 2, 40, d))


@pytest.mark.parametrize("d, dv", [(24, 40), (8, 16), (100, 128), (1, 3)])
def test_attention_head_dims_padded_with_masks(d, dv):
    torch.manual_seed(2)
    run_check(randn(2, 17, d), randn(2, 33, d), randn(2, 33, dv))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("d", [16, 64])
def test_attention_half_precision(dtype, d):
    torch.manual_seed(3)
    run_check(randn(2, 2, 17, d, dtype=dtype), randn(2, 2, 40, d, dtype=dtype), randn(2, 2, 40, d, dtype=dtype))


def test_attention_fp16_output_divides_in_fp32():
    """Many keys: l_i is large; the division must happen in fp32 before the cast to fp16."""
    torch.manual_seed(18)
    q, k, v = randn(1, 5, 16, dtype=torch.float16) * 0.01, randn(1, 64, 16, dtype=torch.float16), \
        randn(1, 64, 16, dtype=torch.float16)
    out = attention(q, k, v, 0.25, block_n=32)
    ref = reference(q, k, v, 0.25)
    assert (out.double() - ref).abs().max() <= 2e-3 * ref.abs().max()


def test_attention_output_dtype_differs_from_inputs():
    torch.manual_seed(4)
    q, k, v = (randn(2, 17, 16, dtype=torch.float16) for _ in range(3))
    out = attention(q, k, v, 0.25, out_dtype=torch.float32)
    assert out.dtype == torch.float32
    check(out, reference(q, k, v, 0.25), "float16")


def test_attention_scale_and_large_logits_are_stable():
    torch.manual_seed(5)
    q, k, v = randn(2, 17, 16) * 30, randn(2, 40, 16) * 30, randn(2, 40, 16)
    out = run_check(q, k, v, scale=0.7)
    assert out.isfinite().all()


# ------------------------------------------------------------------------------------------- masks

@pytest.mark.parametrize("sq, sk", [(17, 17), (64, 64), (5, 40), (17, 64)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_attention_causal_against_sdpa(sq, sk, dtype):
    torch.manual_seed(6)
    q, k, v = randn(1, 2, sq, 16, dtype=dtype), randn(1, 2, sk, 16, dtype=dtype), randn(1, 2, sk, 16, dtype=dtype)
    out = attention(q, k, v, 0.3, causal=True)
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=causal_mask(sq, sk),
                                         scale=0.3)
    check(out, ref, DTYPE_NAMES[dtype])
    if sq == sk:  # the diagonals agree: SDPA's own is_causal
        check(out, F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True, scale=0.3),
              DTYPE_NAMES[dtype])


def test_attention_causal_with_more_queries_than_keys_gives_zero_rows_like_sdpa():
    """Queries i < Sq - Sk see no key: their rows are 0, as in torch's SDPA (an explicit softmax gives nan)."""
    torch.manual_seed(7)
    q, k, v = randn(2, 40, 16), randn(2, 17, 16), randn(2, 17, 16)
    out = attention(q, k, v, 0.25, causal=True)
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=causal_mask(40, 17),
                                         scale=0.25)
    assert torch.equal(out[:, :23], torch.zeros(2, 23, 16))
    check(out, ref, "float32")


def test_attention_causal_skips_key_tiles_above_the_diagonal():
    """nan in v past the first key tile: with 0 * nan = nan in P @ V, a loaded-then-masked tile would poison
    the rows of the first query tile; skipped tiles cannot."""
    torch.manual_seed(8)
    q, k, v = randn(1, 64, 16), randn(1, 64, 16), randn(1, 64, 16)
    poisoned = v.clone()
    poisoned[:, 16:] = float("nan")
    out = attention(q, k, poisoned, 0.25, causal=True)
    assert out[:, :16].isfinite().all()
    check(out[:, :16], reference(q, k, v, 0.25, causal=True)[:, :16], "float32")
    assert out[:, 16:].isnan().all()  # later rows see the poisoned keys (the check above is not vacuous)
    non_causal = attention(q, k, poisoned, 0.25)
    assert non_causal[:, :16].isnan().all()  # without the bound every tile is loaded
    source = render(AttentionSpec(operand(q), operand(k), operand(v), operand(q), 0.25, causal=True), "a")
    assert "hi = tl.minimum((pid_m + 1) * BLOCK_M + Sk - Sq, Sk)" in source
    assert "for start_n in range(0, hi, BLOCK_N):" in source


@pytest.mark.parametrize("bias_shape", [(2, 1, 17, 40), (1, 1, 17, 40), (2, 3, 17, 40), (1, 1, 1, 40),
                                        (2, 1, 17, 1)])
def test_attention_additive_bias_broadcasts(bias_shape):
    torch.manual_seed(9)
    bias = randn(*bias_shape)
    run_check(randn(2, 3, 17, 16), randn(2, 3, 40, 16), randn(2, 3, 40, 16), bias=bias)


def test_attention_bias_masks_with_minus_infinity_and_half_precision_bias():
    torch.manual_seed(10)
    q, k, v = randn(2, 17, 16), randn(2, 40, 16), randn(2, 40, 16)
    bias = torch.zeros(1, 17, 40).masked_fill(torch.rand(1, 17, 40) < 0.5, float("-inf"))
    bias[0, :, 0] = 0.0  # every row keeps a key
    run_check(q, k, v, bias=bias)
    run_check(q, k, v, bias=randn(1, 17, 40, dtype=torch.float16), causal=True)


def test_attention_fully_masked_rows_give_zero_like_sdpa():
    torch.manual_seed(11)
    q, k, v = randn(1, 17, 16), randn(1, 40, 16), randn(1, 40, 16)
    bias = torch.zeros(1, 17, 40)
    bias[0, 3] = float("-inf")
    out = attention(q, k, v, 0.25, bias=bias)
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=bias.double(), scale=0.25)
    assert torch.equal(out[0, 3], torch.zeros(16))
    check(out, ref, "float32")


# ------------------------------------------------------------------------------------------- layouts

def test_attention_k_transposed_is_read_in_place():
    torch.manual_seed(12)
    q, kt, v = randn(2, 2, 17, 64), randn(2, 2, 64, 40), randn(2, 2, 40, 64)
    run_check(q, kt, v, k_t=True)
    run_check(q, randn(2, 2, 40, 64).transpose(-1, -2), v, k_t=True)  # a transposed view: contiguous k


def test_attention_non_contiguous_operands_from_permutes():
    torch.manual_seed(13)
    q = randn(2, 17, 3, 32).permute(0, 2, 1, 3)  # [B, S, H, D] -> [B, H, S, D]
    k = randn(2, 40, 3, 32).permute(0, 2, 1, 3)
    v = randn(2, 40, 3, 64).permute(0, 2, 1, 3)
    assert not (q.is_contiguous() or k.is_contiguous() or v.is_contiguous())
    run_check(q, k, v, causal=True)


def test_attention_broadcast_batch_dims_of_k_and_v():
    torch.manual_seed(14)
    run_check(randn(3, 2, 17, 16), randn(1, 2, 40, 16).expand(3, 2, 40, 16), randn(1, 2, 40, 16))


@pytest.mark.parametrize("hkv", [2, 1])
@pytest.mark.parametrize("causal", [False, True])
def test_attention_grouped_query_heads(hkv, causal):
    torch.manual_seed(15)
    q = randn(2, 4, 17, 16)
    k, v = randn(2, hkv, 40, 16), randn(2, hkv, 40, 16)
    run_check(q, k, v, causal=causal)
    source = render(AttentionSpec(operand(q), operand(k), operand(v), operand(q), 0.25), "a")
    assert ("kv_head = batch1 // kv_group" in source) == (hkv == 2)
    assert "repeat" not in source


def test_attention_grouped_query_heads_bf16_non_contiguous():
    torch.manual_seed(16)
    q = randn(1, 17, 4, 64, dtype=torch.bfloat16).permute(0, 2, 1, 3)
    k = randn(1, 40, 2, 64, dtype=torch.bfloat16).permute(0, 2, 1, 3)
    v = randn(1, 40, 2, 64, dtype=torch.bfloat16).permute(0, 2, 1, 3)
    run_check(q, k, v)


def test_attention_rank_two_and_three():
    torch.manual_seed(17)
    run_check(randn(17, 16), randn(40, 16), randn(40, 16))
    run_check(randn(4, 17, 16), randn(2, 40, 16), randn(2, 40, 16), causal=True)  # GQA over the only batch dim


@pytest.mark.parametrize("split", [2, 3, 8])
@pytest.mark.parametrize("causal", [False, True])
def test_attention_split_key_axis_combines_exactly(split, causal):
    """Flash-decoding: shares of the key axis in separate programs, merged per row by a combine kernel; with
    more shares than key tiles, or shares above the causal diagonal, the empty shares drop out."""
    torch.manual_seed(18)
    q, k, v = randn(2, 4, 3, 32), randn(2, 2, 100, 32), randn(2, 2, 100, 48)  # grouped heads, decode-like Sq
    run_check(q, k, v, causal=causal, split=split)
    bias = randn(1, 4, 3, 100).masked_fill(torch.rand(1, 4, 3, 100) < 0.3, float("-inf"))
    run_check(q, k.transpose(-1, -2).contiguous(), v, bias=bias, k_t=True, split=split)


def test_attention_split_key_axis_half_precision():
    torch.manual_seed(19)
    run_check(randn(1, 2, 1, 64, dtype=torch.float16), randn(1, 2, 200, 64, dtype=torch.float16),
              randn(1, 2, 200, 64, dtype=torch.float16), split=4)


# ------------------------------------------------------------------------------------------- source

def _specs():
    f32, f16 = "float32", "float16"
    return {
        "plain": AttentionSpec(Operand((2, 17, 64), f32), Operand((2, 40, 64), f32), Operand((2, 40, 64), f32),
                               Operand((2, 17, 64), f32), 0.125),
        "everything": AttentionSpec(Operand((2, 4, 17, 128), f16), Operand((2, 2, 128, 40), f16),
                                    Operand((2, 2, 40, 64), f16), Operand((2, 4, 17, 64), f16), 0.1, causal=True,
                                    k_transposed=True, bias=Operand((1, 4, 17, 40), f32), block_m=32, block_n=16),
        "bf16": AttentionSpec(Operand((17, 16), "bfloat16"), Operand((40, 16), "bfloat16"),
                              Operand((40, 16), "bfloat16"), Operand((17, 16), "bfloat16"), 0.25),
    }


@pytest.mark.parametrize("kind", ["plain", "everything", "bf16"])
def test_rendered_source_reads_like_a_tutorial(kind):
    header = "source: (Attention q k v)\nrules: fuse/attention\npredicted: 3.1 us"
    spec = _specs()[kind]
    source = render(spec, "k0", header)
    assert all(f"# {line}" in source for line in header.splitlines())
    (signature,) = re.findall(r"^def \w+_kernel\(\n(.*?)\n\):", source, flags=re.S | re.M)
    for line in signature.splitlines():
        assert re.fullmatch(r"    \w+(: tl\.constexpr)?,( +# .*)?", line), f"not one parameter per line: {line!r}"
    for block in ("BLOCK_M", "BLOCK_N", "BLOCK_D", "BLOCK_DV"):
        assert f"    {block}: tl.constexpr," in signature
    memory_ops = [line for line in source.splitlines() if "tl.load(" in line or "tl.store(" in line]
    assert memory_ops and all("mask=" in line for line in memory_ops)
    assert "memory traffic" in source and "def k0(out, q, k, v" in source
    assert "m_i" in source and "l_i" in source and "alpha" in source  # the online softmax, by name
    assert ("UPCAST_BF16" in source) == (kind == "bf16")
    store = next(line for line in memory_ops if "tl.store(" in line)
    assert "tl.store(out_ptrs, o" in store  # the quotient is cast whole, never just l_i
    assert template(spec).kernels(spec, "k0")[0].name == "k0_kernel"


def test_tf32_is_a_template_choice():
    spec = _specs()["plain"]
    assert "DOT_PRECISION='tf32'" in render(spec, "a", input_precision="tf32")
    with pytest.raises(UnsupportedSpec, match="input_precision"):
        render(spec, "a", input_precision="fp8")


def test_unsupported_specs_raise_clearly():
    f32 = "float32"

    def spec(q, k, v, out=None, **kw):
        out = out or q[:-1] + (v[-1],)
        return AttentionSpec(Operand(q, f32), Operand(k, f32), Operand(v, f32), Operand(out, f32), 1.0, **kw)

    with pytest.raises(UnsupportedSpec, match="do not agree"):
        render(spec((2, 17, 16), (2, 40, 32), (2, 40, 16)), "a")
    with pytest.raises(UnsupportedSpec, match="do not agree"):
        render(spec((2, 17, 16), (2, 40, 16), (2, 41, 16)), "a")
    with pytest.raises(UnsupportedSpec, match="head dims up to 128"):
        render(spec((2, 17, 256), (2, 40, 256), (2, 40, 256)), "a")
    with pytest.raises(UnsupportedSpec, match="neither equals nor broadcasts"):
        render(spec((2, 4, 17, 16), (2, 3, 40, 16), (2, 3, 40, 16)), "a")  # 4 % 3 != 0
    with pytest.raises(UnsupportedSpec, match="neither equals nor broadcasts"):
        render(spec((2, 4, 17, 16), (2, 2, 40, 16), (2, 4, 40, 16)), "a")  # k and v head counts differ
    with pytest.raises(UnsupportedSpec, match="neither equals nor broadcasts"):
        render(spec((2, 4, 17, 16), (3, 4, 40, 16), (3, 4, 40, 16)), "a")
    with pytest.raises(UnsupportedSpec, match="does not broadcast"):
        render(spec((2, 17, 16), (2, 40, 16), (2, 40, 16), bias=Operand((2, 17, 39), f32)), "a")
    with pytest.raises(UnsupportedSpec, match="at least 16"):
        render(spec((2, 17, 16), (2, 40, 16), (2, 40, 16), block_m=8), "a")
    with pytest.raises(UnsupportedSpec, match="power of two"):
        render(spec((2, 17, 16), (2, 40, 16), (2, 40, 16), block_n=48), "a")
    with pytest.raises(UnsupportedSpec, match="share a dtype"):
        render(AttentionSpec(Operand((17, 16), "float16"), Operand((40, 16), f32), Operand((40, 16), f32),
                             Operand((17, 16), f32), 1.0), "a")


def test_launcher_rejects_wrong_shapes_and_dtypes():
    spec = _specs()["plain"]
    kernel = build(spec, "a")
    q, k, v = torch.empty(2, 17, 64), torch.empty(2, 40, 64), torch.empty(2, 40, 64)
    with pytest.raises(ValueError, match="k must be torch.float32 of shape"):
        kernel(torch.empty(2, 17, 64), q, torch.empty(2, 41, 64), v)
    with pytest.raises(ValueError, match="out must be torch.float32"):
        kernel(torch.empty(2, 17, 64, dtype=torch.float16), q, k, v)
    assert DTYPES[spec.out.dtype] == torch.float32
