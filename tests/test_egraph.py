"""The e-graph stage: rule loading errors, limits and stop reasons, the hard time limit, determinism."""
import os
import shutil

import pytest

from eqiforge.egraph import rulesets
from eqiforge.egraph import saturate as sat
from eqiforge.egraph.report import Stop
from eqiforge.errors import EqiforgeError
from eqiforge.ir import Graph


def chain(n=4, size=16):
    g = Graph()
    xs = [g.input(f"m{i}", (size, size), "float32") for i in range(n)]
    y = xs[0]
    for x in xs[1:]:
        y = g.add("MatMul", (y, x))
    g.outputs = [y]
    return g


@pytest.fixture
def rules_dir(tmp_path, monkeypatch):
    """A private rules folder holding the real schema; tests add rule files to it."""
    shutil.copy(rulesets.rules_dir() / "schema.egg", tmp_path / "schema.egg")
    monkeypatch.setenv("EQIFORGE_RULES_DIR", str(tmp_path))
    return tmp_path


def test_saturation_is_deterministic():
    """First in this file: tests below run egglog in this process, and a saturation forked after that can
    deadlock (egglog's worker threads are missing in the child), be killed and replayed."""
    a, _ = sat.saturate(chain(5), None, sat.Limits(), use_cache=False)
    b, _ = sat.saturate(chain(5), None, sat.Limits(), use_cache=False)
    assert (a.node_op, a.node_children, a.node_class, a.roots) == (b.node_op, b.node_children, b.node_class, b.roots)


def same_egraph(a, b) -> bool:
    return (a.node_op, a.node_attrs, a.node_children, a.node_class, a.class_shape, a.roots, a.bindings) == \
        (b.node_op, b.node_attrs, b.node_children, b.node_class, b.class_shape, b.roots, b.bindings)


def test_a_saturation_is_read_from_the_cache_the_second_time(tmp_path, monkeypatch):
    monkeypatch.setenv("EQIFORGE_CACHE_DIR", str(tmp_path))
    first, report = sat.saturate(chain(5), ["matmul"], sat.Limits())
    assert not report.from_cache and len(list((tmp_path / "saturate").glob("*.pkl"))) == 1

    def no_egglog(*args, **kwargs):
        raise AssertionError("saturated again")
    monkeypatch.setattr(sat, "_saturate_in_child", no_egglog)
    seen = []
    again, cached = sat.saturate(chain(5), ["matmul"], sat.Limits(), on_step=seen.append)
    assert cached.from_cache and same_egraph(first, again)
    assert cached.steps == report.steps == seen and cached.stop_reason == report.stop_reason
    # anything egglog would run differently is another entry: the program, the rule sets, the schedule
    for graph, rules, limits in [(chain(4), ["matmul"], sat.Limits()), (chain(5), ["matmul", "scalar"], sat.Limits()),
                                 (chain(5), ["matmul"], sat.Limits(iterations=3))]:
        with pytest.raises(AssertionError, match="saturated again"):
            sat.saturate(graph, rules, limits)
    with pytest.raises(AssertionError, match="saturated again"):
        sat.saturate(chain(5), ["matmul"], sat.Limits(), use_cache=False)


def test_a_constant_of_another_value_is_another_entry(tmp_path, monkeypatch):
    monkeypatch.setenv("EQIFORGE_CACHE_DIR", str(tmp_path))

    def scaled(value):
        g = Graph()
        x = g.input("x", (4, 4), "float32")
        g.outputs = [g.add("Mul", (x, g.fill(value, (4, 4), "float32")))]
        return g
    sat.saturate(scaled(0.5), ["scalar"], sat.Limits())
    _, report = sat.saturate(scaled(0.25), ["scalar"], sat.Limits())
    assert not report.from_cache


def test_runs_the_clock_cut_short_are_not_kept_and_damaged_entries_run_again(tmp_path, monkeypatch):
    from eqiforge.egraph import cache
    monkeypatch.setenv("EQIFORGE_CACHE_DIR", str(tmp_path))
    _, report = sat.saturate(chain(10), ["matmul"], sat.Limits(seconds=1e-6))
    assert report.stop_reason.kind == Stop.SECONDS
    assert not (tmp_path / "saturate").exists()
    sat.saturate(chain(3), ["matmul"], sat.Limits())
    (entry,) = (tmp_path / "saturate").glob("*.pkl")
    entry.write_bytes(b"not a pickle")
    assert cache.load(entry.stem) is None
    _, report = sat.saturate(chain(3), ["matmul"], sat.Limits())
    assert not report.from_cache and cache.load(entry.stem) is not None  # stored again


def test_unknown_ruleset_names_the_known_ones():
    with pytest.raises(EqiforgeError, match=r"unknown rule set\(s\) \['nope'\]; available: \[.*'matmul'"):
        rulesets.select(["nope"])


@pytest.mark.parametrize("text,message", [
    ("(rewrite (Neg (Neg x)) x", "does not parse"),
    ("(rewrite (Neg (Neg x)) x)", "needs a :name"),
    ("(rewrite (Neg (Neg x)) x :name \"a\")\n(rewrite (Neg x) x :name \"a\")", "used twice"),
    ("(let $z (Input \"z\"))", "may only contain rules"),
    ("(ruleset other)\n(rewrite (Neg (Neg x)) x :ruleset other :name \"a\")", "may only contain rules"),
])
def test_malformed_rule_files_name_the_file(rules_dir, text, message):
    (rules_dir / "broken.egg").write_text(text)
    with pytest.raises(EqiforgeError, match=f"broken.egg.*{message}|{message}.*broken"):
        rulesets.available()


def test_a_temporary_rules_folder_is_forgotten_with_it():
    """A loaded folder holds about 0.2 GB: a synthesis worker that kept every temporary one grew by gigabytes."""
    rulesets.available()
    shipped = rulesets.rules_dir()
    with rulesets.rules_folder_with({"extra": '(rewrite (Neg (Neg x)) x :name "twice-negated")'}) as names:
        folder = rulesets.rules_dir()
        assert names == ["extra"] and rulesets.available()["extra"].rule_names == ("twice-negated",)
        assert folder in rulesets._LOADED
    assert folder not in rulesets._LOADED and shipped in rulesets._LOADED
    assert "extra" not in rulesets.available()


def test_a_rule_left_out_leaves_the_assumes_finite_line_that_names_it_with_its_remark(rules_dir):
    """``without`` (rediscovery, ablations) drops a rule and its name from ``; assumes finite:``, also on a line
    whose names a remark follows (the file would not load, naming a rule it does not define)."""
    (rules_dir / "cancel.egg").write_text(
        "; assumes finite: div-self, neg-neg  (inf - inf is NaN)\n"
        '(rewrite (Neg (Neg x)) x :name "neg-neg")\n(rule ((= y (Div x x))) ((union y x)) :name "div-self")\n')
    with rulesets.rules_folder_with({}, without=("neg-neg",)):
        kept = rulesets.available()["cancel"]
        assert kept.rule_names == ("div-self",) and kept.assumes_finite == ("div-self",)


def test_rule_that_does_not_typecheck_is_reported(rules_dir):
    (rules_dir / "bad.egg").write_text('(rewrite (Neg x) (NoSuchOp x) :name "bad-op")')
    with pytest.raises(EqiforgeError, match="rule set bad"):
        sat.saturate(chain(), ["bad"], sat.Limits())


def test_unsound_shape_is_a_loud_error(rules_dir):
    (rules_dir / "unsound.egg").write_text('(rewrite (MatMul a b) a :name "drop-b")')
    g = Graph()
    a, b = g.input("a", (3, 4), "float32"), g.input("b", (4, 5), "float32")
    g.outputs = [g.add("MatMul", (a, b))]
    with pytest.raises(EqiforgeError, match="unsound"):
        sat.saturate(g, ["unsound"], sat.Limits())


def test_stop_reasons():
    from eqiforge.egraph.report import Stop
    _, report = sat.saturate(chain(3), ["matmul"], sat.Limits())
    assert report.stop_reason == "saturated" and report.stop_reason.kind is Stop.SATURATED
    _, report = sat.saturate(chain(8), ["matmul"], sat.Limits(iterations=2))
    assert report.stop_reason == "iteration limit (2)" and report.iterations == 2
    assert report.stop_reason.kind is Stop.ITERATIONS
    _, report = sat.saturate(chain(10), ["matmul"], sat.Limits(enodes=100))
    assert report.stop_reason == "e-node limit (100)" and report.enodes >= 100
    assert report.stop_reason.kind is Stop.ENODES


def test_report_counts_steps_and_matches():
    _, report = sat.saturate(chain(4), ["matmul", "scalar"], sat.Limits())
    assert [s.ruleset for s in report.steps[:2]] == ["matmul", "scalar"]
    assert report.matches_per_rule()["matmul-assoc-right"] > 0
    sizes = [s.enodes for s in report.steps]
    assert sizes == sorted(sizes) and sizes[-1] > report.initial_enodes


def test_hard_time_limit_kills_a_runaway_step_and_keeps_what_completed(rules_dir):
    # one step of this rule joins every input with every pair of inputs: far too slow for the limit
    (rules_dir / "explode.egg").write_text(
        '(rule ((= a (Input s)) (= b (Input t)) (= c (Input u)) (= d (Input v)))'
        ' ((Add (Add a b) (Add c d))) :name "explode")')
    g = Graph()
    xs = [g.input(f"x{i}", (2,), "float32") for i in range(120)]
    g.outputs = [g.add("Neg", (x,)) for x in xs]
    snap, report = sat.saturate(g, ["explode"], sat.Limits(seconds=0.5, hard_seconds=1.0))
    assert report.stop_reason.startswith("hard time limit") and report.stop_reason.kind.name == "KILLED"
    assert snap.num_nodes == 240 and len(snap.roots) == 120


def test_a_step_predicted_to_overrun_the_time_limit_is_not_started(monkeypatch):
    """egglog cannot stop inside a step, so the driver does not start one that its last run of the same rule
    set, scaled by the growth since, says would end past the limit."""
    assert sat.predicted_seconds(None, 100) == 0.0 and sat.predicted_seconds((2.0, 1000), 2000) == 8.0
    monkeypatch.setattr(sat, "predicted_seconds", lambda last, enodes: 0.0 if last is None else 100.0)
    _, report = sat.run(chain(8), ["matmul"], sat.Limits(seconds=50))
    assert report.stop_reason == "time limit (50 s): the next matmul step was predicted to take 100.0 s"
    assert len(report.steps) == 1


@pytest.mark.parametrize("bad", [dict(iterations=-1), dict(seconds=0), dict(enodes=1.5)])
def test_invalid_limits(bad):
    with pytest.raises(EqiforgeError, match="limit|time limits"):
        sat.Limits(**bad)


def test_a_multi_worker_rayon_setting_cannot_deadlock_the_forked_saturation():
    """With RAYON_NUM_THREADS=2 every forked saturation used to wait forever in egglog's rayon pool (killed
    at the hard limit, then replayed): the e-graph stage pins one worker before egglog loads, and says so."""
    import subprocess
    import sys
    code = ("import torch, eqiforge, eqiforge.egraph.saturate as sat; from eqiforge.frontend import capture\n"
            "fn = lambda a, b: torch.softmax((a @ b).sum(0, keepdim=True) * 2.0 + a.sum(), -1)\n"
            "g = capture(fn, (torch.randn(4, 4), torch.randn(4, 4))).graph\n"
            "snap, rep = sat.saturate(g, None, limits=sat.Limits(seconds=2.0, hard_seconds=4.0))\n"
            "print(rep.stop_reason.kind.name)\n")
    env = {**os.environ, "RAYON_NUM_THREADS": "2"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "RAYON_NUM_THREADS=2 set to 1" in out.stderr
    assert out.stdout.split()[-1] not in ("KILLED", "DIED", "STEPS")


def test_fused_inputs_in_canonical_order():
    """Inputs numbered as the expressions first read them, a tensor at two slots read once, unread dropped."""
    from eqiforge.ops.fused import canonical_inputs
    exprs = [("bin", "add", ("in", 3), ("in", 1)), ("bin", "mul", ("acc",), ("in", 0))]
    got, kept = canonical_inputs(exprs, ["a", "b", "c", "a"])  # slots 0 and 3 hold one tensor; slot 2 unread
    assert kept == [3, 1]
    assert got == [("bin", "add", ("in", 0), ("in", 1)), ("bin", "mul", ("acc",), ("in", 0))]


def test_commuted_operands_make_one_canonical_kernel():
    """a + b over (a, b) and b + a over (b, a) are one kernel once commutative operands are ordered by the
    tensors they read; a constant goes last; a subtraction keeps its order."""
    from eqiforge.ops.fused import canonical_inputs
    one = canonical_inputs([("bin", "add", ("in", 0), ("in", 1))], ["a", "b"])
    other = canonical_inputs([("bin", "add", ("in", 1), ("in", 0))], ["a", "b"])
    swapped = canonical_inputs([("bin", "add", ("in", 0), ("in", 1))], ["b", "a"])
    assert one[0] == other[0] == swapped[0] == [("bin", "add", ("in", 0), ("in", 1))]
    assert one[1] == other[1] == [0, 1] and swapped[1] == [1, 0]  # both read a first
    assert canonical_inputs([("bin", "mul", ("const", 0.5), ("in", 0))], ["a"])[0] == [
        ("bin", "mul", ("in", 0), ("const", 0.5))]
    assert canonical_inputs([("bin", "sub", ("in", 1), ("in", 0))], ["a", "b"]) == (
        [("bin", "sub", ("in", 0), ("in", 1))], [1, 0])


def test_e_classes_holding_an_equal_e_node_are_merged_with_their_readers():
    """Classes 10 and 11 hold the same kernel over (1, 2); then 20 = Exp(10) and 21 = Exp(11) are equal too
    (congruence), and 30 = Add(20, 21) reads one class twice. A shape disagreement is a loud error."""
    from eqiforge.egraph.snapshot import _equal_classes
    kernel = ("PointwiseK", (("bin", "add", ("in", 0), ("in", 1)), (4,)))
    rows = [(*kernel, (1, 2), 10), (*kernel, (1, 2), 11), ("Exp", (), (10,), 20), ("Exp", (), (11,), 21),
            ("Add", (), (20, 21), 30), ("Neg", (), (1,), 11)]
    shapes = {c: (4,) for c in (1, 2, 10, 11, 20, 21, 30)}
    same = _equal_classes(rows, shapes, {c: "float32" for c in shapes})
    assert same(10) == same(11) == 10 and same(20) == same(21) == 20
    assert len({same(c) for c in shapes}) == 5
    with pytest.raises(EqiforgeError, match="differ in shape"):
        _equal_classes(rows, {**shapes, 11: (2, 2)}, {c: "float32" for c in shapes})


def test_fusion_paths_make_one_kernel_and_gemm_extras_join_the_epilogue():
    """exp(a @ w + y) + exp(z): fusion reaches the kernels along several inlining orders, numbering their inputs
    differently; the snapshot holds each kernel once (no two e-nodes of a class alike). Every fused expression
    is resolved: inlining exp(z) into a GEMM epilogue that reads it rewrites through the accumulator too (the
    snapshot drops an e-node whose expression is still a substitution term)."""
    g = Graph()
    a, w = g.input("a", (8, 16), "float32"), g.input("w", (16, 8), "float32")
    y, z = g.input("y", (8, 8), "float32"), g.input("z", (8, 8), "float32")
    g.outputs = [g.add("Add", (g.add("Exp", (g.add("Add", (g.add("MatMul", (a, w)), y)),)), g.add("Exp", (z,))))]
    snap, _ = sat.saturate(g, ["fusion"], sat.Limits(), use_cache=False)
    nodes = list(zip(snap.node_op, snap.node_attrs, snap.node_children, snap.node_class))
    assert len(set(nodes)) == len(nodes)
    assert snap.dropped_nodes == 0
    epilogues = [str(attrs[4]) for op, attrs in zip(snap.node_op, snap.node_attrs) if op == "GemmK"]
    assert any(e.count("'exp'") == 2 for e in epilogues), f"no GEMM computes both exps: {epilogues}"


def test_the_guide_keeps_forms_near_their_e_class_best():
    """Class 1 (the root) is Sum(x) at 10 or Sum(y) at 30, y = Exp(x) (elementwise: priced at nothing). Sum(y)
    is 20 dearer than the best form: past 1.5x of its own price (slack 5), within 4x (slack 30)."""
    from eqiforge.egraph.guide import promising_nodes
    from eqiforge.egraph.snapshot import Snapshot
    snap = Snapshot(node_op=["Input", "Sum", "Sum", "Exp"], node_attrs=[("x",), ((1,),), ((1,),), ()],
                    node_children=[(), (0,), (2,), (0,)], node_class=[0, 1, 1, 2],
                    class_shape=[(4, 8), (4, 1), (4, 8)], class_dtype=["float32"] * 3, roots=[1])
    prices = [0.0, 10.0, 30.0, 100.0]
    assert promising_nodes(snap, prices, 1.5) == {0, 1}
    assert promising_nodes(snap, prices, 4.0) == {0, 1, 2, 3}


def _mean_of_a_sum():
    """mean(a + b) over rows, then scaled: the algebra also writes the mean as mean(a) + mean(b)."""
    g = Graph()
    a, b = g.input("a", (64, 512), "float32"), g.input("b", (64, 512), "float32")
    s = g.add("Sum", (g.add("Add", (a, b)),), ((1,),))
    g.outputs = [g.add("Mul", (s, g.fill(1 / 512, (64, 1), "float32")))]
    return g, a


def test_a_guided_saturation_forms_kernels_for_promising_forms_only():
    """Guided, the kernel layer leaves the partial sums sum(a) + sum(b) alone (two passes where one does),
    the plan is the one the unguided run finds, the run is deterministic and the report says what it guided."""
    from eqiforge import cost
    from eqiforge.extract import extract
    model = cost.get_cost_model("roofline", "H100", kernels=True)
    guide = sat.Guide(lambda snap: model.predict(cost.snapshot_features(snap, True)), model.name)
    g, a = _mean_of_a_sum()
    runs = {}
    for factor in (None, 1.5, 1.5):
        schedule = sat.default_schedule(None, kernel_guide=factor)
        snap, report = sat.saturate(g, schedule, guide=guide, use_cache=False)
        prices = model.predict(cost.snapshot_features(snap, True))
        runs.setdefault(factor, []).append((snap, report, extract(snap, prices, use_cache=False).cost))
    (free, free_report, free_cost), = runs[None]
    (snap, report, guided_cost), (again, _, _) = runs[1.5]
    assert same_egraph(snap, again)
    assert report.stop_reason == "saturated" and report.guided.startswith("kernel layer on ")
    assert free_report.guided == "" and snap.num_nodes < free.num_nodes
    assert guided_cost == pytest.approx(free_cost, rel=1e-9)

    def partial_sums(s):  # sum(a) alone (a reduction reading a with a prologue reduces a + b: that is kept)
        return [n for n, op in enumerate(s.node_op)
                if op == "RowReduceK" and s.node_children[n][0] == s.bindings[a] and s.node_attrs[n][1] == ("x",)]
    assert partial_sums(free) and not partial_sums(snap)


def test_a_guided_schedule_needs_prices_and_a_factor_of_at_least_one():
    with pytest.raises(EqiforgeError, match="needs prices"):
        sat.saturate(chain(3), sat.default_schedule(None, kernel_guide=1.5), use_cache=False)
    with pytest.raises(EqiforgeError, match="at least 1"):
        sat.default_schedule(None, kernel_guide=0.5)
