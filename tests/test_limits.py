"""Limits that hold (issue 10): runaway programs stay near the e-node limit and within the time limits
through saturation and extraction; a killed child's replay stops before the step that ran away and obeys the
limits; extraction says when a limit cut it short."""
import multiprocessing
import time

import pytest
import torch

import eqiforge
from eqiforge.egraph import saturate as sat
from eqiforge.egraph.report import Stop, StopReason
from eqiforge.extract import extract, greedy, ilp
from eqiforge.extract.dag import check_choice
from eqiforge.ir import Graph
from test_egraph import chain, rules_dir  # noqa: F401 - rules_dir is a fixture
from test_extract import make_snapshot, random_snapshot

WHY = StopReason(Stop.KILLED, "why")

#: the acceptance limits, smaller than the defaults (50k e-nodes, 8 s, extraction 3 s) to keep tests fast
LIMITS = eqiforge.Limits(enodes=5_000, seconds=2.0)
EXTRACT_SECONDS = 1.0
SLACK = 3.0  # seconds: forking the child, reading the snapshot out, pricing it


def matmul_chain(x, *ws):
    """x @ w0 @ w1 ... : associativity gives a Catalan number of bracketings."""
    for w in ws:
        x = x @ w
    return x


def sums_of_products(*xs):
    """A balanced sum of (a + b) @ (c + d): the distributive rule set's add-interchange runs away on it (one
    step: 279k matches at 16k e-nodes, giving 291k e-nodes)."""
    terms = [(xs[k] + xs[k + 1]) @ (xs[k + 2] + xs[k + 3]) for k in range(0, len(xs), 4)]
    while len(terms) > 1:
        terms = [terms[i] + terms[i + 1] for i in range(0, len(terms), 2)]
    return terms[0]


def square_inputs(n):
    torch.manual_seed(0)
    return tuple(torch.randn(8, 8) for _ in range(n))


@pytest.mark.parametrize("fn, inputs", [pytest.param(matmul_chain, square_inputs(201), marks=pytest.mark.slow),
                                        (sums_of_products, square_inputs(32))],
                         ids=["200-matmul-chain", "add-interchange"])
def test_runaway_programs_stay_within_the_limits(fn, inputs):
    # share_blocks=False: sums_of_products repeats a small block, which alone saturates; the limits are the point
    opt = eqiforge.optimize(fn, inputs, limits=LIMITS, extract_seconds=EXTRACT_SECONDS, share_blocks=False)
    report, seconds = opt.report, opt.report.stage_seconds
    assert report.enodes <= 2 * LIMITS.enodes, report.stop_reason
    assert seconds["saturate"] + seconds["extract"] <= 1.5 * (LIMITS.seconds + EXTRACT_SECONDS) + SLACK
    assert report.stop_reason.startswith(("e-node limit", "time limit"))


def balanced_sums_of_products(k=8):
    """The IR of ``sums_of_products`` with k products."""
    g = Graph()
    terms = []
    for i in range(k):
        a, b, c, d = (g.input(f"{n}{i}", (8, 8), "float32") for n in "abcd")
        terms.append(g.add("MatMul", (g.add("Add", (a, b)), g.add("Add", (c, d)))))
    while len(terms) > 1:
        terms = [g.add("Add", (terms[i], terms[i + 1])) for i in range(0, len(terms), 2)]
    g.outputs = [terms[0]]
    return g


def test_a_rule_that_would_blow_past_the_limit_is_skipped_inside_its_step():
    """egglog's back-off scheduler drops add-interchange's matches (more than the e-nodes left) inside the step;
    the stop reason says the e-node limit stopped it and names the rule."""
    limits = sat.Limits(enodes=50_000, seconds=60)
    _, report = sat.run(balanced_sums_of_products(), ["distributive"], limits)
    capped = [s for s in report.steps if "add-interchange" in s.skipped]
    assert capped and capped[0].skipped["add-interchange"] > capped[0].match_cap > 0
    assert report.enodes < limits.enodes
    assert report.stop_reason.startswith("e-node limit (50000): skipped add-interchange (")
    assert report.stop_reason.kind.name == "ENODES"


def test_capped_saturation_is_deterministic():
    a, ra = sat.saturate(balanced_sums_of_products(), ["distributive", "matmul"], LIMITS, use_cache=False)
    b, rb = sat.saturate(balanced_sums_of_products(), ["distributive", "matmul"], LIMITS, use_cache=False)
    assert any(s.match_cap for s in ra.steps)
    assert (a.node_op, a.node_children, a.node_class, a.roots) == (b.node_op, b.node_children, b.node_class, b.roots)
    assert ra.stop_reason == rb.stop_reason


def test_no_step_starts_at_the_e_node_limit():
    _, report = sat.run(chain(6), ["matmul"], sat.Limits(enodes=3))
    assert report.steps == [] and report.stop_reason == "e-node limit (3)"


# ------------------------------------------------------------------------------------------------ replay
def test_replay_stops_before_the_step_that_ran_away():
    _, full = sat.run(chain(8), ["matmul", "scalar"], sat.Limits())
    assert len(full.steps) > 3
    _, report = sat._replay(chain(8), sat.Schedule.of("matmul", "scalar"), 3, WHY, True, None, time.perf_counter())
    assert [(s.ruleset, s.enodes) for s in report.steps] == [(s.ruleset, s.enodes) for s in full.steps[:3]]
    assert report.stop_reason == "why; continued with the 3 steps completed before"


def test_replay_obeys_the_e_node_limit():
    _, full = sat.run(chain(8), ["matmul"], sat.Limits())
    limit = full.steps[1].enodes  # reached after the second step
    schedule = sat.Schedule.of("matmul", limits=sat.Limits(enodes=limit))
    _, report = sat._replay(chain(8), schedule, len(full.steps), WHY, True, None, time.perf_counter())
    assert len(report.steps) == 2
    assert report.stop_reason == (f"why; replayed 2 of the {len(full.steps)} steps completed before, then stopped "
                                  f"at the e-node limit ({limit})")


def test_replay_obeys_the_time_limit(monkeypatch):
    monkeypatch.setattr(sat, "predicted_seconds", lambda last, enodes: 0.0 if last is None else 100.0)
    schedule = sat.Schedule.of("matmul", limits=sat.Limits(seconds=50))
    _, report = sat._replay(chain(8), schedule, 5, WHY, True, None, time.perf_counter())
    assert len(report.steps) == 1 and "then stopped at the time limit (50 s)" in report.stop_reason


def test_killed_child_keeps_the_steps_before_the_runaway_and_stays_in_time(rules_dir):
    (rules_dir / "grow.egg").write_text('(rule ((= a (Input s))) ((Neg (Neg a))) :name "grow")')
    (rules_dir / "explode.egg").write_text(  # a 4-way join over 120 Negs: far too slow for the limit
        '(rule ((= a (Neg s)) (= b (Neg t)) (= c (Neg u)) (= d (Neg v)))'
        ' ((Add (Add a b) (Add c d))) :name "explode")')
    g = Graph()
    xs = [g.input(f"x{i}", (2,), "float32") for i in range(60)]
    g.outputs = [g.add("Neg", (x,)) for x in xs]
    limits = sat.Limits(seconds=0.5, hard_seconds=1.5)
    started = time.perf_counter()
    snap, report = sat.saturate(g, ["grow", "explode"], limits)
    assert time.perf_counter() - started <= limits.kill_after + limits.seconds + SLACK
    assert [s.ruleset for s in report.steps] == ["grow"]
    assert report.stop_reason.startswith("hard time limit (1.5 s): a step ran away")
    assert report.stop_reason.endswith("continued with the 1 steps completed before")
    assert snap.num_nodes == 3 * 60  # the inputs, the program's Negs and grow's Neg(Neg x)


# ------------------------------------------------------------------------------------------------ extraction
def test_ilp_stopped_by_its_time_limit_says_so(monkeypatch):
    snap, costs = random_snapshot(3, num_classes=30, max_nodes=3)
    real = ilp.milp

    def timed_out(*args, **kwargs):  # the optimum, as HiGHS reports a solution it could not prove in time
        result = real(*args, **kwargs)
        result.status, result.message = 1, "Time limit reached. (HiGHS Status 13: model_status is Time limit)"
        return result
    monkeypatch.setattr(ilp, "milp", timed_out)
    sel = extract(snap, costs, method="ilp")
    assert sel.method == "ilp (time limit: not proven optimal, within 0.0% of the optimum)"  # HiGHS's gap


def test_ilp_time_limit_counts_greedy_and_the_model(monkeypatch):
    """The solver gets what is left of the time limit once greedy has run and the model is built."""
    snap, costs = random_snapshot(1, num_classes=1000, max_nodes=7, back_edge=0.05, leaf_prob=0.02, num_roots=10)
    real, given = ilp.milp, []

    def recording(*args, options, **kwargs):
        given.append((options["time_limit"], time.perf_counter()))
        return real(*args, options=options, **kwargs)
    monkeypatch.setattr(ilp, "milp", recording)
    started = time.perf_counter()
    extract(snap, costs, method="ilp", time_limit=2.0)
    (solver_limit, called), = given
    assert solver_limit <= 2.0 - (called - started) + 1e-3


def deep_chain(n):
    """Class i reads class i-1 (and i-2): every term holds all classes below, so set work is quadratic."""
    return make_snapshot([[((), 1.0)]] + [[((i - 1,), 1.0), ((i - 1, max(i - 2, 0)), 0.5)] for i in range(1, n)],
                         roots=(n - 1,))


def test_greedy_set_work_is_bounded_and_the_choice_stays_valid(monkeypatch):
    snap, costs = deep_chain(2000)
    _, none = greedy.greedy_choice(snap, costs)
    cut, tree_priced = greedy.greedy_choice(snap, costs, set_work=10_000)
    assert none == 0 and 0 < tree_priced < snap.num_nodes
    check_choice(snap, cut)  # complete and acyclic
    monkeypatch.setattr(greedy, "SET_WORK", 10_000)
    sel = extract(snap, costs, method="greedy")
    assert sel.method == f"greedy (work limit: {tree_priced} of {snap.num_nodes} e-nodes priced by tree cost)"
    assert sel.choice == {c: cut[c] for c in sel.choice}


def test_a_saturation_child_whose_parent_is_gone_ends_instead_of_blocking_on_its_pipe():
    """A sweep's worker killed mid-saturation left its saturation child blocked on a full pipe that the child
    itself held open, with gigabytes, for the rest of the run (a size-4 synthesis: 3 GB for 43 minutes). The
    child closes the parent's end: once nobody reads, its sends fail and it ends."""
    g = Graph()
    g.outputs = [g.add("Neg", (g.input(f"x{i}", (2,), "float32"),)) for i in range(3000)]  # a 200 KB snapshot
    schedule = sat.Schedule.of("matmul")
    sat._setup(g, schedule, True, False)  # the rules loaded before the fork, as saturate does
    ctx = multiprocessing.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=sat._child, args=(g, schedule, None, True, None, send, recv), daemon=True)
    proc.start()
    send.close()
    recv.close()  # the parent is gone: nobody reads
    proc.join(timeout=60)
    alive = proc.is_alive()
    proc.kill()
    assert not alive and proc.exitcode != 0
