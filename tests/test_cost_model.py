"""The learned cost model's CPU-checkable parts: features, fitting (on a SYNTHETIC target), files, metrics,
the shape split, and the profiling loop with a fake timer. No GPU timings exist in these tests."""
import itertools
import math

import numpy as np
import pytest

from eqiforge import cost
from eqiforge.cost import configs, dataset, learned, metrics, vector
from eqiforge.cost.train import evaluate_models, train_model
from eqiforge.profiling import candidates, commands
from eqiforge.profiling.profile import profile

H100 = cost.get_device("H100")
TILE = (64, 64, 32, 8, 4, 3)


def gemm(m, n, k, tile=TILE, split_k=1, dtype="float16", epilogue=("acc",)):
    return cost.node_features("GemmK", [(m, k), (k, n)], [dtype, dtype], (m, n), dtype,
                              attrs=("N", "N", tile, split_k, epilogue))


def test_gemm_features_hand_computed():
    f = gemm(128, 256, 64)
    assert f.flops == 2 * 128 * 256 * 64
    assert f.bytes == (128 * 64 + 64 * 256 + 128 * 256) * 2
    assert vector.launch_config(f)["grid"] == 2 * 4  # (128/64) x (256/64) tiles
    per_sm, full, efficiency = vector.waves(8, H100.sms)
    assert (full, per_sm, efficiency) == (1, 8 / 132, 8 / 132)
    v = dict(zip(vector.FEATURE_NAMES, vector.feature_vector(f, H100)))
    assert (v["log2_m"], v["log2_n"], v["log2_k"], v["log2_grid"]) == (7, 8, 6, 3)
    assert v["dtype_float16"] == 1 and v["op_GemmK"] == 1 and v["has_resources"] == 0
    assert v["wave_efficiency"] == pytest.approx(8 / 132)
    assert v["smem_fraction"] == pytest.approx(3 * (64 + 64) * 32 * 2 / (227 * 1024))
    assert v["m_aligned16"] == v["n_aligned16"] == v["k_aligned16"] == 1
    assert v["log_intensity"] == pytest.approx(math.log(f.flops / f.bytes + 1e-3))


def test_waves_and_fused_work():
    assert vector.waves(264, 132) == (2.0, 2, 1.0)
    assert vector.waves(133, 132)[1:] == (2, 133 / 264)
    epi = ("un", "gelu", ("bin", "add", ("acc",), ("in", 0)))
    f = cost.node_features("GemmK", [(64, 64), (64, 64), (1, 64)], ["float16"] * 3, (64, 64), "float16",
                           attrs=("N", "T", TILE, 2, epi))
    assert vector.fused_work(f) == (9.0, 4, 1)  # gelu 8 + add 1; nodes: gelu, add, acc, in
    v = dict(zip(vector.FEATURE_NAMES, vector.feature_vector(f, H100, {"n_regs": 128, "n_spills": 0, "shared": 2048})))
    assert (v["b_transposed"], v["log2_split_k"], v["has_resources"], v["log2_registers"], v["shared_kib"]) == \
        (1, 1, 1, 7, 2)


def test_static_resources_from_a_hopper_compile(tmp_path):
    from eqiforge.lower.triton import StaticCompileUnavailable
    from eqiforge.profiling.static import cached_static_resources
    rec = dataset.kernel_record("GemmK", [(128, 64), (64, 256)], ["float16"] * 2, (128, 256), "float16",
                                ("N", "N", TILE, 1, ("acc",)))
    try:
        res = cached_static_resources(rec, cache_dir=tmp_path)
    except StaticCompileUnavailable as err:
        pytest.skip(f"this triton cannot target CUDA: {err}")
    assert res["n_regs"] > 0 and res["shared"] > 0 and res["n_spills"] >= 0
    assert cached_static_resources(rec, cache_dir=tmp_path) == res  # from the cache
    assert len(list(tmp_path.iterdir())) == 1


# ----------------------------------------------------------------------------------- synthetic data

def synthetic_seconds(f) -> float:
    """A SYNTHETIC 'measured' time: the prior times a known function of the features (no GPU involved)."""
    v = dict(zip(vector.FEATURE_NAMES, vector.feature_vector(f, H100)))
    prior = cost.RooflinePrior(H100, kernels=True).node_seconds(f)
    return prior * math.exp(0.6 * (v["log2_block_k"] - 5) - 0.4 * v["wave_efficiency"] + 0.3 * v["log2_split_k"])


def synthetic_records(groups=60, seed=0):
    recs = []
    for group in itertools.islice(candidates.sweep(H100, seed), groups):
        for rec in group:
            recs.append({**rec, "device": "H100", "seconds": synthetic_seconds(dataset.record_features(rec))})
    return recs


@pytest.fixture(scope="module")
def records():
    return synthetic_records()


@pytest.fixture(scope="module")
def model(records):
    return train_model(records, epochs=300)


def test_shape_split_keeps_shapes_apart(records):
    train, test = dataset.split_by_shape(records)
    assert train and test and len(train) + len(test) == len(records)
    assert not {r["shape"] for r in train} & {r["shape"] for r in test}


def test_training_recovers_a_synthetic_target(records, model):
    table = evaluate_models(records, [model])
    prior, learned_row = table[cost.RooflinePrior(H100).name], table[model.name]
    assert learned_row["mape"] < 0.1 < prior["mape"]
    assert learned_row["kendall_tau"] > 0.8
    assert learned_row["top1_slowdown"] <= prior["top1_slowdown"]


def test_save_load_round_trip_and_determinism(records, model, tmp_path):
    feats = [dataset.record_features(r) for r in records[:50]]
    first = model.predict(feats)
    assert np.array_equal(first, model.predict(feats))
    loaded = learned.LearnedModel.load(model.save(tmp_path / "model.npz"))
    assert np.array_equal(first, loaded.predict(feats))
    assert loaded.header["device"] == "H100" and loaded.header["versions"] == learned.library_versions()
    again = train_model(records, epochs=300)
    assert np.array_equal(first, again.predict(feats))  # fixed seeds: the same fit


def test_get_cost_model_learned_loads_or_names_the_prior(model, tmp_path, monkeypatch):
    monkeypatch.setattr(learned, "DATA_DIR", tmp_path)
    monkeypatch.setattr(learned, "PACKAGED_DIR", tmp_path / "none")
    fallback = cost.get_cost_model("learned", "H100", kernels=True)
    assert fallback.name == "roofline prior (H100; no learned model for this device)"
    model.save(tmp_path / "H100" / "model.npz")
    assert isinstance(cost.get_cost_model("learned", "H100", kernels=True), learned.LearnedModel)
    assert "roofline prior (A100" in cost.get_cost_model("learned", "A100", kernels=True).name


# ----------------------------------------------------------------------------------- metrics

def test_metrics_on_hand_made_groups():
    measured = [1.0, 2.0, 4.0]
    assert metrics.top_k_slowdown([3, 2, 1], measured, 1) == 3.0  # picks the 4.0 one
    assert metrics.top_k_slowdown([3, 2, 1], measured, 2) == 1.0
    assert metrics.group_tau([1, 2, 3], measured) == 1.0 and metrics.group_tau([3, 2, 1], measured) == -1.0
    assert metrics.group_tau([1], [1.0]) is None
    result = metrics.evaluate(["a", "a", "a", "b"], [1, 2, 3, 9], measured + [1.0])
    assert (result["groups"], result["top1_slowdown"], result["kendall_tau"]) == (1, 0.0, 1.0)
    assert metrics.mape([1.1, 2.0], [1.0, 2.0]) == pytest.approx(0.05)


# ----------------------------------------------------------------------------------- profiling

def test_profile_without_cuda_exits_cleanly(capsys, monkeypatch):
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert commands.main(["profile"]) == 0
    assert "no CUDA device" in capsys.readouterr().err


def test_profile_records_are_incremental_and_resumable(tmp_path):
    clock = iter(range(10_000))
    fake_timer = lambda rec: 1e-5 * (1 + len(rec["key"]) % 3)  # noqa: E731
    groups = lambda: candidates.sweep(H100, seed=1)  # noqa: E731
    first = profile(tmp_path, groups(), fake_timer, "H100", {}, budget_s=30, clock=lambda: next(clock))
    assert first.stop == "time budget" and first.measured == 29  # ticks 1..29 are inside the 30-tick budget
    assert len(dataset.read_records(tmp_path)) == 29
    with open(tmp_path / dataset.RECORDS_FILE, "a") as fh:
        fh.write('{"torn": ')  # a run killed mid-write
    second = profile(tmp_path, groups(), fake_timer, "H100", {}, budget_s=1e9, max_records=20,
                     clock=lambda: next(clock))
    assert (second.skipped, second.measured, second.stop) == (29, 20, "record cap")
    keys = [r["key"] for r in dataset.read_records(tmp_path)]
    assert len(keys) == len(set(keys)) == 49


def test_profile_keeps_failures_as_data(tmp_path):
    def timer(rec):
        raise RuntimeError("out of resources")
    run = profile(tmp_path, [candidates.gemm_group(256, 256, 256, "float16", ("acc",), H100)[:2]], timer, "H100", {})
    assert (run.failed, run.measured) == (2, 0)
    assert all(r["seconds"] is None for r in dataset.read_records(tmp_path))


def test_sweep_groups_are_complete_and_active_selection_picks_predicted_best(model):
    group = candidates.gemm_group(1024, 1024, 4096, "float16", ("acc",), H100)
    assert len({r["group"] for r in group}) == 1 and len({r["key"] for r in group}) == len(group) > 10
    other = candidates.gemm_group(512, 384, 128, "bfloat16", ("acc",), H100)
    pool = group + other
    chosen = candidates.active_selection(model, pool, 3, dataset.record_features)
    predicted = model.predict([dataset.record_features(r) for r in group])
    assert chosen[0] is group[int(np.argmin(predicted))] and len(chosen) == 3


def test_record_spec_matches_the_record():
    from eqiforge.lower import kernels as K
    from eqiforge.profiling.measure import record_spec
    rec = candidates.gemm_group(256, 128, 1024, "float16", ("bin", "add", ("acc",), ("in", 0)), H100)[-1]
    spec, operands = record_spec(rec)
    assert isinstance(spec, K.GemmSpec) and spec.tile == K.Tile(*rec["attrs"][2]) and spec.split_k == rec["attrs"][3]
    assert [list(s) for s, _ in operands] == rec["in_shapes"]


# ------------------------------------------------------------------------------------ GEMM configs

def test_the_gemm_config_space_follows_the_problem_shape():
    assert configs.gemm_configs(gemm(256, 256, 64, tile=())) == [(t, 1) for t, _, _ in configs.GEMM_TILES]
    # a small output with a long reduction: the tiles that fit it, and split-K
    assert configs.gemm_configs(gemm(8, 16, 2048, tile=())) == [((16, 16, 32, 8, 2, 2), 1),
                                                                 (configs.SPLIT_K_TILE, configs.SPLIT_K)]
    assert configs.gemm_configs(gemm(40, 70, 64, tile=())) == [((64, 128, 32, 8, 4, 4), 1), ((64, 64, 32, 8, 4, 4), 1),
                                                               ((32, 32, 32, 8, 4, 4), 1),
                                                               ((16, 16, 32, 8, 2, 2), 1)]


@pytest.mark.parametrize("mnk", [(256, 256, 512), (8, 16, 4096), (2048, 4096, 1024)])
def test_an_untiled_gemm_is_priced_at_its_cheapest_config(mnk):
    untiled = gemm(*mnk, tile=())
    variants = [configs.with_config(untiled, *c) for c in configs.gemm_configs(untiled)]
    for model in (cost.RooflinePrior(H100, kernels=True), learned.LearnedModel(H100, members=2, hidden=8)):
        prices = model.predict([untiled, *variants])
        # (the MLPs run in float32: a batch of other nodes may round a price in its last digits)
        assert math.isfinite(prices[0]) and prices[0] == pytest.approx(min(prices[1:]), rel=1e-6)
        [price], [chosen] = configs.best_prices(model.predict, [untiled])
        assert price == pytest.approx(prices[0], rel=1e-6)
        assert model.predict([configs.with_config(untiled, *chosen)])[0] == pytest.approx(price, rel=1e-6)
    # the torch backend's native matmul picks its own tiles: priced as it is, no config chosen
    native = cost.RooflinePrior(H100, kernels=False)
    assert native.predict([untiled])[0] == native.node_seconds(untiled) < math.inf
