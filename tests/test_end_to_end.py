"""End to end: optimized modules compute what eager PyTorch computes, on the example inputs and on fresh
random inputs, for the built-in examples and for programs that stress the frontend and the runtime."""
import copy

import dataclasses

import pytest
import torch
import torch.nn as nn
import torch.utils._pytree as pytree

import eqiforge
from eqiforge import examples
from eqiforge.errors import EqiforgeError


def assert_close(got, want, rtol=1e-5):
    got_leaves, want_leaves = pytree.tree_leaves(got), pytree.tree_leaves(want)
    assert len(got_leaves) == len(want_leaves)
    for g, w in zip(got_leaves, want_leaves):
        assert g.shape == w.shape and g.dtype == w.dtype
        err = (g.double() - w.double()).norm().item()
        assert err <= rtol * w.double().norm().item() + 1e-6, f"relative error {err / (w.double().norm() + 1e-12):.2e}"


def fresh_like(inputs, seed):
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(t.shape, generator=gen).to(t.dtype) for t in inputs)


def check(fn, inputs, **options):
    opt = eqiforge.optimize(fn, inputs, **options)
    with torch.no_grad():
        assert_close(opt(*inputs), fn(*inputs))
        fresh = fresh_like(inputs, 1)
        assert_close(opt(*fresh), fn(*fresh))
    return opt


@pytest.mark.parametrize("name", sorted(set(examples.EXAMPLES) - {"bert_encoder"}))
def test_builtin_examples_match_eager(name):
    fn, inputs = examples.load(name)
    opt = check(fn, inputs)
    assert opt.report.predicted_after <= opt.report.predicted_before * (1 + 1e-9)


def test_matmul_chain_is_reassociated_to_matrix_vector_products():
    fn, inputs = examples.load("matmul_chain")
    opt = check(fn, inputs, rules=["matmul"])
    shapes = [opt.plan.graph.nodes[i].shape for i in opt.plan.graph.live_nodes()
              if opt.plan.graph.nodes[i].op == "MatMul"]
    assert shapes == [(256, 1)] * 3
    assert opt.report.predicted_after < opt.report.predicted_before / 2  # three calls either way: the host's share


def test_low_rank_product_is_not_materialised():
    fn, inputs = examples.load("low_rank")
    opt = check(fn, inputs, rules=["matmul"])
    mm = [opt.plan.graph.nodes[i] for i in opt.plan.graph.live_nodes() if opt.plan.graph.nodes[i].op == "MatMul"]
    assert sorted(n.shape for n in mm) == [(256, 16), (256, 512)]


class SharedAndBroadcast(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(16, 16))
        self.b = nn.Parameter(torch.randn(16))

    def forward(self, x, y):
        shared = torch.tanh(x @ self.w + self.b)        # used three times
        scaled = shared * 3.0 - y[:, None, :]            # broadcasting against a rank-2 input
        return {"a": shared.sum(dim=1), "b": scaled / 2.0, "c": (shared @ shared.transpose(-1, -2)).amax(-1)}


def test_multiple_outputs_shared_subexpressions_broadcasting():
    check(SharedAndBroadcast().eval(), (torch.randn(4, 8, 16), torch.randn(4, 16)))


def test_non_contiguous_inputs():
    fn, _ = examples.load("mlp")
    x = torch.randn(256, 64).t()  # a transposed view: strides (1, 64)
    opt = eqiforge.optimize(fn, (x,))
    with torch.no_grad():
        assert_close(opt(x), fn(x))
        assert_close(opt(x.contiguous()), fn(x))


def test_known_and_unknown_ops_mixed():
    def fn(x, w):
        y = torch.cumprod(x @ w, dim=0)           # cumprod: not in the IR, runs in PyTorch
        vals, idx = torch.topk(y, 3, dim=-1)      # multi-output extern
        return torch.relu(vals) + 1.0, idx, (y @ w).sum()
    check(fn, (torch.randn(8, 8), torch.randn(8, 8)))


def test_fx_graph_module_input():
    fn, inputs = examples.load("mlp")
    check(torch.fx.symbolic_trace(fn), inputs)


def test_rule_subsets_and_no_rules():
    fn, inputs = examples.load("transformer_layer")
    for rules in (["matmul", "scalar"], []):
        opt = check(fn, inputs, rules=rules)
        assert opt.report.rulesets == rules


def test_same_program_same_plan():
    fn, inputs = examples.load("transformer_layer")
    plans = [eqiforge.optimize(fn, inputs).plan.format() for _ in range(2)]
    assert plans[0] == plans[1]


def test_tight_limits_still_give_a_correct_plan():
    fn, inputs = examples.load("transformer_layer")
    opt = check(fn, inputs, limits=eqiforge.Limits(iterations=1, enodes=10))
    assert opt.report.stop_reason.startswith("e-node limit")


def test_parameters_only_expressions_are_folded():
    class TwoLinear(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(64, 64, bias=False), nn.Linear(64, 64, bias=False)

        def forward(self, x):
            return self.b(self.a(x))
    fn = TwoLinear().eval()
    opt = check(fn, (torch.randn(32, 64),))
    assert opt.report.folded_constants >= 1
    assert opt.plan.graph.op_counts().get("MatMul") == 1


def test_rotary_tables_of_weights_are_computed_once():
    """cos/sin of a table the plan folds (positions times the inverse frequencies, a buffer) are PyTorch calls
    on constants: deterministic, so folded too; a call that reads the input stays in the plan."""
    class Rotary(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("inv_freq", 1.0 / 10000 ** (torch.arange(0, 16, 2).float() / 16))

        def forward(self, x):
            angles = torch.outer(torch.arange(x.shape[1], dtype=torch.float32), self.inv_freq)
            table = torch.cat((angles, angles), -1)
            return x * table.cos() + x.cumprod(-1) * table.sin()
    opt = check(Rotary().eval(), (torch.randn(2, 8, 16),), original_if_no_better=False)
    externs = [opt.plan.graph.externs[n.attrs[0]].label for n in opt.plan.graph.nodes if n.op == "Extern"]
    assert externs == ["aten.cumprod.default"]


def test_wrong_input_shape_is_a_clear_error():
    fn, inputs = examples.load("mlp")
    opt = eqiforge.optimize(fn, inputs, shapes="static")
    with pytest.raises(EqiforgeError, match=r"optimized for float32\[64, 256\]"):
        opt(torch.randn(3, 256))
    with pytest.raises(EqiforgeError, match=r"optimized for float32\[64, 256\]"):
        opt(inputs[0].double())
    with pytest.raises(EqiforgeError, match=r"input 'x' is a float, expected a tensor float32\[64, 256\]"):
        opt(1.5)
    with pytest.raises(EqiforgeError, match="expected 1 tensor inputs, got 2"):
        opt(*inputs, inputs[0])


def test_example_inputs_that_alias_or_go_unused():
    """The same tensor passed for several inputs (or views of one) still gives a program of independent
    inputs (torch.export would trace them as one), and an input the program ignores is still checked."""
    t = torch.randn(2, 8, 4)
    attention = lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v)  # noqa: E731
    check(attention, (t, t, t))
    x = torch.randn(6, 6)
    check(lambda a, b: a @ b + a, (x, x.T))
    opt = check(lambda x, unused: x * 2, (x, torch.randn(5)), shapes="static")
    with pytest.raises(EqiforgeError, match="input 'unused' is float32\\[6\\]"):
        opt(x, torch.randn(6))


def test_torch_plan_is_straight_line_code_with_matrix_vector_products():
    """The torch backend's plan is one function: the reassociated chain runs as three torch.mv calls on
    the 1-D vector (no [k, 1] matrices, no reshapes left), and an input named like a generated variable
    does not clash with one."""
    def chain(a, b, t1):
        return a @ b @ t1
    a, b, t1 = torch.randn(40, 50), torch.randn(50, 60), torch.randn(60)
    opt = check(chain, (a, b, t1))
    body = opt.source.split("def plan(", 1)[1]
    assert body.count("torch.mv(") == 2 and "reshape" not in body and "unsqueeze" not in body
    assert opt.source.startswith("# EqiForge plan of chain: ") and "\ndef plan(a, b, in_t1):\n" in opt.source


def test_torch_plan_runs_elementwise_ops_of_vectors_in_1d():
    """(u v^T) x = u (v . x): the scale of the matrix-vector result is one 1-D multiply, with no [k, 1]
    views around it (no unsqueeze, expand or reshape of u), and the result matches eager."""
    def outer_matvec(u, v, x):
        return (u.unsqueeze(-1) * v) @ x
    opt = check(outer_matvec, (torch.randn(2048), torch.randn(1024), torch.randn(1024)))
    body = opt.source.split("def plan(", 1)[1]
    assert "torch.mul(u, " in body and "unsqueeze" not in body and "expand" not in body and "u.reshape" not in body


def test_torch_plan_computes_a_vectors_total_as_a_0d_tensor():
    """Row sums of an outer product and of an outer sum, u sum(v) and n u + sum(v): the total is one 0-d
    ``v.sum()`` read by the elementwise op as it is (no [1, 1] view, unsqueeze or expand of it), and a
    dot product is ``torch.dot``; each result matches eager (priced for a CPU: on a GPU one launch of the
    matrix-vector product of the expanded u costs less than two)."""
    u, v, x = torch.randn(1024), torch.randn(768), torch.randn(768)
    for fn in (lambda u, v: (u.unsqueeze(-1) * v).sum(dim=-1), lambda u, v: (u.unsqueeze(-1) + v).sum(dim=-1)):
        body = check(fn, (u, v), priced_device="cpu").source.split("def plan(", 1)[1]
        assert "v.sum()" in body and not any(view in body for view in ("reshape", "unsqueeze", "expand"))
    body = check(lambda u, v, x: (u.unsqueeze(-1) * v) @ x, (u, v, x),
                 priced_device="cpu").source.split("def plan(", 1)[1]
    assert "torch.dot(v, x)" in body and "reshape" not in body


def test_torch_plan_reduces_and_combines_values_without_their_unit_dims():
    """Reductions and elementwise ops of unsqueezed operands run on the values without the unit dims (a
    sum over [b, 1, n] costs ~1.5x the same sum over [b, n] on a CPU): an outer product's totals are two
    row sums and a product, a batch of 1 x 1 products is that product, a max of a broadcast sum is a row max
    plus b (the max kept as a column, to broadcast as it is), a logsumexp of one row is ``torch.logsumexp``;
    none makes a [b, 1, 1] view, each matches eager."""
    x, y, b = torch.randn(128, 256), torch.randn(128, 256), torch.randn(16)
    for fn in (lambda x, y: (x.unsqueeze(2) * y.unsqueeze(1)).sum((1, 2)),
               lambda x, y: torch.bmm(x.unsqueeze(2), y.unsqueeze(1)).sum(dim=(1, 2))):
        body = check(fn, (x, y), priced_device="cpu").source.split("def plan(", 1)[1]
        assert "y.sum(1)" in body and "(128, 1, 1)" not in body and "matmul" not in body, body
        assert body.count(" = ") == 3, body
    body = check(lambda x, b: (x[:, :, None] + b[None, None, :]).amax(dim=1), (x, b), priced_device="cpu").source
    assert "x.amax(1, True)" in body and body.split("def plan(", 1)[1].count(" = ") == 2, body
    body = check(lambda a, b: torch.logsumexp(a[:, None] + b[None, :], dim=1), (x[0], y[0]), priced_device="cpu").source
    assert "torch.logsumexp(b, -1)" in body and "expand" not in body and "native_row_reduce" not in body


def test_torch_plan_makes_a_parameters_diagonal_once_at_module_level():
    """A diagonal-masked weight times x is the weight's diagonal scaling x's rows: the diagonal (a view of a
    parameter) and its column form are made once at module level, together, and the plan matches eager."""
    weight = torch.nn.Parameter(torch.randn(16, 16))
    opt = check(lambda x: weight.masked_fill(~torch.eye(16, dtype=torch.bool), 0.0) @ x, (torch.randn(16, 7),),
                priced_device="cpu")
    module_level, body = opt.source.split("def plan(", 1)
    assert ".diagonal()" in module_level and ".diagonal(" not in body


def test_torch_plan_runs_a_linear_layers_feature_sum_as_a_matrix_vector_product():
    """A linear layer summed over its features is x (W's column sums) + sum(b): the folded [k, 1] weight
    and [1, 1] bias get 1-D and 0-d views made once, and the product is ``torch.mv`` plus the 0-d bias,
    not addmm of a [k, 1] matrix."""
    model = torch.nn.Linear(32, 24).eval()
    opt = check(lambda x: model(x).sum(dim=-1), (torch.randn(40, 32),), priced_device="cpu")
    body = opt.source.split("def plan(", 1)[1]
    assert "torch.mv(x, " in body and "addmm" not in opt.source and "reshape" not in body


def test_torch_plan_calls_mean_and_broadcasts_implicitly():
    """A mean (decomposed by the frontend into a sum and a scale) is one mean call again, a broadcast row
    is read as it is (no expand per call), and intermediates are freed after their last use."""
    def fn(a, b, c):
        return a.mean(dim=0) @ b + c
    opt = check(fn, (torch.randn(32, 16), torch.randn(16, 24), torch.randn(24)))
    assert "a.mean(0)" in opt.source and ".sum(" not in opt.source and "expand" not in opt.source
    assert "del " in opt.source


def test_torch_plan_moves_with_its_module():
    """Parameters are buffers of the runner: after a move the plan runs on the moved tensors, and views of
    parameters (made once, at module level) are made again from them."""
    fn, inputs = examples.load("mlp")
    opt = eqiforge.optimize(fn, inputs)
    assert "# views of the parameters" in opt.source
    copied = copy.deepcopy(opt.runner)  # a copy computes with its own tensors
    with torch.no_grad():
        for buffer in copied.buffers():
            buffer.zero_()
        assert copied.forward(*inputs)[0].abs().max() == 0
        assert_close(opt(*inputs), fn(*inputs))
    runner = opt.runner.to(torch.float64)
    with torch.no_grad():
        out = runner.forward(inputs[0].double())[0]
        assert out.dtype == torch.float64
        assert_close(out, fn.double()(inputs[0].double()))


def test_non_finite_constants_in_the_torch_plan():
    def masked(x):
        return torch.softmax(x.masked_fill(x > 1.0, float("-inf")), dim=-1) + torch.clamp(x, max=float("inf"))
    check(masked, (torch.randn(8, 16),))


@pytest.mark.parametrize("options,message", [
    ({"rules": ["nope"]}, "unknown rule set"),
    ({"backend": "cuda-magic"}, "unknown backend"),
    ({"extractor": "tree"}, "unknown extraction method"),
    ({"colour": "red"}, "unknown option"),
    ({"priced_device": "TPU"}, "unknown device"),
])
def test_bad_options_are_clear_errors(options, message):
    fn, inputs = examples.load("mlp")
    with pytest.raises(EqiforgeError, match=message):
        eqiforge.optimize(fn, inputs, **options)


def test_options_as_an_object_and_as_keywords_are_the_same_settings():
    """``optimize(options=Options.of(...))`` is the keywords' way; keywords beside it override it; the object is
    frozen and grouped by stage."""
    opts = eqiforge.Options.of(measure="never", share_blocks=False, extract_seconds=2.0, shapes="static")
    assert (opts.measuring.mode, opts.search.share_blocks, opts.extraction.seconds, opts.shapes.policy) == \
        ("never", False, 2.0, "static")
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.measuring.mode = "always"
    with pytest.raises(EqiforgeError, match="unknown measure mode"):
        opts.with_(measure="sometimes")
    fn, inputs = examples.load("mlp")
    by_object = eqiforge.optimize(fn, inputs, options=opts)
    by_keywords = eqiforge.optimize(fn, inputs, measure="never", share_blocks=False, extract_seconds=2.0,
                                    shapes="static")
    assert by_object.source == by_keywords.source
    assert by_object.report.repeated_blocks == "off (share_blocks=False)"
    overridden = eqiforge.optimize(fn, inputs, options=opts, validate=False)
    assert overridden.report.validation == "off (validate=False)" and by_object.report.validation.startswith("passed")
    with pytest.raises(EqiforgeError, match="static"):
        by_object(torch.randn(3, *inputs[0].shape[1:]))


def test_without_folding_parameters_stay_live():
    fn, inputs = examples.load("mlp")
    opt = check(fn, inputs, fold_constants=False)
    assert opt.report.folded_constants == 0
    with torch.no_grad():
        fn.layers[0].weight.mul_(2.0)  # an in-place update is seen by the optimized module
        assert_close(opt(*inputs), fn(*inputs))


def test_a_plan_no_better_than_the_program_runs_the_original_behind_the_same_input_check():
    """A program EqiForge cannot improve (one op it does not optimize) runs as the user wrote it, not as its
    captured decomposition; the input check stays, the plan stays visible, and the option turns it off."""
    calls = []

    def cumulative(x):
        calls.append(x.shape)
        return torch.cumprod(x, 1) * 2.0
    x = torch.randn(4, 8)
    opt = eqiforge.optimize(cumulative, (x,), shapes="static")
    calls.clear()
    assert_close(opt(x), torch.cumprod(x, 1) * 2.0)
    assert calls == [x.shape]  # the original function itself ran
    assert opt.report.runs.startswith("the original program (the plan is predicted no faster") \
        or opt.report.runs.startswith("the original program (the plan is PyTorch calls")
    assert "a call runs" in opt.report.summary() and "def plan(" in opt.source
    with pytest.raises(EqiforgeError, match=r"input 'x' is float32\[4, 9\]"):
        opt(torch.randn(4, 9))
    planned = eqiforge.optimize(cumulative, (x,), original_if_no_better=False)
    calls.clear()
    assert_close(planned(x), torch.cumprod(x, 1) * 2.0)
    assert calls == [] and planned.report.runs == "the plan"


def test_a_plan_with_an_algebraic_win_runs_the_plan():
    a, b, v = torch.randn(512, 512), torch.randn(512, 512), torch.randn(512, 1)
    opt = eqiforge.optimize(lambda a, b, v: a @ b @ v, (a, b, v))
    assert opt.report.runs == "the plan" and opt.report.speedup > 1.5


def test_a_plan_slower_than_the_calls_as_written_runs_the_original():
    """F.smooth_l1_loss is one fused PyTorch kernel but eight ops once decomposed: the plan beats the
    decomposition, not the call, and the program as written (priced call by call) says so."""
    from eqiforge.frontend import capture
    pred, target = torch.randn(256, 256), torch.randn(256, 256)
    fn = torch.nn.functional.smooth_l1_loss
    assert [c.op for c in capture(fn, (pred, target)).written] == ["aten.broadcast_tensors.default",
                                                                   "aten.smooth_l1_loss.default"]
    opt = eqiforge.optimize(fn, (pred, target), priced_device="cpu")
    r = opt.report
    assert r.predicted_after < r.predicted_before and r.predicted_written < r.predicted_after
    assert opt.report.runs.startswith("the original program (the plan is predicted no faster than the program's")
    assert "as written" in r.summary()
    assert_close(opt(pred, target), fn(pred, target))


def test_a_linear_layer_on_a_permuted_activation_is_one_2d_product():
    """nn.MultiheadAttention's in-projection reads a permuted activation ([tokens, batch, dim]): torch.matmul
    of it by the weight expanded over the tokens ran bmm with a copy and a product per token (the vision
    attention block's plan 3.8x eager's time); the plan folds the rows into one matrix product, as F.linear."""
    lin = torch.nn.Linear(32, 96)
    x = torch.randn(2, 32, 64)
    program = lambda x: lin(x.permute(2, 0, 1))  # noqa: E731
    opt = eqiforge.optimize(program, (x,), backend="torch", measure="never", original_if_no_better=False)
    assert ".reshape(128, 32)" in opt.source
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        got = opt(x)
    calls = {e.key: e.count for e in prof.key_averages()}
    assert calls.get("aten::bmm", 0) == 0 and calls.get("aten::mm", 0) + calls.get("aten::addmm", 0) == 1
    torch.testing.assert_close(got, program(x))


def test_a_fused_kernel_stores_in_its_nodes_dtype_whatever_its_first_operand():
    """Fusion can inline a cast into a pointwise kernel whose remaining first operand is float (T5's bucket
    indices: an integer computed from float logarithms); the node's dtype is the program's. The reference
    semantics (constant folding, the plan check) and the torch code store in it, as the Triton kernel does."""
    from eqiforge.ir import Graph, run_node, stored_dtype_differs
    from eqiforge.lower.torch_code import to_torch_code
    from eqiforge.runtime.torch_plan import TorchPlan
    g = Graph()
    x = g.input("x", (6, 5), "float32")
    expr = ("bin", "minimum", ("bin", "add", ("cast", "int64", ("un", "log", ("in", 0))), ("const", 8.0)),
            ("const", 15.0))
    k = g.add("PointwiseK", (x,), (expr, (6, 5)), shape=(6, 5), dtype="int64")
    g.outputs = [k]
    assert stored_dtype_differs(g, g.nodes[k])
    value = torch.rand(6, 5) * 50 + 1
    want = torch.minimum(torch.log(value).long() + 8, torch.full((6, 5), 15))
    got = run_node(g, g.nodes[k], [value], {})
    assert got.dtype == torch.int64 and torch.equal(got, want)
    [out] = TorchPlan(to_torch_code(g, ["x"]))(value)
    assert out.dtype == torch.int64 and torch.equal(out, want)


def _tridiagonal_product(a, x):
    return torch.where(torch.ones(1024, 1024, dtype=torch.bool).triu(-1).tril(1), a, 0.0) @ x


def _window_sum(x):
    return torch.ones(1024, 1024, dtype=x.dtype).tril().triu(-2) @ x


@pytest.mark.parametrize("backend", ["torch", "triton", "inductor"])
def test_banded_products_read_the_band_on_every_backend(backend):
    """A tridiagonal part of a matrix times x is a BandMatMul, a band of ones around the diagonal a WindowSum;
    each backend runs them (the triton module carries band_matmul's source) and matches eager."""
    a, x = torch.randn(1024, 1024), torch.randn(1024, 32)  # sizes where reading the band pays
    for fn, inputs, op in ((_tridiagonal_product, (a, x), "BandMatMul"), (_window_sum, (x,), "WindowSum")):
        opt = check(fn, inputs, backend=backend, measure="never")
        g = opt.plan.graph
        assert op in {g.nodes[i].op for i in g.live_nodes()} and "MatMul" not in {g.nodes[i].op for i in g.live_nodes()}


def test_a_band_product_in_half_precision_accumulates_in_float32():
    """band_matmul of bfloat16 operands sums in float32 and rounds once, as the dense product does."""
    from eqiforge.ops.kernel_semantics import band_matmul
    a, x = torch.randn(64, 64).bfloat16(), torch.randn(64, 8).bfloat16()
    band = torch.ones(64, 64, dtype=torch.bool).triu(-20).tril(20)
    want = torch.where(band, a, 0.0).float() @ x.float()
    got = band_matmul(a, x, -20, 20)
    assert got.dtype == torch.bfloat16 and torch.equal(got, want.bfloat16())
