"""Triton templates: kernel specs (``eqiforge.lower.kernels``) rendered to readable Triton source.

    source = render(spec, "gemm0", header="source term, rules, predicted time")
    launch = build(spec, "gemm0")          # render + load: launch(out, *operands) -> out

``render`` returns module text without imports; a module starts with ``PRELUDE`` (torch, triton,
triton.language as tl) and may hold many kernels. Each rendering defines ``@triton.jit {name}_kernel`` (plus
``{name}_reduce_kernel`` for split-K GEMMs) and a host launcher ``{name}(out, *operands)`` that accepts
tensors of any strides whose shapes and dtypes equal the spec's, and returns ``out``.

Modules, one concern each: ``source`` (parameters, signatures, launches, headers, index math),
``epilogue`` (Epi expressions), ``gemm``, ``pointwise``, ``reduce`` (the templates), ``templates`` (spec type
-> template), ``loader`` (files, import, compilation for a GPU target) and ``resources`` (registers, spills
and shared memory of a kernel, for the cost model).

On a CPU the kernels run under the Triton interpreter: ``TRITON_INTERPRET=1`` must be in the environment
before triton is first imported.
"""
from __future__ import annotations

from typing import Callable

from .loader import StaticCompileUnavailable, load_module
from .resources import static_resources
from .source import UnsupportedSpec
from .templates import template

PRELUDE = "import torch\nimport triton\nimport triton.language as tl\n"


def render(spec, name: str, header: str = "", **options) -> str:
    """Triton source (no imports) for ``spec``: ``{name}_kernel`` and the launcher ``{name}``."""
    return template(spec).render(spec, name, header, **options)


def build(spec, name: str, header: str = "", **options) -> Callable:
    """Render ``spec`` into its own module, load it and return the launcher ``name(out, *operands)``."""
    module = load_module(PRELUDE + "\n\n" + render(spec, name, header, **options), f"eqiforge_{name}")
    return getattr(module, name)


__all__ = ["render", "build", "template", "load_module", "static_resources", "PRELUDE", "UnsupportedSpec",
           "StaticCompileUnavailable"]
