"""Check that every hand rewrite in the suite computes what its program computes (fp32, rel. error <= 1e-4).

    python bench/check_programs.py            # exit status 1 if any hand rewrite disagrees with eager

A benchmark is only as honest as its yardstick: a hand rewrite that computes something else would make
EqiForge look slow (or wrong). ``check()`` is importable for a test.
"""
from __future__ import annotations

import sys

import torch

from measure import TOLERANCE, fresh_inputs, rel_error
from programs import PROGRAMS


def check(names=None, sets: int = 3) -> dict[str, float]:
    """Largest relative error of the hand rewrite against eager, per program, over a few input sets."""
    errors = {}
    with torch.no_grad():
        for name in names or PROGRAMS:
            program, example = PROGRAMS[name].make()
            hand = PROGRAMS[name].hand(program)
            errors[name] = max(rel_error(hand(*x), program(*x)) for x in [example, *fresh_inputs(example, sets)])
    return errors


def main() -> int:
    errors = check()
    for name, err in errors.items():
        print(f"{name:<20} {err:.1e}  {'ok' if err <= TOLERANCE else 'MISMATCH'}")
    bad = [name for name, err in errors.items() if not err <= TOLERANCE]
    print(f"{len(errors) - len(bad)}/{len(errors)} hand rewrites match eager" + (f"; mismatch: {bad}" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
