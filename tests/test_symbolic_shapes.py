"""One plan for every length (issue 24): symbolic dims through capture, hints, lifting, code and guards.

The size algebra (eqiforge/dims.py) exactly; then programs optimized once and called at many lengths,
every output checked against eager on random inputs, the calls counted (``opt.calls``), the plans built
counted (``opt.plans.builds``); and the safety net: a plan that does not hold at other sizes is not used
for them."""
import copy

import pytest
import torch

import eqiforge
from eqiforge import dims
from eqiforge.decide import choice
from eqiforge.dims import Lifter, Poly, SymInt
from eqiforge.errors import EqiforgeError
from eqiforge.shapes import generalize

S = Poly.symbol("s0")
S1 = S + Poly.constant(1)


def test_polynomials_print_as_python_and_evaluate():
    assert S1.source() == "sym_s0 + 1"
    assert (S.scaled(-2) + Poly.constant(3)).source() == "-2*sym_s0 + 3"
    assert (S * Poly.symbol("s1")).source() == "sym_s0*sym_s1"
    assert (S * S1).at({"s0": 5}) == 30 and (S * S1).divided(2) is None and S.scaled(6).divided(3) == S.scaled(2)


def test_a_symint_computes_as_its_hint_and_prints_as_its_expression():
    x = SymInt(17, S)
    assert int(x + 1) == 18 and repr(x + 1) == "(sym_s0 + 1)" and repr(12 * x) == "12*sym_s0"
    assert repr(2 - x) == "(-sym_s0 + 2)" and repr((x * 12) // 4) == "3*sym_s0"
    assert (x * 12) // 5 == 40 and not isinstance((x * 12) // 5, SymInt)  # inexact: the hint's value
    assert x - x == 0 and not isinstance(x - x, SymInt)
    assert repr(1.0 / x) != "" and repr(x.__rtruediv__(1.0)) == "(1.0 / sym_s0)"
    assert dims.instantiate((2, x + 1, x.__rtruediv__(1.0)), {"s0": 3}) == (2, 4, 1.0 / 3)


def test_hints_are_primes_whose_sizes_no_static_size_equals_or_divides():
    hints = dims.choose_hints(["s0"], [S, S1], static=[64, 16, 2, 128, 54], near={"s0": 13})
    assert hints == {"s0": 19}  # 17: 17 + 1 = 18 divides 54
    two = dims.choose_hints(["a", "b"], [Poly.symbol("a"), Poly.symbol("b")], [], {"a": 3, "b": 3})
    assert two["a"] != two["b"] and min(two.values()) >= dims.MIN_HINT
    assert dims.choose_hints(["s0"], [S], [], {"s0": 17}, avoid=[{"s0": 17}]) == {"s0": 19}


def test_the_lifter_recognises_sizes_their_multiples_and_their_reciprocals():
    lift = Lifter([S, S1], {"s0": 17}).lift
    lifted = lift((2, 18, 17, 34, 64, 1, 1 / 18, 0.25, "name"))
    assert repr(lifted) == "(2, (sym_s0 + 1), sym_s0, 2*sym_s0, 64, 1, (1.0 / (sym_s0 + 1)), 0.25, 'name')"
    assert dims.instantiate(lifted, {"s0": 5}) == (2, 6, 5, 10, 64, 1, 1 / 6, 0.25, "name")
    assert repr(lift(-17)) == "-sym_s0" and lift(17.0).size == SymInt(17, S)


class Attention(torch.nn.Module):
    """Causal self-attention, two projections the plan multiplies into one, a mean over the sequence: sizes,
    a mask and a 1/S scale all vary with the length."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.up, self.down = torch.nn.Linear(16, 128, bias=False), torch.nn.Linear(128, 16, bias=False)

    def forward(self, q, k, v):
        s = q.shape[-2]
        mask = torch.ones(s, s, dtype=torch.bool).tril()
        scores = (q @ k.transpose(-1, -2) / 4.0).masked_fill(~mask, float("-inf"))
        out = self.down(self.up(torch.softmax(scores, -1) @ v))
        return out - out.mean(-2, keepdim=True)


attention = Attention().eval()


def qkv(length: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(2, 3, length, 16, generator=gen) for _ in range(3))


def test_declared_dynamic_dims_give_one_plan_for_every_length():
    opt = eqiforge.optimize(attention, qkv(8, 0), dynamic={"q": 2, "k": 2, "v": 2}, measure="never",
                            original_if_no_better=False)
    assert opt.symbolic and "priced at" in opt.report.symbolic and "checked at" in opt.report.symbolic
    assert "sym_" in opt.source  # the code reads its sizes from its inputs
    for length in (8, 3, 21, 40, 8):
        args = qkv(length, length)
        torch.testing.assert_close(opt(*args), attention(*args), rtol=1e-5, atol=1e-5)
    assert opt.calls == {"plan": 5, "inductor": 0, "original": 0, "fallback": 0} and opt.plans.builds == 0


def test_inputs_named_like_generated_variables_give_their_sizes_to_a_symbolic_plan():
    def shared_factor(x1, x2, w):  # x1, x2 are renamed in the generated code (in_x1): it must read those
        return x1 @ w + x2 @ w
    gen = torch.Generator().manual_seed(3)
    make = lambda n: (torch.randn(n, 12, generator=gen), torch.randn(n, 12, generator=gen),
                      torch.randn(12, 10, generator=gen))
    opt = eqiforge.optimize(shared_factor, make(9), dynamic={0: [0], 1: [0]}, measure="never")
    assert opt.symbolic and "in_x1.shape[0]" in opt.source
    for n in (9, 4, 30):
        args = make(n)
        torch.testing.assert_close(opt(*args), shared_factor(*args), rtol=1e-5, atol=1e-5)
    assert opt.calls == {"plan": 3, "inductor": 0, "original": 0, "fallback": 0}


def test_a_dim_becomes_symbolic_at_its_second_value_and_serves_every_later_one():
    opt = eqiforge.optimize(attention, qkv(8, 0), measure="never", original_if_no_better=False)
    assert not opt.symbolic
    for length in range(9, 20):
        args = qkv(length, length)
        torch.testing.assert_close(opt(*args), attention(*args), rtol=1e-5, atol=1e-5)
    assert opt.plans.builds == 1 and opt.calls == {"plan": 11, "inductor": 0, "original": 0, "fallback": 0}
    assert opt.shape_log[0].startswith("built a plan for every value of [")
    args = qkv(8, 1)  # the example's signature keeps its own plan
    torch.testing.assert_close(opt(*args), attention(*args), rtol=1e-5, atol=1e-5)
    assert opt.calls["plan"] == 12


def test_a_plan_that_does_not_hold_at_other_sizes_is_not_used_for_them(monkeypatch):
    """Lifting made to miss every size: the plan, checked at other values of the dim, fails there, and the
    new signature gets a plan of its own, saying why none serves every size."""
    monkeypatch.setattr(Lifter, "lift_int", lambda self, value: value)
    opt = eqiforge.optimize(attention, qkv(8, 0), measure="never", original_if_no_better=False)
    args = qkv(9, 1)
    torch.testing.assert_close(opt(*args), attention(*args), rtol=1e-5, atol=1e-5)
    assert opt.plans.builds == 1 and not opt.plans.values()[0].symbolic
    assert "none for every size of" in opt.shape_log[0]


@pytest.mark.slow
def test_dims_asked_dynamic_whose_plan_does_not_hold_get_a_plan_for_the_example_with_a_warning(monkeypatch):
    failed = generalize.SizeCheck("s=3", "the plan checked made to fail")
    monkeypatch.setattr(generalize, "_checked", lambda *args: failed)
    with pytest.warns(UserWarning, match="asked for a plan for every size, but there is no plan for every size"):
        opt = eqiforge.optimize(attention, qkv(8, 0), dynamic={"q": 2, "k": 2, "v": 2}, measure="never",
                                original_if_no_better=False)
    assert not opt.symbolic and "no plan for every size" in opt.shape_log[0]
    for length in (8, 9):
        args = qkv(length, 1)
        torch.testing.assert_close(opt(*args), attention(*args), rtol=1e-5, atol=1e-5)
    assert opt.calls == {"plan": 2, "inductor": 0, "original": 0, "fallback": 0} and opt.plans.builds == 1


@pytest.mark.slow
def test_a_size_that_is_not_a_polynomial_of_the_dims_gets_plans_per_size():
    def third(x):  # chunk sizes are ceil(n / 3): a floor division, outside what symbolic plans handle
        return x.chunk(3, dim=0)[-1] * 2.0
    gen = torch.Generator().manual_seed(5)
    with pytest.warns(UserWarning, match=r"no plan for every size: size .*//3"):
        opt = eqiforge.optimize(third, (torch.randn(9, 4, generator=gen),), dynamic={0: [0]}, measure="never",
                                original_if_no_better=False)
    assert not opt.symbolic
    for rows in (9, 10, 14):
        x = torch.randn(rows, 4, generator=gen)
        torch.testing.assert_close(opt(x), third(x))
    assert opt.calls == {"plan": 3, "inductor": 0, "original": 0, "fallback": 0}
    compiled = torch.compile(third, backend="eqiforge", dynamic=True, options={"original_if_no_better": False})
    before = eqiforge.dynamo.call_counts()
    with pytest.warns(UserWarning, match=r"no plan for every size \(size .*//3.*it specialises the graph per shape"):
        for rows in (9, 10, 14):
            x = torch.randn(rows, 4, generator=gen)
            torch.testing.assert_close(compiled(x), third(x))
    assert eqiforge.dynamo.call_counts()["plan"] - before["plan"] == 3


def test_a_size_relation_torch_only_guards_gets_plans_per_size():
    gen = torch.Generator().manual_seed(6)
    w = torch.randn(48, 3, generator=gen)

    def flat(x):  # export keeps both dims of x symbolic, guarding s0 * s1 == 48: no hints satisfy it
        return x.reshape(48) @ w
    with pytest.warns(UserWarning, match="no plan for every size: at the size hints"):
        opt = eqiforge.optimize(flat, (torch.randn(24, 2, generator=gen),), dynamic=True, measure="never",
                                original_if_no_better=False)
    for shape in ((24, 2), (12, 4)):
        x = torch.randn(*shape, generator=gen)
        torch.testing.assert_close(opt(x), flat(x))
    assert opt.calls == {"plan": 2, "inductor": 0, "original": 0, "fallback": 0} and not opt.symbolic


def test_a_declared_dim_the_program_fixes_is_a_clear_error():
    def fixed(x):
        return x.reshape(2, 3, 4) * 2.0  # the dim is 12, always

    with pytest.raises(EqiforgeError, match="declared dynamic"):
        eqiforge.optimize(fixed, (torch.randn(2, 12),), dynamic={"x": 1}, measure="never", original_if_no_better=False)
    with pytest.raises(EqiforgeError, match="dynamic names 'y', which is not a tensor input"):
        eqiforge.optimize(fixed, (torch.randn(2, 12),), dynamic={"y": 1}, measure="never", original_if_no_better=False)


def test_torch_compile_optimizes_a_dynamic_graph_once_for_every_length():
    """Dynamo makes the length dynamic at the second call; the backend optimizes that graph once, and every
    call runs an EqiForge plan (``call_counts``)."""
    from eqiforge import dynamo

    torch._dynamo.reset()
    before, reports = dynamo.call_counts(), len(dynamo.REPORTS)
    compiled = torch.compile(attention, backend="eqiforge", options={"original_if_no_better": False})
    with torch.no_grad():
        for length in range(8, 24):
            args = qkv(length, length)
            torch.testing.assert_close(compiled(*args), attention(*args), rtol=1e-5, atol=1e-5)
    after = dynamo.call_counts()
    assert after["plan"] - before["plan"] == 16 and after["fallback"] == before["fallback"]
    assert len(dynamo.REPORTS) - reports == 2 and dynamo.REPORTS[-1].runs == "the plan for every size"
    assert dynamo.SHAPE_PLANS[-1].cache.builds == 0 and "checked at" in dynamo.REPORTS[-1].symbolic


class SlowedTorchPlan(generalize.TorchPlan):
    """A plan as torch code that runs three times per call: slower than the graph by construction."""

    def _bind(self):
        super()._bind()
        forward = self.forward
        self.forward = lambda *x: (forward(*x), forward(*x), forward(*x))[2]


def test_a_dynamic_graph_runs_as_the_fallback_compiles_it_where_that_is_measured_faster(monkeypatch, tmp_path):
    """The plan for every size made three times slower by construction: timed once against the graph, the graph
    serves every size, and no plan per shape is built."""
    from eqiforge import dynamo

    monkeypatch.setenv("EQIFORGE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(generalize, "TorchPlan", SlowedTorchPlan)
    torch._dynamo.reset()
    compiled = torch.compile(attention, backend="eqiforge", options={"original_if_no_better": False,
                                                                     "measure": "always", "measure_seconds": 1.0,
                                                                     "fallback": "eager"})
    with torch.no_grad():
        args = qkv(8, 0)
        torch.testing.assert_close(compiled(*args), attention(*args), rtol=1e-5, atol=1e-5)
        before = dynamo.call_counts()
        for length in (9, 10, 17):
            args = qkv(length, length)
            torch.testing.assert_close(compiled(*args), attention(*args), rtol=1e-5, atol=1e-5)
    plans = dynamo.SHAPE_PLANS[-1]
    assert plans.graph_every_size is not None and plans.cache.builds == 0
    after = dynamo.call_counts()  # the graph chosen by measurement, not for want of a plan
    assert after["original"] - before["original"] == 3 and after["fallback"] == before["fallback"]
    assert dynamo.REPORTS[-1].runs.startswith("the original graph, unchanged, op by op, at every size (measured")
    assert dynamo.REPORTS[-1].measured.endswith("runs: graph")


def test_a_dynamic_graph_under_inductor_is_timed_against_its_plan_however_the_prices_compare(monkeypatch, tmp_path):
    """The cost model cannot price Inductor's compile of the graph, so under "auto" a plan predicted
    decisively faster than the graph op by op (every priced candidate decisive here) is still timed against
    it: the plan made three times slower loses, and the graph compiled by Inductor serves every size."""
    from eqiforge import dynamo

    monkeypatch.setenv("EQIFORGE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(choice, "DECISIVE", 0.0)
    monkeypatch.setattr(generalize, "TorchPlan", SlowedTorchPlan)
    torch._dynamo.reset()
    compiled = torch.compile(attention, backend="eqiforge", options={"original_if_no_better": False,
                                                                     "measure": "auto", "measure_seconds": 1.0})
    with torch.no_grad():
        for length in (8, 9, 17):
            args = qkv(length, length)
            torch.testing.assert_close(compiled(*args), attention(*args), rtol=1e-5, atol=1e-5)
    assert dynamo.SHAPE_PLANS[-1].graph_every_size is not None
    assert dynamo.REPORTS[-1].runs.startswith("the original graph, compiled by Inductor, at every size (measured")


def chain(x, w1, w2):
    return x @ w1 @ w2


def test_where_the_best_plan_depends_on_the_size_each_range_gets_its_own():
    """Priced for the H100 (the tests' device), (x w1) w2 is the cheaper bracketing for few rows of x and
    x (w1 w2) for many: extraction priced at four times the hint chooses the other, which serves the sizes
    from the geometric mean of the two values up; the e-graph is saturated once."""
    x, w1, w2 = torch.randn(64, 64), torch.randn(64, 48), torch.randn(48, 64)
    opt = eqiforge.optimize(chain, (x, w1, w2), dynamic={"x": 0}, measure="never")
    runner = opt.runner
    assert type(runner).__name__ == "BucketedPlan" and len(runner.plans) == 2 and len(runner.bounds) == 1
    assert "another plan" in opt.report.symbolic and opt.report.runs == "the plan"
    small, large = runner.plans
    assert "torch.matmul(x, in_w1)" in small.source and "torch.matmul(in_w1, in_w2)" in large.source
    for rows in (3, 64, runner.bounds[0] - 1, runner.bounds[0], 700):
        xs = torch.randn(rows, 64)
        torch.testing.assert_close(opt(xs, w1, w2), chain(xs, w1, w2), rtol=1e-4, atol=1e-4)
    assert opt.calls == {"plan": 5, "inductor": 0, "original": 0, "fallback": 0} and opt.plans.builds == 0
    copied = copy.deepcopy(runner)  # the generated dispatch is bound again to the copy's own plans
    for rows, plan in ((runner.bounds[0] - 1, small), (runner.bounds[0], large)):
        xs = torch.randn(rows, 64)
        assert torch.equal(runner(xs, w1, w2)[0], plan(xs, w1, w2)[0])
        assert torch.equal(copied(xs, w1, w2)[0], plan(xs, w1, w2)[0])


@pytest.mark.slow
def test_a_strided_window_that_holds_only_above_some_size_is_checked_at_the_smallest():
    """``x[14:15:2]`` at 16 rows is a window of two rows from 14 (frontend/aten.py's strided slice), which torch's
    trace allows from 15 rows: the plan lifted from 16 must be checked at 15 and refused there, so a call at
    15 rows runs a plan of its own instead of failing (found by the fuzzer, seed 996155)."""
    w = torch.randn(5, 1)

    def program(x):
        return (x @ w)[14:15:2] * 2.0
    x = torch.randn(16, 5)
    with pytest.warns(UserWarning, match="fails at s"):
        opt = eqiforge.optimize(program, (x,), dynamic=True, measure="never")
    for rows in (17, 15, 33):
        y = torch.randn(rows, 5)
        torch.testing.assert_close(opt(y), program(y))
