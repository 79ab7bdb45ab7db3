"""Pictures and ablations: files are valid PNG/SVG of the expected size, figures carry the expected labels,
ablation rows agree with running the optimizer directly, drawings highlight exactly the extracted e-nodes."""
import csv
import struct
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import torch
from matplotlib.colors import to_rgba

import eqiforge
from eqiforge import cli, examples
from eqiforge.viz import ablate, combinations, layout, plot_growth
from eqiforge.viz.egraph_drawing import CHOSEN, draw_egraph
from eqiforge.viz.plan_drawing import draw_plan
from eqiforge.viz.table import COLUMNS
from eqiforge.viz.trace import trace_egraph

RULES = ["matmul", "transpose", "reshape"]  # small, and matmul changes the plan of matmul_chain


def png_size(path) -> tuple[int, int]:
    data = Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


def svg_size(path) -> tuple[str, str]:
    root = ET.parse(path).getroot()
    assert root.tag.endswith("svg"), f"{path} is not an SVG"
    return root.get("width"), root.get("height")


def pixels(fig) -> tuple[int, int]:
    w, h = fig.get_size_inches() * fig.dpi
    return round(w), round(h)


def legend_texts(ax) -> list[str]:
    return [t.get_text() for t in ax.get_legend().get_texts()]


def run(capsys, *argv):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def chain():
    return examples.load("matmul_chain")


@pytest.fixture(scope="module")
def chain_opt(chain):
    return eqiforge.optimize(*chain, rules=RULES)


# ------------------------------------------------------------------------------------------------ growth
def test_growth_figure_has_panels_units_limits_and_stop_reason(chain_opt, tmp_path):
    fig = plot_growth(chain_opt.report, tmp_path / "growth.png", title="matmul_chain")
    assert png_size(tmp_path / "growth.png") == pixels(fig) == (1300, 850)
    size, added, rules, per_iteration, cumulative = fig.axes
    assert size.get_yscale() == "log" and size.get_xlabel().startswith("iteration")
    assert legend_texts(size)[:2] == ["e-nodes", "e-classes"]
    assert "e-node limit (50,000)" in legend_texts(size) and "stop: saturated" in legend_texts(size)
    assert set(legend_texts(added)) == {s.ruleset for s in chain_opt.report.saturation.steps}
    top_rule = next(iter(chain_opt.report.matches_per_rule()))
    assert top_rule in [t.get_text() for t in rules.get_yticklabels()]
    assert per_iteration.get_ylabel() == "time per iteration (ms)" and cumulative.get_ylabel() == "cumulative time (s)"
    assert "time limit (8 s)" in legend_texts(cumulative)
    assert "stopped because saturated" in fig._suptitle.get_text()


def test_growth_marks_the_limit_that_stopped_saturation(chain):
    report = eqiforge.optimize(*chain, rules=RULES, limits=eqiforge.Limits(enodes=20)).report
    assert report.stop_reason == "e-node limit (20)"
    labels = legend_texts(plot_growth(report).axes[0])
    assert "e-node limit (20)" in labels and "stop: e-node limit (20)" in labels


def test_growth_of_a_saturation_without_rule_sets(chain):
    fig = plot_growth(eqiforge.optimize(*chain, rules=[]).report)
    assert "no rule matched" in [t.get_text() for t in fig.axes[2].texts]


def test_plot_growth_of_a_report_writes_the_file(chain_opt, tmp_path):
    fig = plot_growth(chain_opt.report, tmp_path / "g.svg")
    assert svg_size(tmp_path / "g.svg") == ("936pt", "612pt") and len(fig.axes) == 5


def test_growth_command_writes_svg(tmp_path, capsys):
    code, out, _ = run(capsys, "growth", "--example", "matmul_chain", "--rules", "matmul", "--out", tmp_path / "g.svg")
    assert code == 0 and "stopped because" in out
    assert svg_size(tmp_path / "g.svg") == ("936pt", "612pt")


# ------------------------------------------------------------------------------------------------ ablation
def test_combinations_per_mode():
    names = ["a", "b", "c"]
    assert combinations(names, "all") == [("all", ("a", "b", "c"))]
    assert [label for label, _ in combinations(names, "leave-one-out")] == ["all", "all - a", "all - b", "all - c"]
    assert combinations(names, "each") == [("none", ()), ("a only", ("a",)), ("b only", ("b",)), ("c only", ("c",))]
    subsets = combinations(names, "subsets")
    assert len(subsets) == 8 and subsets[0] == ("none", ()) and subsets[-1] == ("a + b + c", ("a", "b", "c"))


@pytest.mark.parametrize("names,mode,message", [
    (list("abcdefg"), "subsets", "the limit is 6 sets"),
    (["a"], "pairs", "unknown ablation mode 'pairs'"),
])
def test_combination_errors(names, mode, message):
    with pytest.raises(eqiforge.EqiforgeError, match=message):
        combinations(names, mode)


def test_unknown_rule_set_is_a_clear_error(chain):
    with pytest.raises(eqiforge.EqiforgeError, match="unknown rule set"):
        ablate(*chain, rules=["matmul", "nope"])


@pytest.fixture(scope="module")
def workers():
    """Two local workers kept for this module's ablations (each would start its own: seconds of imports)."""
    from eqiforge import sweep
    with sweep.LocalExecutor(2) as executor:
        yield executor


@pytest.fixture(scope="module")
def table(chain, workers):
    return ablate(*chain, rules=RULES, mode="each", name="matmul_chain", executor=workers)


def test_ablation_rows_match_optimizing_directly(chain, table):
    assert [row["combination"] for row in table.rows] == ["none", "matmul only", "transpose only", "reshape only"]
    for row, (_, sets) in zip(table.rows, combinations(RULES, "each")):
        report = eqiforge.optimize(*chain, rules=list(sets)).report
        assert row["rule_sets"] == "+".join(sets)
        assert row["predicted_us"] == pytest.approx(report.predicted_after * 1e6)
        assert (row["enodes"], row["eclasses"], row["stop_reason"]) == (report.enodes, report.eclasses,
                                                                        report.stop_reason)
    none, matmul = table.rows[:2]
    assert matmul["predicted_us"] < none["predicted_us"] and matmul["enodes"] > none["enodes"]


def test_workers_price_rows_as_this_process_does_on_the_cpu(chain, workers, monkeypatch):
    """Ablation workers run one thread each and this CPU's calibration is per thread count: rows priced there
    must still be priced for this process's CPU (the docs' table had its "all" row, run here, at half the
    predicted time of every row run in a worker)."""
    monkeypatch.delenv("EQIFORGE_DEVICE")
    table = ablate(*chain, rules=["matmul", "transpose"], mode="each", executor=workers)
    for row, (_, sets) in zip(table.rows, combinations(["matmul", "transpose"], "each")):
        assert row["predicted_us"] == pytest.approx(eqiforge.optimize(*chain, rules=list(sets)).report.predicted_after
                                                    * 1e6)


def bessel_chain(a, b, c, v):
    """A program whose captured form does not pickle (its Extern holds a PyTorch operator object)."""
    return torch.special.bessel_j0(a) @ b @ c @ v


def test_a_program_whose_capture_does_not_pickle_is_captured_again_in_the_workers(chain, workers):
    import pickle

    from eqiforge import frontend
    inputs = chain[1]
    with pytest.raises(Exception):
        pickle.dumps(frontend.capture(bessel_chain, inputs))
    (row,) = ablate(bessel_chain, inputs, rules=["matmul"], mode="all", executor=workers).rows
    report = eqiforge.optimize(bessel_chain, inputs, rules=["matmul"]).report
    assert row["predicted_us"] == pytest.approx(report.predicted_after * 1e6) and row["enodes"] == report.enodes
    with pytest.raises(eqiforge.EqiforgeError, match="pickles"):
        ablate(lambda *args: bessel_chain(*args), inputs, rules=["matmul"], mode="all", executor=workers)


def test_ablation_defaults_to_the_rule_sets_optimize_uses(chain, workers):
    (row,) = ablate(*chain, mode="all", executor=workers).rows
    report = eqiforge.optimize(*chain).report
    assert row["rule_sets"] == "+".join(report.rulesets) and len(report.rulesets) >= 4
    assert row["predicted_us"] == pytest.approx(report.predicted_after * 1e6) and row["enodes"] == report.enodes


def test_ablation_times_saturations_it_runs_itself(chain, tmp_path, monkeypatch):
    """The table's seconds are the optimizer's cost: an ablation task neither reads nor fills the caches (run here,
    in this process, to see what it asks of saturation)."""
    from eqiforge import sweep
    from eqiforge.viz import ablation
    monkeypatch.setenv("EQIFORGE_CACHE_DIR", str(tmp_path))
    eqiforge.optimize(*chain, rules=["matmul"])  # stores this saturation
    stored = sorted(p.name for p in tmp_path.rglob("*.pkl"))
    assert stored
    seen = []
    from eqiforge.egraph import saturate as sat
    real = sat.saturate
    monkeypatch.setattr(sat, "saturate", lambda *a, **k: seen.append(k["use_cache"]) or real(*a, **k))
    opts, _, runs = ablation.setup(["matmul"], "all", 1, 1, {})
    captured, opts = ablation.prepared(*chain, opts)
    program = ablation.shipped(captured, *chain)
    threads = torch.get_num_threads()
    try:  # the task runs on one core, as in a worker
        ablation.optimize_task(sweep.Task("all", "ablation", ablation.Combination(program, ("matmul",), opts)))
    finally:
        torch.set_num_threads(threads)
    assert seen == [False] and sorted(p.name for p in tmp_path.rglob("*.pkl")) == stored


@pytest.mark.slow
def test_ablation_is_the_same_in_one_worker_and_in_two(chain, table):
    again = ablate(*chain, rules=RULES, mode="each", jobs=1)
    timings = ("saturate_s", "extract_s")
    assert [{k: v for k, v in r.items() if k not in timings} for r in again.rows] == \
           [{k: v for k, v in r.items() if k not in timings} for r in table.rows]


def test_ablation_files(table, tmp_path):
    paths = table.save(tmp_path)
    with paths["csv"].open() as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == list(COLUMNS) and len(rows) == 4
    assert all(r["measured_us"] == "" for r in rows) and rows[1]["combination"] == "matmul only"
    markdown = paths["markdown"].read_text().splitlines()
    assert markdown[2].startswith("| combination | e-nodes |") and len(markdown) == 3 + 1 + 4
    fig = table.plot()
    assert png_size(paths["chart"]) == pixels(fig) == (1200, 288)
    assert [ax.get_title() for ax in fig.axes] == ["Predicted plan time (dashed: the program as captured, "
                                                   f"{table.rows[0]['predicted_us']:.1f} us)", "E-graph size"]
    assert fig.axes[0].get_xlabel().startswith("predicted plan time (us)")
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == [r["combination"] for r in table.rows]


def test_measure_times_each_combination_and_says_where(chain, workers):
    import socket
    measured = ablate(*chain, rules=["matmul"], mode="all", measure=True, repeats=2, executor=workers)
    assert measured.rows[0]["measured_us"] > 0 and measured.rows[0]["node"] == socket.gethostname()
    assert measured.plot().axes[2].get_title() == "Measured time"


@pytest.mark.slow
def test_ablate_command(tmp_path, capsys):
    code, out, err = run(capsys, "ablate", "--example", "matmul_chain", "--rules", "matmul,transpose",
                         "--out", tmp_path, "--workers", "2")
    assert code == 0 and "| all - matmul |" in out and "3 runs in" in err
    assert {p.name for p in tmp_path.iterdir()} == {"ablation.md", "ablation.csv", "ablation.png"}  # no sweep.jsonl


# ------------------------------------------------------------------------------------------------ drawings
@pytest.fixture(scope="module")
def chain_trace(chain):
    return trace_egraph(*chain, rules=["matmul"])


def test_egraph_drawing_highlights_exactly_the_extracted_nodes(chain_trace, tmp_path):
    drawing = draw_egraph(chain_trace, tmp_path / "e.png", title="matmul_chain")
    snap, g = chain_trace.snapshot, drawing.graph
    assert not drawing.summarised and png_size(tmp_path / "e.png") == pixels(drawing.figure)
    chosen = {n for (kind, n), data in g.nodes(data=True) if kind == "node" and data["chosen"]}
    assert chosen == set(chain_trace.selection.choice.values())
    assert sum(1 for _, _, kind in g.edges(data="kind") if kind == "child") == sum(map(len, snap.node_children))
    assert sum(1 for _, data in g.nodes(data=True) if data["kind"] == "eclass") == snap.num_classes
    highlighted = [t for t in drawing.figure.axes[0].texts
                   if t.get_bbox_patch() is not None and t.get_bbox_patch().get_facecolor() == to_rgba(CHOSEN)]
    assert len(highlighted) == len(chosen)


def test_large_egraph_is_summarised_with_a_message(chain_trace):
    drawing = draw_egraph(chain_trace, max_nodes=5)
    assert drawing.summarised and "more than 5" in drawing.message and "summary" in drawing.message
    assert [ax.get_title() for ax in drawing.figure.axes] == ["E-nodes per op", "E-class sizes"]


def test_plan_drawing_shows_every_node_with_its_predicted_time(chain_opt, tmp_path):
    drawing = draw_plan(chain_opt.plan, tmp_path / "plan.svg")
    plan, g = chain_opt.plan, drawing.graph
    assert sorted(g) == plan.graph.live_nodes() and svg_size(tmp_path / "plan.svg")[0].endswith("pt")
    for i, data in g.nodes(data=True):
        if data["kind"] == "kernel":
            assert data["seconds"] == plan.node_seconds[i] and f"{data['seconds'] * 1e6:.2f} us" in data["label"]
    assert {data["kind"] for _, data in g.nodes(data=True)} == {"input", "kernel"}
    assert draw_plan(plan, max_nodes=3).summarised


def test_layered_layout_is_deterministic_and_does_not_overlap():
    layers = {"a": 0, "b": 0, "c": 1, "d": 1, "e": 2}
    edges = [("a", "d"), ("b", "c"), ("c", "e"), ("d", "e")]
    widths = {k: 1.0 for k in layers}
    pos = layout.layered(layers, edges, widths)
    assert pos == layout.layered(layers, edges, widths)
    assert all(pos[k][1] == -layers[k] * layout.ROW_HEIGHT for k in layers)
    assert (pos["a"][0] - pos["b"][0]) * (pos["d"][0] - pos["c"][0]) > 0  # a->d and b->c do not cross
    assert abs(pos["c"][0] - pos["d"][0]) >= 1.0 + layout.GAP - 1e-9


@pytest.mark.skipif(layout._graphviz_layout() is None, reason="Graphviz dot with pydot or pygraphviz not installed")
def test_graphviz_layout_places_every_item_in_its_row_order():
    layers = {"a": 0, "b": 1, "c": 1, "d": 2}
    pos = layout.positions(layers, [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")], {k: 1.0 for k in layers})
    assert set(pos) == set(layers) and pos["a"][1] > pos["b"][1] > pos["d"][1]


@pytest.mark.parametrize("argv,message", [
    (["draw", "--example", "matmul_chain", "--out", "x.jpg"], "give a file ending in .png or .svg"),
    (["draw", "--out", "x.png"], "give a target file"),
    (["ablate", "--example", "mlp", "--rules", "matmul,nope", "--out", "x"], "unknown rule set"),
])
def test_command_errors_are_one_clear_line(capsys, argv, message):
    code, _, err = run(capsys, *argv)
    assert code == 2 and message in err.strip().splitlines()[-1]


def test_draw_command_summarises_with_a_note(tmp_path, capsys):
    code, out, _ = run(capsys, "draw", "--example", "matmul_chain", "--rules", "matmul", "--max-nodes", "5",
                       "--out", tmp_path / "e.png")
    assert code == 0 and out.startswith("note: E-graph of matmul_chain has") and png_size(tmp_path / "e.png")


def test_the_ablate_commands_modes_are_ablates():
    """The command line lists the modes without importing the pipeline: the same modes as ``ablate`` takes."""
    import argparse

    from eqiforge import cli
    from eqiforge.viz.ablation import MODES
    sub = next(a for a in cli.parser()._actions if isinstance(a, argparse._SubParsersAction))
    [mode] = [a for a in sub.choices["ablate"]._actions if a.dest == "mode"]
    assert tuple(mode.choices) == MODES


def test_the_ablate_command_takes_a_folder_of_programs_as_a_zoo(tmp_path, capsys):
    zoo = tmp_path / "zoo"
    zoo.mkdir()
    (zoo / "chain.py").write_text("import torch\n\nclass Model(torch.nn.Module):\n"
                                  "    def forward(self, a, b, v):\n        return a @ b @ v\n\n\n"
                                  "def get_inputs():\n    return [torch.randn(64, 64), torch.randn(64, 64), "
                                  "torch.randn(64, 1)]\n")
    code = cli.main(["ablate", "--zoo", str(zoo), "--rules", "matmul,reduction", "--workers", "1",
                     "--out", str(tmp_path / "out")])
    assert code == 0 and "| chain |" in capsys.readouterr().out
    assert (tmp_path / "out" / "zoo.png").exists()
    assert cli.main(["ablate", "--zoo", str(tmp_path / "empty"), "--out", str(tmp_path / "x")]) == 2
