"""Frontend: PyTorch programs -> IR. Every program is captured, verified, checked against the IR conventions,
and evaluated with ``ir.evaluate`` on fresh random inputs against eager PyTorch; a few tests pin the exact
structure the frontend emits, and the error tests pin the messages users see."""
import math
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch._decomp import core_aten_decompositions
from torch.utils import _pytree as pytree

from eqiforge import ir, ops
from eqiforge.errors import EqiforgeError
from eqiforge.egraph import rulesets
from eqiforge.frontend import capture, coverage, fx_to_ir

aten = torch.ops.aten


# ------------------------------------------------------------------------------------------------ helpers

def assert_conventions(graph: ir.Graph) -> None:
    """The IR conventions the frontend establishes: equal operand dtypes, bool conditions."""
    for i in graph.live_nodes():
        n = graph.nodes[i]
        kind = ops.get(n.op).kind
        dtypes = [graph.nodes[j].dtype for j in n.inputs]
        if kind in ("binary", "compare", "matmul"):
            assert len(set(dtypes)) == 1, f"node {i} {n.op} mixes dtypes {dtypes}"
        if kind == "where":
            assert dtypes[0] == "bool" and dtypes[1] == dtypes[2], f"node {i} Where has dtypes {dtypes}"


def assert_close(got, want, rel=1e-5):
    assert pytree.tree_structure(got) == pytree.tree_structure(want)
    for g, w in zip(pytree.tree_leaves(got), pytree.tree_leaves(want)):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        g, w = g.double(), w.double()
        assert (g - w).norm() <= rel * w.norm() + 1e-6, f"error {(g - w).norm()} vs norm {w.norm()}"


def check(program, *inputs, fresh=None, rel=1e-5, **kw):
    """Capture at ``inputs``, then compare the IR with eager on ``fresh()`` inputs (default: new randn)."""
    cap = capture(program, inputs, **kw)
    cap.graph.verify()
    assert_conventions(cap.graph)
    new = fresh() if fresh else tuple(torch.randn(x.shape) for x in inputs)
    with torch.no_grad():
        want = program(*new)
    assert_close(cap.unflatten(ir.evaluate(cap.graph, cap.feeds(*new))), want, rel)
    return cap


# ----------------------------------------------------------------------------------------------- programs

class MLP(nn.Module):
    def __init__(self, d=16, hidden=32):
        super().__init__()
        self.up, self.down = nn.Linear(d, hidden), nn.Linear(hidden, d)

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


class Attention(nn.Module):
    """Causal multi-head self-attention written out: softmax(q k^T / sqrt(d)) v with a masked_fill."""

    def __init__(self, d=32, heads=4, seq=8):
        super().__init__()
        self.heads = heads
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.register_buffer("causal", torch.ones(seq, seq).tril().bool())

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in self.qkv(x).split(c, 2))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(c // self.heads))
        att = torch.softmax(att.masked_fill(~self.causal[:t, :t], float("-inf")), dim=-1)
        return self.proj((att @ v).transpose(1, 2).reshape(b, t, c))


class RMSNorm(nn.Module):
    def __init__(self, d=16, eps=1e-6):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.randn(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def test_mlp():
    check(MLP(), torch.randn(4, 16))


def test_mlp_3d_input_with_tanh_gelu():
    m = nn.Sequential(nn.Linear(16, 8), nn.GELU(approximate="tanh"))
    cap = check(m, torch.randn(2, 3, 16))
    assert "GeluTanh" in cap.graph.op_counts()


@pytest.mark.parametrize("fn", [F.elu, lambda x: F.elu(x, alpha=0.5), F.selu, F.softplus,
                                lambda x: F.softplus(x, beta=2.0), torch.log1p],
                         ids=["elu", "elu_alpha", "selu", "softplus", "softplus_beta", "log1p"])
def test_activations_are_ir_ops_not_pytorch_calls(fn):
    x = torch.randn(4, 16) * 3
    cap = check(lambda t: fn(t.abs()) if fn is torch.log1p else fn(t), x)
    assert "Extern" not in cap.graph.op_counts()


def test_softplus_with_another_threshold_stays_a_pytorch_call():
    cap = check(lambda t: F.softplus(t, threshold=5.0), torch.randn(4, 16) * 3)
    assert "Softplus" not in cap.graph.op_counts()


def test_layer_norm():
    cap = check(nn.LayerNorm([4, 8]), torch.randn(3, 4, 8))
    assert cap.graph.op_counts()["Rsqrt"] == 1


def test_layer_norm_without_affine():
    check(nn.LayerNorm(8, elementwise_affine=False), torch.randn(5, 8))


def test_attention():
    cap = check(Attention(), torch.randn(2, 8, 32))
    counts = cap.graph.op_counts()
    assert counts["MatMul"] == 4 and counts["Where"] == 1 and counts["Exp"] == 1 and "Extern" not in counts


def test_rmsnorm():
    cap = check(RMSNorm(), torch.randn(2, 5, 16))
    assert {"Pow", "Rsqrt", "Sum"} <= set(cap.graph.op_counts())


def test_var_and_mean():
    def f(x):
        return (x.var(dim=(0, 2)), x.var(-1, keepdim=True, correction=0), x.mean(1),
                torch.var_mean(x, dim=1), x.std(-1))
    check(f, torch.randn(3, 5, 7))


def test_full_reductions_to_scalars():
    check(lambda x: (x.sum(), x.mean(), x.var(), x.amax(), torch.max(x), torch.dot(x[0], x[1])), torch.randn(3, 4))


def test_split_chunk_cat():
    def f(x):
        a, b, c = x.split([2, 3, 1], dim=1)
        d, e = x.chunk(2, dim=-1)
        u = x.unbind(0)
        return torch.cat([c, a, b], dim=1), d * e, torch.cat([u[2], u[0]]), x.split(4, dim=-1)[1]
    check(f, torch.randn(3, 6))


def test_slices_and_selects():
    def f(x):
        return x[1:, -3:], x[..., 2], x[:, None, :2], x[-1], x[:, 1:100]
    cap = check(f, torch.randn(4, 5))
    assert "Extern" not in cap.graph.op_counts()


def test_comparisons_and_where():
    def f(x, y):
        m = (x > y) & (x <= 0.5) | ~(y == x) ^ (x != 1)
        return (torch.where(m, x, y), torch.where(x >= 0, x, 0.0), torch.where(y < 0, 1.0, y),
                x.masked_fill(y < 0, -1.0), torch.logical_not(m), torch.logical_and(x > 0, m))
    check(f, torch.randn(3, 4), torch.randn(4))


def test_clamp_max_min():
    def f(x, y):
        return x.clamp(-0.5, 0.5), x.clamp(min=0.1), x.clamp(max=y), torch.maximum(x, y), torch.minimum(x, y)
    check(f, torch.randn(3, 4), torch.randn(3, 4))


def test_casts_fp16_round_trip():
    def f(x, w):
        h = (x.half() @ w.half()).relu()
        return h.float() + x.sum(-1, keepdim=True), h.to(torch.float32).softmax(-1), x.to(torch.float32)
    cap = check(f, torch.randn(4, 8), torch.randn(8, 8), rel=2e-3)
    assert cap.graph.op_counts()["Cast"] >= 3


def test_int_and_bool_promotion():
    def f(x, n):
        return x + n, n / 2, n.sum(0), (n > 1).sum(-1), n * 3, x > n
    cap = capture(f, (torch.randn(2, 3), torch.randint(-5, 5, (2, 3))))
    cap.graph.verify()
    assert_conventions(cap.graph)
    x, n = torch.randn(2, 3), torch.randint(-5, 5, (2, 3))
    assert_close(cap.unflatten(ir.evaluate(cap.graph, cap.feeds(x, n))), f(x, n))


def test_matmul_vectors_and_batched_broadcast():
    def f(a, b, v, w, c):
        batched = torch.matmul(a.unsqueeze(0), b.expand(2, 5, 3))
        return a @ v, w @ b, batched, torch.matmul(c, b), w @ c.transpose(-1, -2)
    cap = check(f, torch.randn(4, 5), torch.randn(5, 3), torch.randn(5), torch.randn(5),
                torch.randn(2, 1, 4, 5))
    for i in cap.graph.live_nodes():
        n = cap.graph.nodes[i]
        if n.op == "MatMul":
            a, b = (cap.graph.nodes[j].shape for j in n.inputs)
            assert len(a) == len(b) >= 2 and a[:-2] == b[:-2]


def test_bmm_and_baddbmm_and_addmm_scales():
    def f(x, y, z, m):
        return torch.baddbmm(z, x, y, beta=0.5, alpha=2.0), torch.addmm(m, x[0], y[0], beta=0), torch.bmm(x, y)
    check(f, torch.randn(2, 3, 4), torch.randn(2, 4, 5), torch.randn(2, 3, 5), torch.randn(3, 5))


def test_scalar_arithmetic():
    def f(x):
        return (x * 2 + 1, 3 - x, x / 4, torch.add(x, x, alpha=3), torch.sub(x, 1, alpha=2), 2 ** x,
                x.abs().sqrt(), (x.abs() + 1).log(), x.exp(), x.reciprocal(), -x, x.sigmoid(), x.tanh(),
                torch.erf(x), F.silu(x), x.relu(), x ** 3, F.relu6(x * 4), F.hardtanh(x), F.leaky_relu(x, 0.2))
    check(f, torch.randn(3, 4))


def test_reductions_with_and_without_keepdim():
    def f(x):
        return (x.sum((0, 2)), x.sum((1, 3), keepdim=True), x.sum((0, 1, 2, 3), keepdim=True),
                x.amax((0, 1, 3)), x.amin(-1, keepdim=True), x.mean((-1, -2)), x.sum(1, dtype=torch.float64),
                (x > 0).any(-1), (x > -1).all(1, keepdim=True), (x > 0).sum((0, 1)))
    cap = check(f, torch.randn(2, 3, 4, 5))
    for i in cap.graph.live_nodes():
        n = cap.graph.nodes[i]
        limit = {"Sum": 3, "Amax": 2, "Amin": 2}.get(n.op)
        assert limit is None or len(n.attrs[0]) <= limit


def test_constants_and_fills():
    def f(x):
        return x + torch.ones(4, 5), torch.zeros_like(x) - x, torch.full((5,), 2.5) * x, x.new_ones(5) + x, \
            x + torch.tensor(3.0)
    check(f, torch.randn(4, 5))


def test_unknown_ops_become_externs():
    emb = nn.Embedding(10, 4)

    def f(x, idx):
        return torch.cumprod(x, 0) + torch.topk(x, 2, -1).values.sum(-1, keepdim=True) * 2, emb(idx), x[:, ::4]
    x, idx = torch.randn(3, 6), torch.randint(0, 10, (2, 3))
    cap = capture(f, (x, idx))
    cap.graph.verify()
    assert cap.graph.op_counts()["Extern"] == 4  # cumprod, topk (values), embedding, x[:, ::4] (no window fits)
    x, idx = torch.randn(3, 6), torch.randint(0, 10, (2, 3))
    with torch.no_grad():
        assert_close(cap.unflatten(ir.evaluate(cap.graph, cap.feeds(x, idx))), f(x, idx))


@pytest.mark.parametrize("program,shape", [
    (lambda x: x.diagonal(), (5, 5)), (lambda x: x.diagonal(2), (4, 6)), (lambda x: x.diagonal(-1), (6, 4)),
    (lambda x: torch.diagonal(x, 1, 2, 0), (3, 4, 5)), (torch.trace, (5, 5)), (torch.diag, (4, 6)),
    (lambda x: torch.eye(5) * x, (5, 5)), (lambda x: torch.eye(4, 6, dtype=torch.float64) + x, (4, 6)),
    (lambda x: torch.where(torch.eye(5, dtype=torch.bool), x, 0.0), (5, 5))],
    ids=["diagonal", "offset", "negative-offset", "dims-of-3d", "trace", "diag-of-matrix", "eye", "eye-n-m",
         "eye-bool"])
def test_diagonals_and_identities_are_ir_ops(program, shape):
    """diagonal/trace/diag read a Diagonal node and eye is built from index vectors (its decomposition's
    unsigned arange is no IR dtype): none of them is a PyTorch call the algebra cannot see into."""
    cap = check(program, torch.randn(shape))
    assert "Extern" not in cap.graph.op_counts()


@pytest.mark.parametrize("program,shapes,ops", [
    (lambda w: torch.block_diag(*w.unbind(0)), [(3, 2, 4)], {"BlockDiag": 1}),
    (lambda w: torch.block_diag(w, w, w), [(2, 3)], {"BlockDiag": 1, "Expand": 1}),
    (lambda a, b: torch.block_diag(a, b, a), [(2, 2), (3, 1)], {"Concat": 6}),
    (lambda a, v: torch.block_diag(a, v, v.sum(), a.double()), [(2, 3), (4,)], {"Concat": 9})],
    ids=["stack", "repeated", "unequal", "vector-scalar-cast"])
def test_block_diag_is_a_stack_of_equal_blocks_or_zero_padded_rows(program, shapes, ops):
    """block_diag of blocks of one shape is one BlockDiag of their stack (a block repeated: its broadcast);
    of blocks of several shapes (1-D ones as rows, a 0-d one as 1 x 1, dtypes promoted), rows of zero fills
    and blocks; each equals eager's on fresh inputs."""
    cap = check(program, *(torch.randn(s) for s in shapes))
    assert {op: cap.graph.op_counts().get(op, 0) for op in ops} == ops and "Extern" not in cap.graph.op_counts()


@pytest.mark.parametrize("program,externs", [
    (lambda x: x.max(dim=1).values, 0), (lambda x: torch.max(x, -1, keepdim=True)[0] * 2, 0),
    (lambda x: x.min(0).values, 0), (lambda x: x.max(1), 2), (lambda x: x.norm(dim=-1), 0),
    (lambda x: torch.linalg.vector_norm(x, 1, dim=0), 0), (lambda x: torch.linalg.vector_norm(x, float("inf")), 0),
    (lambda x: torch.linalg.vector_norm(x, -float("inf"), dim=(0, 1)), 0),
    (lambda x: torch.linalg.vector_norm(x, 3.0, dim=1, keepdim=True), 0),
    (lambda x: torch.linalg.vector_norm(x, 2, dtype=torch.float64), 0), (lambda x: torch.linalg.vector_norm(x, 0), 1)],
    ids=["max-values", "max-keepdim", "min-values", "max-with-indices", "norm-2", "norm-1", "norm-inf",
         "norm-minus-inf", "norm-3", "norm-float64", "norm-0"])
def test_max_values_and_vector_norms_are_reductions(program, externs):
    """max/min over a dim whose indices are unread, and vector norms, are reductions the algebra sees; the
    indices, and the 0-"norm" (a count), stay PyTorch calls."""
    cap = check(program, torch.randn(5, 7))
    assert cap.graph.op_counts().get("Extern", 0) == externs


def test_side_effecting_linalg_calls_are_refused_plainly():
    """linalg.inv checks its input and raises (an effect token orders the check): capture says so, by every
    path, instead of failing inside the converter."""
    with pytest.raises(EqiforgeError, match="side effects"):
        capture(lambda x: torch.linalg.inv(x) @ x, (torch.randn(4, 4),))


def test_identity_masks_are_marked_by_value():
    """eye(n) (bool, a 0/1 float, negated) applied with where/masked_fill is a diagonal mask; a shifted
    identity is not."""
    from eqiforge.frontend.masks import DIAG_MASK

    def facts(program):
        graph = capture(program, (torch.randn(6, 6),)).graph
        return sorted((f for i, fs in graph.facts.items() for f in fs if i in graph.live_nodes()), key=str)
    assert facts(lambda x: torch.where(torch.eye(6, dtype=torch.bool), x, 0.0)) == [DIAG_MASK]
    assert facts(lambda x: x * torch.eye(6)) == [DIAG_MASK]  # the 0/1 float is no band: the diagonal alone
    assert facts(lambda x: x.masked_fill(~torch.eye(6, dtype=torch.bool), 0.0)) == [DIAG_MASK]
    assert facts(lambda x: x.masked_fill(torch.ones(6, 6, dtype=torch.bool).triu(1).tril(1), 0.0)) == []


def test_block_diag_is_concatenations_not_a_call():
    """block_diag decomposes to cats that include empty pieces; those add nothing, so the blocks are Concats
    of the operands and zero fills the rules can see, not one opaque call."""
    cap = check(lambda x, w: x @ torch.block_diag(w, 2 * w, w), torch.randn(4, 9), torch.randn(3, 2))
    assert "Extern" not in cap.graph.op_counts() and "Concat" in cap.graph.op_counts()
    # a cache that starts as a legacy empty 1-D tensor, concatenated with a 4-d one
    cap = check(lambda k: torch.cat([torch.empty(0), k], dim=2) * 2, torch.randn(2, 3, 4, 5))
    assert "Extern" not in cap.graph.op_counts() and "Concat" not in cap.graph.op_counts()


def test_band_masks_are_marked_by_value():
    """A tridiagonal bool mask (where), a 0/1 float sliding window (a product by it, a mask multiplied in) are
    bands with their offsets; a band wider than MAX_BAND_DIAGONALS, a dense weight and a band with a hole are
    not."""
    from eqiforge.frontend.masks import BAND_MASK, BAND_ONES, MAX_BAND_DIAGONALS

    def facts(program, n=8):  # the band facts (a tril mask on the way is one too)
        graph = capture(program, (torch.randn(n, n),)).graph
        return [f for i, fs in graph.facts.items() for f in fs if i in graph.live_nodes() and isinstance(f, tuple)]
    i = torch.arange(8)
    assert facts(lambda a: torch.where((i[:, None] - i[None, :]).abs() <= 1, a, 0.0) @ a) == [(BAND_MASK, -1, 1)]
    assert facts(lambda x: torch.ones(8, 8).tril().triu(-3) @ x) == [(BAND_ONES, -3, 0)]
    assert facts(lambda a: (a * torch.ones(8, 8).triu(-1).tril(2)) @ a) == [(BAND_ONES, -1, 2)]
    wide = MAX_BAND_DIAGONALS // 2 + 1
    assert facts(lambda x: torch.ones(80, 80).tril(wide).triu(-wide) @ x, n=80) == []
    holed = torch.ones(8, 8).tril(1).triu(-1)
    holed[3, 4] = 0.0
    assert facts(lambda x: holed @ x) == []
    weight = torch.randn(8, 8)
    assert facts(lambda x: weight @ x) == []


@pytest.mark.parametrize("index", [(Ellipsis, slice(None, None, 2)), (Ellipsis, slice(1, None, 2)),
                                   (slice(None), slice(2, 7, 3)), (slice(1, None, 2),)],
                         ids=["even", "odd", "start-end-step3", "dim0"])
def test_strided_slices_are_views(index):
    """GPT-J's rotary reads x[..., ::2] and x[..., 1::2]: views of the IR (a window reshaped to [n, step],
    one column of it), not PyTorch calls, so the algebra sees through them."""
    def f(x):
        return x[index] * 2 + 1
    cap = check(f, torch.randn(4, 8, 10))
    assert "Extern" not in cap.graph.op_counts()


def test_arithmetic_on_one_element_constants_is_a_fill():
    """sqrt(torch.tensor(16.0)) (a lifted one-element constant) is a Fill of 4.0 the rules can match; a
    one-element parameter read with the input is evaluated the same way, never at the broadcast shape."""
    def f(x):
        return x / torch.sqrt(torch.tensor(16.0) * 1) + torch.tensor([2.0]).exp()
    cap = check(f, torch.randn(3, 5))
    live = [cap.graph.nodes[i] for i in cap.graph.live_nodes()]
    assert "Param" not in {n.op for n in live} and "Sqrt" not in {n.op for n in live}
    assert sorted(n.attrs[0] for n in live if n.op == "Fill") == pytest.approx([4.0, math.exp(2.0)])


def test_empty_tensors_and_int_bitwise_ops_stay_externs():
    """An op with an empty operand or result stays a call (the IR has no empty tensors), but a cat leaves
    its empty pieces out: it is its other pieces, and the empty slice no longer runs."""
    def f(x):
        return torch.cat([x, x[:, :0]], 1) * 2, (x.int() & 3).float() + x, x[:, :0] + 1
    cap = check(f, torch.randn(3, 4))
    assert sorted(c.label for c in cap.graph.externs.values()) == [
        "aten.add.Tensor", "aten.bitwise_and.Scalar", "aten.slice.Tensor"]
    assert "Concat" not in cap.graph.op_counts()


def test_multiple_outputs_tuple_and_dict():
    def f(x, y):
        return {"sum": x + y, "parts": (x * y, [y - x])}
    cap = check(f, torch.randn(3), torch.randn(3))
    assert len(cap.graph.outputs) == 3


def test_shared_subexpressions_are_one_node():
    w = torch.randn(8, 8)

    def f(x):
        return (x @ w).relu() + (x @ w).relu(), (x @ w).sum(-1)
    cap = check(f, torch.randn(4, 8))
    assert cap.graph.op_counts()["MatMul"] == 1 and cap.graph.op_counts()["Relu"] == 1


def test_non_contiguous_inputs():
    def f(x, y):
        return x @ y + x.sum(1, keepdim=True)
    x, y = torch.randn(6, 4).t(), torch.randn(6, 6)[:, ::2]
    check(f, x, y, fresh=lambda: (torch.randn(6, 4).t(), torch.randn(6, 6)[:, ::2]))


def test_symbolic_trace_graph_module_and_plain_function():
    gm = torch.fx.symbolic_trace(MLP())
    check(gm, torch.randn(2, 16))
    cap = check(lambda a, b: a * b + 1, torch.randn(3), torch.randn(3))
    assert cap.input_names == ["a", "b"] and cap.module is None


def test_unfolded_params_are_inputs():
    m = MLP()
    cap = check(m, torch.randn(2, 16), fold_params=False)
    assert "Param" not in cap.graph.op_counts() and set(cap.param_inputs) <= set(cap.graph.input_names)
    assert cap.module is m


def test_torch_cond_becomes_an_extern():
    def f(x, y):
        return torch.cond(x.sum() > 0, lambda a, b: a + b, lambda a, b: a - b, (x, y)) * 2
    cap = capture(f, (torch.randn(3, 4), torch.randn(3, 4)))
    assert cap.graph.op_counts()["Extern"] == 1
    y = torch.randn(3, 4)
    for x in (torch.rand(3, 4), -torch.rand(3, 4)):  # both branches
        assert_close(cap.unflatten(ir.evaluate(cap.graph, cap.feeds(x, y))), f(x, y))


# ---------------------------------------------------------------------------------------- exact structure

def test_linear_structure():
    cap = capture(nn.Linear(8, 4), (torch.randn(3, 8),))
    assert cap.graph.op_counts() == {"Input": 1, "Param": 2, "Permute": 1, "MatMul": 1, "Reshape": 1,
                                     "Expand": 1, "Add": 1}


def test_mean_is_sum_times_reciprocal():
    cap = capture(lambda x: x.mean(-1), (torch.randn(3, 8),))
    g = cap.graph
    assert g.op_counts() == {"Input": 1, "Sum": 1, "Fill": 1, "Mul": 1, "Reshape": 1}
    fill = next(g.nodes[i] for i in g.live_nodes() if g.nodes[i].op == "Fill")
    assert fill.attrs[0] == 1 / 8


def test_softmax_structure():
    cap = capture(lambda x: torch.softmax(x, -1), (torch.randn(3, 8),))
    assert cap.graph.op_counts() == {"Input": 1, "Amax": 1, "Expand": 2, "Sub": 1, "Exp": 1, "Sum": 1, "Div": 1}


def test_unknown_op_is_exactly_one_extern():
    cap = capture(lambda x: torch.cumprod(x, 1) * 2, (torch.randn(3, 8),))
    g = cap.graph
    assert g.op_counts() == {"Input": 1, "Extern": 1, "Fill": 1, "Mul": 1}
    (key, call), = g.externs.items()
    assert call.fn is aten.cumprod.default and call.args == (ir.TensorArg(0), 1)
    extern = next(g.nodes[i] for i in g.live_nodes() if g.nodes[i].op == "Extern")
    assert extern.attrs == (key, 0) and extern.shape == (3, 8) and extern.dtype == "float32"


def test_scalar_fills_are_broadcast_as_fills():
    cap = capture(lambda x: torch.where(x > 0, x, 0.0), (torch.randn(3, 8),))
    assert cap.graph.op_counts() == {"Input": 1, "Fill": 1, "Gt": 1, "Where": 1}


# -------------------------------------------------------------------------------------- other FX sources

def test_aot_export_module_graph():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.mlp = MLP()

        def forward(self, x):
            return (self.mlp(x).softmax(-1),)
    m = M()
    gm, sig = torch._functorch.aot_autograd.aot_export_module(
        m, (torch.randn(2, 16),), trace_joint=False, decompositions=core_aten_decompositions())
    state = dict(m.named_parameters())
    graph = fx_to_ir(gm, params={name: state[fqn].detach() for name, fqn in sig.inputs_to_parameters.items()})
    graph.verify()
    x = torch.randn(2, 16)
    with torch.no_grad():
        assert_close(ir.evaluate(graph, {sig.user_inputs[0]: x}), list(m(x)))


def test_make_fx_graph_with_and_without_meta():
    def f(x, w):
        return torch.softmax(x @ w, -1), F.layer_norm(x, [8])
    from torch.fx.experimental.proxy_tensor import make_fx
    x, w = torch.randn(3, 8), torch.randn(8, 5)
    gm = make_fx(f, decomposition_table=core_aten_decompositions())(x, w)
    assert_close(ir.evaluate(fx_to_ir(gm), {"x_1": x, "w_1": w}), list(f(x, w)))
    for node in gm.graph.nodes:
        node.meta.pop("val", None)
    with pytest.raises(EqiforgeError, match="example_inputs"):
        fx_to_ir(gm)
    assert_close(ir.evaluate(fx_to_ir(gm, ["x"], {"w_1": w}, example_inputs=[x]), {"x": x}), list(f(x, w)))


# ------------------------------------------------------------------------------------------------- errors

@pytest.mark.parametrize("program", [lambda x: x[x > 0] * 2, lambda x: torch.nonzero(x).float().sum()])
def test_data_dependent_shapes_are_a_clear_error(program):
    with pytest.raises(EqiforgeError, match="(?s)data-dependent or dynamic shape.*static shapes"):
        capture(program, (torch.randn(3, 4),))


def test_data_dependent_control_flow_is_a_clear_error():
    def f(x):
        return x * 2 if x.sum() > 0 else x - 1
    with pytest.raises(EqiforgeError, match="(?s)torch.export could not trace.*AOTAutograd .*could not trace"
                                            ".*torch.where or torch.cond"):
        capture(f, (torch.randn(3),))


def test_a_program_no_path_captures_is_an_error_naming_the_stage_and_every_path():
    """Every capture path is tried; the error names the stage, each path with the step it failed at and the
    cause, and gives the control-flow hint only for data-dependent failures."""
    with pytest.raises(EqiforgeError) as info:
        capture(lambda x, y: x @ y, (torch.randn(2, 3), torch.randn(4, 5)))
    lines = str(info.value).splitlines()
    assert lines[0] == "EqiForge could not capture <lambda> (stage: capture); every capture path failed:"
    cause = "RuntimeError: a and b must have same reduction dim, but got [2, 3] X [4, 5]."
    assert lines[1:3] == [f"  - torch.export could not trace the program: {cause}",
                          f"  - AOTAutograd (aot_export_module) could not trace the program: {cause}"]
    assert lines[3].startswith("  - Dynamo (torch._dynamo graph capture) could not capture the program as one "
                               "graph (fullgraph=True): NotOneGraph: ") and cause.split(": ")[1] in lines[3]
    assert lines[4:] == ["Hint: check that the program runs eagerly with the example inputs"]


def test_a_program_torch_export_cannot_trace_is_captured_by_aot_autograd(monkeypatch):
    """The fallback path gives the same program: same input and parameter names, same values, and says why."""
    m, x = MLP(), torch.randn(2, 16)
    first = capture(m, (x,))

    def broken(*args, **kwargs):
        raise RuntimeError("export is broken today")
    monkeypatch.setattr(torch.export, "export", broken)
    cap = check(m, x)
    assert cap.fallback == ("torch.export could not trace the program: RuntimeError: export is broken today; "
                            "captured by AOTAutograd (aot_export_module)")
    assert cap.input_names == first.input_names == ["x"] and sorted(cap.graph.params) == sorted(first.graph.params)
    assert first.fallback == "" and cap.written == []  # nothing traced the program as written


def test_a_failing_decomposition_falls_back_and_keeps_the_calls_as_written(monkeypatch):
    def broken(self, *args, **kwargs):
        raise ValueError("Cannot view a tensor with shape ...")
    monkeypatch.setattr(torch.export.ExportedProgram, "run_decompositions", broken)
    cap = check(MLP(), torch.randn(2, 16))
    assert cap.fallback.startswith("torch.export could not decompose it to core ATen (run_decompositions): "
                                   "ValueError: Cannot view")
    assert [c.op for c in cap.written][:1] == ["aten.linear.default"]


def test_pytree_inputs_keywords_and_constants():
    """Arguments are pytrees: tensors in containers are inputs (named after the argument), other leaves are
    constants; outputs keep their structure; the spec rebuilds a call from its tensors."""
    def f(pair, scale, *, bias=None, square=False):
        y = pair["a"] @ pair["b"] * scale + bias
        return {"y": y.square() if square else y, "parts": (pair["a"].sum(), pair["b"].sum())}
    a, b, c = torch.randn(3, 4), torch.randn(4, 5), torch.randn(5)
    cap = capture(f, ({"a": a, "b": b}, 2.0), {"bias": c, "square": True})
    assert cap.input_names == ["pair_0", "pair_1", "bias"] and cap.graph.op_counts()["MatMul"] == 1
    fresh = [torch.randn(t.shape) for t in (a, b, c)]
    got = cap.unflatten(ir.evaluate(cap.graph, cap.feeds(*fresh)))
    assert_close(got, f({"a": fresh[0], "b": fresh[1]}, 2.0, bias=fresh[2], square=True))
    args, kwargs = cap.call.rebuild(fresh)
    assert args == ({"a": fresh[0], "b": fresh[1]}, 2.0) and kwargs == {"bias": fresh[2], "square": True}
    from eqiforge.frontend.calls import flatten_call
    assert cap.call.tensors(*flatten_call(args, kwargs)) == fresh
    assert cap.call.tensors(*flatten_call(args, {**kwargs, "square": False})) is None  # another constant


def test_capture_does_not_import_transformers():
    """transformers is optional: its pytrees are registered only where it is already imported."""
    import subprocess
    import sys
    code = ("import sys, torch; from eqiforge.frontend import capture; capture(lambda x: x * 2, (torch.randn(3),)); "
            "print('transformers' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stderr[-2000:]


def test_an_output_eqiforge_cannot_see_into_is_a_clear_error():
    class Box:
        def __init__(self, t):
            self.t = t
    with pytest.raises(EqiforgeError, match="(?s)returns a Box among its outputs.*register_pytree_node"):
        capture(lambda x: (x, Box(x * 2)), (torch.randn(3),))


def test_item_is_a_clear_error():
    with pytest.raises(EqiforgeError):
        capture(lambda x: x * x.sum().item(), (torch.randn(3),))


def test_mutation_is_a_clear_error():
    def f(x):
        x.add_(1)
        return x * 2
    with pytest.raises(EqiforgeError, match="in place"):
        capture(f, (torch.randn(3),))


@pytest.mark.parametrize("names", [["x", "x"], ["not an identifier", "w"], ["x"], ["x", "p_1"]])
def test_fx_to_ir_rejects_bad_input_names(names):
    from torch.fx.experimental.proxy_tensor import make_fx
    gm = make_fx(lambda x, w, p: x @ w + p)(torch.randn(2, 3), torch.randn(3, 2), torch.randn(2))
    with pytest.raises(EqiforgeError, match="input names"):
        fx_to_ir(gm, names, {"p_1": torch.randn(2)})


@pytest.mark.parametrize("program, inputs", [
    (lambda x: x, torch.randn(3)),  # not a tuple
    (lambda x, n: x * n, (torch.randn(3), object())),  # an object it cannot see into
    (42, (torch.randn(3),)),  # not callable
])
def test_bad_arguments(program, inputs):
    with pytest.raises(EqiforgeError):
        capture(program, inputs)


def test_deterministic_constant_calls_are_evaluated_at_capture_random_ones_are_not():
    from eqiforge.frontend import capture

    def fn(x):
        mask = torch.triu(torch.ones(4, 4, dtype=torch.bool), 1)     # constant (triu decomposes to aranges)
        noise = torch.rand(4, 4)                                      # random: must stay a call
        return x.masked_fill(mask, 0.0) + noise
    graph = capture(fn, (torch.randn(4, 4),)).graph
    ops_used = [graph.nodes[i] for i in graph.live_nodes()]
    consts = [n for n in ops_used if n.op == "Param" and n.attrs[0].startswith("const_arange")]
    externs = [graph.externs[n.attrs[0]].label for n in ops_used if n.op == "Extern"]
    assert len(consts) == 2 and graph.params[consts[0].attrs[0]].tolist() == [0, 1, 2, 3]
    assert externs == ["aten.rand.default"]


# ------------------------------------------------------------------------------------------ op coverage

@pytest.mark.parametrize("entry", coverage.TABLE, ids=[c.call for c in coverage.TABLE])
def test_op_coverage_row_holds(entry):
    """Each row of the op coverage table is what capture does: a modelled call becomes the listed IR ops and no
    Extern (computing what eager computes), an opaque one an Extern; its rule sets exist."""
    inputs = coverage.sample_inputs(entry)
    cap = check(entry.sample, *inputs, fresh=lambda: coverage.sample_inputs(entry, seed=1), rel=1e-4)
    counts = cap.graph.op_counts()
    if entry.ir_ops:
        assert "Extern" not in counts and set(entry.ir_ops) <= set(counts), counts
    else:
        assert "Extern" in counts and entry.note, counts
    assert set(entry.rulesets) <= set(rulesets.available()), entry.rulesets


def test_op_coverage_table_is_in_the_docs():
    """docs/ops.md shows the table as the code has it, and the table reaches the products, the diagonal, the
    reductions and the views of the IR."""
    page = (Path(__file__).parents[1] / "docs" / "ops.md").read_text()
    assert coverage.markdown() in page
    modelled = {op for c in coverage.TABLE for op in c.ir_ops}
    assert {"MatMul", "Diagonal", "Sum", "Amax", "Reshape", "Expand", "Permute", "Concat", "Slice"} <= modelled
