"""Optimize the GPU suite here (CPU, egglog) and export each plan for ``run.py`` on a GPU machine.

The GPU machine has no egglog, so plans are optimized here: each program of the suite (built-in examples at
GPU sizes, fp16 and fp32) goes through ``eqiforge.optimize(..., backend="triton", priced_device="H200")`` (priced
for the GPU lent to this project), and ``OptimizedModule.export`` writes the standalone plan (plan.py, params.pt,
meta.json). Then:

- params.pt is rewritten without the parameters that equal a weight of the program, or weights concatenated
  (a merged projection): run.py rebuilds the program from its seed and makes them from there
  (``params_from_module`` in program.json). Only the other folded constants stay, so the folder that
  travels to the GPU machine stays small (checked: SIZE_LIMIT_MB);
- check.pt: fingerprints of the weights and inputs, the reference outputs (eager PyTorch in float32 on this
  CPU; for fp16 programs from the fp16-rounded weights and inputs), REFERENCE_POINTS sampled elements per
  output, and the tolerance: fp32 1e-4; fp16 1e-2 (eager fp16 itself is 0.3-2e-3 off at these sizes).
  Entries too large for a CPU reference (attention at 8k-16k tokens: 16 GiB of fp32 scores) record none
  and are checked against eager on the GPU only;
- program.json: how to rebuild program and inputs, the FLOPs of GEMM-heavy programs, and what the optimizer
  reported (predicted time, e-graph size, kernels, fallbacks, optimize seconds);
- inductor/: the inductor backend's plan of the same program (``backend="torch"``, priced for the H200: the
  same algebra-only plan, without compiling it here), PyTorch code that run.py compiles with Inductor there,
  its weights taken from the rebuilt program too. Where that plan is predicted no better than the program,
  the backend runs the program compiled by Inductor: no folder, and program.json says why.

    python bench/gpu/export_plans.py                     # the GPU suite -> bench/gpu/plans (about 2 minutes)
    python bench/gpu/export_plans.py --tiny --out DIR    # tiny sizes, for the tests (run.py --dry-run-cpu)
"""
from __future__ import annotations

import argparse
import copy
import json
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

import eqiforge
from eqiforge.cost import get_device
from eqiforge.cost.plans import graph_nodes
import run

SIZE_LIMIT_MB = 48  # the carried paths travel in 64 MiB with the rest
REFERENCE_POINTS = 16384
TOLERANCE = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 2e-2}
SEED = 0

# The Hugging Face blocks of bench/joint_scaling.py, as the joint e-graph's scaling was judged on them:
# builder (bench/gpu/hf_blocks.py) -> (its sizes: the published model's, input shape: batch 1, 128 tokens;
# ViT's 197)
HF_BLOCKS = {"bert_layer": ({}, [1, 128, 768]), "gpt2_block": ({}, [1, 128, 768]),
             "llama_layer": ({}, [1, 128, 4096]), "t5_block": ({}, [1, 128, 768]), "vit_layer": ({}, [1, 197, 768])}

# GPU sizes: a BERT-base layer at batch 8 x 512 tokens; 4096-wide MLP and matrices; a rank-64 weight of 8192^2.
# Tiny sizes: not multiples of any tile, for the interpreter.
SIZES = {
    "gpu": {"d": 768, "heads": 12, "ffn": 3072, "batch": 8, "seq": 512, "mlp": 4096, "tokens": 4096,
            "chain": 4096, "rank_n": 8192, "rank": 64, "rank_rows": 2048, "sums": 4096, "norm": 4096,
            "norm_rows": 8192, "attention": [(2, 16, 1024, 64), (1, 16, 4096, 128)],
            "attention_long": [(1, 16, 8192, 64), (1, 16, 16384, 128)], "decode": (1, 32, 16384, 128),
            "blocks": HF_BLOCKS},
    "tiny": {"d": 24, "heads": 2, "ffn": 40, "batch": 2, "seq": 5, "mlp": 40, "tokens": 9, "chain": 33,
             "rank_n": 40, "rank": 3, "rank_rows": 7, "sums": 33, "norm": 40, "norm_rows": 6,
             "attention": [(1, 2, 17, 16)], "attention_long": [(1, 2, 33, 16)], "decode": (1, 2, 300, 16),
             "blocks": {"bert_layer": ({"hidden": 32, "heads": 2, "ffn": 48}, [1, 5, 32]),
                        "gpt2_block": ({"hidden": 32, "heads": 2}, [1, 5, 32]),
                        "llama_layer": ({"hidden": 32, "heads": 4, "kv_heads": 2, "ffn": 48}, [1, 5, 32]),
                        "t5_block": ({"hidden": 32, "heads": 2, "head_dim": 16, "ffn": 48}, [1, 5, 32]),
                        "vit_layer": ({"hidden": 32, "heads": 2, "ffn": 48}, [1, 7, 32])}},
}


@dataclass(frozen=True)
class Entry:
    example: str  # the built-in example (or block) this scales up
    module: list  # [[qualified class, kwargs], ...]: several make an nn.Sequential
    inputs: list  # input shapes (standard normal)
    dtypes: tuple = ("float16", "float32")
    count_flops: bool = False  # GEMM-heavy and algebra leaves its FLOPs alone: run.py reports TFLOP/s
    cpu_reference: bool = True  # False: too large for this CPU; run.py checks against eager on the GPU only


def suite(s: dict) -> list[Entry]:
    """The programs, most important first (max-autotune, the last pass on the GPU, gets them in this order)."""
    return [
        Entry("transformer_layer", [["eqiforge.examples.EncoderLayer", {"d": s["d"], "heads": s["heads"],
                                                                         "ffn": s["ffn"]}]],
              [[s["batch"], s["seq"], s["d"]]], count_flops=True),
        Entry("mlp", [["eqiforge.examples.MLP", {"d": s["mlp"], "hidden": s["mlp"]}]], [[s["tokens"], s["mlp"]]],
              count_flops=True),
        Entry("low_rank", [["eqiforge.examples.LowRank", {"n": s["rank_n"], "r": s["rank"]}]],
              [[s["rank_rows"], s["rank_n"]]]),
        # fp32 only: each product of standard-normal n x n matrices grows sqrt(n)-fold, past fp16's range
        Entry("matmul_chain", [["eqiforge.examples.MatmulChain", {}]], [[s["chain"]] * 2] * 3 + [[s["chain"]]],
              dtypes=("float32",)),
        Entry("row_sums", [["eqiforge.examples.RowSums", {}]], [[s["sums"]] * 2] * 2),
        Entry("layernorm_softmax", [["torch.nn.LayerNorm", {"normalized_shape": s["norm"]}],
                                    ["torch.nn.Softmax", {"dim": -1}]], [[s["norm_rows"], s["norm"]]]),
        # fused attention against PyTorch's SDPA (flash on the GPU), 1k-16k tokens, head dims 64 and 128; past
        # 4k tokens the fp32 scores of a CPU reference do not fit here (16 heads x 8192^2 x 4 B = 4 GiB)
        *(Entry("attention" + ("_causal" if causal else "") + f"_s{shape[2]}_d{shape[3]}",
                [["eqiforge.examples.Attention", {"causal": causal}]], [list(shape)] * 3,
                dtypes=("float16", "bfloat16") if shape == shapes[-1] else ("float16",), count_flops=True,
                cpu_reference=key == "attention")
          for key in ("attention", "attention_long") for shapes in [s[key]] for shape in shapes
          for causal in (False, True)),
        # decoding: one query per head over a long cache; the kernel splits the key axis (flash-decoding)
        Entry("attention_decode" + "_s{2}_d{3}".format(*s["decode"]), [["eqiforge.examples.Attention", {}]],
              [[*s["decode"][:2], 1, s["decode"][3]], list(s["decode"]), list(s["decode"])], dtypes=("float16",),
              count_flops=True),
        # the Hugging Face blocks last: the GPU machine may lack transformers (run.py then records the error).
        # T5 in fp32: in fp16 it clamps infinities through an isinf test the torch code cannot export
        *(Entry(f"hf_{name}", [[f"hf_blocks.{name}", kwargs]], [shape], count_flops=True,
                dtypes=("float32",) if name == "t5_block" else ("float16",))
          for name, (kwargs, shape) in s["blocks"].items()),
    ]


def specs(sizes: dict) -> list[tuple[dict, Entry]]:
    """(program.json spec, its suite entry) per suite entry and dtype."""
    short = {"float16": "fp16", "float32": "fp32", "bfloat16": "bf16"}
    pairs = [(entry, dtype) for entry in suite(sizes) for dtype in entry.dtypes]
    return [({"entry": f"{e.example}_{short[dtype]}", "example": e.example, "module": e.module, "inputs": e.inputs,
              "dtype": dtype, "seed": SEED, "order": order}, e)
            for order, (e, dtype) in enumerate(pairs)]


def params_from_module(params: dict[str, torch.Tensor], module: torch.nn.Module) -> dict:
    """Plan parameter -> how run.py makes it from the module's state (``run.weight_of``): the state entry
    holding the same tensor (shape, dtype and values), or a recipe of weights concatenated (``folded_recipe``)."""
    state = module.state_dict()
    found = {}
    for key, t in params.items():
        for name, s in state.items():
            if s.shape == t.shape and s.dtype == t.dtype and torch.equal(s, t):
                found[key] = name
                break
        else:
            recipe = folded_recipe(t, state)
            if recipe is not None:
                found[key] = recipe
    return found


def folded_recipe(t: torch.Tensor, state: dict[str, torch.Tensor]) -> dict | None:
    """A folded constant as weights, each as stored or transposed (2-D), cast to its dtype and concatenated
    along one dim, in order (merged projections, weights stored transposed), checked exactly; None if not."""
    for dim in range(t.dim()):
        parts, start = [], 0
        while start < t.shape[dim]:
            part = _next_part(t, dim, start, state)
            if part is None:
                break
            parts.append(part[:2])
            start += part[2]
        if parts and start == t.shape[dim]:
            recipe = {"dim": dim, "parts": parts, "dtype": str(t.dtype).removeprefix("torch.")}
            if torch.equal(run.weight_of(state, recipe), t):
                return recipe
    return None


def _next_part(t: torch.Tensor, dim: int, start: int, state: dict[str, torch.Tensor]):
    """(state name, transposed, its extent along ``dim``) of the weight that ``t`` holds from ``start`` on."""
    for name, w in state.items():
        for transposed in (False, True) if w.dim() == 2 else (False,):
            v = w.t() if transposed else w
            n = v.shape[dim] if v.dim() == t.dim() else 0
            if not n or start + n > t.shape[dim] or any(
                    v.shape[d] != t.shape[d] for d in range(t.dim()) if d != dim):
                continue
            if torch.equal(t.narrow(dim, start, n), v.to(t.dtype)):
                return name, transposed, n
    return None


def keep_folded_only(path: Path, module: torch.nn.Module) -> dict:
    """Rewrite an exported params.pt without the parameters made of weights of ``module`` (run.py makes
    those from the rebuilt program); returns which they are and how (``params_from_module``)."""
    params = torch.load(path, weights_only=True)
    from_module = params_from_module(params, module)
    torch.save({k: v for k, v in params.items() if k not in from_module}, path)
    return from_module


def reference(module: torch.nn.Module, inputs) -> tuple[torch.Tensor, ...]:
    """Eager outputs in float32 (fp16 programs: from their fp16-rounded weights and inputs)."""
    with torch.no_grad():
        return run.as_tuple(copy.deepcopy(module).float()(*(t.float() for t in inputs)))


def flops(module: torch.nn.Module, inputs) -> int:
    """FLOPs of one eager call, counted on the meta device (shapes only: no memory, no compute)."""
    meta = copy.deepcopy(module).to("meta")
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        meta(*(torch.empty_like(t, device="meta") for t in inputs))
    return counter.get_total_flops()


def export(spec: dict, entry: Entry, folder: Path, device) -> dict:
    """Optimize one program for ``device``, export its plan into ``folder``, add check.pt and program.json;
    the table row."""
    module, inputs = run.build_program(spec)
    start = time.perf_counter()
    # priced for the GPU lent to this project; checked there (see export_inductor), not on this CPU
    opt = eqiforge.optimize(module, inputs, backend="triton", priced_device=device, validate=False)
    seconds = time.perf_counter() - start
    opt.export(folder)
    from_module = keep_folded_only(folder / "params.pt", module)
    refs = [run.reference_of(o, REFERENCE_POINTS) for o in reference(module, inputs)] if entry.cpu_reference \
        else None
    tolerance = TOLERANCE[spec["dtype"]]
    torch.save({"fingerprints": run.fingerprints(module, inputs, from_module), "tolerance": tolerance,
                "reference": refs}, folder / "check.pt")
    r, generated = opt.report, opt.runner.generated
    program = {**spec, "params_from_module": from_module, "inductor": export_inductor(module, inputs, folder, device),
               "flops": flops(module, inputs) if entry.count_flops else None,
               "tolerance": tolerance, "predicted_us": r.predicted_after * 1e6,
               "predicted_us_as_written": r.predicted_before * 1e6, "cost_model": r.cost_model,
               "enodes": r.enodes, "eclasses": r.eclasses, "stop_reason": r.stop_reason,
               "kernels": len(generated.kernels), "fallbacks": generated.fallbacks, "optimize_s": seconds,
               "nodes": graph_nodes(opt.plan.graph)}  # what the cost model priced: the GPU's records keep it
    (folder / "program.json").write_text(json.dumps(program, indent=2) + "\n")
    mb = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 2**20
    return {"entry": spec["entry"], "kernels": program["kernels"], "predicted us": f"{program['predicted_us']:.1f}",
            "e-nodes": r.enodes, "optimize s": f"{seconds:.1f}", "MiB": f"{mb:.2f}"}


def export_inductor(module: torch.nn.Module, inputs, folder: Path, device) -> dict:
    """The inductor backend's plan into ``folder/inductor`` (see the module docstring); what program.json
    records of it."""
    start = time.perf_counter()
    # no plan check here: at GPU sizes the captured program and the plan would run on this CPU (16k-token
    # attention: tens of GiB; Triton kernels in the interpreter); run.py checks each plan against eager on
    # the GPU and against check.pt's reference
    opt = eqiforge.optimize(module, inputs, backend="torch", priced_device=device, validate=False)
    seconds = time.perf_counter() - start
    if not opt.runs_plan:
        return {"runs": opt.report.runs, "runs_plan": False, "optimize_s": seconds}
    opt.export(folder / "inductor")
    from_module = keep_folded_only(folder / "inductor" / "params.pt", module)
    return {"runs": opt.report.runs, "runs_plan": True, "params_from_module": from_module, "optimize_s": seconds,
            "predicted_us": opt.report.predicted_after * 1e6}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=run.PLANS, help="folder of plan folders (default: bench/gpu/plans)")
    p.add_argument("--tiny", action="store_true", help="tiny sizes (tests: run.py --dry-run-cpu)")
    p.add_argument("--programs", help="comma-separated entries to export (default: all; others are kept)")
    args = p.parse_args(argv)
    chosen = [(spec, entry) for spec, entry in specs(SIZES["tiny" if args.tiny else "gpu"])
              if not args.programs or spec["entry"] in args.programs.split(",")]
    if not args.programs:  # a full export replaces the previous one (only folders this script wrote)
        for stale in args.out.glob("*/program.json"):
            shutil.rmtree(stale.parent)
    # the tests' tiny programs are priced on the datasheet: the forms they check (a merged gate/up projection)
    # are near-ties at tiny sizes under the figures fitted to published times
    device = get_device("H200", datasheet=args.tiny)
    rows = []
    for spec, entry in chosen:
        print(f"exporting {spec['entry']} ...", flush=True)
        rows.append(export(spec, entry, args.out / spec["entry"], device))
    total = sum(f.stat().st_size for f in args.out.rglob("*") if f.is_file()) / 2**20
    print("\n| " + " | ".join(rows[0]) + " |\n|" + "---|" * len(rows[0]))
    print("\n".join("| " + " | ".join(str(v) for v in row.values()) + " |" for row in rows))
    print(f"\n{len(rows)} plans in {args.out}, {total:.1f} MiB in all (limit {SIZE_LIMIT_MB} MiB)")
    if total > SIZE_LIMIT_MB:
        print(f"too large to carry: {args.out} must stay under {SIZE_LIMIT_MB} MiB")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
