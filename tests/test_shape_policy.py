"""optimize()'s module at changing shapes (runtime/module.py, runtime/plan_cache.py): a call at a new
signature runs a plan built for it, kept in a bounded cache, said in ``shape_log`` (a dim that changed
size gets a plan for every value of it: tests/test_symbolic_shapes.py); the example's signature takes the
generated fast path; ``shapes="static"`` keeps the strict errors."""
import pytest
import torch

import eqiforge
from eqiforge.errors import EqiforgeError
from eqiforge.runtime import module as runtime_module
from eqiforge.runtime.plan_cache import DEFAULT_CAPACITY


def program(x, w):
    return torch.relu(x @ w) @ w.t() + 1.0


def check_close(opt, *args, **kwargs):
    with torch.no_grad():
        torch.testing.assert_close(opt(*args, **kwargs), program(*args, **kwargs), rtol=1e-5, atol=1e-5)


def test_a_new_shape_gets_a_plan_for_every_size_once_and_the_example_keeps_the_fast_path(monkeypatch):
    x, w = torch.randn(4, 8), torch.randn(8, 6)
    opt = eqiforge.optimize(program, (x, w))
    check_close(opt, torch.randn(5, 8), w)
    assert opt.shape_log == [opt.shape_log[0]] and opt.shape_log[0].startswith("built a plan for every value of [")
    assert "(input 'x' is float32[5, 8] but the plan was optimized for float32[4, 8]) in " in opt.shape_log[0]
    check_close(opt, torch.randn(5, 8), w)  # the same signature again: the cached plan
    check_close(opt, torch.randn(9, 8), w)  # another size of the same dim: the same plan
    check_close(opt, torch.randn(5, 8).double(), w.double())  # a dtype is part of the signature
    assert len(opt.shape_log) == 2 and opt.plans.builds == 2 and len(opt.plans) == 2
    assert opt.shape_log[1].startswith("built a plan for a call")
    assert sum(opt.calls.values()) == 4 and opt.calls["fallback"] == 0  # a plan, or the program chosen
    monkeypatch.setattr(runtime_module, "flatten_call", None)  # the example's signature never flattens
    check_close(opt, torch.randn(4, 8), w)


@pytest.mark.slow
def test_past_the_caches_capacity_new_signatures_run_the_original_program():
    calls = []

    def scaled(x, scale):
        calls.append(scale)
        return x * scale + 1.0
    x = torch.randn(2, 3)
    opt = eqiforge.optimize(scaled, (x, 0.0), original_if_no_better=False)
    for k in range(1, DEFAULT_CAPACITY + 1):  # a constant is traced: each value another signature
        torch.testing.assert_close(opt(x, float(k)), x * k + 1.0)
    assert opt.plans.builds == len(opt.plans) == DEFAULT_CAPACITY
    calls.clear()
    with pytest.warns(UserWarning, match=f"past the {DEFAULT_CAPACITY} signatures this module builds plans for"):
        for k in (20.0, 21.0, 20.0):
            torch.testing.assert_close(opt(x, k), x * k + 1.0)
    assert calls == [20.0, 21.0, 20.0]  # the original program ran
    torch.testing.assert_close(opt(x, 2.0), x * 2.0 + 1.0)  # a cached plan still runs
    assert calls == [20.0, 21.0, 20.0] and len(opt.shape_log) == DEFAULT_CAPACITY + 1
    assert opt.calls == {"plan": DEFAULT_CAPACITY + 1, "inductor": 0, "original": 0, "fallback": 3}


def test_keywords_and_constants_are_part_of_the_signature():
    def scaled(x, *, scale=1.0, shift=None):
        return x * scale + (0.0 if shift is None else shift)
    x = torch.randn(3, 4)
    opt = eqiforge.optimize(scaled, (x,), {"scale": 2.0})
    torch.testing.assert_close(opt(x, scale=2.0), x * 2.0)
    torch.testing.assert_close(opt(x, scale=3.0), x * 3.0)  # another constant: traced again
    shift = torch.randn(4)
    torch.testing.assert_close(opt(x, scale=2.0, shift=shift), x * 2.0 + shift)  # another structure
    assert len(opt.shape_log) == 2
    assert "an argument is 3.0 where the example had 2.0" in opt.shape_log[0]
    assert "expected 1 tensor inputs, got 2" in opt.shape_log[1]


def test_the_entrys_fast_check_only_speeds_up_what_its_own_checks_accept():
    """The C check learns the last accepted call; a call it does not know (a strided view, a Parameter, a
    tensor requiring grad) is decided by the entry's own checks and still runs the plan; a wrong shape or
    dtype after a learned call is still refused."""
    x, w = torch.randn(4, 8), torch.randn(8, 6)
    opt = eqiforge.optimize(program, (x, w), shapes="static", original_if_no_better=False)
    check_close(opt, x, w)
    for other in (torch.randn(8, 8)[::2], torch.nn.Parameter(torch.randn(4, 8)), torch.randn(4, 8).requires_grad_()):
        check_close(opt, other, w)
        check_close(opt, x, w)
    assert opt.calls == {"plan": 7, "inductor": 0, "original": 0, "fallback": 0}
    for bad in (torch.randn(5, 8), torch.randn(4, 8).double()):
        with pytest.raises(EqiforgeError, match="but the plan was optimized for float32\\[4, 8\\]"):
            opt(bad, w)
    with pytest.raises(EqiforgeError, match="expected 2 tensor inputs, got 1"):
        opt([1.0], w)
    fast = opt._entry.__globals__["fast"]
    assert runtime_module._FastCheck.available and fast.check(x, w) and not fast.check(x.t().t()[:3], w)


def test_static_shapes_keep_the_strict_errors():
    x, w = torch.randn(4, 8), torch.randn(8, 6)
    opt = eqiforge.optimize(program, (x, w), shapes="static")
    with pytest.raises(EqiforgeError, match=r"input 'x' is float32\[5, 8\] but the plan was optimized for "
                                            r"float32\[4, 8\]; this module was optimized with shapes='static'"):
        opt(torch.randn(5, 8), w)
    with pytest.raises(EqiforgeError, match="expected 2 tensor inputs, got 1"):
        opt(x, w=None)
    assert opt.plans is None and opt.shape_log == []
    with pytest.raises(EqiforgeError, match="unknown shapes policy 'dynamic'"):
        eqiforge.optimize(program, (x, w), shapes="dynamic")


def test_a_new_signature_eqiforge_cannot_capture_runs_the_original_program_and_says_why():
    def positives(x):
        return x * 2.0 if x.shape[0] > 3 else x[x > 0].sum() * x  # a data-dependent shape at small sizes
    opt = eqiforge.optimize(positives, (torch.randn(4, 3),))
    x = torch.randn(2, 3)
    with pytest.warns(UserWarning, match=r"(?s)no plan for a call at another signature than the example's \(input "
                                         r"'x' is float32\[2, 3\].*data-dependent.*it runs the original program"):
        torch.testing.assert_close(opt(x), positives(x))
    assert len(opt.shape_log) == 1 and opt.plans.builds == 0
    torch.testing.assert_close(opt(x), positives(x))  # known: no second attempt, no second warning
    assert len(opt.shape_log) == 1
