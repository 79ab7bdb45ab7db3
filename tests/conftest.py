"""Test-session setup: the Triton interpreter, one cache folder per session, and the two tiers.

TRITON_INTERPRET must be set before triton is first imported anywhere in the process, hence here.

Caches: EqiForge's (saturations, extraction answers, this CPU's calibration, Triton modules) and Inductor's
go to one fresh folder per test session, never the user's: no test reads what another run stored, and the
tests of one session share what they compute (a saturation or an Inductor compile done once serves every
test that asks for it again). Under pytest-xdist the folder is made by the controlling process, whose
environment the workers inherit, so that all workers of a session share it (entries are written whole:
``eqiforge/paths.py``; Inductor locks its own). Tests that need a cold cache point at their own tmp_path.

Tiers: a test marked ``slow`` runs only when asked for (``-m slow``, or named on the command line as
``file::test``); the default run, the README's test command, is the fast tier.
"""
import os
import shutil
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")
if "PYTEST_XDIST_WORKER" not in os.environ:  # a plain run, or xdist's controller: make the session's folder
    _session = Path(tempfile.mkdtemp(prefix="eqiforge-tests-"))
    os.environ["EQIFORGE_CACHE_DIR"] = str(_session / "eqiforge")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(_session / "inductor")
# plans are priced for a table device, so that what a test expects does not depend on this machine's measured
# CPU figures (tests/test_calibrate.py tests the CPU device and the default that picks it)
os.environ.setdefault("EQIFORGE_DEVICE", "H100")
# optimize() chooses between the program and the plan as predicted, not by timing them: the same plan every run
# and no timing in the suite's time (tests/test_choice.py tests the measured choice)
os.environ.setdefault("EQIFORGE_MEASURE", "never")
# a decision measured while the other worker runs is no less final for it: the tests that time candidates must
# read their decisions back from the cache (tests/test_choice.py tests the busy machine, its threshold set)
os.environ.setdefault("EQIFORGE_BUSY_CORES", "inf")
sys.path.insert(0, str(Path(__file__).resolve().parent))  # helpers such as rule_cases
if "PYTEST_XDIST_WORKER" in os.environ:
    # a worker's share of the cores as PyTorch's threads: two workers of two threads each on two cores left
    # every parallel call waiting at its barrier for a descheduled thread (a 0.2 ms product timed at 16 ms),
    # and the tests that time candidates decided on that noise
    import torch
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))))


def pytest_configure(config):
    """Without ``-m``, run the fast tier: deselect tests marked slow, unless a test was named by its id."""
    if not config.option.markexpr and not any("::" in arg for arg in config.args):
        config.option.markexpr = "not slow"


def pytest_unconfigure(config):
    """The controller removes the session's cache folder (workers leave it to the controller)."""
    if "_session" in globals():
        shutil.rmtree(_session, ignore_errors=True)
