"""Extracted choices to runnable plans: lowered by the backend's entry, checked against the captured program
(pipeline/validate.py), extracted again without the e-nodes a failing plan used, and the next-best distinct
plans a measured choice times beside the best."""
from __future__ import annotations

import math
import os

from ..errors import EqiforgeError
from ..extract.dag import Selection
from ..lower.attention_notes import unfused_attention
from ..lower.plan import Plan, build_plan, price
from ..lower.torch_code import to_torch_code
from ..lower.writer import provenance
from ..runtime.torch_plan import TorchPlan
from . import validate
from .search import Search


class Lowering:
    """Choices of one saturated e-graph (``snap``, of ``graph``) to plans: ``bound`` maps graph inputs that are
    not call arguments to their tensors; ``title`` names the program in generated code."""

    def __init__(self, snap, graph, input_names, bound, search: Search, title: str):
        self.snap, self.graph, self.input_names, self.bound = snap, graph, input_names, bound
        self.search, self.opts, self.model, self.title = search, search.opts, search.model, title

    def lower(self, selection):
        """(plan, runner, source, notes) of ``selection``."""
        plan = build_plan(self.snap, selection.choice, self.graph, self.model, self.opts.search.fold_constants)
        plan.graph.verify()
        return (plan, *self.opts.runtime.entry.lower(plan, self.input_names, self.bound, self.title,
                                                     self.search.rulesets))

    def plan_check(self, examples) -> validate.PlanCheck:
        interpreted = self.opts.runtime.entry.kernels and os.environ.get("TRITON_INTERPRET") == "1"
        return validate.PlanCheck(self.graph, self.input_names, examples, self.bound, self.opts.search.assume_finite,
                                  slow_plans="the Triton interpreter" if interpreted else "")

    def checked(self, selection, plan, runner, source, notes, node_cost, examples):
        """The first of: this plan, plans extracted again without the e-nodes where a failing plan left the
        program's values, the captured program itself; that passes the check. A failure of all is an error.
        Returns the one that passed, what the check found (words) and whether it intervened (not the first)."""
        check = self.plan_check(examples)
        history = []
        problems = validate.check_encoding(self.snap, self.graph)
        if problems:
            history.append(f"the e-graph does not hold the program as encoded ({len(problems)} nodes; first: "
                           f"{problems[0]})")
        costs = list(node_cost)
        for attempt in range(1, validate.MAX_EXCLUSION_ROUNDS + 2 if not problems else 1):
            verdict = check(runner)
            if verdict.ok:
                return selection, plan, runner, source, notes, "; ".join(history + [verdict.describe()]), \
                    bool(history)
            history.append(f"plan {attempt}: {verdict.describe()}")
            culprits = check.culprits(plan, verdict.feeds, self.snap.bindings) if verdict.feeds else []
            enodes = {selection.choice[plan.eclass[p]] for p in culprits if p in plan.eclass}
            enodes = sorted(e for e in enodes if self.snap.node_op[e] not in ("Input", "Param"))
            if not enodes:
                break  # the plan graph computes the program: its lowering differs
            history.append(f"excluded {len(enodes)} e-nodes "
                           f"({', '.join(sorted({self.snap.node_op[e] for e in enodes}))}) and extracted again")
            for e in enodes:
                costs[e] = math.inf
            try:
                selection = self.search.extracted(self.snap, costs)
            except EqiforgeError as err:
                history.append(f"no plan without them ({err})")
                break
            plan, runner, source, notes = self.lower(selection)
        return self._captured_program(check, history)

    def _captured_program(self, check, history):
        """The program as captured, unoptimized, on the torch backend (what a failing plan falls back to)."""
        plan = Plan(self.graph, price(self.graph, self.model), self.model.name)
        header = provenance(plan, self.title, []) + ["the captured program, unoptimized: the plan failed its check"]
        runner = TorchPlan(to_torch_code(self.graph, self.input_names, self.bound, header))
        verdict = check(runner)
        if not verdict.ok:
            raise EqiforgeError(f"the captured program itself fails the plan check ({verdict.describe()}); "
                                f"before: {'; '.join(history)}")
        selection = Selection({}, 0.0, "none (the captured program: the plan failed its check)", 0.0)
        text = "; ".join(history + [f"fell back to the captured program, unoptimized: {verdict.describe()}"])
        return selection, plan, runner, runner.source, [], text, True


class NextPlans:
    """The next-best distinct plans of an extraction (the ILP with a no-good cut per plan found), lowered and
    checked like the best one: the measured choice's further candidates."""

    def __init__(self, lowering: Lowering, first, first_source: str, node_cost, examples):
        self.lowering, self.first, self.first_source = lowering, first, first_source
        self.node_cost, self.examples = node_cost, examples

    def plans(self, count: int, ceiling: float) -> list[tuple]:
        """Up to ``count`` (selection, plan, runner, source), cheapest first, each predicted to take at most
        ``ceiling`` seconds, with code of its own, passing the plan check (with ``validate``)."""
        lowering, found, sources, plans = self.lowering, [self.first], {self.first_source}, []
        check = None
        for _ in range(3 * count):  # a plan whose code repeats one found (another view e-node) is cut too
            if len(plans) == count:
                break
            selection = lowering.search.next_extracted(lowering.snap, self.node_cost, found)
            if selection is None or selection.cost > ceiling:
                break
            found.append(selection)
            plan, runner, source, _ = lowering.lower(selection)
            if source in sources:
                continue
            sources.add(source)
            if lowering.opts.runtime.validate:
                check = check or validate.PlanCheck(lowering.graph, lowering.input_names, self.examples,
                                                    lowering.bound, lowering.opts.search.assume_finite)
                if not check(runner).ok:
                    continue
            plans.append((selection, plan, runner, source))
        return plans


def attention_notes(snap, plan) -> list[str]:
    """Why each softmax(S) V of the plan is not one attention kernel (lower/attention_notes.py)."""
    attention = {c for c, op in zip(snap.node_class, snap.node_op) if op == "AttentionK"}

    def kernel_found(node: int) -> bool:  # the e-graph held an attention kernel for this plan node
        return plan.eclass.get(node) in attention
    return unfused_attention(plan.graph, kernel_found)
