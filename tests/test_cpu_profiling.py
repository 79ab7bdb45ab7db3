"""The learned cost model for the CPU: the torch backend's native calls profiled here, in the records format
GPU profiling writes, trained and evaluated by the same commands."""
import itertools

import pytest

from eqiforge.ops import native
from eqiforge.cost import get_cost_model, get_device, learned
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
    prior = RooflinePrior(get_device("cpu"))

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
    model = learned.LearnedModel.load(learned.shipped_model_file("cpu"))
    assert model.header["kernels"] is False and model.header["device"] == "cpu"
    assert model.header["training"]["records"] > 1000


def test_attention_records_time_sdpa_with_keys_in_both_layouts():
    from eqiforge.profiling.cpu import attention_layouts
    group = attention_layouts((2, 3), 16, 16, 8, "float32", causal=True)
    assert [r["attrs"][0] for r in group] == ["N", "T"] and [r["in_shapes"][1] for r in group] == [[2, 3, 16, 8],
                                                                                                 [2, 3, 8, 16]]
    assert len({r["group"] for r in group}) == 1 and all(0 < cpu_timer(r) < 1.0 for r in group)
    assert any(g[0]["op"] == "AttentionK" for g in itertools.islice(sweep_cpu(0), 60))


def gemm_model(epochs=30):
    """A model trained on GEMM records only (a synthetic clock twice the roofline's price)."""
    from eqiforge.cost.roofline import RooflinePrior
    prior = RooflinePrior(get_device("cpu"), kernels=False)
    recs = [r for g in itertools.islice((g for g in sweep_cpu(5) if g[0]["op"] == "GemmK"), 40) for r in g]
    feats = [record_features(r) for r in recs]
    return learned.LearnedModel("cpu", members=2, kernels=False).fit(feats, 2 * prior.predict(feats), epochs=epochs)


def test_the_mlps_correct_the_ops_they_were_trained_on_and_a_matmul_as_the_gemm_it_calls():
    from eqiforge.cost import node_features
    from eqiforge.cost.roofline import RooflinePrior
    model, prior = gemm_model(), RooflinePrior(get_device("cpu"), kernels=False)
    assert model.header["training"]["ops"] == ["GemmK"]
    q = (2, 4, 64, 32)
    attention = node_features("AttentionK", [q, q, q], ["float32"] * 3, q, "float32", attrs=("N", 0.2, 0))
    assert model.predict([attention])[0] == prior.predict([attention])[0]  # no records: the prior's price
    matmul = node_features("MatMul", [(96, 80), (80, 48)], ["float32"] * 2, (96, 48), "float32")
    gemm = node_features("GemmK", [(96, 80), (80, 48)], ["float32"] * 2, (96, 48), "float32",
                         attrs=("N", "N", (), 1, native.ACC))
    ratio = lambda f: model.predict([f])[0] / prior.predict([f])[0]  # noqa: E731
    assert ratio(matmul) == pytest.approx(ratio(gemm), rel=1e-6) and ratio(gemm) != pytest.approx(1.0, abs=0.05)


def test_a_node_beyond_the_training_features_gets_the_correction_at_their_edge():
    from eqiforge.cost import node_features
    model = gemm_model()
    far, farther = (node_features("GemmK", [(m, 64), (64, 64)], ["float32"] * 2, (m, 64), "float32",
                                  attrs=("N", "N", (), 1, native.ACC)) for m in (2 ** 24, 2 ** 30))
    assert model.member_log_ratios([far]) == pytest.approx(model.member_log_ratios([farther]))


def test_cpu_records_of_two_machines_train_a_model_of_one_and_it_serves_that_cpu_only(tmp_path, monkeypatch):
    from eqiforge.cost import calibrate, train
    from eqiforge.errors import EqiforgeError
    recs = [r for g in itertools.islice(sweep_cpu(1), 30) for r in g]
    records = [{**r, "device": "cpu", "seconds": 1e-4, "machine": "CPU A"} for r in recs] + \
              [{**r, "device": "cpu", "seconds": 5e-4, "machine": "CPU B"} for r in recs]
    monkeypatch.setattr(calibrate, "cpu_model", lambda: "CPU B")
    monkeypatch.setattr(train, "cpu_model", calibrate.cpu_model)
    monkeypatch.setattr(learned, "cpu_model", calibrate.cpu_model)
    assert {r["seconds"] for r in train.machine_records(records)[0]} == {5e-4}
    model = train_model(records, epochs=5)
    assert model.machine == "CPU B" and model.header["training"]["records"] < len(recs)
    with pytest.raises(EqiforgeError, match="no records of the CPU 'CPU C'.*--machine"):
        train_model(records, machine="CPU C")
    monkeypatch.setattr(learned, "DATA_DIR", tmp_path)
    model.save(tmp_path / "cpu" / learned.MODEL_FILE)
    assert learned.find_model("cpu", kernels=False)[0] is not None
    monkeypatch.setattr(learned, "cpu_model", lambda: "CPU A")
    found, why = learned.find_model("cpu", kernels=False)
    assert found is None and "trained on the CPU 'CPU B', this is 'CPU A'" in why


def test_a_saved_cpu_model_prices_with_the_calibration_it_was_trained_against(monkeypatch, tmp_path):
    from dataclasses import replace
    from eqiforge.cost import calibrate, node_features
    model = gemm_model(epochs=5)
    path = model.save(tmp_path / "model.npz")
    matmul = node_features("MatMul", [(96, 80), (80, 48)], ["float32"] * 2, (96, 48), "float32")
    before = model.predict([matmul])[0]
    slower = replace(model.device, mem_bw_gbs=model.device.mem_bw_gbs / 3, launch_us=model.device.launch_us * 3,
                     peak_tflops={d: r / 3 for d, r in model.device.peak_tflops.items()})
    monkeypatch.setattr(calibrate, "cpu_device", lambda remeasure=False: slower)  # this machine recalibrated
    loaded = learned.LearnedModel.load(path)
    assert loaded.device == model.device != slower and loaded.predict([matmul])[0] == pytest.approx(before)
    assert learned.LearnedModel("cpu", members=1, kernels=False).device == slower  # a new model: the new figures
    monkeypatch.setattr(learned, "DATA_DIR", tmp_path)
    model.save(tmp_path / "cpu" / learned.MODEL_FILE)
    assert learned.find_model("cpu", kernels=False)[0] is not None
    monkeypatch.setattr(learned.torch, "get_num_threads", lambda: model.device.sms + 2)
    found, why = learned.find_model("cpu", kernels=False)
    assert found is None and why.endswith(f"trained with {model.device.sms} threads, this process uses "
                                          f"{model.device.sms + 2}")


class _TwoNodes:
    """An executor of two nodes that runs each task here, in order."""

    def nodes(self):
        return ["node-a", "node-b"]

    def map(self, fn, tasks, timed=False):
        assert timed, "a profile times kernels: its tasks hold their node"
        for task in tasks:
            yield task, fn(task)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass


def test_a_fleet_profile_runs_a_task_per_node_and_merges_their_records_once_with_each_fingerprint(tmp_path,
                                                                                                 monkeypatch):
    from eqiforge import cli, sweep
    from eqiforge.cost import calibrate
    from eqiforge.profiling import fleet
    monkeypatch.setattr(calibrate, "cpu_device", lambda: None)  # the prior is not what this test is about
    monkeypatch.setattr(sweep, "executor_from", lambda *args, **kwargs: _TwoNodes())
    args = ["cost", "profile", "--device", "cpu", "--records", "2", "--cluster", "ray", "--out", str(tmp_path)]
    assert cli.main(args) == 0
    records = read_records(tmp_path / "cpu" / "records.jsonl")
    assert len(records) == 2 and len({r["key"] for r in records}) == 2  # the second node's same keys: skipped
    assert all(r["node"] == sweep.this_node() and r["fingerprint"]["cpu"] == calibrate.cpu_model()
               and r["seconds"] > 0 for r in records)
    assert fleet.merge(tmp_path, {"node": "n", "device": None, "run": "no CUDA device"}) == \
        "n: no CUDA device, nothing measured"
    assert cli.main(args) == 0  # again: the keys measured are passed to the nodes, which measure the next ones
    again = read_records(tmp_path / "cpu" / "records.jsonl")
    assert len(again) == 4 and {r["key"] for r in records} < {r["key"] for r in again}
