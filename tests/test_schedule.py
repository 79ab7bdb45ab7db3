"""The schedule is data: the default one is a step per selected rule set, a custom one runs as declared (a
rule set twice, its own back-off), it prints, and the saturation report records it."""
import pytest
import torch

import eqiforge
from eqiforge.egraph import rulesets
from eqiforge.egraph import saturate as sat
from eqiforge.egraph.schedule import BackOff, Limits, Schedule, Step, default_schedule
from eqiforge.errors import EqiforgeError
from test_egraph import chain, rules_dir  # noqa: F401 - rules_dir is a fixture

GROW = '(rule ((= a (Input s))) ((Neg a)) :name "{}")'


def test_optimize_runs_and_reports_the_default_schedule_of_its_backend():
    """First in this file: it forks a saturation, and the tests below run egglog in this process."""
    limits = Limits(iterations=3)
    opt = eqiforge.optimize(lambda a, b: (a @ b) * 2.0, (torch.randn(4, 4), torch.randn(4, 4)), limits=limits)
    ran = opt.report.saturation.schedule
    assert ran == default_schedule(None, limits, layers=("algebra",))
    assert list(ran.rulesets) == opt.report.rulesets
    assert {s.ruleset for s in opt.report.saturation.steps} <= set(ran.rulesets)


def test_default_schedule_is_a_step_per_selected_rule_set_by_layer(rules_dir):
    (rules_dir / "b.egg").write_text(GROW.format("b"))
    (rules_dir / "a.egg").write_text("; layer: kernel\n" + GROW.format("a"))
    (rules_dir / "c.egg").write_text("; purpose\n; layer: algebra\n" + GROW.format("c"))
    assert default_schedule(None, layers=("algebra",)) == Schedule((Step("b"), Step("c")), Limits())
    assert default_schedule(None) == Schedule((Step("a"), Step("b"), Step("c")), Limits())
    assert default_schedule(None, layers=("kernel",)).steps == (Step("a"),)


def test_default_schedule_of_names_keeps_their_order_once_each_with_the_limits_and_back_off():
    limits, back_off = Limits(iterations=3), BackOff(match_limit=7, ban_iterations=1)
    schedule = default_schedule(["scalar", "matmul", "scalar"], limits, back_off=back_off)
    assert schedule == Schedule((Step("scalar", back_off), Step("matmul", back_off)), limits)
    assert schedule.rulesets == ("scalar", "matmul")


def test_the_torch_backends_default_is_every_algebra_rule_set():
    kernel = {n for n, rs in rulesets.available().items() if rs.layer == "kernel"}
    schedule = default_schedule(None, layers=("algebra",))
    assert [s.ruleset for s in schedule.steps] == sorted(set(rulesets.available()) - kernel)
    assert kernel and not kernel & set(schedule.rulesets)


def test_a_rule_set_scheduled_twice_runs_twice_per_iteration():
    schedule = Schedule.of("matmul", "matmul", limits=Limits(iterations=1))
    _, report = sat.run(chain(6), schedule)
    assert [(s.iteration, s.ruleset) for s in report.steps] == [(1, "matmul"), (1, "matmul")]
    assert report.steps[1].enodes > report.steps[0].enodes  # the second step rewrote what the first made
    assert report.stop_reason == "iteration limit (1)" and report.schedule == schedule


def test_names_and_their_default_schedule_run_the_same_steps():
    limits = Limits(iterations=3)
    _, by_names = sat.run(chain(5), ["matmul", "scalar"], limits)
    _, by_schedule = sat.run(chain(5), default_schedule(["matmul", "scalar"], limits))
    assert [(s.iteration, s.ruleset, s.enodes, s.matches) for s in by_names.steps] == \
        [(s.iteration, s.ruleset, s.enodes, s.matches) for s in by_schedule.steps]
    assert by_names.schedule == by_schedule.schedule == Schedule.of("matmul", "scalar", limits=limits)


def test_each_step_backs_off_by_its_own_policy():
    """matmul's step bans it past 5 matches for an iteration, then past twice as many for twice as long
    (it applies 6, 26, 87); scalar's default policy never bans it, so it runs every iteration."""
    steps = (Step("matmul", BackOff(match_limit=5, ban_iterations=1)), Step("scalar"))
    schedule = Schedule(steps, Limits(iterations=6))
    _, report = sat.run(chain(8), schedule)
    assert [(s.iteration, s.ruleset, s.banned) for s in report.steps] == [
        (1, "matmul", True), (1, "scalar", False), (2, "scalar", False), (3, "matmul", True), (3, "scalar", False),
        (4, "scalar", False), (5, "scalar", False), (6, "matmul", True), (6, "scalar", False)]


def test_back_off_policy():
    policy = BackOff(match_limit=10, ban_iterations=2)
    assert policy.ban(10, 0) is None and policy.ban(11, 0) == 2
    assert policy.ban(20, 1) is None and policy.ban(21, 1) == 4  # both double per ban
    assert not policy.runs_capped(enodes=100, limit=1000, predicted_matches=899)
    assert policy.runs_capped(enodes=100, limit=1000, predicted_matches=900)  # may find more than left
    assert policy.runs_capped(enodes=500, limit=1000, predicted_matches=0)  # half the limit
    assert not BackOff(capped_from=1.0).runs_capped(enodes=500, limit=1000, predicted_matches=0)


def test_schedule_prints_its_steps_back_off_and_limits():
    schedule = Schedule.of("matmul", "scalar", limits=Limits(iterations=4, enodes=900, seconds=2))
    assert str(schedule) == (
        "4 iterations of 2 steps (each then analysis to saturation):\n"
        "  1. matmul\n"
        "  2. scalar\n"
        "back-off: banned for 2 iterations past 20000 matches (both double per ban); capped from 50% of the "
        "e-node limit\n"
        "limits: 900 e-nodes, 2 s (killed after 14 s)")
    mixed = Schedule((Step("matmul", BackOff(match_limit=5)), Step("scalar")))
    assert "  1. matmul  (back-off: banned for 2 iterations past 5 matches" in str(mixed)
    assert "\nback-off:" not in str(mixed)


def test_a_schedule_carries_its_limits():
    schedule = Schedule.of("matmul", limits=Limits(enodes=100))
    assert sat.as_schedule(schedule) is schedule and sat.as_schedule(schedule, Limits(enodes=100)) is schedule
    with pytest.raises(EqiforgeError, match="carries its own limits"):
        sat.as_schedule(schedule, Limits())
    assert sat.as_schedule(["matmul"], Limits(enodes=100)) == schedule


@pytest.mark.parametrize("build, message", [
    (lambda: Schedule(("matmul",)), "tuple of Step"),
    (lambda: Schedule([Step("matmul")]), "tuple of Step"),
    (lambda: Schedule((Step("matmul"),), limits={"enodes": 5}), "eqiforge.Limits"),
    (lambda: BackOff(match_limit=-1), "back-off match_limit"),
    (lambda: BackOff(capped_from=2), "capped_from"),
])
def test_malformed_schedules_are_clear_errors(build, message):
    with pytest.raises(EqiforgeError, match=message):
        build()


def test_a_schedule_naming_an_unknown_rule_set_fails_before_saturating():
    with pytest.raises(EqiforgeError, match=r"unknown rule set\(s\) \['nope'\]"):
        sat.saturate(chain(3), Schedule.of("matmul", "nope"))
