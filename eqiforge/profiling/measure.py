"""The CUDA timer: a record's kernel built from the Triton templates and timed with ``do_bench`` (median).

A record is turned into a kernel spec the way a plan's kernel node is (``kernels.kernel_spec`` on a one-node
graph), so profiled kernels are exactly those plans run.
"""
from __future__ import annotations

from ..cost.dataset import tuplify
from ..ir import Graph
from ..lower.kernels import kernel_spec

def cuda_available() -> bool:
    import torch
    return torch.cuda.is_available()


def record_spec(rec: dict):
    """(kernel spec, operand shapes and dtypes in launcher order) of a record."""
    graph = Graph()
    inputs = [graph.input(f"x{i}", tuple(s), d) for i, (s, d) in enumerate(zip(rec["in_shapes"], rec["in_dtypes"]))]
    node = graph.add(rec["op"], tuple(inputs), tuplify(rec["attrs"]), shape=tuple(rec["out_shape"]),
                     dtype=rec["dtype"])
    spec, operand_ids = kernel_spec(graph, node)
    return spec, [(graph.nodes[j].shape, graph.nodes[j].dtype) for j in operand_ids]


def cuda_timer(rec: dict) -> float:
    """Median seconds of the record's kernel on the current CUDA device (warm: compiled before timing)."""
    import torch
    import triton.testing

    from ..lower.triton import build
    spec, operands = record_spec(rec)
    launch = build(spec, f"k{rec['key']}")
    make = lambda shape, dtype: torch.randn(shape, device="cuda").to(getattr(torch, dtype))  # noqa: E731
    args = [make(s, d) for s, d in operands]
    out = torch.empty(tuple(rec["out_shape"]), device="cuda", dtype=getattr(torch, rec["dtype"]))
    launch(out, *args)
    torch.cuda.synchronize()
    return triton.testing.do_bench(lambda: launch(out, *args), return_mode="median") * 1e-3
