"""The measured choice (eqiforge/decide/choice.py, eqiforge/decide/timing.py): candidates timed by the protocol
on a clock the test controls (costs and noise known), the decision rule, and optimize() choosing by measurement:
a plan made slower on purpose is not chosen, a decision is read back from the cache, records are written as
documented."""
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import eqiforge
from eqiforge.decide import choice, load, timing
from eqiforge.runtime import backends
from eqiforge.decide import program
from eqiforge.runtime.torch_plan import TorchPlan


class FakeMachine:
    """A clock and candidates whose calls cost known times, with multiplicative noise and a drift shared by
    all (a busy neighbour): what a per-round comparison must see through."""

    def __init__(self, costs: dict[str, float], noise: float = 0.0, seed: int = 0):
        self.now, self.costs, self.noise, self.rng = 0.0, costs, noise, random.Random(seed)
        self.calls = {name: 0 for name in costs}

    def clock(self) -> float:
        return self.now

    def candidate(self, name: str):
        def call():
            self.calls[name] += 1
            drift = 1.0 + 0.5 * (self.calls[name] % 7 == 0)  # every seventh call of each: the machine is busy
            self.now += self.costs[name] * drift * (1.0 + self.rng.uniform(-self.noise, self.noise))
        return call

    def timings(self, budget_s: float = 1.0, **kw) -> timing.Timings:
        return timing.time_candidates({n: self.candidate(n) for n in self.costs}, budget_s, clock=self.clock, **kw)


def decided(costs: dict[str, float], noise: float, seed: int, min_gain: float = 0.005) -> str:
    t = FakeMachine(costs, noise, seed).timings()
    return choice.decide(t, list(costs), min_gain)[0]


@pytest.mark.parametrize("seed", range(20))
def test_a_candidate_made_slower_on_purpose_is_never_chosen(seed):
    assert decided({"program": 1e-3, "plan": 1.3e-3}, noise=0.2, seed=seed) == "program"
    assert decided({"program": 1e-3, "plan": 0.5e-3, "slowed": 0.6e-3}, noise=0.2, seed=seed) == "plan"


@pytest.mark.parametrize("seed", range(20))
def test_equal_candidates_pick_the_program(seed):
    assert decided({"program": 1e-3, "plan": 1e-3, "other": 1e-3}, noise=0.2, seed=seed) == "program"


@pytest.mark.parametrize("seed", range(10))
def test_a_candidate_a_few_percent_faster_is_not_settled_as_a_tie(seed):
    machine = FakeMachine({"program": 1e-3, "plan": 0.96e-3}, noise=0.03, seed=seed)
    t = machine.timings(budget_s=10.0, settled=lambda t: choice.settled(t, 0.005))
    assert choice.decide(t, ["program", "plan"], 0.005)[0] == "plan"


def raced(costs: dict[str, float], noise: float, seed: int) -> tuple[timing.Timings, FakeMachine]:
    """The candidates timed as choose() times them: stopping once settled, the beaten ones leaving early."""
    machine = FakeMachine(costs, noise, seed)
    return machine.timings(budget_s=10.0, settled=lambda t: choice.settled(t, 0.005),
                           beaten=lambda t: choice.beaten(t, 0.005)), machine


def test_a_candidate_beaten_beyond_doubt_leaves_the_rounds_and_is_not_chosen():
    longer = 0
    for seed in range(10):
        t, machine = raced({"program": 1e-3, "plan": 1e-3, "slow": 4e-3}, noise=0.2, seed=seed)
        assert len(t.seconds["slow"]) == 2 * timing.MIN_ROUNDS <= len(t.seconds["plan"]) == t.rounds
        assert machine.calls["slow"] == 1 + 2 * 2 * timing.MIN_ROUNDS
        assert choice.decide(t, ["program", "plan", "slow"], 0.005)[0] != "slow"
        longer += t.rounds > 2 * timing.MIN_ROUNDS
    assert longer >= 5  # the tie of the other two takes more rounds, without the slow one


def test_rounds_stop_once_the_winner_is_within_alike_of_the_rest():
    costs = {"program": 1e-3, "plan": 0.985e-3, "plan 2": 1e-3, "plan 3": 0.99e-3}  # within 1.5%, noise +-5%
    rounds = []
    for seed in range(10):
        t, _ = raced(costs, noise=0.05, seed=seed)
        winner = choice.decide(t, list(costs), 0.005)[0]
        assert costs[winner] <= (1 + choice.ALIKE) * min(costs.values())
        rounds.append(t.rounds)
    assert sorted(rounds)[5] <= 30  # without the rule: 100 (the budget fits 2,500), 1.2 s of a 1.6 ms program


def test_a_candidate_six_percent_faster_under_ten_percent_noise_is_still_found():
    wins = [choice.decide(raced({"program": 1e-3, "plan": 0.94e-3}, 0.1, seed)[0], ["program", "plan"], 0.005)[0]
            for seed in range(20)]
    assert wins.count("plan") >= 17  # stopping within ALIKE may keep the program where noise hid the gain


def test_a_clearly_faster_candidate_wins_and_the_simpler_of_two_equal_ones():
    assert decided({"program": 1e-3, "plan": 0.7e-3}, noise=0.05, seed=0) == "plan"
    assert decided({"program": 1e-3, "plan": 0.7e-3, "later": 0.7e-3}, noise=0.05, seed=0) == "plan"


def test_the_protocol_times_each_call_after_its_own_untimed_call_within_the_budget():
    machine = FakeMachine({"a": 1e-3, "b": 2e-3})
    t = machine.timings(budget_s=0.05)
    assert t.rounds >= timing.MIN_ROUNDS and set(t.seconds) == {"a", "b"}
    assert machine.calls["a"] == 1 + 2 * len(t.seconds["a"])  # the first call, then two per visit
    assert machine.now <= timing.HARD_LIMIT * 0.05 + 2 * 3e-3 * 1.5  # stopped at the budget, give a round


def test_several_timed_calls_per_visit_count_as_their_median():
    """A visit of ``calls=3`` is one untimed call and three timed ones; the busy seventh call of each
    candidate is outvoted by the other two of its visit."""
    machine = FakeMachine({"a": 1e-3})
    t = machine.timings(budget_s=float("inf"), min_rounds=6, max_rounds=6, calls=3)
    assert machine.calls["a"] == 1 + 6 * 4 and t.seconds["a"] == [pytest.approx(1e-3)] * 6


def test_the_benchmarks_time_by_the_same_loop_with_inputs_in_turn():
    """bench/measure.time_round_robin is this loop (issue 43: one timing loop): ``repeats`` rounds after the
    warm-up, every call on the next input set."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    import measure
    seen = []
    samples = measure.time_round_robin({"a": seen.append, "b": seen.append}, [(1,), (2,), (3,)], 4, warmup=1)
    assert [len(v) for v in samples.values()] == [4, 4]
    assert seen == [1, 2, 3] * (len(seen) // 3) + [1, 2, 3][:len(seen) % 3] and len(seen) == 2 + 2 + 4 * 2 * 2
    with pytest.raises(RuntimeError, match="b"):
        measure.time_round_robin({"a": seen.append, "b": lambda x: 1 / 0}, [(1,)], 2, warmup=0)


def test_a_failing_candidate_is_dropped_with_its_reason():
    machine = FakeMachine({"program": 1e-3})

    def broken():
        raise RuntimeError("no kernel for this")
    t = timing.time_candidates({"program": machine.candidate("program"), "plan": broken}, 0.01, clock=machine.clock)
    assert t.failed == {"plan": "RuntimeError: no kernel for this"} and list(t.seconds) == ["program"]


def test_a_budget_too_small_for_a_decision_runs_the_predicted_best():
    machine = FakeMachine({"program": 0.2, "plan": 0.1})
    candidates = [choice.Candidate("program", machine.candidate("program"), 0.2),
                  choice.Candidate("plan", machine.candidate("plan"), 0.15)]
    original = timing.time_candidates
    try:
        timing.time_candidates = lambda c, b, **kw: original(c, b, clock=machine.clock, **kw)
        decision = choice.choose(candidates, "always", budget_s=0.5, min_gain=0.005, use_cache=False)
    finally:
        timing.time_candidates = original
    assert decision.winner == "plan" and not decision.medians
    assert decision.why.startswith("too few rounds to decide: ") and "rounds fit the budget of 0.5 s" in decision.why
    assert choice.choose(candidates, "always", budget_s=0, min_gain=0.005).why == "a budget of 0 s"


def test_auto_times_only_where_the_prediction_does_not_decide(monkeypatch):
    monkeypatch.setattr(timing, "time_candidates", lambda *a, **k: pytest.fail("timed a decisive prediction"))
    candidates = [choice.Candidate("program", lambda: None, 1e-3), choice.Candidate("plan", lambda: None, 1e-4)]
    decision = choice.choose(candidates, "auto", 1.0, 0.005)
    assert decision.winner == "plan" and decision.why == "plan predicted 2x or more faster than the rest"


# ------------------------------------------------------------------------------------------ optimize()

def chain():
    a, b, v = torch.randn(256, 256), torch.randn(256, 256), torch.randn(256, 1)
    return (lambda a, b, v: a @ b @ v), (a, b, v)


def test_optimize_measures_and_a_plan_slowed_on_purpose_runs_the_original(monkeypatch, tmp_path):
    """The chain's plan is predicted 20x faster; made to run the program twice more per call (slower by
    construction, whatever else loads the machine), the measurement must see it."""
    monkeypatch.setenv("EQIFORGE_CACHE_DIR", str(tmp_path))
    fn, inputs = chain()
    real = TorchPlan

    class Slowed(real):
        def _bind(self):
            super()._bind()
            forward = self.forward
            self.forward = lambda *x: (fn(*x), fn(*x), forward(*x))[2]
    monkeypatch.setattr(backends, "TorchPlan", Slowed)  # what the torch backend lowers a plan to
    opt = eqiforge.optimize(fn, inputs, backend="torch", measure="always", measure_seconds=1.0)
    assert opt.report.runs.startswith("the original program (measured: no candidate was faster")
    assert opt.report.measured.startswith("program ") and opt.report.measured.endswith("runs: program")
    assert "measured" in opt.report.summary()
    torch.testing.assert_close(opt(*inputs), fn(*inputs))
    # the program by choice, not for want of a plan
    assert opt.calls == {"plan": 0, "inductor": 0, "original": 1, "fallback": 0}


def test_a_second_optimization_reads_the_decision_from_the_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("EQIFORGE_CACHE_DIR", str(tmp_path))
    fn, inputs = chain()
    first = eqiforge.optimize(fn, inputs, backend="torch", measure="always", measure_seconds=1.0)
    assert first.report.runs == "the plan" and "rounds); runs: plan" in first.report.measured
    # the timed calls were EqiForge's, not the user's
    assert first.calls == {"plan": 0, "inductor": 0, "original": 0, "fallback": 0}
    monkeypatch.setattr(timing, "time_candidates", lambda *a, **k: pytest.fail("measured again"))
    again = eqiforge.optimize(fn, inputs, backend="torch", measure="always", measure_seconds=1.0)
    assert again.report.runs == "the plan" and "read from EqiForge's cache); runs: plan" in again.report.measured
    [line] = (tmp_path / "measure" / choice.RECORDS).read_text().splitlines()  # one measurement, one record
    record = json.loads(line)
    assert set(record) == {"version", "time", "program", "device", "machine", "runs", "rounds", "candidates"}
    assert [c["name"] for c in record["candidates"]] == ["program", "plan"] and record["runs"] == "plan"
    for c in record["candidates"]:
        assert c["predicted_s"] > 0 and c["measured_s"] > 0 and c["failed"] is None
    assert record["machine"]["torch"] == torch.__version__
    monkeypatch.undo()


def test_measure_never_is_the_predicted_choice_every_time(monkeypatch):
    monkeypatch.setattr(timing, "time_candidates", lambda *a, **k: pytest.fail("timed with measure='never'"))
    fn, inputs = chain()
    plans = {eqiforge.optimize(fn, inputs, measure="never").source for _ in range(2)}
    assert len(plans) == 1
    assert eqiforge.optimize(fn, inputs, measure="never").report.measured == ""


class Held:
    """A container the program could change in place, as a transformers cache (registered as a pytree)."""

    def __init__(self, tensor):
        self.tensor = tensor


torch.utils._pytree.register_pytree_node(Held, lambda h: ([h.tensor], None), lambda leaves, _: Held(*leaves))


def test_inputs_in_a_container_the_program_may_change_are_not_timed(monkeypatch):
    monkeypatch.setattr(timing, "time_candidates", lambda *a, **k: pytest.fail("timed a call on a held object"))
    x = torch.randn(64, 64)
    opt = eqiforge.optimize(lambda h: (h.tensor @ h.tensor.T).sum(-1), (Held(x),), measure="always")
    held = "its inputs hold a Held, which the program may change in place"
    assert opt.report.measured == f"not measured ({held}); runs: the predicted choice; Inductor not tried: {held}"
    torch.testing.assert_close(opt(Held(x)), (x @ x.T).sum(-1), rtol=1e-5, atol=1e-4)  # sums reassociated


@pytest.mark.parametrize("options,message", [
    ({"measure": "sometimes"}, "unknown measure mode 'sometimes'"),
    ({"measure_seconds": -1.0}, "measure_seconds is a time budget"),
])
def test_bad_measure_options_are_clear_errors(options, message):
    fn, inputs = chain()
    with pytest.raises(eqiforge.EqiforgeError, match=message):
        eqiforge.optimize(fn, inputs, **options)


@pytest.mark.parametrize("measure", ["always", "auto"])
def test_the_torch_compile_backend_times_both_compiled_graphs(measure, monkeypatch, tmp_path):
    """Under torch.compile the candidates are the graph and the plan, both compiled by Inductor: the plan of a
    chain (an algebraic win) runs; made to run the program twice more per call, the graph runs. Under "auto"
    too, with every priced candidate "decisive": the graph as Inductor compiles it is not priced."""
    from eqiforge import dynamo
    monkeypatch.setenv("EQIFORGE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(choice, "DECISIVE", 0.0)
    fn, inputs = chain()
    options = {"measure": measure, "measure_seconds": 1.0, "cache": False}  # the second run must time again
    reports, served = [], []
    for slowed in (False, True):
        if slowed:
            real = dynamo._plan_callable

            class Slowed:
                _boxed_call = True  # AOTAutograd passes the inputs as one list, as to the plan

                def __init__(self, *args):
                    self.plan = real(*args)

                def __call__(self, args):
                    fn(*inputs), fn(*inputs)  # slower by construction, whatever the machine's load
                    return self.plan(args)
            monkeypatch.setattr(dynamo, "_plan_callable", Slowed)
        torch._dynamo.reset()
        before, calls = len(dynamo.REPORTS), dynamo.call_counts()
        with torch.no_grad():
            torch.testing.assert_close(torch.compile(fn, backend="eqiforge", options=options)(*inputs), fn(*inputs),
                                       rtol=1e-4, atol=1e-3)
        [report] = dynamo.REPORTS[before:]
        reports.append(report)
        served.append({k: v - calls[k] for k, v in dynamo.call_counts().items() if v != calls[k]})
    planned, slowed = reports
    assert served == [{"plan": 1}, {"inductor": 1}]  # the slowed plan lost: Inductor's graph served, by choice
    assert planned.runs == "the plan" and planned.measured.startswith("graph ") and "runs: plan" in planned.measured
    assert slowed.runs.startswith("the original graph, compiled by Inductor (measured: no candidate was faster")
    assert slowed.measured.endswith("runs: graph")


# ------------------------------------------- optimize()'s default backend: torch code or Inductor, measured

def fusable():
    """Elementwise passes over 1M floats then a row sum: Inductor fuses them into one loop, several times
    faster than eager's five passes on any CPU; EqiForge's plan is torch calls, at eager's speed."""
    x = torch.randn(1024, 1024)
    return (lambda x: ((x * 2 + 1).relu() * 3 - x).sum(-1)), (x,)


def test_auto_backend_runs_what_inductor_compiled_where_measured_faster(monkeypatch, tmp_path):
    monkeypatch.setenv("EQIFORGE_CACHE_DIR", str(tmp_path))
    fn, inputs = fusable()
    with torch.no_grad():
        # a budget a loaded machine can fit rounds in (CI under xdist: first calls 0.8 s, rounds 0.2 s); rounds
        # stop long before it where the machine is quiet (the compiled program is 7x faster: ordered in 10)
        opt = eqiforge.optimize(fn, inputs, measure="always", measure_seconds=4.0)
        torch.testing.assert_close(opt(*inputs), fn(*inputs), rtol=1e-5, atol=1e-4)
    races = opt.report.measured.split("; then ")
    assert races[0].startswith("program ") and "program under Inductor" in races[0]  # one race with the program
    assert races[-1].endswith(("runs: plan under Inductor", "runs: program under Inductor"))
    assert "compiled by Inductor (measured: faster than" in opt.report.runs
    records = [json.loads(line) for line in (tmp_path / "measure" / choice.RECORDS).read_text().splitlines()]
    names = [[c["name"] for c in r["candidates"]] for r in records]
    assert names[0][0] == "program" and names[0][-1] == "program under Inductor"
    if len(races) == 2:  # a plan beat the program and its compile: then the plan against its own compile
        assert races[0].endswith("runs: plan") and names[1] == ["plan", "plan under Inductor"]
    else:  # the program's compile won the first race: no second one
        assert races[0].endswith("runs: program under Inductor") and len(records) == 1
    assert all(c["predicted_s"] is None for r in records for c in r["candidates"] if "Inductor" in c["name"])


def test_auto_backend_runs_the_program_under_inductor_where_it_beats_the_plan_however_compiled(monkeypatch, tmp_path):
    """The program compiled by Inductor races the program and the plan (its fusion can beat the plan
    however compiled): here the plan, as torch code and compiled, made to run three times per call, and the
    program's compile standing in for one that computes the chain in its fast order; the program's compile
    runs, decided in one race. Under "auto" a plan predicted 2x faster than the program skips it."""
    from eqiforge.runtime import inductor_plan
    monkeypatch.setenv("EQIFORGE_CACHE_DIR", str(tmp_path))
    fn, inputs = chain()
    real_plan, real_compile = TorchPlan, inductor_plan.inductor_compiled

    class Slowed(real_plan):
        def _bind(self):
            super()._bind()
            forward = self.forward
            self.forward = lambda *x: (forward(*x), forward(*x), forward(*x))[2]

    def slowed(*args, **kwargs):
        run, graph = real_compile(*args, **kwargs)
        return (lambda *x: (run(*x), run(*x), run(*x))[2]), graph
    monkeypatch.setattr(backends, "TorchPlan", Slowed)
    monkeypatch.setattr(inductor_plan, "inductor_compiled", slowed)
    monkeypatch.setattr(program, "compiled_original", lambda fn: lambda a, b, v: a @ (b @ v))
    with torch.no_grad():
        opt = eqiforge.optimize(fn, inputs, measure="always", measure_seconds=2.0)
        torch.testing.assert_close(opt(*inputs), fn(*inputs), rtol=1e-4, atol=1e-3)
    assert "; then " not in opt.report.measured and opt.report.measured.startswith("program ")
    assert "plan " in opt.report.measured and opt.report.measured.endswith("runs: program under Inductor")
    assert opt.report.runs.startswith("the original program compiled by Inductor (measured: faster than")
    assert opt.calls == {"plan": 0, "inductor": 1, "original": 0, "fallback": 0}  # Inductor's, by choice
    with torch.no_grad():
        auto = eqiforge.optimize(fn, inputs, measure="auto", measure_seconds=1.0)
    assert "program under Inductor" not in auto.report.measured and "plan under Inductor" in auto.report.measured


def test_a_program_compile_that_fails_is_dropped_in_the_first_race_and_not_tried_again(monkeypatch, tmp_path):
    monkeypatch.setenv("EQIFORGE_CACHE_DIR", str(tmp_path))
    tries = []

    def broken(*args):
        tries.append(args)
        raise RuntimeError("Inductor could not compile this")
    monkeypatch.setattr(program, "compiled_original", lambda fn: broken)
    fn, inputs = fusable()
    with torch.no_grad():
        opt = eqiforge.optimize(fn, inputs, measure="always", measure_seconds=4.0)
        torch.testing.assert_close(opt(*inputs), fn(*inputs), rtol=1e-5, atol=1e-4)
    first = opt.report.measured.split("; then ")[0]
    assert "program under Inductor failed (RuntimeError: Inductor could not compile this)" in first
    assert len(tries) == 1 and opt.report.measured.count("program under Inductor") == 1


def test_auto_backend_does_not_time_inductor_on_a_program_of_library_calls_only(monkeypatch, tmp_path):
    """Attention and products only: Inductor would make the same library calls, with nothing between them to
    fuse, so "auto" does not compile and time the program under it (the report says so); "always" does."""
    from eqiforge import frontend
    from eqiforge.cost.as_written import library_calls_only
    monkeypatch.setenv("EQIFORGE_CACHE_DIR", str(tmp_path))
    q, k, v = (torch.randn(2, 4, 128, 32) for _ in range(3))
    attention = lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v) @ v.transpose(-1, -2)  # noqa: E731
    assert library_calls_only(frontend.capture(attention, (q, k, v), {}).written)
    assert not library_calls_only(frontend.capture(lambda q: (q @ q.transpose(-1, -2)).relu(), (q,), {}).written)
    timed = {}
    for mode in ("auto", "always"):
        with torch.no_grad():
            opt = eqiforge.optimize(attention, (q, k, v), measure=mode, measure_seconds=1.0, cache=False)
            torch.testing.assert_close(opt(q, k, v), attention(q, k, v), rtol=1e-4, atol=1e-4)
        records = [json.loads(line) for line in (tmp_path / "measure" / choice.RECORDS).read_text().splitlines()]
        timed[mode] = {c["name"] for r in records for c in r["candidates"] if c.get("measured_s")}
        (tmp_path / "measure" / choice.RECORDS).unlink()
        if mode == "auto" and opt.report.measured.split("; ")[0].endswith("runs: program"):
            assert opt.report.measured.endswith("the program under Inductor not timed: it is only library calls "
                                                "(products, convolutions, attention)")
    assert "program" in timed["auto"] and "program under Inductor" not in timed["auto"]
    assert "program under Inductor" in timed["always"]


def test_auto_backend_keeps_the_torch_code_where_the_compiled_plan_is_slower_and_caches_it(monkeypatch, tmp_path):
    """The chain's plan (an algebraic win, chosen untimed under "auto"), its Inductor compile made to run the
    program twice more per call: the torch code runs; a second optimization times and compiles nothing."""
    from eqiforge.runtime import inductor_plan
    monkeypatch.setenv("EQIFORGE_CACHE_DIR", str(tmp_path))
    fn, inputs = chain()
    real = inductor_plan.inductor_compiled

    def slowed(*args, **kwargs):
        run, graph = real(*args, **kwargs)
        return (lambda *x: (fn(*inputs), fn(*inputs), run(*x))[2]), graph
    monkeypatch.setattr(inductor_plan, "inductor_compiled", slowed)
    with torch.no_grad():
        opt = eqiforge.optimize(fn, inputs, measure="auto", measure_seconds=1.0)
    assert opt.report.measured.startswith("not measured (plan predicted 2x or more faster than the rest); runs: "
                                          "plan; then plan ")
    assert opt.report.measured.endswith("runs: plan") and opt.report.runs == "the plan"
    assert type(opt.runner) is TorchPlan
    monkeypatch.setattr(timing, "time_candidates", lambda *a, **k: pytest.fail("measured again"))
    monkeypatch.setattr(inductor_plan, "inductor_compiled", lambda *a, **k: pytest.fail("compiled again"))
    with torch.no_grad():
        again = eqiforge.optimize(fn, inputs, measure="auto", measure_seconds=1.0)
    assert again.report.measured.endswith("read from EqiForge's cache); runs: plan") and again.report.runs == "the plan"
    torch.testing.assert_close(again(*inputs), fn(*inputs), rtol=1e-4, atol=1e-3)


def test_auto_backend_does_not_try_inductor_where_autograd_records_the_call(monkeypatch):
    monkeypatch.setattr(program, "compiled_original", lambda fn: pytest.fail("compiled a program that trains"))
    fn, (x,) = fusable()
    x.requires_grad_(True)
    opt = eqiforge.optimize(fn, (x,), measure="always", measure_seconds=0.2)
    assert opt.report.measured.endswith("Inductor not tried: an input requires grad (optimize under "
                                        "torch.no_grad() for inference)")
    opt(x).sum().backward()
    torch.testing.assert_close(x.grad, torch.func.grad(lambda x: fn(x).sum())(x.detach()))


def test_a_plan_compiled_for_inference_runs_its_torch_code_where_autograd_records(monkeypatch):
    """A plan chosen under Inductor records no autograd: called on an input that requires grad, its torch code
    runs (and gradients flow); called without, Inductor's graph."""
    from eqiforge.runtime import inductor_plan
    fn, inputs = chain()
    with torch.no_grad():
        opt = eqiforge.optimize(fn, inputs, backend="torch", measure="never")
    real, compiled_calls = inductor_plan.inductor_compiled, []

    def counted(*args, **kwargs):
        run, graph = real(*args, **kwargs)
        return (lambda *x: (compiled_calls.append(1), run(*x))[1]), graph
    monkeypatch.setattr(inductor_plan, "inductor_compiled", counted)
    plan = inductor_plan.InductorPlan.of(opt.runner)
    plan.compile(inputs, inference_only=True)
    assert plan.graph is not None
    torch.testing.assert_close(plan(*inputs)[0], fn(*inputs), rtol=1e-4, atol=1e-3)
    assert len(compiled_calls) == 1
    a = inputs[0].clone().requires_grad_(True)
    out = plan(a, *inputs[1:])[0]
    assert out.requires_grad and len(compiled_calls) == 1
    out.sum().backward()
    torch.testing.assert_close(a.grad, torch.func.grad(lambda a: fn(a, *inputs[1:]).sum())(inputs[0]),
                               rtol=1e-4, atol=1e-2)


# ------------------------------------------------------------- next-best plans: more candidates, measured

def shared_factor():
    a, b, c = torch.randn(256, 256), torch.randn(256, 256), torch.randn(256, 1)
    return (lambda a, b, c: a * c + b * c), (a, b, c)


def test_next_best_plans_are_timed_beside_the_best_and_recorded(monkeypatch, tmp_path):
    """With a band wide enough for them, the next-best distinct plans (each checked) are candidates too;
    whichever runs computes the program."""
    monkeypatch.setenv("EQIFORGE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(program, "NEXT_PLANS_BAND", 100.0)
    fn, inputs = shared_factor()
    with torch.no_grad():
        opt = eqiforge.optimize(fn, inputs, backend="torch", measure="always", measure_seconds=0.5)
        torch.testing.assert_close(opt(*inputs), fn(*inputs))
    assert "plan 2 " in opt.report.measured
    [record] = [json.loads(line) for line in (tmp_path / "measure" / choice.RECORDS).read_text().splitlines()]
    names = [c["name"] for c in record["candidates"]]
    assert names[:3] == ["program", "plan", "plan 2"] and names[3:] in ([], ["plan 3"])
    predicted = [c["predicted_s"] for c in record["candidates"][1:]]
    assert predicted == sorted(predicted) and all(c["measured_s"] > 0 for c in record["candidates"])


def test_a_next_best_plan_measured_faster_becomes_the_plan(monkeypatch):
    monkeypatch.setattr(program, "NEXT_PLANS_BAND", 100.0)
    monkeypatch.setattr(choice, "decide", lambda timings, order, gain: ("plan 2", "measured faster (a test)"))
    fn, inputs = shared_factor()
    best = eqiforge.optimize(fn, inputs, backend="torch", measure="never")
    with torch.no_grad():
        opt = eqiforge.optimize(fn, inputs, backend="torch", measure="always", measure_seconds=1.0, cache=False)
    assert opt.report.runs == "the plan" and opt.report.measured.endswith("runs: plan 2")
    assert opt.source != best.source and opt.plan.predicted_seconds > best.plan.predicted_seconds
    assert opt.report.predicted_after == opt.plan.predicted_seconds
    assert opt.extraction.selection.method == "ilp (next best)"
    torch.testing.assert_close(opt(*inputs), fn(*inputs))


# ------------------------------------------------------------------------------------------ a busy machine

def loaded(cores: float):
    """decide/load.OtherLoad reporting ``cores`` of other processes' work, whatever this machine's load."""
    class Reported(load.OtherLoad):
        def __exit__(self, *exc):
            self.cores = cores
            return False
    return Reported


def test_a_decision_taken_on_a_busy_machine_is_provisional_and_the_quiet_one_replaces_it(monkeypatch, tmp_path):
    """Under load the plan's calls were stalled and the program won: that decision is not cached, the next one,
    on a quiet machine, measures again and the plan wins, and that one is cached (the synthetic clock)."""
    monkeypatch.setenv("EQIFORGE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(load, "DISTURBING_CORES", 0.25)
    spare = max(0, (os.cpu_count() or 1) - torch.get_num_threads())
    machine = FakeMachine({"program": 1e-3, "plan": 1.6e-3}, noise=0.05)  # the plan stalled by the load
    real = timing.time_candidates
    monkeypatch.setattr(timing, "time_candidates", lambda c, b, **kw: real(c, b, clock=machine.clock, **kw))
    candidates = [choice.Candidate("program", machine.candidate("program"), 1e-3, "program"),
                  choice.Candidate("plan", machine.candidate("plan"), 0.7e-3, "plan")]

    def decide():
        return choice.choose(candidates, "always", 1.0, 0.005, key="a busy machine")
    monkeypatch.setattr(load, "OtherLoad", loaded(spare + 1.0))
    busy = decide()
    assert busy.winner == "program" and busy.provisional and "provisional" in busy.describe()
    machine.costs["plan"] = 0.7e-3  # the load ends
    monkeypatch.setattr(load, "OtherLoad", loaded(0.0))
    calls = dict(machine.calls)
    quiet = decide()
    assert machine.calls["plan"] > calls["plan"] and not quiet.from_cache  # measured again, not read back
    assert quiet.winner == "plan" and not quiet.provisional and "provisional" not in quiet.describe()
    assert decide().from_cache and decide().winner == "plan"


def test_other_processes_using_the_cores_make_a_measured_decision_provisional(monkeypatch, tmp_path):
    """Real load: busy processes beside a measured choice (one more than the cores PyTorch's threads leave
    free, and the rest of this machine's cores) are seen, and the decision says so."""
    monkeypatch.setenv("EQIFORGE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(load, "DISTURBING_CORES", 0.25)
    def spin():  # 10 ms of this process's CPU a call: the rounds last long enough for /proc/stat's ticks
        started = time.perf_counter()
        while time.perf_counter() - started < 0.01:
            pass
    candidates = [choice.Candidate("program", spin, None, "spin"), choice.Candidate("plan", spin, None, "spin too")]
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range((os.cpu_count() or 1) + 1)]
    try:
        time.sleep(0.2)
        decision = choice.choose(candidates, "always", 0.5, 0.005, key="real load")
    finally:
        for p in spinners:
            p.kill()
            p.wait()
    assert decision.provisional and decision.other_cores > 1.0, decision.describe()


def test_optimize_under_load_reports_a_provisional_choice_and_the_next_optimization_measures_again(monkeypatch,
                                                                                                      tmp_path):
    """The report flags a decision timed under load; it is not cached, so the next optimize() (the load gone)
    times the candidates again and caches that decision, which a third reads back."""
    monkeypatch.setenv("EQIFORGE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(load, "DISTURBING_CORES", 0.25)
    fn, inputs = chain()
    spare = max(0, (os.cpu_count() or 1) - torch.get_num_threads())

    def optimized():
        return eqiforge.optimize(fn, inputs, backend="torch", measure="always", measure_seconds=1.0)
    monkeypatch.setattr(load, "OtherLoad", loaded(spare + 1.0))
    busy = optimized()
    assert busy.report.provisional and "provisional: other processes kept" in busy.report.measured
    assert not (tmp_path / "measure").exists() or not list((tmp_path / "measure").glob("*.json"))
    monkeypatch.setattr(load, "OtherLoad", loaded(0.0))
    quiet = optimized()
    assert not quiet.report.provisional and not quiet.report.from_cache
    assert "read from EqiForge's cache" not in quiet.report.measured
    again = optimized()
    assert again.report.from_cache and "read from EqiForge's cache" in again.report.measured
    torch.testing.assert_close(quiet(*inputs), fn(*inputs), rtol=1e-4, atol=1e-3)  # a @ (b @ v): reassociated


# ------------------------------------------------------------------------------- the measuring stage's budget

def test_a_stage_inside_another_is_its_own(monkeypatch):
    """StageTimer: seconds spent in a stage opened inside another count for the inner one only."""
    from eqiforge.pipeline import report
    now = [0.0]
    monkeypatch.setattr(report.time, "perf_counter", lambda: now[0])
    timer = report.StageTimer()
    with timer("measure"):
        now[0] += 1.0
        with timer("compile"):
            now[0] += 5.0
        now[0] += 0.5
        with timer("compile"):
            now[0] += 2.0
    with timer("measure"):
        now[0] += 0.25
    assert timer.seconds == {"measure": 1.75, "compile": 7.0}


def test_the_builds_a_measured_choice_starts_are_the_compile_stage_not_the_measuring(monkeypatch, tmp_path):
    """The program compiled by Inductor, a candidate, is built before it is timed: that build (here a stand-in
    taking 0.4 s on its first call) is reported as the "compile" stage, outside the measuring's budget."""
    monkeypatch.setenv("EQIFORGE_CACHE_DIR", str(tmp_path))
    fn, inputs = fusable()

    def slow_to_build(program):
        built = []

        def run(*args):
            if not built:
                time.sleep(0.4)
                built.append(True)
            return program(*args)
        return run
    monkeypatch.setattr(program, "compiled_original", slow_to_build)
    with torch.no_grad():
        opt = eqiforge.optimize(fn, inputs, measure="always", measure_seconds=0.4)
    stages = opt.report.stage_seconds
    assert "program under Inductor" in opt.report.measured and stages["compile"] >= 0.4, stages
