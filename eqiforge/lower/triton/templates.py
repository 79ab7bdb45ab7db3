"""Which template renders which kernel spec."""
from __future__ import annotations

from ..kernels import AttentionSpec, GemmSpec, PointwiseSpec, RowReduceSpec
from . import attention, gemm, pointwise, reduce
from .source import UnsupportedSpec

TEMPLATES = {GemmSpec: gemm, PointwiseSpec: pointwise, RowReduceSpec: reduce, AttentionSpec: attention}


def template(spec):
    """The template module for ``spec``: it has ``render``, ``kernels`` and ``kernel_params``."""
    try:
        return TEMPLATES[type(spec)]
    except KeyError:
        raise UnsupportedSpec(f"no Triton template for {type(spec).__name__}") from None
