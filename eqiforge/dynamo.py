"""``torch.compile(model, backend="eqiforge")``: the registered torch.compile backend.

Dynamo hands over an FX graph; AOTAutograd decomposes it to core ATen and splits forward from backward.
The forward graph (parameters arrive as inputs, so nothing is folded) goes through the EqiForge pipeline.
The backward graph, when there is one, runs unchanged: training stays correct, only the forward is
optimized. A graph EqiForge cannot take (dynamic shapes, say) runs as Dynamo gave it, with a warning.
"""
from __future__ import annotations

import warnings

import torch
from torch._decomp import core_aten_decompositions
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import make_boxed_func
from torch._subclasses.fake_tensor import unset_fake_temporarily

from . import api, frontend
from .errors import EqiforgeError
from .report import StageTimer

#: reports of the graphs compiled in this process, newest last
REPORTS: list = []


def _run_unchanged(gm, _example_inputs):
    """The graph as AOTAutograd built it (the backward, and graphs EqiForge cannot take)."""
    return make_boxed_func(gm.forward)


def _real_inputs(example_inputs) -> list:
    """Real tensors shaped like Dynamo's (fake) example inputs, for the plan check: normal floats, zero
    integers (valid indices whatever they index)."""
    return [torch.randn(t.shape, dtype=t.dtype, device=t.device) if t.is_floating_point()
            else torch.zeros(t.shape, dtype=t.dtype, device=t.device) for t in example_inputs]


def _forward_compiler(opts: api.Options):
    def compile_forward(gm, example_inputs):
        names = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
        timer = StageTimer()
        try:
            with timer("capture"):
                graph = frontend.mark_causal_masks(frontend.fx_to_ir(gm, names, {}))
            with unset_fake_temporarily():  # the pipeline computes with real tensors (folding, the plan check)
                optimized = api.optimize_graph(graph, names, None, opts, timer,
                                               examples=_real_inputs(example_inputs), title="a torch.compile graph")
        except EqiforgeError as err:
            warnings.warn(f"eqiforge: running this graph unoptimized: {err}", stacklevel=2)
            return _run_unchanged(gm, example_inputs)
        REPORTS.append(optimized.report)
        return make_boxed_func(optimized.runner.forward)
    return compile_forward


def eqiforge_backend(gm, example_inputs, **options):
    """torch.compile backend entry point; ``options`` are those of ``eqiforge.optimize``."""
    opts = api.Options(**api.normalise_options({**options, "fold_constants": False}))
    backend = aot_autograd(fw_compiler=_forward_compiler(opts), bw_compiler=_run_unchanged,
                           decompositions=core_aten_decompositions())
    return backend(gm, example_inputs)
