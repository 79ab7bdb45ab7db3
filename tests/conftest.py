"""Test-session setup: Triton kernels run under the Triton interpreter on this CPU-only machine.

TRITON_INTERPRET must be set before triton is first imported anywhere in the process, hence here.
"""
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")
# extraction answers are cached on disk (eqiforge/extract/cache.py): a fresh folder per session, so that no
# test reads what another run stored, nor writes into the user's cache
os.environ["EQIFORGE_CACHE_DIR"] = tempfile.mkdtemp(prefix="eqiforge-test-cache-")
# plans are priced for a table device, so that what a test expects does not depend on this machine's measured
# CPU figures (tests/test_calibrate.py tests the CPU device and the default that picks it)
os.environ.setdefault("EQIFORGE_DEVICE", "H100")
sys.path.insert(0, str(Path(__file__).resolve().parent))  # helpers such as rule_cases, rulecheck
