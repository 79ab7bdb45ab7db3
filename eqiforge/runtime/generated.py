"""Running a generated (triton backend) plan: load its module once, keep its parameters on the device.

Triton kernels run on CUDA tensors; on a CPU they run under the Triton interpreter, which must be switched
on (``TRITON_INTERPRET=1``) before triton is first imported. Inputs on a device the kernels cannot use get
a clear error instead of a crash inside Triton.
"""
from __future__ import annotations

import os

import torch

from ..errors import EqiforgeError
from ..lower.codegen import GeneratedModule
from ..lower.triton import load_module


class GeneratedPlan(torch.nn.Module):
    """Calls ``forward(*inputs, params, externs)`` of a generated module; parameters move with the inputs."""

    def __init__(self, generated: GeneratedModule, params: dict[str, torch.Tensor], module_name: str):
        super().__init__()
        self.generated = generated
        self.module = load_module(generated.source, module_name)
        self.params = {key: params[name] for key, name in generated.param_names.items()}
        self._on_device: dict[torch.device, dict[str, torch.Tensor]] = {}

    def forward(self, *inputs):
        device = inputs[0].device if inputs else torch.device("cuda")
        if device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
            raise EqiforgeError(f"the triton backend runs on CUDA tensors, got {device.type} inputs; on a CPU "
                                "set TRITON_INTERPRET=1 before importing triton (slow, for testing), or use "
                                "backend='torch'")
        if device not in self._on_device:
            self._on_device[device] = {k: v.to(device) for k, v in self.params.items()}
        return self.module.forward(*inputs, params=self._on_device[device], externs=self.generated.externs)
