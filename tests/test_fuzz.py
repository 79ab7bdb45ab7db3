"""The differential fuzzer: a fixed-seed sample of the campaign must find nothing, and the fuzzer itself
must be trustworthy (deterministic programs, reproducers that re-run them, a judge that catches a wrong
plan, hangs killed on time)."""
import ast
import math
import json
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
import torch

from eqiforge.fuzz import programs, runner, sizes
from eqiforge.fuzz.__main__ import main as fuzz_main


@pytest.mark.parametrize("count,triton", [
    (6, 2),  # the default run: 6 programs x 2 configurations in rotation (every configuration) + 2 triton
    pytest.param(22, 6, marks=pytest.mark.slow),  # 4 jobs per configuration + 6 triton jobs
])
def test_fixed_seed_sample_finds_nothing_wrong(tmp_path, count, triton):
    sample = ["--programs", str(count), "--per-program", "2", "--seed", "0", "--triton", str(triton), "--workers", "2"]
    code = fuzz_main(sample + ["--out", str(tmp_path)])
    summary = json.loads((tmp_path / "summary.json").read_text())
    failures = [f"{tmp_path / f['reproducer']}: {f['status']}: {f['detail']}" for f in summary["failures"]]
    jobs = 2 * count + triton
    assert code == 0 and not failures, "\n".join(failures)
    assert summary["jobs"] == jobs and summary["ok"] + summary["rejected"] == jobs
    assert set(summary["by config"]) == set(runner.CONFIGS + runner.TRITON_CONFIGS)
    assert (tmp_path / "summary.md").read_text().startswith("# EqiForge fuzz summary")


@pytest.mark.parametrize("profile", ["torch", "triton"])
def test_programs_are_deterministic_per_seed_and_run_in_eager(profile):
    sources = set()
    for seed in range(40):
        program = programs.generate(seed, profile)
        assert programs.generate(seed, profile) == program
        sources.add(program.source)
        make_program, make_inputs = programs.load(program.source)
        with torch.no_grad():
            first, again = make_program()(*make_inputs(1)), make_program()(*make_inputs(1))
        for a, b in zip(torch.utils._pytree.tree_leaves(first), torch.utils._pytree.tree_leaves(again)):
            assert torch.equal(a, b) and torch.isfinite(a).all()
            assert a.numel() <= programs.PROFILES[profile].max_numel
    assert len(sources) == 40


def test_generator_draws_every_family_and_dtype():
    drawn = [programs.generate(seed) for seed in range(300)]
    assert {f for p in drawn for f in p.families} == set(programs.FAMILIES)
    assert {p.dtype for p in drawn} == set(programs.DTYPES)
    assert any("class Program(torch.nn.Module)" in p.source for p in drawn)


def test_reproducer_source_round_trips_the_program():
    job = runner.plan_jobs(1, 7, ("limits",), per_program=1)[0]
    source = runner.reproducer_source(job, runner.Outcome("wrong", "a test"))
    namespace = {"__name__": "not_main"}
    exec(compile(source, "repro", "exec"), namespace)
    make_program, make_inputs = programs.load(job.program.source)
    with torch.no_grad():
        want, got = make_program()(*make_inputs(1)), namespace["make_program"]()(*namespace["make_inputs"](1))
    assert all(torch.equal(a, b) for a, b in zip(torch.utils._pytree.tree_leaves(want),
                                                 torch.utils._pytree.tree_leaves(got)))
    assert "Limits(iterations=2" in source
    imported = {alias.name.split(".")[0] for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(ast.parse(source)) if isinstance(node, ast.ImportFrom)}
    assert imported == {"os", "torch", "eqiforge"}


@pytest.mark.slow
def test_reproducer_runs_standalone_and_prints_the_verdict(tmp_path):
    job = runner.plan_jobs(1, 3, ("greedy",), per_program=1)[0]
    path = runner.write_reproducer(tmp_path, job, runner.Outcome("crash", "a test"))
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(("OK", "REJECTED")), done.stdout


def _fp32_case():
    def program(x, w):
        return torch.softmax(x @ w, -1) * 3.0
    gen = torch.Generator().manual_seed(0)
    inputs = (torch.randn(8, 16, generator=gen), torch.randn(16, 12, generator=gen))
    with torch.no_grad():
        return program, inputs, program(*inputs), program(*(x.double() for x in inputs))


def test_judge_accepts_a_correct_plan_and_flags_a_wrong_one():
    program, inputs, eager, reference = _fp32_case()
    assert runner.judge(program(*inputs), eager, reference, "float32").status == "ok"
    wrong = runner.judge(program(*inputs) + 1e-2, eager, reference, "float32")
    assert wrong.status == "wrong" and wrong.error > wrong.allowed
    assert runner.judge(program(*inputs).half(), eager, reference, "float32").status == "wrong"  # dtype
    assert runner.judge(program(*inputs)[:, :4], eager, reference, "float32").status == "wrong"  # shape


def test_judge_compares_nonfinite_patterns_only_when_asked():
    eager = torch.tensor([1.0, float("nan"), float("inf")])
    plan = torch.tensor([1.0, 2.0, float("inf")])
    assert runner.judge(plan, eager, eager.double(), "float32").status == "ok"
    assert runner.judge(plan, eager, eager.double(), "float32", compare_nonfinite=True).status == "wrong"
    assert runner.judge(eager.clone(), eager, eager.double(), "float32", compare_nonfinite=True).status == "ok"


def test_a_nonfinite_class_eagers_rounding_made_is_not_held_against_the_plan():
    """Fuzz program 996066 (bfloat16): eager rounds a sum of two products to 0 and multiplies it by -inf (NaN);
    exact math, and Inductor's float32 arithmetic, give -inf. The plan agreeing with float64 is right; a
    class that neither eager nor float64 has is wrong."""
    rounded, exact = torch.tensor([1.0, 0.0], dtype=torch.bfloat16), torch.tensor([1.0, 1e-3], dtype=torch.float64)
    eager = rounded * torch.tensor([2.0, -math.inf], dtype=torch.bfloat16)  # [2, nan]
    reference = exact * torch.tensor([2.0, -math.inf], dtype=torch.float64)  # [2, -inf]
    for got, verdict in (([2.0, -math.inf], "ok"), ([2.0, math.nan], "ok"), ([2.0, math.inf], "wrong")):
        got = torch.tensor(got, dtype=torch.bfloat16)
        assert runner.judge(got, eager, reference, "bfloat16", compare_nonfinite=True).status == verdict


def test_judge_allows_float64_rounding_noise_where_an_output_cancels_and_nowhere_else():
    """A float64 program's eager output is its own reference; where an output cancels to rounding noise (the
    mean of layer-normed rows, ~1e-17) the float64 program on inputs moved by a few ulps says how far rounding
    alone moves it, so a plan's 0.0 passes there; a well-conditioned output keeps the tight floor."""
    def program(x):
        return torch.nn.functional.layer_norm(x, (3,), eps=1e-12).mean(), x.sum()
    x = torch.randn(3, 3, generator=torch.Generator().manual_seed(991221), dtype=torch.float64)
    with torch.no_grad():
        eager = program(x)
    noise = runner._perturbed(lambda: program, (x,))
    assert eager[0].abs() < 1e-15 and noise[0] != eager[0]
    cancelled = (torch.zeros((), dtype=torch.float64), eager[1])
    assert runner.judge(cancelled, eager, eager, "float64").status == "wrong"  # without the noise estimate
    assert runner.judge(cancelled, eager, eager, "float64", noise=noise).status == "ok"
    off = (eager[0], eager[1] * (1 + 1e-9))
    assert runner.judge(off, eager, eager, "float64", noise=noise).status == "wrong"


def test_check_flags_an_optimizer_that_adds_a_hundredth(monkeypatch):
    program, inputs, _, _ = _fp32_case()
    monkeypatch.setattr(runner, "_optimized", lambda make, example, config, options: (
        lambda *x: make()(*x) + 1e-2, []))
    outcome = runner.check(lambda: program, lambda seed: tuple(torch.randn(x.shape) for x in inputs), "default", {},
                           "float32")
    assert outcome.status == "wrong"


def test_plan_check_interventions_are_told_apart_from_passes():
    """The count of interventions reads the reports' flags (tests/test_validation.py checks the flags)."""
    assert not runner.Outcome("ok", interventions=[False, False]).intervened
    assert runner.Outcome("ok", interventions=[False, True]).intervened


def test_other_sizes_grow_and_shrink_one_size_class_that_eager_runs():
    def make_inputs(seed):
        gen = torch.Generator().manual_seed(seed)
        return torch.rand(5, 3, generator=gen).add_(0.5), torch.randn(3, 5, generator=gen)

    def make_program():
        return lambda x, w: (x @ w).view(5, 5).sum(0)  # the view fixes 5: only the class of size 3 may change

    old, runs = sizes.variants(make_program, make_inputs)
    assert old == 3 and [n for n, _ in runs] == [4, 7, 2]
    (x, w), (x1, w1), (x2, _) = runs[1][1], make_inputs(1), make_inputs(2)
    assert x.shape == (5, 7) and w.shape == (7, 5)
    assert torch.equal(x[:, :3], x1) and torch.equal(x[:, 3:6], x2) and torch.equal(x[:, 6:], x2[:, :1])
    assert torch.equal(w[:3], w1) and bool((x >= 0.5).all())  # a positive input stays positive
    assert torch.equal(runs[2][1][1], w1[:2])


def test_a_sized_configuration_flags_a_plan_wrong_only_at_another_size(monkeypatch):
    program, inputs, _, _ = _fp32_case()

    class RightAtTheExampleSizeOnly:
        calls = {"plan": 0, "inductor": 0, "original": 0, "fallback": 0}
        plans = types.SimpleNamespace(values=lambda: [])

        def __call__(self, x, w):
            return program(x, w) + (0.0 if x.shape == inputs[0].shape else 1e-2)

    monkeypatch.setattr(runner, "_optimized", lambda make, example, config, options: (
        RightAtTheExampleSizeOnly(), []))
    make_inputs = lambda seed: tuple(torch.randn(x.shape, generator=torch.Generator().manual_seed(seed))
                                     for x in inputs)
    outcome = runner.check(lambda: program, make_inputs, "dynamic", {}, "float32")
    assert outcome.status == "wrong" and outcome.detail.startswith("at sizes 9, 17, 7 of the dims of size 8")
    assert runner.check(lambda: program, make_inputs, "default", {}, "float32").status == "ok"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state not in ("Z", "X")


@pytest.mark.slow  # two worker processes started, one of them killed: ~15 s of the fuzzer's own machinery
def test_a_hanging_job_is_killed_within_its_timeout_with_its_children(tmp_path):
    pids = tmp_path / "pids"
    hanging_source = "\n".join([
        "import os, subprocess, time",
        "import torch",
        "",
        "def make_program():",
        "    child = subprocess.Popen(['sleep', '600'])  # as saturation forks a child",
        f"    open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{child.pid}}')",
        "    time.sleep(600)",
        "",
        "def make_inputs(seed):",
        "    return (torch.randn(3),)",
        ""])
    hanging = runner.Job(programs.Program(-1, "torch", hanging_source, "float32", ()), "default", {}, 3.0)
    normal = runner.plan_jobs(1, 0, ("default",), per_program=1)[0]
    results = dict((job.name, outcome) for job, outcome in runner.run_jobs([hanging, normal], workers=1))
    assert results[hanging.name].status == "hang"
    assert 3.0 <= results[hanging.name].seconds < 4.5
    assert results[normal.name].status in ("ok", "rejected")  # the pool replaced the killed worker
    worker, child = map(int, pids.read_text().split())
    deadline = time.time() + 5
    while (_alive(worker) or _alive(child)) and time.time() < deadline:
        time.sleep(0.1)
    assert not _alive(worker) and not _alive(child)


def dead_branch_program(x0, x1, x2):
    """Fuzz program 22 of seed 7: x2 feeds only a value no output reads, and the product's rows are fixed by
    a reshape."""
    v0 = torch.einsum("...ij,jk->...ik", x0, x1)
    ((v0[:, None, :] - x2[None, :, :]) ** 2).sum(-1)
    return v0.reshape(1, 2, 3), v0


def test_a_dynamic_dim_read_by_no_output_under_the_backend_in_another_layout():
    """The job the layout cases first found crashing: the other layout's call made Dynamo compile again, the
    sizes of x2 then made its dim dynamic, and the plan for every size had no symbolic dim of its own to
    check a call against (AttributeError from the module's input check)."""
    def make_inputs(seed):
        gen = torch.Generator().manual_seed(seed)
        return tuple(torch.randn(*shape, generator=gen).to(torch.float16) for shape in ((2, 3), (3, 3), (5, 3)))
    outcome = runner.check(lambda: dead_branch_program, make_inputs, "compile_symbolic",
                           runner.job_options("compile_symbolic", 0), "float16")
    assert outcome.status == "ok", str(outcome)
    assert outcome.sizes["plan calls"] + outcome.sizes["other calls"] == len(outcome.sizes["sizes"])


def narrowed_scores(x0, x1, x2, x3, x4):
    """Fuzz program 996103: attention scores flattened and narrowed at constants (dims of size 3 change)."""
    v0 = (x0 - x1 * 0.5).sum(-3)
    v3 = (v0.masked_fill(x2 >= -0.25, -1.0) * 0.0833) @ x3.transpose(-2, -1) * 0.5774
    return v3.reshape(96).narrow(-1, 42, 34)


def test_a_program_that_does_not_convert_at_the_smallest_size_gets_a_plan_for_its_own():
    """Checked at the smallest size the trace allows (a plan for every size must hold there), the program does
    not convert (an empty slice): that is no plan for every size, not a refusal of the program."""
    def make_inputs(seed):
        gen = torch.Generator().manual_seed(seed)
        return tuple(torch.randn(*shape, generator=gen) for shape in ((3, 3, 3), (3, 3, 3), (3, 1), (32, 3), (32, 2)))
    outcome = runner.check(lambda: narrowed_scores, make_inputs, "dynamic", runner.job_options("dynamic", 0),
                           "float32")
    assert outcome.status == "ok", str(outcome)
