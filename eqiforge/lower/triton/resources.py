"""Static resources of a rendered kernel on a GPU target, measured by compiling without a GPU.

Registers per thread, spilled words and shared memory per program decide occupancy and whether a tile
config is feasible at all; they differ between kernel formulations, so the cost model reads them as
features. Compiling one config for Hopper takes about 0.5-5 s (Triton caches the result on disk).

The kernel is specialized the way a launch on contiguous tensors specializes it (Triton turns integer
arguments equal to 1 into constants and marks pointers and multiples of 16 as 16-divisible). That matters:
without it loads are not vectorized and Hopper's software pipelining does not apply.
"""
from __future__ import annotations

from .loader import compile_for_target
from .source import Param
from .templates import template

STATIC_PRELUDE = "import triton\nimport triton.language as tl\n"  # the launcher's torch is not needed


def launch_specialization(params: list[Param]) -> tuple[dict, dict, list[str]]:
    """(signature, constexprs, 16-divisible parameter names) of a launch on contiguous tensors."""
    signature, constexprs, divisible = {}, {}, []
    for p in params:
        if p.is_constexpr or (p.kind == "i32" and p.value == 1):
            signature[p.name], constexprs[p.name] = "constexpr", p.value
            continue
        signature[p.name] = p.kind
        if p.kind.startswith("*") or (p.kind == "i32" and p.value % 16 == 0):
            divisible.append(p.name)
    return signature, constexprs, divisible


def static_resources(spec, name: str, arch: int = 90, **options) -> dict:
    """``{"n_regs", "n_spills", "shared", "num_warps"[, "num_stages"]}`` of ``{name}_kernel`` for sm_``arch``.

    Raises ``StaticCompileUnavailable`` where this Triton cannot target CUDA.
    """
    tpl = template(spec)
    main = tpl.kernels(spec, name, **options)[0]
    signature, constexprs, divisible = launch_specialization(main.params)
    source = STATIC_PRELUDE + "\n\n" + tpl.render(spec, name, "", **options)
    return compile_for_target(source, main.name, signature, constexprs, divisible, main.num_warps, main.num_stages,
                              arch)
