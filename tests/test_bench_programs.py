"""The CPU benchmark's hand-optimised rewrites compute what the programs compute (a benchmark against a
wrong rewrite would prove nothing), and every benchmark program optimizes to a plan matching eager."""
import sys
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

import check_programs  # noqa: E402
import measure  # noqa: E402
import programs  # noqa: E402

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
