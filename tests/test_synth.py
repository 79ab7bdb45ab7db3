"""Rule synthesis (eqiforge/synth/) and rule checking (eqiforge/egraph/rulecheck.py): typed enumeration,
fingerprints, derivability by the shipped rules, verification, the written rules as egglog, and verdicts."""
import pytest
import torch

from eqiforge import cli
from eqiforge.egraph import rulecheck, rulesets
from eqiforge.egraph.soundness import check_rules_on
from eqiforge.ir import Graph
from eqiforge.synth import derive, minimize, run, shards
from eqiforge.sweep import Task
from eqiforge.synth.candidates import Candidate, enumerate_candidates
from eqiforge.synth.egg import rule_name, rule_text
from eqiforge.synth.generalize import generalized
from eqiforge.synth.terms import Term, Var, applications, parse_vars, symbols_of
from eqiforge.synth.values import Evaluator, fingerprint, to_graph
from eqiforge.synth.verify import SHAPES, TOLERANCE, check_values, symbolic, verify

A, B, W = Var("A", (("i",), ("j",))), Var("B", (("i",), ("j",))), Var("W", (("j",), ("k",)))
V, R, S = Var("V", (("k",), ("l",))), Var("r", ((), ("j",))), Var("s", None)
VARS = [A, B, W, V, R, S]
SYMBOLS = ["i", "j", "k", "l"]


def term(op, *kids, attrs=None):
    """The term of ``op`` on ``kids`` (the one typing when ``attrs`` is None, else the one with ``attrs``)."""
    options = applications(op, kids, SYMBOLS)
    found = [(a, s) for a, s in options if attrs is None or a == attrs]
    assert len(found) == 1, f"{op}{attrs}: {options}"
    return Term(op, kids, found[0][0], found[0][1], 1 + sum(k.size for k in kids))


def test_terms_type_symbolically_as_the_op_table_does():
    assert applications("MatMul", (A, W), SYMBOLS) == [((), (("i",), ("k",)))]
    assert applications("MatMul", (W, A), SYMBOLS) == []  # k != i: no product
    assert applications("Add", (A, W), SYMBOLS) == [] and applications("Mul", (A, S), SYMBOLS) == [((), A.shape)]
    assert applications("Mul", (S, A), SYMBOLS) == []  # a scalar is a Fill of its partner's shape: never first
    assert [s for _, s in applications("Sum", (R,), SYMBOLS)] == [((), ())]  # dim 0 is 1 already
    assert [a for a, _ in applications("Expand", (R,), SYMBOLS)] == [(((s,), ("j",)),) for s in SYMBOLS]
    assert applications("Concat", (A, B), SYMBOLS) == []  # A and B share i and j: j + j would be ambiguous
    wide = term("Concat", A, Var("C", (("i",), ("k",))))
    assert wide.shape == (("i",), ("j", "k"))
    assert [a for a, _ in applications("Slice", (wide,), SYMBOLS)] == [(1, (), ("j",)), (1, ("j",), ("j", "k"))]
    ev = Evaluator(VARS + [Var("C", (("i",), ("k",)))], SYMBOLS)
    ev.keep(wide, ev.values(wide), ev.redrawn(wide))
    back = term("Slice", wide, attrs=(1, (), ("j",)))
    assert fingerprint(back.shape, ev.values(back)) == fingerprint(A.shape, ev.kept[A])  # slicing undoes it


def test_equal_terms_share_a_fingerprint_and_others_do_not():
    ev = Evaluator(VARS, SYMBOLS)
    left = term("Sum", term("Expand", R, attrs=(((("i",), ("j",))),)), attrs=((1,),))
    right = term("Expand", term("Sum", R, attrs=((1,),)), attrs=(((("i",), ())),))
    wrong = term("Sum", term("Expand", R, attrs=(((("i",), ("j",))),)), attrs=((0,),))
    for t in (left.kids[0], right.kids[0]):
        ev.keep(t, ev.values(t), ev.redrawn(t))
    prints = [fingerprint(t.shape, ev.values(t)) for t in (left, right, wrong)]
    assert prints[0] == prints[1] != prints[2]


def test_enumeration_finds_the_sum_of_a_broadcast_over_a_dim_it_does_not_broadcast():
    """The identity no shipped rule states (issue 25): sum(expand(b), d) = expand(sum(b, d)), d not a
    broadcast dim; it is not derivable, and written as a rule it fires on its witness and is sound."""
    vars_ = parse_vars("A:i,j r:1,j")
    found = enumerate_candidates(vars_, ["Sum", "Expand"], 2, symbols_of(vars_))
    sides = [{c.lhs.text(), c.rhs.text()} for c in found.candidates]
    wanted = {"sum(expand(r, [i, j]), (1,))", "expand(sum(r, (1,)), [i, 1])"}
    assert wanted in sides and len(sides) == len({frozenset(x) for x in sides})
    c = found.candidates[sides.index(wanted)]
    lhs, rhs = (c.lhs, c.rhs) if c.lhs.op == "Sum" else (c.rhs, c.lhs)
    adopted = ("sum-of-expand-over-kept-dim",)  # the rule reduction.egg now has, written from this one
    assert derive.derivable([c], ["i", "j"])[0] == [True]
    assert derive.derivable([c], ["i", "j"], without=adopted)[0] == [False]
    text = rule_text(lhs, rhs, "sum-of-expand")
    assert "(= 1 (vec-get s_r 0))" in text and "(= n_i (vec-get s" in text  # guards as the typing assumed
    g, memo = Graph(), {}
    g.outputs = [to_graph(g, lhs, {"i": 5, "j": 3}, {}, memo)]
    matches, problems = check_rules_on(text, g)
    assert matches["sum-of-expand"] >= 1 and not problems


def test_the_shipped_rules_derive_what_they_state_and_renamings_are_one_candidate():
    sum_add = Candidate(term("Sum", term("Add", A, B), attrs=((1,),)),
                        term("Add", term("Sum", A, attrs=((1,),)), term("Sum", B, attrs=((1,),))))
    assoc = Candidate(term("MatMul", term("MatMul", A, W), V), term("MatMul", A, term("MatMul", W, V)))
    transpose_max = Candidate(term("Amax", term("Permute", A), attrs=((0,),)),
                              term("Permute", term("Amax", A, attrs=((1,),))))
    joined, _ = derive.derivable([sum_add, assoc, transpose_max], SYMBOLS)
    assert joined == [True, True, False]
    renamed = Candidate(term("Amax", term("Permute", W), attrs=((0,),)),
                        term("Permute", term("Amax", W, attrs=((1,),))))
    assert renamed.canonical() == transpose_max.canonical() and renamed.text() != transpose_max.text()


def test_a_derivation_graph_that_fails_costs_its_candidates_only():
    """A rule that merges two shapes (here a sum with its operand) makes egglog fail the saturation: the graph
    is split until the failing candidate is alone, which counts as not derivable with the error as its stop
    reason; the others keep their verdicts (a size-4 synthesis stopped so on shipped rules that were unsound)."""
    merges_shapes = '(rule ((= y (Sum x d))) ((union y x)) :name "sum-is-its-operand")'
    sum_add = Candidate(term("Sum", term("Add", A, B), attrs=((1,),)),
                        term("Add", term("Sum", A, attrs=((1,),)), term("Sum", B, attrs=((1,),))))
    assoc = Candidate(term("MatMul", term("MatMul", A, W), V), term("MatMul", A, term("MatMul", W, V)))
    joined, stops = derive.derivable([assoc, sum_add, assoc], SYMBOLS, [merges_shapes])
    assert joined == [True, False, True]
    assert len(stops) == 1 and stops[0].startswith(f"saturation failed on {sum_add.text()}: ") and "shape" in stops[0]


def test_verification_passes_identities_fails_others_and_finds_the_finite_only_ones():
    assoc = (term("MatMul", term("MatMul", A, W), V), term("MatMul", A, term("MatMul", W, V)))
    v = verify(*assoc, VARS, SYMBOLS)  # reassociation: finite only, as rules/matmul.egg declares it
    assert v.passed and v.error < 1e-12 and v.finite_only and v.symbolic.startswith("proved at sizes")
    assert not verify(term("Neg", term("Neg", A)), A, VARS, SYMBOLS).finite_only
    wrong = verify(term("Sum", A, attrs=((0,),)), term("Amax", A, attrs=((0,),)), VARS, SYMBOLS)
    assert not wrong.passed and wrong.error > 0.1
    cancel = verify(term("Div", term("Mul", A, B), B), A, VARS, SYMBOLS)
    assert cancel.passed and cancel.finite_only  # an inf in B: inf / inf is NaN where A is a number
    assert "not tried: Exp" in symbolic(term("Exp", term("Neg", A)), term("Recip", term("Exp", A)), SYMBOLS)


def test_a_values_check_asked_to_stop_at_a_failure_stops_at_the_first_and_checks_all_of_an_identity():
    wrong = (term("Sum", A, attrs=((0,),)), term("Amax", A, attrs=((0,),)))
    assert check_values(*wrong, VARS, SYMBOLS, 0, stop_above=TOLERANCE)[0] == 1
    assert check_values(*wrong, VARS, SYMBOLS, 0) == (SHAPES, pytest.approx(verify(*wrong, VARS, SYMBOLS).error))
    identity = (term("Neg", term("Neg", A)), A)
    assert check_values(*identity, VARS, SYMBOLS, 0, stop_above=TOLERANCE) == (SHAPES, 0.0)


def test_an_unbound_size_on_the_right_is_no_rule():
    grown = term("Expand", term("Sum", R, attrs=((1,),)), attrs=(((("k",), ())),))
    with pytest.raises(ValueError, match=r"sizes \['k'\] of the right side are not read on the left"):
        rule_text(term("Sum", R, attrs=((1,),)), grown, "bad")
    assert rule_name(A, B, {"x--x"}) == "x--x-2"


@pytest.mark.slow
def test_synthesize_writes_a_rule_file_that_loads_and_checks_sound_and_a_report(tmp_path, monkeypatch):
    monkeypatch.setenv("EQIFORGE_CACHE_DIR", str(tmp_path / "cache"))
    parser = cli.parser()
    args = parser.parse_args(["rules", "synthesize", "--ops", "Sum,Expand,Mul", "--vars", "A:i,j r:1,j s:scalar",
                              "--max-size", "2", "--out", str(tmp_path / "out"), "--device", "H100",
                              "--without", "sum-of-expand-over-kept-dim"])
    assert args.run(args) == 0
    egg, report = (tmp_path / "out" / "candidates.egg").read_text(), (tmp_path / "out" / "report.md").read_text()
    assert egg.startswith("; candidates.egg: rules found by `eqiforge rules synthesize`")
    loaded = rulesets.load_ruleset(tmp_path / "out" / "candidates.egg")
    assert "sum-expand--expand-sum" in loaded.rule_names
    assert "| **kept and verified** |" in report and "sum-expand--expand-sum" in report.split("## Kept rules")[1]
    verdicts = rulecheck.check_file(tmp_path / "out" / "candidates.egg")
    assert verdicts and all(v.status == "sound" for v in verdicts), [v.line() for v in verdicts]
    again = run.synthesize(["Sum", "Expand", "Mul"], "A:i,j r:1,j s:scalar", 2, progress=False, device="H100",
                           without=("sum-of-expand-over-kept-dim",))
    assert run.egg_file(again) == egg  # deterministic for a seed


def test_rules_check_gives_a_verdict_per_rule_and_fails_on_an_unsound_one(tmp_path, capsys):
    (tmp_path / "mine.egg").write_text(
        '(rewrite (Permute (MatMul a b) (vec-of 1 0)) (MatMul (Permute a (vec-of 1 0)) (Permute b (vec-of 1 0)))'
        ' :name "transpose-of-product-wrong")\n(rewrite (Neg (Neg x)) x :name "neg-neg")\n'
        '(rewrite (GemmK a b la lb t k e x) (GemmK a b la lb t k e x) :name "kernel")\n')
    parser = cli.parser()
    args = parser.parse_args(["rules", "check", str(tmp_path / "mine.egg")])
    assert args.run(args) == 1
    out = capsys.readouterr().out
    assert "transpose-of-product-wrong: unsound (" in out and "witness program:" in out
    assert "neg-neg: sound" in out and "kernel: could not instantiate (" in out
    args = parser.parse_args(["rules", "check", str(rulesets.shipped_rules_dir() / "transpose.egg")])
    assert args.run(args) == 0


@pytest.mark.slow
def test_every_shipped_rule_file_passes_the_check():
    for path in sorted(rulesets.shipped_rules_dir().glob("*.egg")):
        if path.name != rulesets.SCHEMA_FILE:
            unsound = [v.line() for v in rulecheck.check_file(path) if v.status == "unsound"]
            assert not unsound, unsound


def test_terms_evaluate_with_the_op_tables_reference_implementations():
    ev = Evaluator(VARS, SYMBOLS)
    t = term("MatMul", A, W)
    [first, *_] = ev.values(t)
    inst = ev.instances[0]
    torch.testing.assert_close(first, inst.inputs["A"] @ inst.inputs["W"])


def test_a_term_in_which_a_variable_cancels_is_a_candidate_against_its_class_and_represents_none():
    """(A + B) - B is A whatever B is: it opens no class (its parents would only cancel too), but it is the
    candidate (A + B) - B = A, the one rule its larger likes are instances of; one whose value no class has is
    dropped and counted."""
    vars_ = parse_vars("A:i,j B:i,j s:scalar")
    found = enumerate_candidates(vars_, ["Add", "Sub", "Neg"], 2, symbols_of(vars_))
    texts = [c.text() for c in found.candidates]
    assert {"sub(add(A, B), B) = A", "add(sub(A, s), s) = A", "sub(A, sub(A, B)) = B"} <= set(texts)
    assert found.cancelling > 0 and not [t for t in texts if "sub(A, A)" in t or "add(A, neg(A))" in t]
    assert not [t for t in texts if t.split(" = ")[1].startswith(("sub(add(A, B), B)", "add(sub(A, s), s)"))]
    ev = Evaluator(vars_, ["i", "j"])
    a = vars_[0]
    neg = term("Neg", a)
    ev.keep(neg, ev.values(neg), ev.redrawn(neg))
    t = term("Add", a, neg)
    assert ev.cancels(t, ev.values(t), ev.redrawn(t)) and not ev.cancels(neg, ev.values(neg), ev.redrawn(neg))


def test_a_candidate_is_made_as_general_as_its_values_allow_and_the_general_rule_derives_it():
    """A / (B / (A + A)) = A * ((A + A) / B) holds for any tensor in place of A + A: that rule is kept, and the
    instance follows from it in the e-graph (the shipped rules alone do not derive it)."""
    inner = term("Add", A, A)
    c = Candidate(term("Div", A, term("Div", B, inner)), term("Mul", A, term("Div", inner, B)))
    general = generalized(c, VARS, SYMBOLS, 0)
    assert general.text() == "div(A, div(B, X_i_j)) = mul(A, div(X_i_j, B))"
    assert verify(general.lhs, general.rhs, VARS, SYMBOLS).passed
    assert derive.derivable([c], SYMBOLS)[0] == [False]
    assert derive.derivable([c], SYMBOLS, [rule_text(general.lhs, general.rhs, "general")])[0] == [True]
    not_any_x = Candidate(term("Div", term("Mul", A, A), term("Div", A, B)), term("Mul", A, B))  # A * A is no X
    assert generalized(not_any_x, VARS, SYMBOLS, 0).text() == "div(mul(A, X_i_j), div(X_i_j, B)) = mul(A, B)"
    regrouped = Candidate(term("Add", term("Add", A, B), term("Add", A, S)),
                          term("Add", A, term("Add", A, term("Add", B, S))))
    assert generalized(regrouped, VARS, SYMBOLS, 0) == regrouped  # X for A + s: regrouping only, stated by no rule


def test_over_sums_alone_every_equality_is_commuting_or_regrouping_at_any_depth():
    """(A + B) + (A + s) = A + (A + (B + s)): no rule states regrouping, so an enumeration over Add alone finds no
    candidate, to size 3 (regrouping three levels deep)."""
    vars_ = parse_vars("A:i,j B:i,j s:scalar")
    found = enumerate_candidates(vars_, ["Add"], 3, symbols_of(vars_))
    assert found.commuted > 0 and [c.text() for c in found.candidates] == []


def test_a_variable_used_twice_is_split_where_its_uses_need_not_be_one_tensor():
    """A * (B + B / A) = A * B + B holds with any X in place of the B divided by A (and of the B added on the
    right): that is kept, verified, and derives the instance; a split that breaks the identity is not made."""
    c = Candidate(term("Mul", A, term("Add", B, term("Div", B, A))), term("Add", term("Mul", A, B), B))
    general = generalized(c, VARS, SYMBOLS, 0)
    assert general.text() == "mul(A, add(B, div(X_i_j, A))) = add(mul(A, B), X_i_j)"
    assert verify(general.lhs, general.rhs, VARS, SYMBOLS).passed
    assert derive.derivable([c], SYMBOLS, [rule_text(general.lhs, general.rhs, "general")])[0] == [True]
    cancels = Candidate(term("Div", term("Mul", A, B), A), B)  # A must be one tensor on both of its uses
    assert generalized(cancels, VARS, SYMBOLS, 0) == cancels


def test_general_rules_of_other_shapes_meet_in_one_derivation_graph():
    """A fresh variable's name says its shape: a derivation graph makes one input per name, and two shapes
    under one name would fail the graph."""
    inner = term("Add", A, A)
    over_a = Candidate(term("Div", A, term("Div", B, inner)), term("Mul", A, term("Div", inner, B)))
    over_w = Candidate(term("Div", term("Mul", W, term("Neg", W)), W), term("Neg", W))
    generals = [generalized(c, VARS, SYMBOLS, 0) for c in (over_a, over_w)]
    assert [g.text() for g in generals] == ["div(A, div(B, X_i_j)) = mul(A, div(X_i_j, B))",
                                            "div(mul(W, X_j_k), W) = X_j_k"]
    rules = [rule_text(g.lhs, g.rhs, f"general-{n}") for n, g in enumerate(generals)]
    assert derive.derivable(generals + [over_a, over_w], SYMBOLS, rules) == ([True] * 4, [])


def test_synthesis_over_running_sums_and_flips_rediscovers_the_adopted_rules():
    """Cumsum and Flip in the vocabulary (issue 42): a running sum commutes with a sum over another dim and with
    a product's columns, a reversed contracted dim moves across a product; sympy proves them, and each is
    derivable from the shipped rules only with rules/synthesized.egg, written for any rank from these."""
    square = Var("Q", (("i",), ("i",)))
    assert applications("Diagonal", (square,), SYMBOLS) == [((), (("i",), ()))]  # the IR keeps a unit last dim
    assert applications("Diagonal", (A,), SYMBOLS) == []  # i != j: no diagonal
    assert [a for a, _ in applications("Flip", (R,), SYMBOLS)] == [((1,),)]  # never along its dim of size 1
    vars_ = parse_vars("A:i,j W:j,k")
    found = enumerate_candidates(vars_, ["Cumsum", "Flip", "Sum", "MatMul"], 2, symbols_of(vars_))
    pairs = {frozenset((c.lhs.text(), c.rhs.text())): c for c in found.candidates}
    wanted = {frozenset(("sum(cumsum(A, 1), (0,))", "cumsum(sum(A, (0,)), 1)")): "sum-of-cumsum-over-other-dim",
              frozenset(("matmul(A, cumsum(W, 1))", "cumsum(matmul(A, W), 1)")): "cumsum-out-of-matmul-columns",
              frozenset(("matmul(flip(A, (1,)), W)", "matmul(A, flip(W, (0,)))")): "flip-across-matmul-to-right"}
    assert set(wanted) <= set(pairs), sorted(map(sorted, pairs))
    adopted = tuple(rulesets.available()["synthesized"].rule_names)
    for sides, rule in wanted.items():
        c = pairs[sides]
        assert verify(c.lhs, c.rhs, vars_, ["i", "j", "k"]).symbolic.startswith("proved at sizes"), rule
        assert derive.derivable([c], ["i", "j", "k"])[0] == [True], rule
        assert derive.derivable([c], ["i", "j", "k"], without=adopted)[0] == [False], rule


class _Recording:
    """An executor that runs its tasks in this process, in order, and keeps their payloads."""

    def __init__(self):
        self.payloads = []

    def map(self, fn, tasks):
        for task in tasks:
            self.payloads.append(task.payload)
            yield task, fn(task)


def test_a_redundancy_test_graph_holds_only_the_kept_rules_over_its_ops(monkeypatch):
    """Thousands of kept rules (size 4) do not fit one egglog: a kept rule is tested against the others over
    its own ops only, and one that no other rule's ops fit is not derivable without a graph."""
    monkeypatch.setattr(shards, "MIN_TASKS", 1)
    inner = term("Add", A, A)
    instance = Candidate(term("Div", A, term("Div", B, inner)), term("Mul", A, term("Div", inner, B)))
    general = generalized(instance, VARS, SYMBOLS, 0)
    transposed = Candidate(term("Neg", term("Permute", A, attrs=((1, 0),))),
                           term("Permute", term("Neg", A), attrs=((1, 0),)))
    negated = Candidate(term("Neg", term("Amax", A, attrs=((0,),))), term("Amin", term("Neg", A), attrs=((0,),)))
    kept = {c.text(): minimize.Kept(c, [(f"rule-{n}", rule_text(c.lhs, c.rhs, f"rule-{n}"))], None)
            for n, c in enumerate((instance, general, transposed, negated))}
    executor = _Recording()
    tested = [kept[instance.text()], kept[negated.text()]]
    rules = [kept[general.text()], kept[transposed.text()]]
    setting = minimize.Setting(VARS, SYMBOLS, 0, (), ())
    assert minimize.derivable_by(shards.Runner(executor), tested, rules, setting) == [True, False]
    [(candidates, _, texts, _)] = executor.payloads  # Amax/Amin/Neg: no rule over those ops, no graph
    assert candidates == [instance] and texts == [kept[general.text()].rules[0][1]]


class _Reversed:
    """An executor that runs its tasks in this process, last first: results come back out of task order."""

    def __init__(self):
        self.kinds = []

    def map(self, fn, tasks):
        for task in reversed(tasks):
            self.kinds.append(task.kind)
            yield task, fn(task)


class _Refusing:
    """An executor that records what it is asked to run and runs nothing (a resumed synthesis asks for nothing)."""

    def __init__(self):
        self.asked = []

    def map(self, fn, tasks):
        self.asked += tasks
        return iter(())


def test_a_few_tasks_run_here_until_the_executors_workers_are_up():
    """Starting workers costs more than a few tasks save; once they are up, two tasks are worth sending."""
    executor = _Reversed()
    runner = shards.Runner(executor)
    tasks = lambda n, tag: [Task(f"{tag}-{i}", tag, i) for i in range(n)]  # noqa: E731
    for n, tag in ((3, "first"), (4, "second"), (2, "third"), (1, "fourth")):
        assert runner.run(lambda task: task.payload * 10, tasks(n, tag)) == [10 * i for i in range(n)]
    assert executor.kinds == ["second"] * 4 + ["third"] * 2


SMALL = (["Sum", "Amax", "Expand", "Mul", "Neg"], "A:i,j r:1,j s:scalar")


@pytest.fixture
def small_shards(monkeypatch):
    """Small chunks and parts, every step through the executor: a small run has several tasks of each kind."""
    monkeypatch.setattr(shards, "MIN_TASKS", 1)
    monkeypatch.setattr(derive, "CHUNK", 40)
    monkeypatch.setattr(derive, "CHUNK_WITH_KEPT", 20)
    monkeypatch.setattr(minimize, "PART", 2)


def test_synthesis_through_an_executor_finds_the_same_rules_as_in_one_process(small_shards):
    """Sharded (the last size's terms a task per root operator, derivation and verification in chunks, the
    minimization in parts) and merged in enumeration order, whatever order the tasks finish in: the same
    candidates and rules, named alike."""
    here = run.synthesize(*SMALL, 2, progress=False, device="H100")
    executor = _Reversed()
    sharded = run.synthesize(*SMALL, 2, progress=False, device="H100", executor=executor)
    assert {"synthesis-enumeration", "synthesis-derivation", "synthesis-minimization"} <= set(executor.kinds)
    assert [c.text() for c in sharded.enumeration.candidates] == [c.text() for c in here.enumeration.candidates]
    assert sharded.enumeration.per_size == here.enumeration.per_size and here.kept
    assert run.egg_file(sharded) == run.egg_file(here)
    names = [n for k in here.kept for n, _ in k.rules]
    assert len(names) == len(set(names)), "two parts' rules share a name"


def test_a_synthesis_started_again_reads_what_finished_from_its_results_file(small_shards, tmp_path):
    """--resume: a task whose result the file holds does not run again (here: none runs), and the rules are
    the same; a task whose inputs changed (another seed) runs. The file's folder is made where missing."""
    first = run.synthesize(*SMALL, 2, progress=False, device="H100", executor=_Reversed(),
                           results=tmp_path / "run" / "sweep.jsonl")
    again = _Refusing()
    resumed = run.synthesize(*SMALL, 2, progress=False, device="H100", executor=again,
                             results=tmp_path / "run" / "sweep.jsonl")
    assert again.asked == [] and run.egg_file(resumed) == run.egg_file(first)
    read_back = {s.name: s.stored for s in resumed.steps}
    assert read_back == {s.name: s.sent + s.here for s in first.steps} and read_back["enumeration"] == len(SMALL[0])
    assert "| enumeration |" in run.report_text(resumed)
    other = _Reversed()
    run.synthesize(*SMALL, 2, seed=1, progress=False, device="H100", executor=other,
                   results=tmp_path / "run" / "sweep.jsonl")
    assert "synthesis-minimization" in other.kinds
