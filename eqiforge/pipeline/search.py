"""Saturate -> price -> extract, the only place they run: for a whole program, a repeated block and the rest
(pipeline/blocks.py), a shape bucket's re-pricing (shapes/), a plan check's re-extraction and the next-best
plans a measured choice times (pipeline/lowering.py)."""
from __future__ import annotations

from dataclasses import dataclass

from .. import cost
from ..egraph import rulecheck
from ..egraph import saturate as sat
from ..egraph.report import SaturationReport
from ..egraph.snapshot import Snapshot
from ..extract import extract, next_best
from ..extract.dag import Selection
from ..ir import Graph
from .options import Options


@dataclass
class Searched:
    """What one search found: the saturated e-graph, how saturation went, every e-node's price, the choice."""

    snap: Snapshot
    saturation: SaturationReport
    node_cost: list[float]
    selection: Selection


@dataclass(frozen=True)
class Search:
    """How the programs of one ``optimize`` are searched: the rule schedule, the cost model that prices
    e-nodes (and guides the kernel layer), and the options."""

    schedule: sat.Schedule
    model: object
    opts: Options
    guide: sat.Guide

    @classmethod
    def of(cls, opts: Options, model) -> Search:
        """The schedule of the backend's rule layers (the kernel layer's for kernel plans), checked rules."""
        kernels = opts.runtime.entry.kernels
        layers = ("algebra", "kernel") if kernels else ("algebra",)
        rules = None if opts.search.rules is None else list(opts.search.rules)
        schedule = sat.default_schedule(rules, opts.search.limits, layers,
                                        kernel_guide=opts.search.kernel_guide if kernels else None)
        if opts.search.check_rules:
            rulecheck.check_custom_rules(list(schedule.rulesets))
        fold = opts.search.fold_constants
        guide = sat.Guide(lambda snap: model.predict(cost.snapshot_features(snap, fold)),
                          repr((model.name, model.device, fold)))
        return cls(schedule, model, opts, guide)

    @property
    def rulesets(self) -> list[str]:
        return list(self.schedule.rulesets)

    def run(self, graph: Graph, timer, on_step=None) -> Searched:
        """``graph`` saturated, priced and extracted; a graph of leaves only is read out without an e-graph."""
        with timer("saturate"):
            if all(n.op in ("Input", "Param", "Fill") for n in graph.nodes):
                snap, saturation = leaves_only(graph), SaturationReport()
            else:
                snap, saturation = sat.saturate(graph, self.schedule, on_step=on_step,
                                                assume_finite=self.opts.search.assume_finite, guide=self.guide,
                                                use_cache=self.opts.runtime.cache)
        with timer("extract"):
            node_cost = self.prices(snap)
            return Searched(snap, saturation, node_cost, self.extracted(snap, node_cost))

    def prices(self, snap: Snapshot) -> list[float]:
        """Every e-node's predicted seconds."""
        return list(self.model.predict(cost.snapshot_features(snap, self.opts.search.fold_constants)))

    def extracted(self, snap: Snapshot, node_cost) -> Selection:
        """The cheapest choice at ``node_cost`` (an EqiforgeError where no e-node of a root can be chosen)."""
        opts = self.opts
        return extract(snap, node_cost, method=opts.extraction.method, time_limit=opts.extraction.seconds,
                       use_cache=opts.runtime.cache)

    def next_extracted(self, snap: Snapshot, node_cost, found: list[Selection]) -> Selection | None:
        """The cheapest choice that is none of ``found`` (extract/api.py ``next_best``), or None."""
        return next_best(snap, node_cost, found, time_limit=self.opts.extraction.seconds)


def leaves_only(graph: Graph) -> Snapshot:
    """The snapshot of a graph of leaves: one e-class and e-node per live node."""
    live = graph.live_nodes()
    cls = {i: c for c, i in enumerate(live)}
    nodes = [graph.nodes[i] for i in live]
    return Snapshot(node_op=[n.op for n in nodes], node_attrs=[n.attrs for n in nodes],
                    node_children=[() for _ in nodes], node_class=list(range(len(nodes))),
                    class_shape=[n.shape for n in nodes], class_dtype=[n.dtype for n in nodes],
                    roots=[cls[o] for o in graph.outputs], bindings=cls)
