"""Running an inductor-backend plan: the torch backend's generated function, compiled by Inductor.

EqiForge chooses the algebra (reassociation, merged projections, re-formed composites); Inductor generates
the code (fused C++/OpenMP loops on a CPU, Triton kernels on a GPU). ``torch.compile`` traces the plan's
function at its first call (static shapes, as the plan's) and compiles what it traced; a call it cannot
trace runs in PyTorch between compiled parts (a graph break), as torch.compile does for any program.
"""
from __future__ import annotations

import torch

from .torch_plan import TorchPlan

COMPILE_OPTIONS = {"backend": "inductor", "dynamic": False}


class InductorPlan(TorchPlan):
    """A TorchPlan whose function runs through ``torch.compile(..., backend="inductor")``."""

    def _bind(self) -> None:
        super()._bind()
        self.forward = torch.compile(self.forward, **COMPILE_OPTIONS)


def compiled_original(fn):
    """The user's program compiled by Inductor the same way: what an inductor plan that is no better
    than the program runs instead."""
    return torch.compile(fn, **COMPILE_OPTIONS)
