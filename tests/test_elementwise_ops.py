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


def unary_cases():
    """Every op through both backends in each dtype; the fast tier takes one dtype per op and backend, the two
    dtypes alternating over the ops (every op, backend and dtype runs), the slow tier the rest."""
    for i, name in enumerate(UNARY):
        for backend in ("torch", "triton"):
            for j, (dtype, dtype_id) in enumerate(((torch.float32, "float32"), (torch.float16, "float16"))):
                fast = (i + (backend == "triton") + j) % 2 == 0
                yield pytest.param(name, backend, dtype, id=f"{name}-{backend}-{dtype_id}",
                                   marks=[] if fast else [pytest.mark.slow])


@pytest.mark.parametrize("name,backend,dtype", list(unary_cases()))
def test_unary_op_matches_eager(name, backend, dtype):
    impl = ops.EPI[name].torch_impl
    x = (torch.randn(6, 40, generator=torch.Generator().manual_seed(0)) * 4).to(dtype)
    opt = eqiforge.optimize(lambda t: impl(t), (x,), backend=backend)
    counts = opt.plan.graph.op_counts()
    assert "Extern" not in counts
    assert ("PointwiseK" if backend == "triton" else ops.EPI[name].name) in counts
    tol = TOLERANCE[dtype]
    torch.testing.assert_close(opt(x), impl(x), rtol=tol, atol=tol, equal_nan=True)
