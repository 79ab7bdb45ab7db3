"""Golden files: the generated source of a few small plans, on both backends, against committed expected
source, so that a change in generated code (a new rule, a template edit, a renaming) is seen in review.

After an intended change, regenerate them and read the diff:
    EQIFORGE_UPDATE_GOLDEN=1 python -m pytest -q tests/test_golden.py
"""
import difflib
import os
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import eqiforge

GOLDEN = Path(__file__).resolve().parent / "golden"


def gemm_bias_gelu(x, w, b):
    return F.gelu(x @ w + b)


def softmax_of_scaled_scores(q, k):
    return torch.softmax((q @ k.mT) * 0.125, -1)


def layer_norm_residual(x, r, weight, bias):
    return F.layer_norm(x + r, (16,), weight, bias) * 2.0


def sums_through_a_product(a, b):
    return (a @ b).sum(-1)


def _inputs(*shapes):
    gen = torch.Generator().manual_seed(0)
    return tuple(torch.randn(*s, generator=gen) for s in shapes)


PROGRAMS = {
    "gemm_bias_gelu": (gemm_bias_gelu, ((8, 16), (16, 32), (32,))),
    "softmax_of_scaled_scores": (softmax_of_scaled_scores, ((16, 8), (16, 8))),
    "layer_norm_residual": (layer_norm_residual, ((4, 16), (4, 16), (16,), (16,))),
    "sums_through_a_product": (sums_through_a_product, ((8, 16), (16, 32))),
}


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_generated_source_matches_its_golden_file(name, backend):
    fn, shapes = PROGRAMS[name]
    inputs = _inputs(*shapes)
    # priced for a table device, not this CPU as measured (which differs between machines); generation only
    opt = eqiforge.optimize(fn, inputs, backend=backend, priced_device="H100", validate=False,
                            original_if_no_better=False)
    path = GOLDEN / f"{name}.{backend}.py"
    if os.environ.get("EQIFORGE_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(exist_ok=True)
        path.write_text(opt.source)
    expected = path.read_text()
    diff = "".join(difflib.unified_diff(expected.splitlines(True), opt.source.splitlines(True),
                                        f"{path.name} (committed)", f"{path.name} (generated now)"))
    assert not diff, f"generated source changed; if intended, regenerate (see this file's docstring):\n{diff}"
    if backend == "torch":  # the committed source is also a working plan
        with torch.no_grad():
            torch.testing.assert_close(opt(*inputs), fn(*inputs), rtol=1e-5, atol=1e-5)
