"""Device table for the cost prior: what the roofline needs to know about a GPU.

Figures are vendor datasheet numbers (dense, no sparsity): NVIDIA H100 SXM5, H200 SXM, A100 SXM4 80GB, L40S,
RTX 4090 and RTX 3090 datasheets/whitepapers. ``fp32`` is the non-tensor-core rate (PyTorch does not use TF32
for fp32 matmuls by default); ``tf32`` is kept for kernels that opt in. Launch overhead is a typical measured
figure for a small CUDA kernel launched from Python (a few microseconds).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import EqiforgeError


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

    def bandwidth_gbs(self, op: str, kind: str) -> float:
        """The bandwidth a node of ``op`` (of kind ``kind``) streams its traffic at."""
        return dict(self.class_bw_gbs).get(memory_class(op, kind), self.mem_bw_gbs)

    def matmul_peak(self, dtype: str) -> float:
        """FLOP/s of a matmul in ``dtype`` (fp32 runs without TF32 unless asked)."""
        return self.peak_tflops.get(dtype, self.peak_tflops["float32"]) * 1e12


#: op kinds, and kernel ops by what they compute, by the class of traffic a plan-level fit gives one bandwidth
MEMORY_CLASSES = {**dict.fromkeys(("binary", "unary", "cast", "compare", "where", "PointwiseK"), "elementwise"),
                  **dict.fromkeys(("reduce", "pool", "RowReduceK"), "reduction"),
                  **dict.fromkeys(("matmul", "conv", "GemmK", "AttentionK"), "contraction")}


def memory_class(op: str, kind: str) -> str:
    """The class of a node's traffic ("other": movement, gathers, external calls)."""
    return MEMORY_CLASSES.get(op if kind == "kernel" else kind, "other")


DEVICES: dict[str, Device] = {d.name: d for d in [
    Device("H100", 132, {"float16": 989.0, "bfloat16": 989.0, "tf32": 494.0, "float32": 67.0}, 67.0, 3350.0, 227),
    Device("H200", 132, {"float16": 989.0, "bfloat16": 989.0, "tf32": 494.0, "float32": 67.0}, 67.0, 4800.0, 227),
    Device("A100", 108, {"float16": 312.0, "bfloat16": 312.0, "tf32": 156.0, "float32": 19.5}, 19.5, 2039.0, 163),
    Device("L40S", 142, {"float16": 362.0, "bfloat16": 362.0, "tf32": 183.0, "float32": 91.6}, 91.6, 864.0, 99),
    Device("RTX4090", 128, {"float16": 165.0, "bfloat16": 165.0, "tf32": 82.6, "float32": 82.6}, 82.6, 1008.0, 99),
    Device("RTX3090", 82, {"float16": 71.0, "bfloat16": 71.0, "tf32": 35.6, "float32": 35.6}, 35.6, 936.0, 99),
]}

DEFAULT_DEVICE = "H100"


def get_device(name: str | Device | None = None) -> Device:
    """A device from the table by name (case-insensitive); the default when None."""
    if isinstance(name, Device):
        return name
    if isinstance(name, str) and name.lower() == "cpu":
        from .calibrate import cpu_device  # measured, not tabled (calibrate.py builds on Device)
        return cpu_device()
    key = (name or DEFAULT_DEVICE).upper().replace("NVIDIA", "").replace(" ", "")
    for dev_name, dev in DEVICES.items():
        if dev_name.upper() == key:
            return dev
    raise EqiforgeError(f"unknown device {name!r}; known devices: {sorted(DEVICES) + ['cpu']}")
