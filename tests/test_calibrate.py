"""The CPU as a cost-model device: measured once per machine, cached, used by default for torch-backend
plans of CPU tensors, and named in the report."""
import json

import pytest
import torch

import eqiforge
from eqiforge.cost import calibrate, get_cost_model
from eqiforge.cost.lookup import get_device
from eqiforge.pipeline.compile import default_device

FIGURES = {"threads": 2, "matmul_tflops_float32": 0.1, "matmul_tflops_float64": 0.05,
           "matmul_tflops_bfloat16": 0.2, "mem_bw_gbs": 20.0, "vector_tflops": 0.02, "call_us": 2.0,
           "view_us": 0.5}


@pytest.fixture
def fake_measure(tmp_path, monkeypatch):
    monkeypatch.setenv("EQIFORGE_CACHE_DIR", str(tmp_path))
    calls = []
    monkeypatch.setattr(calibrate, "measure", lambda: calls.append(1) or dict(FIGURES))
    monkeypatch.setattr(calibrate, "_LOADED", {})
    return calls


def test_measured_figures_are_plausible_for_a_cpu():
    f = calibrate.measure()
    assert f["threads"] == torch.get_num_threads()
    for d in calibrate.MATMUL_DTYPES:
        assert 1e-5 < f[f"matmul_tflops_{d}"] < 100, d  # 10 MFLOP/s .. 100 TFLOP/s
    assert 0.1 < f["mem_bw_gbs"] < 10_000 and 0 < f["vector_tflops"] < 100
    assert 0 < f["view_us"] < 1000 and 0 < f["call_us"] < 1000


def test_the_cpu_is_measured_as_programs_call_pytorch_even_inside_torch_compile(monkeypatch):
    """Inside torch.compile's backend (where a plan is often first priced) AOTAutograd has PyTorch's Python
    dispatcher on, which made every measured call ~10x dearer; the measurement turns it and any mode off."""
    from torch._dynamo.backends.common import aot_autograd
    seen = []

    def spy():
        seen.append((torch._C._dispatch_tls_is_dispatch_key_included(torch._C.DispatchKey.PythonDispatcher),
                     len(torch.utils._python_dispatch._get_current_dispatch_mode_stack()),
                     torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE) is not None))
        return dict(FIGURES)
    monkeypatch.setattr(calibrate, "_measure_one_thread", spy)

    def backend(gm, example_inputs):
        inside = (torch._C._dispatch_tls_is_dispatch_key_included(torch._C.DispatchKey.PythonDispatcher),)
        calibrate.measure()
        seen.append(inside)
        return gm.forward
    torch.compile(lambda x: x * 2, backend=aot_autograd(fw_compiler=backend))(torch.randn(4))
    measured, inside = seen
    assert inside == (True,)  # what the measurement is shielded from
    assert measured == (False, 0, False)


def test_the_cpu_is_measured_once_per_machine_and_cached(fake_measure, tmp_path):
    first = get_device("cpu")
    again = get_device("CPU")
    assert fake_measure == [1] and first == again
    assert first.name == "cpu" and first.sms == 2 and first.launch_us == 2.0 and first.mem_bw_gbs == 20.0
    assert first.matmul_peak("float64") == 0.05e12 and first.matmul_peak("float16") == 0.1e12  # unmeasured: fp32's
    assert first.unfused == calibrate.unfused_on_cpu()
    stored = json.loads(calibrate.cache_path().read_text())
    assert stored["machine"] == calibrate.machine_key() and stored["figures"] == FIGURES
    calibrate.cpu_device(remeasure=True)
    assert fake_measure == [1, 1]
    calibrate._LOADED.clear()  # a new process
    assert get_device("cpu") == first and fake_measure == [1, 1]  # read from the file
    calibrate._LOADED.clear()
    calibrate.cache_path().write_text("{not json")
    assert get_device("cpu") == first and fake_measure == [1, 1, 1]  # a damaged cache is measured again


def test_torch_plans_of_cpu_tensors_are_priced_for_this_cpu(fake_measure, monkeypatch):
    monkeypatch.delenv("EQIFORGE_DEVICE")  # the test session's pin (conftest.py)
    x = torch.randn(8, 8)
    opt = eqiforge.optimize(lambda a: (a @ a).relu(), (x,))
    assert opt.report.cost_model == "roofline prior (cpu)"
    assert get_cost_model("roofline", "H100").name.startswith("roofline prior (H100; published-time fit")
    named = eqiforge.optimize(lambda a: (a @ a).relu(), (x,), priced_device="A100")
    assert named.report.cost_model == get_cost_model("roofline", "A100").name
    assert default_device("triton", [x]) is None and default_device("torch", [x]) == "cpu"
    monkeypatch.setenv("EQIFORGE_DEVICE", "L40S")
    assert (eqiforge.optimize(lambda a: (a @ a).relu(), (x,)).report.cost_model
            == get_cost_model("roofline", "L40S").name)


def test_a_norm_pytorch_composes_on_this_cpu_is_not_priced_as_one_native_call():
    """F.rms_norm has no fused CPU kernel in this PyTorch (five ATen ops): on the CPU device the plan keeps
    the written-out ops instead of a 'native' call that is no faster, and the as-written price counts five."""
    from eqiforge.ops import native
    from eqiforge.cost.roofline import RooflinePrior
    from eqiforge.cost.features import node_features
    attrs = ("rms_norm", ("x",), ("acc",), 1e-6)
    assert native.is_native("RowReduceK", attrs, [(4, 8)]) and not native.is_native("RowReduceK", attrs, [(4, 8)],
                                                                                      ("rms_norm",))
    cpu = get_device("H100").__class__(**{**get_device("H100").__dict__, "unfused": ("rms_norm",)})
    f = node_features("RowReduceK", [(4, 8)], ["float32"], (4, 8), "float32", attrs=attrs)
    assert (RooflinePrior(cpu).node_seconds(f) == float("inf")
            and RooflinePrior(get_device("H100")).node_seconds(f) < 1e-3)
