"""Every unary math op of the op table, end to end from its PyTorch call: captured as its IR op (not an
Extern), then run through the torch backend (a generated PyTorch call) and the triton backend (a fused
pointwise kernel, under the interpreter), matching eager in float32 and float16. A new entry is tested here
without a line of its own."""
import pytest
import torch

import eqiforge
from eqiforge import ops

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # log, sqrt of negatives: nan, like torch
UNARY = sorted(name for name, op in ops.EPI.items() if op.arity == 1)
TOLERANCE = {torch.float32: 1e-5, torch.float16: 2e-3}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["float32", "float16"])
@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("name", UNARY)
def test_unary_op_matches_eager(name, backend, dtype):
    impl = ops.EPI[name].torch_impl
    x = (torch.randn(6, 40, generator=torch.Generator().manual_seed(0)) * 4).to(dtype)
    opt = eqiforge.optimize(lambda t: impl(t), (x,), backend=backend)
    counts = opt.plan.graph.op_counts()
    assert "Extern" not in counts
    assert ("PointwiseK" if backend == "triton" else ops.EPI[name].name) in counts
    tol = TOLERANCE[dtype]
    torch.testing.assert_close(opt(x), impl(x), rtol=tol, atol=tol, equal_nan=True)
