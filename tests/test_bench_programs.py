"""The CPU benchmark's hand-optimised rewrites compute what the programs compute (a benchmark against a
wrong rewrite would prove nothing), and every benchmark program optimizes to a plan matching eager: the
algebra suite at benchmark size, the KernelBench-style suite shrunk (its programs at benchmark size take
minutes to optimize and check; the small ones keep every program and op in the test)."""
import sys
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

import check_programs  # noqa: E402
import families  # noqa: E402
import kernelbench_style  # noqa: E402
import measure  # noqa: E402
import programs  # noqa: E402
import run_cpu  # noqa: E402
import summary  # noqa: E402
import twins  # noqa: E402

import eqiforge  # noqa: E402


def test_hand_rewrites_match_the_programs():
    errors = check_programs.check()
    assert errors and all(err <= measure.TOLERANCE for err in errors.values()), errors


@pytest.mark.parametrize("name", sorted(programs.PROGRAMS))
def test_benchmark_programs_optimize_correctly(name):
    fn, inputs = programs.PROGRAMS[name].factory()
    opt = eqiforge.optimize(fn, inputs)
    with torch.no_grad():
        got, want = opt(*inputs), fn(*inputs)
    assert (got - want).norm() <= 1e-4 * want.norm()


def every_third(names) -> list:
    """``names`` as parameters, two of every three in the slow tier (the fast tier keeps a spread sample)."""
    return [pytest.param(n, marks=[] if i % 3 == 0 else [pytest.mark.slow]) for i, n in enumerate(names)]


@pytest.mark.parametrize("name", every_third(kernelbench_style.SMALL))
def test_kernelbench_style_programs_optimize_correctly(name):
    """The module EqiForge returns and its plan alone both match eager: where the module runs the original
    program (a plan predicted no better), the plan is still checked."""
    fn, inputs = kernelbench_style.SMALL[name].make()
    opt = eqiforge.optimize(fn, inputs, backend="torch")
    with torch.no_grad():
        want = fn(*inputs)
        assert measure.rel_error(opt(*inputs), want) <= measure.TOLERANCE
        assert measure.rel_error(opt.runner.forward(*inputs), want) <= measure.TOLERANCE
    assert "fell back" not in opt.report.validation, opt.report.validation


@pytest.mark.parametrize("name", every_third(twins.SMALL))
def test_twins_match_their_programs_and_optimize_correctly(name):
    """Each twin computes what its program computes (at both sizes, on fresh inputs), and the program,
    shrunk, optimizes to a module and a plan that match eager."""
    assert_twin_computes_the_program(twins, name)
    assert_optimizes_correctly(twins.SMALL[name])


def assert_twin_computes_the_program(suite_module, name: str) -> None:
    """The twin of program ``name`` computes what the program computes, at both sizes, on fresh inputs."""
    for suite in (suite_module.SMALL, suite_module.SUITE):
        program, example = suite[name].make()
        hand = suite[name].hand(program)
        with torch.no_grad():
            for x in [example, *measure.fresh_inputs(example, 2)]:
                assert measure.rel_error(hand(*x), program(*x)) <= measure.TOLERANCE


def assert_optimizes_correctly(small) -> None:
    """The (small) program optimizes to a module and a plan that match eager."""
    program, example = small.make()
    opt = eqiforge.optimize(program, example, backend="torch")
    with torch.no_grad():
        want = program(*example)
        assert measure.rel_error(opt(*example), want) <= measure.TOLERANCE
        assert measure.rel_error(opt.runner.forward(*example), want) <= measure.TOLERANCE


@pytest.mark.parametrize("name", list(families.SMALL))
def test_families_twins_compute_what_their_programs_compute(name):
    """Each spelling's twin computes what its program computes, at both sizes, on fresh inputs."""
    assert_twin_computes_the_program(families, name)


@pytest.mark.slow  # an optimization per spelling, 67 of them: about a minute of CPU
@pytest.mark.parametrize("name", list(families.SMALL))
def test_families_optimize_correctly(name):
    """Each spelling, shrunk, optimizes to a module and a plan that match eager."""
    assert_optimizes_correctly(families.SMALL[name])


def test_families_suite_is_whole():
    """At least 24 families, each program claiming an algebraic win, documented, a twin that is not the
    program, the same names at both sizes and none shared with the other suites."""
    assert len(families.FAMILIES) >= 24 and list(families.SUITE) == list(families.SMALL)
    assert len(families.SUITE) == len(families.TWINS)  # no two spellings share a name
    assert not set(families.SUITE) & (set(programs.PROGRAMS) | set(kernelbench_style.SUITE) | set(twins.SUITE))
    for name, p in families.SMALL.items():
        program, _ = p.make()
        assert p.algebraic_win and p.doc and p.hand(program) is not program, name


def test_twins_suite_is_whole():
    """At least 20 programs, each claiming an algebraic win, documented, a twin that is not the program,
    the same names at both sizes and none shared with the other suites."""
    assert len(twins.SUITE) >= 20 and list(twins.SUITE) == list(twins.SMALL)
    assert not set(twins.SUITE) & (set(programs.PROGRAMS) | set(kernelbench_style.SUITE))
    for name, p in twins.SMALL.items():
        program, _ = p.make()
        assert p.algebraic_win and p.doc and p.hand(program) is not program, name


def test_kernelbench_style_suite_is_whole():
    """At least 40 programs, the same ones at both sizes, none claiming an algebraic win (the yardstick is
    eager), every one documented, and no name shared with the algebra suite (run_cpu --programs)."""
    suite, small = kernelbench_style.SUITE, kernelbench_style.SMALL
    assert len(suite) >= 40 and list(suite) == list(small)
    assert not set(suite) & set(programs.PROGRAMS)
    for name, p in suite.items():
        assert not p.algebraic_win and p.doc and p.doc == small[name].doc, name
        program, _ = p.make()
        assert p.hand(program) is program, name


def test_fresh_inputs_keep_labels_in_range():
    """Integer inputs are class labels: fresh ones stay in the example's range; float inputs are as before."""
    example = (torch.randn(64, 10), torch.randint(0, 10, (64,)))
    sets = run_cpu.fresh(example, 3)
    assert len(sets) == 3
    for x, labels in sets:
        assert x.shape == (64, 10) and x.dtype == torch.float32
        assert labels.dtype == torch.int64 and 0 <= labels.min() and labels.max() <= example[1].max()
    floats = (torch.randn(4, 5),)
    assert torch.equal(run_cpu.fresh(floats, 2)[1][0], measure.fresh_inputs(floats, 2)[1][0])


def test_suite_option_selects_programs_and_files():
    assert run_cpu.parse_args([]).programs == list(programs.PROGRAMS)  # the default is today's suite
    args = run_cpu.parse_args(["--suite", "kernelbench"])
    assert args.suites == ["kernelbench"] and args.programs == list(kernelbench_style.SUITE)
    args = run_cpu.parse_args(["--suite", "all", "--programs", "softmax,low_rank"])
    assert args.suites == ["algebra", "kernelbench", "twins", "families"]
    assert args.programs == ["softmax", "low_rank"]
    assert run_cpu.SUITES["kernelbench"][1] == "cpu_kernelbench" and run_cpu.SUITES["algebra"][1] == "cpu"
    assert run_cpu.SUITES["twins"][1] == "cpu_twins" and run_cpu.SUITES["families"][1] == "cpu_families"
    with pytest.raises(SystemExit):
        run_cpu.parse_args(["--suite", "algebra", "--programs", "softmax"])


def test_summary_of_a_suite_without_algebra_has_only_the_eager_target():
    ms = {"eager": 1.0, "compile": 1.0, "hand": 1.0, "eqiforge": 1.2, "eqiforge_plan": 1.0}
    row = {"algebraic_win": False, "median_ms": ms, "ratios": {"eqiforge/eager": 1.2, "eqiforge_plan/eager": 1.0,
           "eqiforge/hand": 1.2, "compile/eager": 1.0}, "correct": {"eqiforge": True}, "rel_error": {"eqiforge": 0.0},
           "build_seconds": {"eqiforge": 0.5}, "other_load_cores": 0.0, "errors": {},
           "info": {"eqiforge": {"predicted_before_s": 1e-5, "predicted_after_s": 1e-5, "enodes": 3,
                                 "stop_reason": "saturated", "runs": "the original program (no better)"}}}
    results = {"suite": "kernelbench", "programs": {"softmax": row},
               "machine": {"date": "today", "eqiforge": "abc", "cpu": "cpu", "cpus_usable": 2, "torch": "2",
                           "threads": 2, "repeats": 5}}
    (sentence, passed, offenders), = summary.verdicts(results)
    assert "eager" in sentence and not passed and offenders[0].startswith("softmax (1.20x eager")
    table = summary.markdown(results)
    assert "kernelbench suite" in table and "| original |" in table
