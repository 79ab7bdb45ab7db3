"""The learned cost model for the CPU: the torch backend's native calls profiled here, in the records format
GPU profiling writes, trained and evaluated by the same commands."""
import itertools

import pytest

from eqiforge import native
from eqiforge.cost import get_cost_model, learned
from eqiforge.cost.dataset import read_records, record_features, tuplify
from eqiforge.cost.train import evaluate_models, train_model
from eqiforge.profiling.cpu import cpu_timer, gemm_layouts, sweep_cpu
from eqiforge.profiling.profile import profile


def test_a_gemm_group_is_one_problem_in_its_four_layouts_and_every_record_is_a_native_call():
    group = gemm_layouts(5, 7, 3, "float32", bias=True)
    assert [tuple(r["attrs"][:2]) for r in group] == [("N", "N"), ("N", "T"), ("T", "N"), ("T", "T")]
    assert [r["in_shapes"][:2] for r in group] == [[[5, 3], [3, 7]], [[5, 3], [7, 3]], [[3, 5], [3, 7]],
                                                   [[3, 5], [7, 3]]]
    assert len({r["group"] for r in group}) == 1 and len({r["key"] for r in group}) == 4
    for rec in itertools.chain.from_iterable(itertools.islice(sweep_cpu(3), 20)):
        assert native.is_native(rec["op"], tuplify(rec["attrs"]), [tuple(s) for s in rec["in_shapes"]])


def test_the_cpu_timer_times_what_the_plan_would_call():
    small, large = gemm_layouts(16, 16, 16, "float32", False)[0], gemm_layouts(256, 256, 256, "float32", False)[0]
    t_small, t_large = cpu_timer(small), cpu_timer(large)
    assert 0 < t_small < t_large < 1.0


@pytest.fixture
def cpu_records(tmp_path, monkeypatch):
    """Records of the sweep timed by a synthetic CPU on which a GEMM with both operands as given runs 3x
    slower than with either transposed (the roofline prices the layouts alike and picks the first):
    what a model must learn."""
    from eqiforge.cost.roofline import RooflinePrior
    monkeypatch.setenv("EQIFORGE_CACHE_DIR", str(tmp_path / "cache"))
    prior = RooflinePrior("cpu")

    def timer(rec):
        seconds = prior.node_seconds(record_features(rec))
        return seconds * (3.0 if rec["op"] == "GemmK" and rec["attrs"][:2] == ["N", "N"] else 1.0)
    groups = itertools.islice(sweep_cpu(0), 160)
    profile(tmp_path / "cpu", groups, timer, "cpu", learned.library_versions(), budget_s=600)
    return read_records(tmp_path / "cpu")


def test_a_model_trained_on_cpu_records_prices_the_torch_backend_and_beats_the_roofline(cpu_records, tmp_path,
                                                                                        monkeypatch):
    model = train_model(cpu_records, seed=0, epochs=300)
    assert model.header["kernels"] is False and model.device.name == "cpu"
    scores = evaluate_models(cpu_records, [model])
    prior, learned_scores = scores["roofline prior (cpu)"], scores[model.name]
    assert learned_scores["top1_slowdown"] < prior["top1_slowdown"]
    assert learned_scores["mape"] < prior["mape"]
    monkeypatch.setattr(learned, "DATA_DIR", tmp_path)
    model.save(tmp_path / "cpu" / learned.MODEL_FILE)
    assert get_cost_model("learned", "cpu").name == model.name  # the torch backend on the CPU finds it
    found, why = learned.find_model("cpu", kernels=True)
    assert found is None and "trained for the torch backend" in why  # not for generated kernels


def test_committed_records_are_read_gzipped_and_never_twice(tmp_path):
    import gzip
    import json
    lines = "".join(json.dumps({"key": str(i), "seconds": 1.0}) + "\n" for i in range(3))
    (tmp_path / "records.jsonl.gz").write_bytes(gzip.compress(lines.encode()))
    assert [r["key"] for r in read_records(tmp_path)] == ["0", "1", "2"]
    (tmp_path / "records.jsonl").write_text(lines + json.dumps({"key": "3", "seconds": 1.0}) + "\n")
    assert [r["key"] for r in read_records(tmp_path)] == ["0", "1", "2", "3"]  # the plain file, which grows


def test_the_shipped_cpu_model_loads_for_the_torch_backend():
    model = learned.LearnedModel.load(learned.DATA_DIR / "cpu" / learned.MODEL_FILE)
    assert model.header["kernels"] is False and model.header["device"] == "cpu"
    assert model.header["training"]["records"] > 1000
