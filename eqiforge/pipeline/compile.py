"""The pipeline after capture, written once: price for a device -> search (saturate, price, extract; once per
repeated block) -> lower -> check -> report -> the drop-in module. ``optimize()``, the torch.compile backend
and plans for every size all call ``compile_graph``.

    IR graph --search--> snapshot, prices, choice --lowering--> Plan, runner --check--> OptimizedModule
"""
from __future__ import annotations

import os

import torch

from .. import cost
from ..cost.as_written import written_seconds
from ..extract import Extraction
from ..lower.plan import price
from ..runtime import OptimizedModule, backends
from . import blocks
from .lowering import Lowering, NextPlans, attention_notes
from .options import Options
from .report import Report, StageTimer
from .search import Search


def compile_graph(graph, input_names, out_spec, opts: Options, timer: StageTimer, bound=None, examples=None,
                  title: str = "a program", written=(), next_plans: bool = False) -> OptimizedModule:
    """``graph`` (inputs ``input_names``; ``bound`` maps graph inputs that are not call arguments to their
    tensors) optimized: the module runs the checked plan, its report says what happened. ``examples`` are the
    call's inputs the plan is checked on (None: random ones); ``written`` the program's calls as written (their
    price is the report's); with ``next_plans`` the module's ``next_plans`` gives the next-best plans."""
    graph.verify()
    model = cost.get_cost_model(opts.extraction.cost_model, priced_device(opts, graph, examples, bound),
                                kernels=opts.runtime.entry.kernels)
    search = Search.of(opts, model)
    with _progress(opts.runtime.progress) as on_step:
        shared = blocks.optimize_once(graph, search, timer, on_step) if opts.search.share_blocks else None
        found = shared.result if shared and shared.result else search.run(graph, timer, on_step)
    lowering = Lowering(found.snap, graph, input_names, bound, search, title)
    with timer("lower"):
        selection, (plan, runner, source, notes) = found.selection, lowering.lower(found.selection)
    validation, intervened = "off (validate=False)", False
    if opts.runtime.validate:
        with timer("validate"):
            selection, plan, runner, source, notes, validation, intervened = lowering.checked(
                selection, plan, runner, source, notes, found.node_cost, examples)
    report = Report(
        rulesets=search.rulesets, saturation=found.saturation, stage_seconds=timer.seconds,
        predicted_before=sum(price(graph, model).values()), predicted_after=plan.predicted_seconds,
        predicted_written=written_seconds(written, model.device) if written else 0.0,
        extraction_method=selection.method, extraction_cost=selection.cost, cost_model=model.name,
        ops_before=graph.op_counts(), ops_after=plan.graph.op_counts(), folded_constants=plan.folded,
        lowering_notes=notes, attention_notes=attention_notes(found.snap, plan), validation=validation,
        plan_check_intervened=intervened, repeated_blocks=shared.note if shared else "off (share_blocks=False)",
        repeated_blocks_found=shared.found if shared else None)
    specs = [(name, graph.nodes[i].shape, graph.nodes[i].dtype) for name in input_names
             for i in [next(i for i, n in enumerate(graph.nodes) if n.op == "Input" and n.attrs[0] == name)]]
    optimized = OptimizedModule(runner, source, specs, out_spec, plan, report)
    optimized.extraction = Extraction(found.snap, list(found.node_cost), selection)
    optimized.cost_model, optimized.search = model, search  # shape buckets price and extract again with them
    optimized.shared_blocks = bool(shared and shared.result)
    if next_plans and selection.choice and not optimized.shared_blocks:  # a block's plan, repeated: no others
        optimized.next_plans = NextPlans(lowering, selection, source, found.node_cost, examples)
    return optimized


def default_device(backend: str, tensors) -> str | None:
    """The device a plan is priced for when none is named: this CPU, as measured (cost/calibrate.py), for a
    torch-backend plan of CPU tensors; the cost model's default GPU otherwise (a triton plan runs on one)."""
    cpu_priced = backends.resolve(backend)[0].cpu_priced
    if cpu_priced and all(t.device.type == "cpu" for t in tensors if isinstance(t, torch.Tensor)):
        return "cpu"
    return None


def priced_device(opts: Options, graph, examples=None, bound=None):
    """The device a plan of ``graph`` is priced for: the option, else $EQIFORGE_DEVICE, else the default."""
    return opts.extraction.device or os.environ.get("EQIFORGE_DEVICE") or default_device(
        opts.runtime.backend, [*(examples or []), *(bound or {}).values(), *graph.params.values()])


def program_title(fn) -> str:
    """How generated code names the program: a function's qualified name (past any enclosing function's),
    a module's class."""
    name = getattr(fn, "__qualname__", None) if not isinstance(fn, torch.nn.Module) else None
    return name.split("<locals>.")[-1] if name else type(fn).__name__


class _progress:
    """A tqdm bar over saturation steps when asked for, else a no-op callback."""

    def __init__(self, enabled: bool):
        self.enabled, self.bar = enabled, None

    def __enter__(self):
        if not self.enabled:
            return None
        from tqdm import tqdm
        self.bar = tqdm(desc="saturating", unit="step", leave=False, disable=None)  # off when not a terminal

        def on_step(s):
            self.bar.set_postfix_str(f"iter {s.iteration} {s.ruleset}: {s.enodes} e-nodes")
            self.bar.update(1)
        return on_step

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.close()
        return False
