"""The drop-in replacement a user gets back from ``eqiforge.optimize``.

It takes the same arguments as the original program, checks them against the shapes and dtypes the plan
was optimized for (shapes are static per compilation: a mismatch is a clear error, not garbage), runs the
lowered plan and rebuilds the original output structure.
"""
from __future__ import annotations

import torch
import torch.utils._pytree as pytree

from .. import ops
from ..errors import EqiforgeError


class OptimizedModule(torch.nn.Module):
    """Callable like the original; ``plan``, ``report`` and ``graph_module`` show what it runs."""

    def __init__(self, graph_module, input_specs: list[tuple[str, tuple, str]], out_spec, plan, report):
        super().__init__()
        self.graph_module = graph_module
        self.input_specs = input_specs  # (name, shape, dtype) per flattened tensor input
        self.out_spec = out_spec
        self.plan = plan
        self.report = report

    def forward(self, *args, **kwargs):
        flat = [a for a in pytree.tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
        self._check(flat)
        outs = self.graph_module(*flat)
        return pytree.tree_unflatten(list(outs), self.out_spec) if self.out_spec is not None else outs

    def _check(self, flat: list[torch.Tensor]) -> None:
        if len(flat) != len(self.input_specs):
            raise EqiforgeError(f"expected {len(self.input_specs)} tensor inputs, got {len(flat)}")
        for t, (name, shape, dtype) in zip(flat, self.input_specs):
            if tuple(t.shape) != shape or ops.DTYPE_NAMES.get(t.dtype) != dtype:
                raise EqiforgeError(
                    f"input {name!r} is {ops.DTYPE_NAMES.get(t.dtype, t.dtype)}{list(t.shape)} but the plan was "
                    f"optimized for {dtype}{list(shape)}; shapes are static per optimization: call "
                    f"eqiforge.optimize again with example inputs of the new shape (torch.compile recompiles "
                    f"by itself)")

    @property
    def source(self) -> str:
        """The generated Python code of the lowered plan."""
        return self.graph_module.code
