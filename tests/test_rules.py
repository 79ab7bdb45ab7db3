"""Every rewrite rule is checked numerically: its case program is saturated with the rule's rule set, the
rule must fire, and every e-node of the e-graph must evaluate to its e-class's value on random tensors of
random shapes (tests/rulecheck.py). A rule without a case fails the suite."""
import random

import pytest
import torch

from eqiforge.egraph import rulesets
from rule_cases import CASES
from rulecheck import check_sound, saturate_in_process

ALL_RULES = sorted((name, rs.name) for rs in rulesets.available().values() for name in rs.rule_names)


def random_inputs(graph, seed):
    gen = torch.Generator().manual_seed(seed)
    values = {}
    for n in graph.nodes:
        if n.op == "Input":
            t = torch.randn(n.shape, generator=gen)
            values[n.attrs[0]] = t.abs() + 0.5 if n.attrs[0].startswith("pos") else t
    return values


def test_every_rule_has_a_case():
    missing = [name for name, _ in ALL_RULES if name not in CASES]
    assert not missing, f"rules without a numerical test case in tests/rule_cases.py: {missing}"


@pytest.mark.parametrize("rule,ruleset", ALL_RULES, ids=[r for r, _ in ALL_RULES])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rule_is_sound(rule, ruleset, seed):
    if rule not in CASES:
        pytest.fail(f"no case for {rule}")
    graph, sets = CASES[rule](random.Random(f"{rule}/{seed}"))
    assert ruleset in sets
    snap, report = saturate_in_process(graph, sets)
    assert report.matches_per_rule().get(rule, 0) > 0, f"{rule} did not fire on its case"
    problems = check_sound(graph, snap, random_inputs(graph, seed))
    assert not problems, "\n".join(problems[:10])
