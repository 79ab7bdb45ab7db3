"""Run ``eqiforge.optimize`` and bundle what an e-graph drawing needs: the saturated e-graph, the price of
every e-node and the extractor's choice (kept on the optimized module as ``opt.extraction``), and the plan.
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import api
from ..egraph.report import SaturationReport
from ..egraph.snapshot import Snapshot
from ..extract.dag import Selection
from ..lower.plan import Plan


@dataclass
class EGraphTrace:
    snapshot: Snapshot
    saturation: SaturationReport
    node_cost: list[float]  # predicted seconds per e-node
    selection: Selection  # the extracted e-node of every e-class the outputs need
    plan: Plan

    @property
    def chosen(self) -> set[int]:
        """The extracted e-nodes."""
        return set(self.selection.choice.values())


def trace_egraph(fn, example_inputs, **options) -> EGraphTrace:
    """``eqiforge.optimize(fn, example_inputs, **options)``, returning its e-graph, choice and plan."""
    opt = api.optimize(fn, example_inputs, **options)
    ex = opt.extraction
    return EGraphTrace(ex.snapshot, opt.report.saturation, ex.node_cost, ex.selection, opt.plan)
