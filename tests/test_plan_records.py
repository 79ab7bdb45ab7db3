"""Plan-level cost data (eqiforge/cost/plans.py): a measured choice's records hold each plan's nodes, which
price back to the plan's prediction; plan-level metrics; op factors fitted to measured plans (on a SYNTHETIC
clock whose truth is known); the `eqiforge cost train|eval --plans` commands."""
import json
import math
import os

import numpy as np
import pytest
import torch

import eqiforge
from eqiforge import api, choice, cli, cost
from eqiforge.cost import learned, plans
from eqiforge.profiling import commands


def test_a_plans_recorded_nodes_price_back_to_its_prediction(monkeypatch, tmp_path):
    monkeypatch.setenv("EQIFORGE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(api, "NEXT_PLANS_BAND", 100.0)
    a, b, c = torch.randn(128, 128), torch.randn(128, 128), torch.randn(128, 1)
    with torch.no_grad():
        opt = eqiforge.optimize(lambda a, b, c: a * c + b * c, (a, b, c), backend="torch", measure="always",
                                measure_seconds=1.0)
    [record] = [json.loads(line) for line in (tmp_path / "measure" / choice.RECORDS).read_text().splitlines()]
    [group] = plans.plan_groups([record])
    priced = [c for c in record["candidates"] if "nodes" in c]
    assert [c["name"] for c in priced][:2] == ["plan", "plan 2"] and "nodes" not in record["candidates"][0]
    prior = cost.RooflinePrior(cost.get_device(os.environ.get("EQIFORGE_DEVICE", "cpu")), kernels=False)
    assert plans.plan_seconds(prior, group) == pytest.approx([c["predicted_s"] for c in priced], rel=1e-9)
    assert group.seconds == [c["measured_s"] for c in priced]


def synthetic_groups(count, seed, truth):
    """Programs of 2-4 plans over elementwise and matmul nodes of one size, timed by ``truth`` (op -> factor
    over the roofline prior), with 3% noise, each program's times scaled by its own factor of 1-3 (what no
    node price sees: the call's host work)."""
    rng = np.random.default_rng(seed)
    prior = cost.RooflinePrior(cost.get_device("cpu"), kernels=False)
    groups = []
    for p in range(count):
        candidates, overhead = [], rng.uniform(1.0, 3.0)
        n = int(rng.integers(64, 512))  # one size per program: its plans differ in their ops, as real ones do
        for _ in range(rng.integers(2, 5)):
            nodes = [cost.node_features("Add", [(n, n), (n, n)], ["float32"] * 2, (n, n), "float32")
                     for _ in range(rng.integers(1, 6))]
            nodes += [cost.node_features("MatMul", [(n, n), (n, 64)], ["float32"] * 2, (n, 64), "float32")
                      for _ in range(rng.integers(0, 3))]
            base = prior.predict(nodes)
            seconds = overhead * sum(b * truth.get(f.op, 1.0) for b, f in zip(base, nodes)) \
                * math.exp(rng.normal(0, 0.03))
            candidates.append((nodes, seconds))
        groups.append(plans.PlanGroup(f"program {seed}-{p}", [c[0] for c in candidates], [c[1] for c in candidates]))
    return groups


def test_op_factors_fitted_to_measured_plans_find_the_true_costs_and_rank_held_out_programs_better():
    truth = {"Add": 4.0, "MatMul": 0.5}  # elementwise adds dearer than the prior says, products cheaper
    model = learned.LearnedModel("cpu", kernels=False)
    before = plans.plan_metrics(synthetic_groups(40, 1, truth), model)
    model.fit_plans(synthetic_groups(120, 0, truth))
    factors = model.header["op_factors"]  # fitted to times relative within a program, shrunk towards 1
    assert 2.5 < math.exp(factors["Add"] - factors["MatMul"]) <= 8.0  # the truth's ratio: 8
    after = plans.plan_metrics(synthetic_groups(40, 1, truth), model)
    assert after["kendall_tau"] > before["kendall_tau"] + 0.02 and after["top1_regret"] <= before["top1_regret"]
    assert "op factors from 120 programs" in model.name


def test_a_cost_every_plan_of_a_program_shares_is_no_op_factor():
    """Each program's plans run 1-3x their prices (host work no node shows): relative to each other they are
    priced right, and the fit leaves the ops alone."""
    model = learned.LearnedModel("cpu", kernels=False)
    model.fit_plans(synthetic_groups(120, 0, {}))
    assert all(abs(w) < 0.05 for w in model.header["op_factors"].values())


def test_cross_validation_prices_each_program_by_factors_fitted_without_it_and_leaves_the_model_alone():
    truth = {"Add": 4.0, "MatMul": 0.5}
    groups = synthetic_groups(60, 2, truth)
    model = learned.LearnedModel("cpu", kernels=False)
    header = json.dumps(model.header)
    bare = plans.plan_metrics(groups, model)
    crossed = plans.cross_validated(model, groups, folds=4)
    assert json.dumps(model.header) == header  # each fold's factors were fitted on a copy of the header
    assert crossed["programs"] == 60 and crossed["kendall_tau"] > bare["kendall_tau"] + 0.02
    assert crossed["tau_apart"] > bare["tau_apart"] and crossed["top1_regret"] < bare["top1_regret"]


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


def test_op_factors_survive_saving_and_the_commands_fit_and_rank(tmp_path, capsys):
    groups = synthetic_groups(60, 0, {"Add": 3.0})
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
    factors = loaded.header["op_factors"]
    # the truth's ratio is 3 over the roofline prior; the fit is over the model's prices, where the MLPs (4 records,
    # 5 epochs: their numbers differ by processor) price the MatMul, so the ratio carries their error too
    assert 1.8 < math.exp(factors["Add"] - factors.get("MatMul", 0.0)) <= 3.6
    args = parser.parse_args(["cost", "eval", "--data", str(kernels), "--plans", str(tmp_path / "plans.jsonl"),
                              "--model", str(model_file), "--held-out", "0.34"])
    assert args.run(args) == 0
    out = capsys.readouterr().out
    assert "programs of" in out and "roofline prior (cpu" in out and "op factors (5-fold)" in out


def test_a_plans_file_without_measured_plans_is_a_clear_error(tmp_path):
    (tmp_path / "empty.jsonl").write_text(json.dumps({"program": "p", "candidates": []}) + "\n")
    with pytest.raises(eqiforge.EqiforgeError, match="no measured choice with two plans or more"):
        commands._plan_groups(tmp_path / "empty.jsonl", None)
