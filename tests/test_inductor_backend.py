"""backend="inductor": EqiForge chooses the algebra, Inductor generates the code (issue 13 item 1)."""
import pytest
import torch

import eqiforge
from eqiforge.runtime import inductor_plan
from eqiforge.runtime.inductor_plan import InductorPlan


def test_the_plan_is_compiled_by_inductor_and_keeps_its_algebraic_win():
    a, b, v = torch.randn(128, 128), torch.randn(128, 128), torch.randn(128, 1)

    def chain(a, b, v):
        return torch.relu(a @ b @ v) * 2.0
    opt = eqiforge.optimize(chain, (a, b, v), backend="inductor", device="cpu")
    assert isinstance(opt.runner, InductorPlan) and opt.report.runs == "the plan"
    assert opt.report.speedup > 3  # (a @ b) @ v -> a @ (b @ v): two matrix-vector products
    [note] = [n for n in opt.report.lowering_notes if "Inductor" in n]
    assert note.startswith("Inductor compiled the plan, an ATen graph of")
    inner, outer = [n for n in opt.runner.graph.graph.nodes if n.target == torch.ops.aten.mm.default]
    assert [a.name for a in inner.args] == ["b_1", "v_1"] and outer.args[1] is inner  # Inductor got a @ (b @ v)
    assert "torch.matmul(b, v)" in opt.source  # the small product first
    torch.testing.assert_close(opt(a, b, v), chain(a, b, v), rtol=1e-4, atol=1e-4)


def test_a_program_without_a_win_runs_compiled_by_inductor_as_written():
    def gelu2(x):
        return torch.nn.functional.gelu(x) * 2.0
    x = torch.randn(32, 32)
    opt = eqiforge.optimize(gelu2, (x,), backend="inductor", device="cpu")
    assert opt.report.runs.startswith("the original program")
    assert opt.runner.graph is None  # the plan that does not run is not compiled
    assert opt._original is not gelu2 and getattr(opt._original, "__wrapped__", None) is gelu2  # torch.compile's
    torch.testing.assert_close(opt(x), gelu2(x))


def test_the_inductor_backend_is_known_to_the_cli_options():
    with pytest.raises(eqiforge.EqiforgeError, match="available: \\['torch', 'triton', 'inductor'\\]"):
        eqiforge.optimize(torch.relu, (torch.randn(2),), backend="xla")


def test_a_plan_inductor_cannot_compile_runs_as_torch_code_and_says_why(monkeypatch):
    def broken(gm, example_inputs):
        raise RuntimeError("no kernel for this")
    monkeypatch.setattr(inductor_plan, "compile_fx_inner", broken)
    a, b, v = torch.randn(64, 64), torch.randn(64, 64), torch.randn(64, 1)

    def chain(a, b, v):
        return a @ b @ v
    opt = eqiforge.optimize(chain, (a, b, v), backend="inductor", device="cpu")
    assert opt.runner.graph is None and opt.runner.forward is opt.runner.torch_forward
    assert "Inductor could not compile the plan (RuntimeError: no kernel for this); it runs as EqiForge's torch " \
           "code" in opt.report.lowering_notes
    torch.testing.assert_close(opt(a, b, v), chain(a, b, v), rtol=1e-4, atol=1e-4)
