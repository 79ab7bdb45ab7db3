"""Every rewrite rule is checked numerically: its case program is saturated with the rule's rule set, the
rule must fire, and every e-node of the e-graph must evaluate to its e-class's value on random tensors of
random shapes (eqiforge/egraph/soundness.py). A rule without a case fails the suite."""
import functools
import random

import pytest

from eqiforge.egraph import rulesets
from eqiforge.egraph.soundness import check_sound, random_inputs, saturate_case
from rule_cases import CASES

ALL_RULES = sorted((name, rs.name) for rs in rulesets.available().values() for name in rs.rule_names)


def test_every_rule_has_a_case():
    missing = [name for name, _ in ALL_RULES if name not in CASES]
    assert not missing, f"rules without a numerical test case in tests/rule_cases.py: {missing}"


@functools.lru_cache(maxsize=None)
def run_case(case, seed):
    """(rule sets, matches per rule, soundness problems) of one case program; shared by its rules."""
    graph, sets = case(random.Random(f"{case.__name__}/{seed}"))
    snap, report = saturate_case(graph, sets)
    return sets, report.matches_per_rule(), check_sound(graph, snap, random_inputs(graph, seed))


@pytest.mark.parametrize("rule,ruleset", ALL_RULES, ids=[r for r, _ in ALL_RULES])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rule_is_sound(rule, ruleset, seed):
    if rule not in CASES:
        pytest.fail(f"no case for {rule}")
    sets, matches, problems = run_case(CASES[rule], seed)
    assert ruleset in sets
    assert matches.get(rule, 0) > 0, f"{rule} did not fire on its case"
    assert not problems, "\n".join(problems[:10])


def test_checker_catches_an_unsound_rule(tmp_path, monkeypatch):
    """The soundness check must fail on a wrong rule: here a - b == b - a."""
    import shutil
    shutil.copy(rulesets.rules_dir() / "schema.egg", tmp_path / "schema.egg")
    (tmp_path / "wrong.egg").write_text('(rewrite (Sub a b) (Sub b a) :name "sub-commutes")')
    monkeypatch.setenv("EQIFORGE_RULES_DIR", str(tmp_path))
    from eqiforge.ir import Graph
    g = Graph()
    a, b = g.input("a", (3, 4), "float32"), g.input("b", (3, 4), "float32")
    g.outputs = [g.add("Sub", (a, b))]
    snap, _ = saturate_case(g, ["wrong"])
    assert check_sound(g, snap, random_inputs(g, 0))


@pytest.mark.parametrize("dtype,fires", [("float32", True), ("float16", False), ("bfloat16", False)])
def test_running_sums_of_column_sums_are_kept_out_of_half_precision(dtype, fires):
    """sum-of-cumsum-over-other-dim reorders a running sum's additions: in float16 a fuzz program's plan
    rounded 10x further from the exact value than eager (program 994049), so the rule skips half precision."""
    from eqiforge.ir import Graph
    g = Graph()
    x = g.input("x", (5, 7), dtype)
    g.outputs = [g.add("Sum", (g.add("Cumsum", (x,), (1,)),), ((0,),))]
    _, report = saturate_case(g, ["synthesized"])
    assert bool(report.matches_per_rule().get("sum-of-cumsum-over-other-dim")) == fires
