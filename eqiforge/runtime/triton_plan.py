"""Running a triton-backend plan: load its generated module once, keep its parameters on the device, and
run a kernel that fails to build through PyTorch instead.

Triton kernels run on CUDA tensors; on a CPU they run under the Triton interpreter, which must be switched
on (``TRITON_INTERPRET=1``) before triton is first imported. Inputs on a device the kernels cannot use get
a clear error instead of a crash inside Triton. Triton compiles a kernel at its first launch; if that fails,
the module is generated again with that kernel as PyTorch code, the failure is noted (``notes``, shared
with the report) and the call is retried.
"""
from __future__ import annotations

import os
import traceback

import torch

from ..errors import EqiforgeError
from ..lower.triton_module import generate
from ..lower.triton import load_module


class TritonPlan(torch.nn.Module):
    """Calls ``forward(*inputs, params, externs)`` of the plan's generated module; parameters move with the
    inputs."""

    def __init__(self, plan, input_names: list[str], params: dict[str, torch.Tensor], bound=(),
                 title: str = "a program", rulesets=()):
        super().__init__()
        self._source_args = dict(plan=plan, input_names=input_names, bound=list(bound), title=title,
                                 rulesets=list(rulesets))
        self.in_torch: dict[str, str] = {}  # kernels that could not be built -> why
        self.notes: list[str] = []
        self._all_params = params
        self._on_device: dict[torch.device, dict[str, torch.Tensor]] = {}
        self._build()

    def _build(self) -> None:
        self.generated = generate(**self._source_args, in_torch=self.in_torch)
        self.module = load_module(self.generated.source, "eqiforge_plan")
        self.params = {key: self._all_params[name] for key, name in self.generated.param_names.items()}
        self._on_device.clear()
        self.notes[:] = [f"{k} runs in PyTorch: {why}" for k, why in self.generated.fallbacks.items()]

    @property
    def source(self) -> str:
        return self.generated.source

    def forward(self, *inputs):
        device = inputs[0].device if inputs else torch.device("cuda")
        if device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
            raise EqiforgeError(f"the triton backend runs on CUDA tensors, got {device.type} inputs; on a CPU "
                                "set TRITON_INTERPRET=1 before importing triton (slow, for testing), or use "
                                "backend='torch'")
        while True:
            if device not in self._on_device:
                self._on_device[device] = {k: v.to(device) for k, v in self.params.items()}
            try:
                return self.module.forward(*inputs, params=self._on_device[device], externs=self.generated.externs)
            except Exception as err:  # noqa: BLE001 - a kernel that fails to build falls back, anything else re-raises
                failed = self._failed_kernel(err)
                if failed is None:
                    raise
                self.in_torch[failed] = f"could not be built ({type(err).__name__}: {str(err).strip()[:200]})"
                self._build()

    def _failed_kernel(self, err: Exception) -> str | None:
        """The generated kernel whose launch raised ``err`` (None if the error came from elsewhere)."""
        launchers = set(self.generated.kernels) - set(self.in_torch)
        for frame in traceback.extract_tb(err.__traceback__):
            name = frame.name.removesuffix("_kernel")
            if name in launchers:
                return name
        return None
