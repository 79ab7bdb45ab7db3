"""Plan-level cost data (eqiforge/cost/plans.py): a measured choice's records hold each plan's nodes, which
price back to the plan's prediction; plan-level metrics; plan figures fitted to measured plans (on a SYNTHETIC
clock whose truth is known); the `eqiforge cost train|eval --plans` commands."""
import json
import math
import os

import numpy as np
import pytest
import torch

import eqiforge
from eqiforge import cli, cost
from eqiforge.decide import choice
from eqiforge.decide import program
from eqiforge.cost import learned, plans
from eqiforge.profiling import commands


def test_a_plans_recorded_nodes_price_back_to_its_prediction(monkeypatch, tmp_path):
    monkeypatch.setenv("EQIFORGE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(program, "NEXT_PLANS_BAND", 100.0)
    a, b, c = torch.randn(128, 128), torch.randn(128, 128), torch.randn(128, 1)
    with torch.no_grad():
        eqiforge.optimize(lambda a, b, c: a * c + b * c, (a, b, c), backend="torch", measure="always",
                          measure_seconds=1.0)
    [record] = [json.loads(line) for line in (tmp_path / "measure" / choice.RECORDS).read_text().splitlines()]
    [group] = plans.plan_groups([record])
    priced = [c for c in record["candidates"] if "nodes" in c]
    assert [c["name"] for c in priced][:2] == ["plan", "plan 2"] and "nodes" not in record["candidates"][0]
    prior = cost.RooflinePrior(cost.get_device(os.environ.get("EQIFORGE_DEVICE", "cpu")), kernels=False)
    assert plans.plan_seconds(prior, group) == pytest.approx([c["predicted_s"] for c in priced], rel=1e-9)
    assert group.seconds == [c["measured_s"] for c in priced]


#: a clock unlike the calibrated prior: elementwise passes stream at 1/4 its bandwidth, products at 4x its rate
TRUTH = {"compute_scale": 0.25, "bandwidth": {"elementwise": 0.25}}


def true_device(truth):
    """The CPU's calibrated device with ``truth``'s compute scale and bandwidth multiples per memory class."""
    device = cost.get_device("cpu")
    return plans.plan_device(device, {
        "call_us": device.launch_us, "view_us": device.view_us, "compute_scale": truth.get("compute_scale", 1.0),
        "bandwidth_gbs": {c: device.mem_bw_gbs * truth.get("bandwidth", {}).get(c, 1.0)
                          for c in plans.MEMORY_CLASS_NAMES}})


def synthetic_groups(count, seed, truth):
    """Programs of 2-4 plans over elementwise and matmul nodes of one size, timed by the roofline on
    ``true_device(truth)``, with 3% noise, each program's times scaled by its own factor of 1-3 (what no node
    price sees: the call's host work)."""
    rng = np.random.default_rng(seed)
    clock = cost.RooflinePrior(true_device(truth), kernels=False)
    groups = []
    for p in range(count):
        candidates, overhead = [], rng.uniform(1.0, 3.0)
        n = int(rng.integers(64, 512))  # one size per program: its plans differ in their ops, as real ones do
        for _ in range(rng.integers(2, 5)):
            nodes = [cost.node_features("Add", [(n, n), (n, n)], ["float32"] * 2, (n, n), "float32")
                     for _ in range(rng.integers(1, 6))]
            nodes += [cost.node_features("MatMul", [(n, n), (n, 64)], ["float32"] * 2, (n, 64), "float32")
                      for _ in range(rng.integers(0, 3))]
            seconds = overhead * float(np.sum(clock.predict(nodes))) * math.exp(rng.normal(0, 0.03))
            candidates.append((nodes, seconds))
        groups.append(plans.PlanGroup(f"program {seed}-{p}", [c[0] for c in candidates], [c[1] for c in candidates]))
    return groups


def test_plan_figures_fitted_to_measured_plans_find_the_true_clock_and_rank_held_out_programs_better():
    model = learned.LearnedModel("cpu", kernels=False)  # no MLP trained: its figures are all there is to fit
    before = plans.plan_metrics(synthetic_groups(40, 1, TRUTH), model)
    model.fit_plans(synthetic_groups(120, 0, TRUTH))
    figures = model.header["plan_figures"]
    # fitted to times relative within a program, held towards the model's own figures: an Add's price against a
    # product's moves most of the way from the prior's ratio to the clock's
    clock, prior = cost.RooflinePrior(true_device(TRUTH)), cost.RooflinePrior(cost.get_device("cpu"))
    add_to_product = lambda m: np.divide(*m.predict([  # noqa: E731
        cost.node_features("Add", [(256, 256), (256, 256)], ["float32"] * 2, (256, 256), "float32"),
        cost.node_features("MatMul", [(256, 256), (256, 64)], ["float32"] * 2, (256, 64), "float32")]))
    assert abs(math.log(add_to_product(model) / add_to_product(clock))) \
        < 0.5 * abs(math.log(add_to_product(prior) / add_to_product(clock)))
    after = plans.plan_metrics(synthetic_groups(40, 1, TRUTH), model)
    # the clock's own prices: noise is all that is left
    best = plans.plan_metrics(synthetic_groups(40, 1, TRUTH), clock)
    assert after["kendall_tau"] >= max(before["kendall_tau"], best["kendall_tau"] - 0.01)
    assert after["top1_regret"] <= before["top1_regret"]
    assert "figures from 120 programs' plans" in model.name
    assert model.prior.device.bandwidth_gbs("Add", "binary") == pytest.approx(figures["bandwidth_gbs"]["elementwise"])


def test_a_cost_every_plan_of_a_program_shares_moves_no_figure():
    """Each program's plans run 1-3x their prices (host work no node shows): relative to each other they are
    priced right, and the fit leaves the model's figures as they are."""
    model = learned.LearnedModel("cpu", kernels=False)
    model.fit_plans(synthetic_groups(120, 0, {}))
    figures, device = model.header["plan_figures"], model.device
    assert figures["compute_scale"] == pytest.approx(1.0, abs=0.05)
    for name, bandwidth in figures["bandwidth_gbs"].items():
        assert bandwidth == pytest.approx(device.mem_bw_gbs, rel=0.05), name


def test_figures_equal_to_the_devices_own_price_as_the_prior_does():
    # kernel nodes take the class of what they compute
    assert [cost.devices.memory_class(op, "kernel") for op in ("GemmK", "AttentionK", "RowReduceK", "PointwiseK")] \
        == ["contraction", "contraction", "reduction", "elementwise"]
    assert cost.devices.memory_class("Concat", "movement") == "other"
    device = cost.get_device("cpu")
    same = plans.plan_device(device, {"call_us": device.launch_us, "view_us": device.view_us, "compute_scale": 1.0,
                                      "bandwidth_gbs": dict.fromkeys(plans.MEMORY_CLASS_NAMES, device.mem_bw_gbs)})
    [group] = synthetic_groups(1, 3, {})
    for plan in group.plans:
        assert np.allclose(cost.RooflinePrior(same).predict(plan), cost.RooflinePrior(device).predict(plan), rtol=1e-12)


def test_cross_validation_prices_each_program_by_figures_fitted_without_it_and_leaves_the_model_alone():
    groups = synthetic_groups(60, 2, TRUTH)
    model = learned.LearnedModel("cpu", kernels=False)
    header = json.dumps(model.header)
    bare = plans.plan_metrics(groups, model)
    crossed = plans.cross_validated(model, groups, folds=4)
    assert json.dumps(model.header) == header  # each fold's figures were fitted on a copy of the header
    best = plans.plan_metrics(groups, cost.RooflinePrior(true_device(TRUTH)))
    assert crossed["programs"] == 60 and crossed["kendall_tau"] >= max(bare["kendall_tau"], best["kendall_tau"] - 0.01)
    assert crossed["tau_apart"] > bare["tau_apart"] and crossed["top1_regret"] < bare["top1_regret"]


def test_kernel_corrections_that_rank_plans_worse_are_switched_off_for_plans():
    """MLPs trained on a clock where a product costs 8x or 1/8 the prior by turns of its size misrank the plans
    of a clock without that: no figure undoes a correction that varies by program, so fit_plans keeps the
    figures and leaves the corrections out of plan prices."""
    model = learned.LearnedModel("cpu", members=1, kernels=False)
    sizes = [64, 96, 128, 160, 192, 256, 320, 384, 448, 512]
    feats = [cost.node_features("GemmK", [(n, n), (n, 64)], ["float32"] * 2, (n, 64), "float32",
                                attrs=("N", "N", (), 1, ("acc",))) for n in sizes]
    model.fit(feats, model.prior.predict(feats) * 8.0 ** np.resize([1, -1], len(sizes)), epochs=400)
    groups = synthetic_groups(60, 4, {})
    model.fit_plans(groups)
    assert model.header["kernel_corrections"] is False and "MLPs off for plans" in model.name
    tau = model.header["training"]["plans"]["cross_validated_tau"]
    assert tau["kernel MLPs off"] > tau["kernel MLPs on"] + 0.03
    assert np.all(model.corrections(groups[0].plans[0]) == 1.0)


def test_plan_metrics_of_a_perfect_and_a_reversed_ranking():
    class Exact:
        name = "exact"

        def predict(self, nodes):
            return np.array([n.flops for n in nodes])
    nodes = lambda k: [cost.node_features("Add", [(k, k), (k, k)], ["float32"] * 2, (k, k), "float32")]  # noqa: E731
    group = plans.PlanGroup("p", [nodes(8), nodes(16), nodes(32)], [1.0, 4.0, 16.0])
    assert plans.plan_metrics([group], Exact()) == {"programs": 1, "plans": 3, "kendall_tau": 1.0, "tau_apart": 1.0,
                                                    "top1_regret": 0.0}
    near = plans.PlanGroup("p", group.plans, [1.0, 1.01, 16.0])  # the first two are a tie within the noise
    assert plans.plan_metrics([near], Exact())["tau_apart"] == 1.0
    tied = plans.PlanGroup("p", [nodes(8), nodes(8), nodes(32)], [1.0, 3.0, 16.0])  # the pick is either of two
    assert plans.plan_metrics([tied], Exact())["top1_regret"] == 1.0
    reversed_group = plans.PlanGroup("p", group.plans, [16.0, 4.0, 1.0])
    assert plans.plan_metrics([reversed_group], Exact())["kendall_tau"] == -1.0
    assert plans.plan_metrics([reversed_group], Exact())["top1_regret"] == 15.0


@pytest.mark.slow
def test_plan_figures_survive_saving_and_the_commands_fit_and_rank(tmp_path, capsys):
    groups = synthetic_groups(60, 0, TRUTH)
    records = [{"program": g.program, "candidates": [
        {"name": f"plan {i}", "measured_s": s, "nodes": [
            {"op": f.op, "in_shapes": [list(x) for x in f.in_shapes], "in_dtypes": ["float32"] * len(f.in_shapes),
             "out_shape": list(f.out_shape), "dtype": f.dtype, "attrs": []} for f in plan]}
        for i, (plan, s) in enumerate(zip(g.plans, g.seconds))]} for g in groups]
    (tmp_path / "plans.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    kernels = tmp_path / "kernels.jsonl"  # the kernel-level records the MLPs train on (a synthetic clock)
    recs = []
    for m, n, k in [(64, 64, 64), (128, 256, 64), (256, 128, 512), (512, 512, 128), (96, 200, 300), (300, 96, 40)]:
        rec = cost.dataset.kernel_record("GemmK", [(m, k), (k, n)], ["float32"] * 2, (m, n), "float32",
                                         ("N", "N", None, 1, ("acc",)))
        recs.append({**rec, "device": "cpu", "seconds": 2 * m * n * k / 5e10 + 5e-6})
    kernels.write_text("".join(json.dumps(r) + "\n" for r in recs))
    model_file = tmp_path / "model.npz"
    parser = cli.parser()
    args = parser.parse_args(["cost", "train", "--data", str(kernels), "--plans", str(tmp_path / "plans.jsonl"),
                              "--out", str(model_file), "--epochs", "5", "--held-out", "0.34"])
    assert args.run(args) == 0
    loaded = learned.LearnedModel.load(model_file)
    figures = loaded.header["plan_figures"]
    assert set(figures["bandwidth_gbs"]) == set(plans.MEMORY_CLASS_NAMES)
    elementwise = figures["bandwidth_gbs"]["elementwise"] / loaded.device.mem_bw_gbs
    assert elementwise < 0.67  # the truth's 1/4, towards which the fit moves (MLPs on or off, as they rank)
    assert loaded.predict(groups[0].plans[0]) == pytest.approx(
        cost.RooflinePrior(plans.plan_device(loaded.device, figures)).predict(groups[0].plans[0])
        * loaded.corrections(groups[0].plans[0]))
    args = parser.parse_args(["cost", "eval", "--data", str(kernels), "--plans", str(tmp_path / "plans.jsonl"),
                              "--model", str(model_file), "--held-out", "0.34"])
    assert args.run(args) == 0
    out = capsys.readouterr().out
    assert "programs of" in out and "roofline prior (cpu" in out and "plan figures, MLPs off (5-fold)" in out


def test_a_plans_file_without_measured_plans_is_a_clear_error(tmp_path):
    (tmp_path / "empty.jsonl").write_text(json.dumps({"program": "p", "candidates": []}) + "\n")
    with pytest.raises(eqiforge.EqiforgeError, match="no measured choice with two plans or more"):
        commands._plan_groups(tmp_path / "empty.jsonl", None)
