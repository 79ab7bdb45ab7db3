"""The GPU cost model against published timings: the dataset's loader, the calls' data flow, the fit of device
figures, their use by default, the configurations' prices, and the evaluation command.

``tests/data/kernelbench_fixture.json`` holds the rows of ``bench/data/gpu/kernelbench.json.gz`` (built by
``bench/kernelbench_data.py`` from KernelBench's published times) for a few problems of each level, on the
H100 SXM, H100 PCIe and B200 setups, every configuration published for them.
"""
import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from eqiforge.cost import RooflinePrior, configurations, get_device, gpu_eval, gpu_fit
from eqiforge.cost.as_written import call_terms, generic_calls, written_seconds
from eqiforge.cost.devices import DEVICES
from eqiforge.cost.published import DATASET, load_published
from eqiforge.errors import EqiforgeError
from eqiforge.frontend.as_written import WrittenCall, written_calls
from eqiforge.profiling import commands

FIXTURE = Path(__file__).parent / "data" / "kernelbench_fixture.json"


def call(op, ins, outs, args=(), sources=None, dtype="float32"):
    return WrittenCall(op, tuple(map(tuple, ins)), (dtype,) * len(ins), tuple(map(tuple, outs)), (dtype,) * len(outs),
                       tuple(args), tuple(sources if sources is not None else [-1] * len(ins)))


def test_written_calls_record_which_call_made_each_tensor_argument():
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(8, 6)

        def forward(self, x):
            h = self.proj(x)
            return torch.relu(h + x[:, :6]).view(-1).sum()

    exported = torch.export.export(Block(), (torch.randn(4, 8),), strict=False)
    calls = written_calls(exported.graph_module)
    assert [(c.op, c.sources) for c in calls] == [
        ("aten.linear.default", (-1, -1, -1)),  # x, the weight, the bias: inputs of the program
        ("aten.slice.Tensor", (-1,)), ("aten.add.Tensor", (0, 1)), ("aten.relu.default", (2,)),
        ("aten.view.default", (3,)), ("aten.sum.default", (4,))]
    assert calls[0].in_shapes == ((4, 8), (6, 8), (6,)) and calls[-1].out_shapes == ((),)


def test_the_loader_reads_published_rows_and_their_captured_calls():
    data = load_published(FIXTURE)
    assert data.source["licence"] == "MIT" and data.source["repository"] == "ScalingIntelligence/KernelBench"
    relu = [(p, t) for p, t in data.measured(setups=("H100_Modal",)) if t.problem == "19_ReLU.py"]
    assert len(relu) == 1
    program, timing = relu[0]
    assert (timing.gpu, timing.level, timing.config) == ("H100", 1, "eager")
    assert timing.seconds == pytest.approx(4.28e-3)
    assert [c.op for c in program.calls] == ["aten.relu.default"]
    assert program.calls[0].in_shapes == ((4096, 393216),) and program.calls[0].sources == (-1,)
    assert {t.config for t in data.timings if t.setup == "B200_together"} == {
        "eager", "inductor", "max-autotune", "max-autotune-no-cudagraphs", "reduce-overhead", "cudagraphs"}
    assert all(t.seconds > 0 for t in data.timings)


def test_the_loader_says_what_is_wrong_with_a_missing_or_foreign_file(tmp_path):
    with pytest.raises(EqiforgeError, match="bench/kernelbench_data.py"):
        load_published(tmp_path / "none.json.gz")
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"format": "something-else/1"}))
    with pytest.raises(EqiforgeError, match="not a published-timings file"):
        load_published(other)


@pytest.fixture(scope="module")
def h100_programs():
    """Levels 1-2 of the H100 SXM setups in the shipped dataset (a source checkout's)."""
    data = load_published(DATASET)
    return [(p, t) for p, t in data.measured(gpus=("H100",), levels=(1, 2))]


def test_the_vectorised_fit_prices_as_the_device_with_those_figures_does(h100_programs):
    figures = {**gpu_fit.REFERENCE, "launch_us": 7.0, "bw_reduction": 0.4, "conv_efficiency": 0.3,
               "conv_winograd": 2.0, "row_gbs": 6.0, "gemm_efficiency": 0.9}
    sample = h100_programs[::7]
    vectorised = gpu_fit.predict(gpu_eval._terms(sample), figures)
    device = gpu_fit.apply_figures(DEVICES["H100"], figures, "a test")
    one_by_one = [written_seconds(list(p.calls), device) for p, _ in sample]
    np.testing.assert_allclose(vectorised, one_by_one, rtol=1e-9)


def test_the_fit_recovers_the_figures_of_a_synthetic_gpu(h100_programs):
    """Times made by a device with known figures: the fit, started from the references, finds the figures
    the programs pin (a figure no program exercises stays at its reference)."""
    truth = {**gpu_fit.REFERENCE, "launch_us": 9.0, "program_us": 20.0, "bw_elementwise": 0.6, "bw_reduction": 0.35,
             "bw_other": 0.3, "gemm_efficiency": 0.85, "conv_efficiency": 0.25, "conv_transposed": 0.5,
             "row_gbs": 5.0}
    terms = gpu_eval._terms(h100_programs)
    measured = gpu_fit.predict(terms, truth)
    found = gpu_fit.fit(terms, measured, weight=0.01)
    for name in ("launch_us", "bw_elementwise", "bw_reduction", "bw_other", "gemm_efficiency", "conv_efficiency",
                 "conv_transposed", "row_gbs"):
        assert found[name] == pytest.approx(truth[name], rel=0.15), name
    np.testing.assert_allclose(gpu_fit.predict(terms, found), measured, rtol=0.05)


def test_a_gpu_is_priced_with_its_fitted_figures_by_default_and_says_so():
    fitted, datasheet = get_device("H100"), get_device("H100", datasheet=True)
    assert datasheet is DEVICES["H100"] and not datasheet.figures
    assert fitted.figures and "held-out level 3" in fitted.fitted
    assert fitted.launch_us != datasheet.launch_us and dict(fitted.class_bw_gbs)["elementwise"] < datasheet.mem_bw_gbs
    assert "held-out level 3" in RooflinePrior(get_device("H100")).name
    h200 = get_device("H200")  # no published times: the H100's figures on the H200's datasheet
    assert h200.mem_bw_gbs == DEVICES["H200"].mem_bw_gbs and h200.figures == fitted.figures
    assert (h200.fitted.startswith("H100's published-time fit")
            and RooflinePrior(get_device("H200")).name.startswith("roofline prior (H200; H100's"))
    figures = gpu_fit.load_figures()
    assert set(figures["gpus"]) >= {"H100", "B200", "A100", "L40S", "T4"} and "H100_PCIE" not in figures["gpus"]


def test_convolutions_are_classed_by_shape():
    def classes(op, x, w, out, args=()):
        return call_terms(call(op, [x, w], [out], args), DEVICES["H100"]).conv_factors

    assert classes("aten.conv2d.default", (8, 64, 56, 56), (64, 64, 3, 3), (8, 64, 56, 56), (1, 1, 1, 1)) == (
        "conv_winograd",)
    assert classes("aten.conv2d.default", (8, 64, 56, 56), (128, 64, 3, 3), (8, 128, 28, 28), (2, 2, 1, 1)) == (
        "conv_strided",)
    assert classes("aten.conv2d.default", (8, 64, 56, 56), (64, 1, 3, 3), (8, 64, 56, 56), (1, 1, 1, 1, 1, 1, 64)) == (
        "conv_grouped",)
    assert classes("aten.conv_transpose3d.input", (2, 32, 8, 8, 8), (32, 4, 3, 3, 3), (2, 16, 10, 10, 10)) == (
        "conv_transposed", "conv_3d", "conv_grouped")
    assert classes("aten.conv1d.default", (8, 16, 100), (32, 16, 5), (8, 32, 96)) == ()


def test_every_call_of_the_published_programs_has_a_positive_price():
    data = load_published(DATASET)
    device = get_device("H100")
    for program in data.programs.values():
        for c in program.calls:
            seconds = call_terms(c, device)
            assert seconds.calls >= 0 and (seconds.views or seconds.calls or not c.out_shapes), c.op
        assert 0 < written_seconds(list(program.calls), device) < math.inf, program.problem
    assert generic_calls([call("aten.erfinv.default", [(4, 4)], [(4, 4)])]) == ["aten.erfinv.default"]
    assert generic_calls([call("aten.relu.default", [(4, 4)], [(4, 4)])]) == []


def test_a_compiler_fuses_the_calls_between_library_products():
    """mm -> add(bias) -> relu -> view -> sum: the product alone; add, relu and sum one kernel reading the
    product's output and the bias once, writing the sum's result only."""
    calls = [call("aten.mm.default", [(64, 32), (32, 16)], [(64, 16)]),
             call("aten.add.Tensor", [(64, 16), (16,)], [(64, 16)], sources=[0, -1]),
             call("aten.relu.default", [(64, 16)], [(64, 16)], sources=[1]),
             call("aten.view.default", [(64, 16)], [(1024,)], sources=[2]),
             call("aten.sum.default", [(1024,)], [()], sources=[3])]
    device = DEVICES["H100"]
    kernels = configurations.fuse(calls, device)
    assert len(kernels) == 2
    product, fused = kernels
    assert product.compute_class == "gemm" and fused.compute_class == "vector"
    assert fused.bytes == (64 * 16 + 16 + 1) * 4 and fused.memory_class == "reduction"
    eager = configurations.config_work(calls, device, "eager")
    compiled = configurations.config_work(calls, device, "inductor")
    assert (eager.kernels, compiled.kernels) == (4, 2) and compiled.device_seconds < eager.device_seconds
    graphed = dataclasses.replace(device, figures=(("graph_call_us", 2.0), ("graph_program_us", 5.0)))
    graphs = configurations.config_seconds(calls, graphed, "cudagraphs")
    assert graphs == pytest.approx((5.0 + 4 * 2.0) * 1e-6 + eager.device_seconds)


def test_the_gpu_command_fits_and_reports_held_out_programs_and_setup(tmp_path, capsys):
    out = tmp_path / "report.json"
    assert commands.main(["gpu", "--data", str(FIXTURE), "--json-out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "H100_PCIe_LambdaLabs level 3 (held out), fitted" in printed
    assert "H100_Modal level 1 (fitted on), datasheet" in printed and "configuration choice" in printed
    report = json.loads(out.read_text())
    assert report["eager"]["H100_Modal level 3"]["held_out"] and not report["eager"]["H100_Modal level 1"]["held_out"]
    assert set(report["figures"]["per_gpu"]) == {"H100", "B200"}
    assert report["choice"]["held-out level 3"]["fitted"]["programs"] > 0
    written = gpu_eval.figures_file(report, {"repository": "test"})
    assert written["borrow"]["H100_PCIE"] == "H100" and "held-out level 3" in written["gpus"]["H100"]["label"]
    device = gpu_fit.fitted_device(DEVICES["H100_PCIE"], written)
    assert device.figures == tuple(sorted(dataclasses.asdict(device)["figures"]))
    assert device.fitted.startswith("H100's published-time fit")


def test_the_written_predictions_pair_each_published_h100_program_with_the_models_times(tmp_path, monkeypatch):
    import sys
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent.parent / "bench" / "gpu"))
    import kernelbench_predictions
    monkeypatch.setattr(sys, "argv",
                        ["kernelbench_predictions.py", "--data", str(FIXTURE), "--out", str(tmp_path / "p")])
    kernelbench_predictions.main()
    rows = json.loads((tmp_path / "p.json").read_text())["rows"]
    data = load_published(FIXTURE)
    relu = next(r for r in rows if r["problem"] == "19_ReLU.py")
    [(program, _)] = [(p, t) for p, t in data.measured(setups=("H100_Modal",)) if t.problem == "19_ReLU.py"]
    assert relu["published_eager_ms"] == pytest.approx(4.28)
    assert relu["predicted_h100_eager_ms"] == pytest.approx(
        written_seconds(list(program.calls), get_device("H100")) * 1e3)
    assert relu["predicted_h200_eager_ms"] < relu["predicted_h100_eager_ms"]  # the H200's bandwidth, same figures
    assert len(rows) == len({t.problem for t in data.timings if t.setup == "H100_Modal"})
    assert "predictions, not measurements" in (tmp_path / "p.md").read_text()
