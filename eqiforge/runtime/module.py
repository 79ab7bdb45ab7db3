"""The drop-in replacement a user gets back from ``eqiforge.optimize``.

It takes the same arguments as the original program, checks them against the shapes and dtypes the plan
was optimized for (shapes are static per compilation: a mismatch is a clear error, not garbage), runs the
lowered plan and rebuilds the original output structure.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.utils._pytree as pytree

from .. import ops
from ..errors import EqiforgeError
from .torch_plan import compile_function


class OptimizedModule(torch.nn.Module):
    """Callable like the original; ``plan``, ``report`` and ``source`` show what it runs.

    ``runner`` is the lowered plan: a TorchPlan (torch backend) or a TritonPlan (triton backend),
    called with the flat input tensors and returning a tuple of outputs.
    """

    def __init__(self, runner, source: str, input_specs: list[tuple[str, tuple, str]], out_spec, plan, report):
        super().__init__()
        self.runner = runner
        self._source = source
        self.input_specs = input_specs  # (name, shape, dtype) per flattened tensor input
        self.out_spec = out_spec
        self.plan = plan
        self.report = report
        self._entry = self._compile_entry(self._plan_result())
        self._original = None

    def run_original(self, fn, why: str) -> None:
        """Calls run ``fn``, the program as the user wrote it, behind the same input check: the plan is no
        better. ``runner`` and ``source`` still show the plan."""
        self._original = fn
        if isinstance(fn, torch.nn.Module):
            self.original = fn  # a submodule: it moves with .to() and shows in state_dict()
        self._entry = self._compile_entry("original({args})")
        self._check = self._compile_entry("None")
        self.report.runs = f"the original program ({why})"

    def forward(self, *args, **kwargs):
        if kwargs or len(args) != len(self.input_specs):  # not the flat positional tensors: flatten first
            flat = [a for a in pytree.tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
            if len(flat) != len(self.input_specs):
                raise EqiforgeError(f"expected {len(self.input_specs)} tensor inputs, got {len(flat)}")
            if self._original is None:
                return self._entry(*flat)
            self._check(*flat)
            return self._original(*args, **kwargs)
        return self._entry(*args)

    # a drop-in replacement is called every step: skip nn.Module's hook dispatch (it registers no hooks)
    __call__ = forward

    def _plan_result(self) -> str:
        """What the entry returns when it runs the plan: its outputs in the original structure."""
        if self.out_spec is not None and self.out_spec.is_leaf():
            return "runner.forward({args})[0]"
        if self.out_spec is not None:
            return "unflatten(list(runner.forward({args})), out_spec)"
        return "runner.forward({args})"

    def _compile_entry(self, result: str):
        """``entry(*inputs)``: checks every input's type, shape and dtype inline, then returns ``result``
        (the plan's outputs, or the original program's), in one generated function (a per-input helper call
        and loop cost ~10 us per call on a CPU with cold caches, measured by bench/run_cpu.py)."""
        names = [f"x{i}" for i in range(len(self.input_specs))]
        namespace = {"Tensor": torch.Tensor, "runner": self.runner, "mismatch": self._mismatch,
                     "unflatten": pytree.tree_unflatten, "out_spec": self.out_spec,
                     "original": getattr(self, "_original", None)}
        checks = []
        for i, (x, (_, shape, dtype)) in enumerate(zip(names, self.input_specs)):
            namespace[f"shape_{i}"], namespace[f"dtype_{i}"] = torch.Size(shape), ops.DTYPES[dtype]
            checks.append(f"isinstance({x}, Tensor) and {x}.shape == shape_{i} and {x}.dtype == dtype_{i}")
        args = ", ".join(names)
        guard = [f"    if not ({' and '.join(checks)}):", f"        mismatch([{args}])"] if checks else []
        source = "\n".join([f"def entry({args}):", *guard, f"    return {result.format(args=args)}", ""])
        return compile_function(source, "entry", namespace)

    @property
    def source(self) -> str:
        """The generated code of the lowered plan (as it is now: a kernel that failed to build is PyTorch code)."""
        return getattr(self.runner, "source", self._source)

    def export(self, directory, example_inputs=None) -> Path:
        """Write the plan as a standalone deployment: ``plan.py`` (the generated module, importing only torch
        and triton), ``params.pt`` (its parameters) and ``meta.json`` (inputs and how to call it). With
        ``example_inputs``, ``check.pt`` holds them and this module's outputs, to verify the plan elsewhere."""
        params = getattr(self.runner, "params", None)
        if params is None:
            raise EqiforgeError("export needs the triton backend (backend='triton'): the torch backend's plan "
                                "is generated code bound to objects of this process")
        if self.runner.generated.externs:
            raise EqiforgeError(f"the plan calls {sorted(self.runner.generated.externs)} which cannot be "
                                "written as code; it can only run in this process")
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        (out / "plan.py").write_text(self.source)
        torch.save(params, out / "params.pt")
        meta = {"inputs": [{"name": n, "shape": list(s), "dtype": d} for n, s, d in self.input_specs],
                "call": "plan.forward(*inputs, params=params)", "predicted_us": self.plan.predicted_seconds * 1e6,
                "cost_model": self.plan.cost_model}
        (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
        if example_inputs is not None:
            with torch.no_grad():
                outputs = self.runner(*example_inputs)
            torch.save({"inputs": list(example_inputs), "outputs": list(outputs)}, out / "check.pt")
        return out

    def _mismatch(self, flat) -> None:
        for t, (name, shape, dtype) in zip(flat, self.input_specs):
            if not isinstance(t, torch.Tensor):
                raise EqiforgeError(f"input {name!r} is a {type(t).__name__}, expected a tensor {dtype}{list(shape)}")
            if tuple(t.shape) != shape or ops.DTYPE_NAMES.get(t.dtype) != dtype:
                raise EqiforgeError(
                    f"input {name!r} is {ops.DTYPE_NAMES.get(t.dtype, t.dtype)}{list(t.shape)} but the plan was "
                    f"optimized for {dtype}{list(shape)}; shapes are static per optimization: call "
                    f"eqiforge.optimize again with example inputs of the new shape (torch.compile recompiles "
                    f"by itself)")
