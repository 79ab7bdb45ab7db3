"""Device table for the cost prior: what the roofline needs to know about a GPU.

Figures are vendor datasheet numbers (dense, no sparsity): NVIDIA H100 SXM5 and PCIe, H200 SXM, B200 (HGX),
A100 SXM4 80GB and 40GB, L40S, A10, A10G, L4, T4 (Turing: no TF32), RTX 4090 and RTX 3090 datasheets/whitepapers.
``fp32`` is the non-tensor-core rate (PyTorch does not use TF32 for fp32 matmuls by default); ``tf32`` is what
cuDNN's convolutions use for fp32 by default, and kernels that opt in. Launch overhead is a typical measured
figure for a small CUDA kernel launched from Python (a few microseconds).
"""
from __future__ import annotations

import math
from dataclasses import dataclass



@dataclass(frozen=True)
class Device:
    name: str
    sms: int
    peak_tflops: dict[str, float]  # dense tensor-core rate per dtype (fp32: CUDA cores)
    vector_tflops: float  # non-tensor-core fp32 rate, for elementwise and reduction work
    mem_bw_gbs: float  # DRAM bandwidth, GB/s
    smem_per_sm_kib: int  # usable shared memory per block
    launch_us: float = 4.0
    view_us: float = 0.3  # host-side cost of a view / metadata-only op
    unfused: tuple[str, ...] = ()  # row kinds PyTorch runs as several kernels here (no fused kernel)
    #: (node class, GB/s) where a fit to measured plans found a class's traffic streams at another rate than
    #: mem_bw_gbs (cost/plans.py): on a CPU, a pass over what the call before it just wrote reads its cache
    class_bw_gbs: tuple[tuple[str, float], ...] = ()
    #: (name, value) figures fitted to measured times (cost/gpu_fit.py): efficiencies of the datasheet rates
    #: by class of compute, and host costs; see FIGURE_DEFAULTS
    figures: tuple[tuple[str, float], ...] = ()
    #: what the figures were fitted to and how well they predict held-out programs ("" for the datasheet's)
    fitted: str = ""

    def bandwidth_gbs(self, op: str, kind: str) -> float:
        """The bandwidth a node of ``op`` (of kind ``kind``) streams its traffic at."""
        return self.class_bandwidth_gbs(memory_class(op, kind))

    def class_bandwidth_gbs(self, klass: str) -> float:
        """The bandwidth traffic of memory class ``klass`` streams at."""
        return dict(self.class_bw_gbs).get(klass, self.mem_bw_gbs)

    def figure(self, name: str) -> float:
        """A fitted figure, or its default (FIGURE_DEFAULTS) where none was fitted."""
        return dict(self.figures).get(name, FIGURE_DEFAULTS[name])

    def conv_peak(self, dtype: str) -> float:
        """FLOP/s of a library convolution: fp32 runs on TF32 tensor cores where the device has them (cuDNN's
        default in PyTorch, unlike matmuls)."""
        return self.peak_tflops.get("tf32" if dtype == "float32" else dtype, self.peak_tflops["float32"]) * 1e12

    def matmul_peak(self, dtype: str) -> float:
        """FLOP/s of a matmul in ``dtype`` (fp32 runs without TF32 unless asked)."""
        return self.peak_tflops.get(dtype, self.peak_tflops["float32"]) * 1e12


#: op kinds, and kernel ops by what they compute, by the class of traffic a plan-level fit gives one bandwidth
MEMORY_CLASSES = {**dict.fromkeys(("binary", "unary", "cast", "compare", "where", "band", "PointwiseK"),
                                   "elementwise"),
                  **dict.fromkeys(("reduce", "scan", "pool", "RowReduceK"), "reduction"),
                  **dict.fromkeys(("matmul", "GemmK", "AttentionK"), "contraction"), "conv": "conv"}


#: a recurrent layer's time step: the two kernels cuDNN runs one after the other (the hidden product, the
#: gates' pointwise kernel), each launched from C++ (~4 us, no Python). A prior, not fitted: no published
#: program of levels 1-2 has a recurrent layer (bench/data/README.md)
RNN_STEP_US = 2 * 4.0
#: a figure's value where none was fitted: datasheet rates reached in full, no per-program host cost, rows
#: streaming without limit
FIGURE_DEFAULTS = {"gemm_efficiency": 1.0, "conv_efficiency": 1.0, "attention_efficiency": 1.0,
                   "vector_efficiency": 1.0, "conv_transposed": 1.0, "conv_3d": 1.0, "conv_grouped": 1.0,
                   "conv_strided": 1.0, "conv_winograd": 1.0,
                   "row_gbs": math.inf, "program_us": 0.0, "rnn_step_us": RNN_STEP_US, "conv_call_us": 0.0,
                   # host costs of a program compiled by Inductor and of one replayed as a CUDA graph (us): per
                   # kernel and per call of the program (cost/configurations.py)
                   "compiled_call_us": 4.0, "compiled_program_us": 30.0, "graph_call_us": 1.5, "graph_program_us": 10.0}


def memory_class(op: str, kind: str) -> str:
    """The class of a node's traffic ("other": movement, gathers, external calls)."""
    return MEMORY_CLASSES.get(op if kind == "kernel" else kind, "other")


DEVICES: dict[str, Device] = {d.name: d for d in [
    Device("H100", 132, {"float16": 989.0, "bfloat16": 989.0, "tf32": 494.0, "float32": 67.0}, 67.0, 3350.0, 227),
    Device("H100_PCIE", 114, {"float16": 756.0, "bfloat16": 756.0, "tf32": 378.0, "float32": 51.0}, 51.0, 2000.0, 227),
    Device("H200", 132, {"float16": 989.0, "bfloat16": 989.0, "tf32": 494.0, "float32": 67.0}, 67.0, 4800.0, 227),
    Device("B200", 148, {"float16": 2250.0, "bfloat16": 2250.0, "tf32": 1100.0, "float32": 80.0}, 80.0, 8000.0, 227),
    Device("A100", 108, {"float16": 312.0, "bfloat16": 312.0, "tf32": 156.0, "float32": 19.5}, 19.5, 2039.0, 163),
    Device("A100_40GB", 108, {"float16": 312.0, "bfloat16": 312.0, "tf32": 156.0, "float32": 19.5}, 19.5, 1555.0, 163),
    Device("L40S", 142, {"float16": 362.0, "bfloat16": 362.0, "tf32": 183.0, "float32": 91.6}, 91.6, 864.0, 99),
    Device("A10", 72, {"float16": 125.0, "bfloat16": 125.0, "tf32": 62.5, "float32": 31.2}, 31.2, 600.0, 99),
    Device("A10G", 80, {"float16": 125.0, "bfloat16": 125.0, "tf32": 62.5, "float32": 31.2}, 31.2, 600.0, 99),
    Device("L4", 58, {"float16": 121.0, "bfloat16": 121.0, "tf32": 60.0, "float32": 30.3}, 30.3, 300.0, 99),
    Device("T4", 40, {"float16": 65.0, "float32": 8.1}, 8.1, 320.0, 64),
    Device("RTX4090", 128, {"float16": 165.0, "bfloat16": 165.0, "tf32": 82.6, "float32": 82.6}, 82.6, 1008.0, 99),
    Device("RTX3090", 82, {"float16": 71.0, "bfloat16": 71.0, "tf32": 35.6, "float32": 35.6}, 35.6, 936.0, 99),
]}

#: the table's name of a card by the name CUDA reports for it (torch.cuda.get_device_name, and the hardware of
#: KernelBench's published times), where the name alone does not say it (an A100's memory, an H100's form)
CUDA_NAMES = {"NVIDIA H100 80GB HBM3": "H100", "NVIDIA H100 PCIe": "H100_PCIE", "NVIDIA H200": "H200",
              "NVIDIA B200": "B200", "NVIDIA L40S": "L40S", "NVIDIA A100-SXM4-80GB": "A100",
              "NVIDIA A100-SXM4-40GB": "A100_40GB", "NVIDIA A10G": "A10G", "NVIDIA A10": "A10", "NVIDIA L4": "L4",
              "Tesla T4": "T4"}

DEFAULT_DEVICE = "H100"
