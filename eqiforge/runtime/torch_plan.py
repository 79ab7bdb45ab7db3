"""Running a torch-backend plan: the generated function, with its tensors kept as module buffers.

The buffers make ``.to()``, ``.cuda()`` and ``state_dict()`` see the plan's parameters; after a move (or a
copy, or unpickling) the function is bound again to the module's own tensors. ``forward`` is the plain
generated function (an instance attribute), so calling it costs one Python frame.
"""
from __future__ import annotations

import hashlib
import importlib
import linecache

import torch

from ..errors import EqiforgeError
from ..lower.torch_code import TorchCode


def compile_function(source: str, name: str, namespace: dict):
    """Define ``name`` from ``source`` in ``namespace``; the source is registered with linecache so that
    tracebacks and debuggers show the generated lines."""
    filename = f"<eqiforge {hashlib.sha1(source.encode()).hexdigest()[:12]}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - our own generated code
    return namespace[name]


class _GeneratedForward(torch.nn.Module):
    """A module whose ``forward`` is a generated function (an instance attribute: one Python frame per call,
    no nn.Module dispatch), which the subclass's ``_bind`` makes and which is made again after a move, a copy
    or unpickling."""

    def _apply(self, fn, recurse=True):
        moved = super()._apply(fn, recurse)
        self._bind()
        return moved

    def __getstate__(self):  # the generated function is rebuilt from the source, bound to the copy's tensors
        state = super().__getstate__() if hasattr(super(), "__getstate__") else self.__dict__.copy()
        return {k: v for k, v in state.items() if k != "forward"}

    def __setstate__(self, state):
        super().__setstate__(state)
        self._bind()


class TorchPlan(_GeneratedForward):
    """``forward(*inputs)`` returns the plan's outputs as a tuple."""

    def __init__(self, code: TorchCode):
        super().__init__()
        self.source = code.source
        self._helpers = code.helpers
        for name, tensor in code.constants.items():
            self.register_buffer(name, tensor)
        self._bind()

    def _bind(self) -> None:
        namespace = {"torch": torch, **self._helpers, **dict(self.named_buffers())}
        self.forward = compile_function(self.source, "plan", namespace)


def standalone_source(source: str, helpers: dict, constants) -> str:
    """The plan's code as a module of its own (what ``export`` writes for the torch and inductor backends):
    ``bind(params)`` returns the plan function with its tensors bound, ``forward(*inputs, params=params)``
    calls it. It imports torch and the torch-only helpers the code calls (eqiforge.ops.native), never egglog;
    a helper that is not importable by name (an extern call of this process) cannot be written."""
    imports = []
    for name, value in sorted(helpers.items()):
        module, qualname = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
        if not (module and qualname and getattr(importlib.import_module(module), qualname, None) is value):
            raise EqiforgeError(f"the plan calls {name} ({value!r}), which cannot be written as code; it can only "
                                "run in this process")
        imports.append(f"from {module} import {qualname}" + ("" if qualname == name else f" as {name}"))
    lines = source.rstrip("\n").splitlines()
    opening = next((k for k, line in enumerate(lines) if not line.startswith("#")), len(lines))
    header, code = lines[:opening], lines[opening:]  # the provenance comments stay at the top
    body = [f"    {name} = params[{name!r}]" for name in constants]
    body += [f"    {line}" if line else "" for line in code] + ["    return plan"]
    return "\n".join([
        *header, '"""An EqiForge plan as PyTorch code: torch.compile(bind(params)) is what its inductor backend',
        'runs; forward(*inputs, params=params) runs it as it is."""', "import torch", *imports, "", "",
        "def bind(params):", '    """The plan function, reading the given parameters and folded constants."""', *body,
        "", "", "def forward(*inputs, params):", "    return bind(params)(*inputs)", ""])


class BucketedPlan(_GeneratedForward):
    """Plans of one program for ranges of its symbolic size (buckets, from the values extraction priced):
    ``forward`` reads the size from the inputs (``size_source``, a statement binding ``size``) and runs the
    plan of its range; a bucket's range runs from the geometric mean of its value and the one below it.
    ``forward`` is generated too: a loop over the buckets took ~10 us more per call than its bucket's plan
    alone (a 0.25 ms plan on a CPU), more than the 5% a plan for every size may lose to a specialised one."""

    def __init__(self, buckets: list[tuple[int, TorchPlan]], size_source: str, arguments: list[str]):
        super().__init__()
        values = [v for v, _ in buckets]
        self.plans = torch.nn.ModuleList([p for _, p in buckets])
        self.bounds = [round((a * b) ** 0.5) for a, b in zip(values, values[1:])]  # bucket k: size < bounds[k]
        self._size_source, self._arguments = size_source, arguments
        ranges = [f"size < {b}" for b in self.bounds] + [f"size >= {self.bounds[-1]}" if self.bounds else "any size"]
        self.source = "\n".join(f"# bucket {k}: {r} ({size_source})\n{p.source}"
                                for k, (r, p) in enumerate(zip(ranges, self.plans)))
        self._bind()

    def _bind(self) -> None:
        args = ", ".join(self._arguments)
        lines = [f"def dispatch({args}):", f"    {self._size_source}"]
        for k, bound in enumerate(self.bounds):
            lines += [f"    if size < {bound}:", f"        return plan_{k}({args})"]
        lines.append(f"    return plan_{len(self.bounds)}({args})")
        namespace = {f"plan_{k}": plan.forward for k, plan in enumerate(self.plans)}
        self.forward = compile_function("\n".join(lines) + "\n", "dispatch", namespace)
