"""Check and time exported EqiForge plans on a GPU: eager, torch.compile (default, max-autotune), EqiForge's
triton plans and its inductor backend (its plan's PyTorch code compiled by Inductor here).

The GPU machine has torch and triton but no egglog and no package registry, so this file imports only
torch, triton and ``eqiforge.examples`` (to rebuild each program for eager and torch.compile). Plans come
from ``export_plans.py``, one folder each under ``bench/gpu/plans/``:

- ``plan.py``: the generated module (torch + triton only), called as ``forward(*inputs, params=params)``;
- ``params.pt``: the plan parameters the program cannot rebuild (folded constants); the weights are taken
  from the program rebuilt here (``params_from_module`` in program.json), which keeps the carried files small;
- ``program.json``: how to rebuild program and inputs (modules with keyword arguments, input shapes, dtype,
  seed) and what the optimizer reported (predicted time, e-graph size, kernels);
- ``check.pt``: fingerprints of the weights and inputs (the seeded CPU generator must rebuild them exactly),
  the reference outputs (eager PyTorch in float32 on the exporting CPU; sampled elements of large outputs)
  and the tolerance;
- ``inductor/``: the inductor backend's plan (``plan.py`` of PyTorch code: ``bind(params)`` gives the plan
  function, which ``torch.compile`` hands to Inductor, as the backend does; ``params.pt`` as above). Without
  it, the backend runs the program compiled by Inductor (program.json's ``inductor.runs`` says why) and its
  time is torch.compile's.

A plan is correct when its largest relative error (largest |difference| over largest |reference|) is within
the tolerance both against the recorded reference and against eager on this GPU (every element); programs
exported without a reference (too large for the exporting CPU) are checked against eager here only. Times are
``triton.testing.do_bench`` medians in ms, each call on the next of several input sets. The work runs in
three passes so that the time budget cuts the least important numbers: 1) every plan: check, time eager and
EqiForge; 2) torch.compile (default) of every program, then EqiForge's inductor backend; 3) max-autotune
while the budget allows. Results are
rewritten after every step, so a kill leaves the partial results: ``gpu.json`` and ``gpu.md`` in ``--out``;
a short table is printed last. ``gpu_records.jsonl`` holds the same measurements in the records format of
EqiForge's measured choice (``eqiforge/decide/choice.py``; docs/usage.md#measured-choice), one line per program:
the candidates with their measured seconds, EqiForge's plan with its predicted seconds and its nodes, the
data a GPU cost model learns plan-level ranking from.

    python bench/gpu/run.py [--plans bench/gpu/plans] [--out bench/results] [--budget-s 420] [--no-max-autotune]
    python bench/gpu/run.py --dry-run-cpu --plans DIR --out DIR   # tiny plans on a CPU, Triton interpreter
"""
from __future__ import annotations

import argparse
import datetime
import importlib
import importlib.util
import itertools
import json
import os
import platform
import statistics
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # eqiforge.examples from this checkout: nothing is installed on the GPU machine
sys.path.insert(0, str(ROOT / "bench" / "gpu"))  # hf_blocks, however this file was loaded

PLANS = ROOT / "bench" / "gpu" / "plans"
RESULTS = ROOT / "bench" / "results"
BUILDERS = ("eqiforge.examples.", "torch.nn.", "hf_blocks.")  # where program.json may name modules (none pulls egglog)
COMPILE_MODES = {"compile": {}, "max-autotune": {"mode": "max-autotune"}}
INDUCTOR_PLAN = "eqiforge_inductor"  # the variant of EqiForge's inductor backend, timed after "compile"
VARIANTS = ("compile", INDUCTOR_PLAN, "max-autotune")  # the compiling passes, in order
FINGERPRINT_POINTS = 64
NO_CUDA = ("run.py: no CUDA device here, nothing to time. Run bench/gpu/run.sh on a GPU machine "
           "(--dry-run-cpu checks the plans on a CPU under the Triton interpreter).")


# ------------------------------------------------------------------ shared with export_plans.py

def build_program(spec: dict) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """(module in eval mode, inputs) of a program.json spec, on the CPU, in the spec's dtype.

    Weights come from ``torch.manual_seed(seed)`` and the standard-normal inputs from a CPU generator seeded
    the same, so two machines build the same tensors (check.pt's fingerprints verify it). Several modules
    in ``spec["module"]`` make an ``nn.Sequential``."""
    torch.manual_seed(spec["seed"])
    layers = [_resolve(name)(**kwargs) for name, kwargs in spec["module"]]
    module = layers[0] if len(layers) == 1 else torch.nn.Sequential(*layers)
    dtype = getattr(torch, spec["dtype"])
    gen = torch.Generator().manual_seed(spec["seed"])
    inputs = tuple(torch.randn(shape, generator=gen).to(dtype) for shape in spec["inputs"])
    return module.eval().to(dtype), inputs


def _resolve(qualname: str):
    if not qualname.startswith(BUILDERS):
        raise ValueError(f"{qualname!r}: programs are built from {BUILDERS} only (the GPU machine has no egglog)")
    module, _, name = qualname.rpartition(".")
    return getattr(importlib.import_module(module), name)


def fingerprints(module: torch.nn.Module, inputs, from_module: dict[str, str]) -> dict[str, torch.Tensor]:
    """Evenly spaced elements of every input and of the weights the plan takes from the module."""
    state = module.state_dict()
    tensors = {**{f"input {i}": t for i, t in enumerate(inputs)},
               **{f"param {key}": weight_of(state, recipe) for key, recipe in from_module.items()}}
    return {key: _points(t.reshape(-1)) for key, t in tensors.items()}


def weight_of(state: dict[str, torch.Tensor], recipe) -> torch.Tensor:
    """A plan parameter made from the rebuilt program's weights (``params_from_module``): a weight, by its
    state name, or a constant the optimizer folded from weights: weights, each maybe transposed, concatenated
    along a dim and cast (``{"dim": 1, "parts": [[name, transposed], ...], "dtype": "float16"}``: a merged
    Q/K/V projection's weight, 50 MB in fp16 for a Llama layer, need not travel)."""
    if isinstance(recipe, str):
        return state[recipe]
    parts = [state[name].t() if transposed else state[name] for name, transposed in recipe["parts"]]
    return torch.cat(parts, recipe["dim"]).to(getattr(torch, recipe["dtype"])).contiguous()


def _points(flat: torch.Tensor) -> torch.Tensor:
    return flat[torch.arange(FINGERPRINT_POINTS) * (flat.numel() - 1) // (FINGERPRINT_POINTS - 1)].clone()


def as_tuple(out) -> tuple:
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def reference_of(out: torch.Tensor, points: int | None = None, seed: int = 0) -> dict:
    """A reference for ``out``: float32 values of every element, or of ``points`` sampled ones (and the first
    and last) when it has more."""
    flat = out.detach().reshape(-1).float()
    index = None
    if points is not None and flat.numel() > points:
        gen = torch.Generator().manual_seed(seed)
        drawn = torch.randint(flat.numel(), (points,), generator=gen)
        index = torch.unique(torch.cat([drawn, torch.tensor([0, flat.numel() - 1])]))
    return {"shape": list(out.shape), "index": index, "values": (flat if index is None else flat[index]).clone()}


def max_rel_error(outs, references: list[dict]) -> float:
    """Largest |out - reference| over the largest |reference|, worst over the outputs (inf on a mismatch)."""
    if len(outs) != len(references):
        return float("inf")
    worst = 0.0
    for out, ref in zip(outs, references):
        if list(out.shape) != ref["shape"]:
            return float("inf")
        flat = out.detach().reshape(-1).float().cpu()
        got = flat if ref["index"] is None else flat[ref["index"]]
        want = ref["values"].float().cpu()
        worst = max(worst, ((got - want).abs().max() / want.abs().max().clamp_min(1e-30)).item())
    return worst


# ------------------------------------------------------------------------------------ timing

def gpu_ms(fn, input_sets) -> float:
    """Median ms of ``fn`` by ``triton.testing.do_bench`` (L2 flushed between calls), inputs rotated."""
    from triton.testing import do_bench
    sets = itertools.cycle(input_sets)
    with torch.no_grad():
        return do_bench(lambda: fn(next(sets)), return_mode="median")


def cpu_ms(fn, input_sets, calls: int = 3) -> float:
    """Dry run: median wall ms of a few calls. Interpreter times mean nothing; the plumbing is under test."""
    times = []
    with torch.no_grad():
        for inputs in itertools.islice(itertools.cycle(input_sets), calls):
            start = time.perf_counter()
            fn(inputs)
            times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def expected_seconds(variant: str, record: dict) -> float:
    """Budget a compile variant needs to start: a cold inductor compile of one of these programs takes
    ~5-30 s; max-autotune benchmarks GEMM configs on top, estimated from the default compile's time."""
    if variant in ("compile", INDUCTOR_PLAN):
        return 30.0
    return max(60.0, 4 * record["compile_s"].get("compile", 30.0))


# ------------------------------------------------------------------------------------ the run

@dataclass
class Program:
    folder: Path
    spec: dict
    record: dict
    module: torch.nn.Module | None = None
    input_sets: list = field(default_factory=list)
    check: dict = field(default_factory=dict)


class Session:
    """One run: the device, the time budget, the results so far and where they are written."""

    def __init__(self, args):
        self.dry = args.dry_run_cpu
        self.device = torch.device("cpu" if self.dry else "cuda")
        self.time_ms = cpu_ms if self.dry else gpu_ms
        self.input_sets = args.input_sets
        self.started = time.monotonic()
        self.deadline = self.started + args.budget_s
        self.nodes: dict[str, list | None] = {}  # per program: its plan's nodes (program.json), for the records
        stem = "gpu_dry_run" if self.dry else "gpu"
        self.paths = [args.out / f"{stem}.{ext}" for ext in ("json", "md")] + [args.out / f"{stem}_records.jsonl"]
        self.results = {"machine": machine(self.device), "budget_s": args.budget_s, "input_sets": args.input_sets,
                        "mode": "dry run on a CPU (Triton interpreter; times are not measurements)" if self.dry
                        else "CUDA", "programs": {}}

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def attempt(self, prog: Program, step: str, fn) -> bool:
        """Run one step of a program; an exception is recorded under ``errors[step]`` and the run goes on."""
        try:
            fn(prog)
            return True
        except Exception as err:  # noqa: BLE001 - one failing program must not stop the others
            traceback.print_exc()
            first = (str(err).strip().splitlines() or [""])[0]
            prog.record["errors"][step] = f"{type(err).__name__}: {first[:300]}"
            return False
        finally:
            self.save()

    def load(self, folder: Path) -> Program:
        spec = json.loads((folder / "program.json").read_text())
        record = {"dtype": spec["dtype"], "inputs": spec["inputs"], "kernels": spec["kernels"],
                  "predicted_us": spec["predicted_us"], "flops": spec["flops"], "tolerance": spec["tolerance"],
                  "correct": None, "ms": {}, "compile_s": {}, "skipped": {}, "errors": {}}
        self.results["programs"][spec["entry"]] = record
        self.nodes[spec["entry"]] = spec.get("nodes")
        return Program(folder, spec, record)

    def prepare(self, prog: Program) -> None:
        """Rebuild program and inputs, verify them against the exporting machine's, move them to the device."""
        module, inputs = build_program(prog.spec)
        prog.check = torch.load(prog.folder / "check.pt", weights_only=True)
        found = fingerprints(module, inputs, prog.spec["params_from_module"])
        differ = [key for key, points in prog.check["fingerprints"].items() if not torch.equal(found[key], points)]
        if differ:
            raise RuntimeError(f"{differ} rebuilt from the seed differ from the exporting machine's (another "
                               "random stream?): re-export, or compare torch versions")
        prog.module = module.to(self.device)
        first = tuple(t.to(self.device) for t in inputs)
        prog.input_sets = [first] + [tuple(torch.randn_like(t) for t in first) for _ in range(self.input_sets - 1)]

    def time_eager(self, prog: Program) -> None:
        prog.record["ms"]["eager"] = self.time_ms(lambda inputs: prog.module(*inputs), prog.input_sets)

    def check_and_time_plan(self, prog: Program) -> None:
        """Load the standalone plan, compare its outputs with the reference and with eager, time it."""
        plan, params = self.load_plan(prog, prog.folder, prog.spec["params_from_module"])

        def call(inputs):
            return plan.forward(*inputs, params=params)
        self.check(prog, call, "")
        prog.record["ms"]["eqiforge"] = self.time_ms(call, prog.input_sets)

    def check_and_time_inductor_plan(self, prog: Program) -> None:
        """The inductor backend's plan: its code bound to its tensors, compiled by Inductor (the dry run: by
        torch.compile's eager backend), checked like the triton plan, its first calls timed as compile_s."""
        inductor = prog.spec.get("inductor", {})
        if not inductor.get("runs_plan"):  # the backend runs the program compiled by Inductor
            prog.record["skipped"][INDUCTOR_PLAN] = f"runs torch.compile's program: {inductor.get('runs', '?')}"
            if "compile" in prog.record["ms"]:
                prog.record["ms"][INDUCTOR_PLAN] = prog.record["ms"]["compile"]
            return
        plan, params = self.load_plan(prog, prog.folder / "inductor", inductor["params_from_module"])
        torch._dynamo.reset()
        compiled = self.first_calls(prog, INDUCTOR_PLAN, torch.compile(
            plan.bind(params), backend="eager" if self.dry else "inductor", dynamic=False))
        self.check(prog, lambda inputs: compiled(*inputs), "_inductor")
        prog.record["ms"][INDUCTOR_PLAN] = self.time_ms(lambda inputs: compiled(*inputs), prog.input_sets)

    def first_calls(self, prog: Program, variant: str, compiled):
        """Call ``compiled`` once per input set (it compiles at the first), timed as compile_s; returns it."""
        start = time.perf_counter()
        with torch.no_grad():
            for inputs in prog.input_sets:
                compiled(*inputs)
        if not self.dry:
            torch.cuda.synchronize()
        prog.record["compile_s"][variant] = time.perf_counter() - start
        return compiled

    def load_plan(self, prog: Program, folder: Path, from_module: dict[str, str]):
        """(plan module, its parameters on the device): the folded constants from params.pt, the weights from
        the rebuilt program."""
        name = f"eqiforge_plan_{prog.spec['entry']}_{folder.name}"
        loader = importlib.util.spec_from_file_location(name, folder / "plan.py")
        plan = sys.modules[name] = importlib.util.module_from_spec(loader)  # Triton's inspect finds it there
        loader.loader.exec_module(plan)
        state = prog.module.state_dict()
        params = {key: t.to(self.device) for key, t in torch.load(folder / "params.pt", weights_only=True).items()}
        params.update({key: weight_of(state, recipe).to(self.device) for key, recipe in from_module.items()})
        return plan, params

    def check(self, prog: Program, call, suffix: str) -> None:
        """``max_rel_err<suffix>`` against the recorded reference and ``max_rel_err<suffix>_vs_eager`` against
        eager here; ``correct`` stays true only while every plan checked is within the tolerance."""
        first = prog.input_sets[0]
        with torch.no_grad():
            outs, eager = as_tuple(call(first)), as_tuple(prog.module(*first))
        rec = prog.record
        rec[f"max_rel_err{suffix}_vs_eager"] = max_rel_error(outs, [reference_of(e) for e in eager])
        if prog.check["reference"] is None:  # too large for the exporting CPU: eager on this GPU decides
            rec[f"max_rel_err{suffix}"] = None
            rec["skipped"]["CPU reference"] = "too large to compute on the exporting CPU; checked against eager here"
        else:
            rec[f"max_rel_err{suffix}"] = max_rel_error(outs, prog.check["reference"])
        errors = (rec[f"max_rel_err{suffix}"], rec[f"max_rel_err{suffix}_vs_eager"])
        rec["correct"] = rec["correct"] is not False and max(e for e in errors if e is not None) \
            <= prog.check["tolerance"]

    def time_compiled(self, prog: Program, variant: str) -> None:
        """torch.compile in ``variant``'s mode; the first calls (compiling) are timed apart, as compile_s."""
        torch._dynamo.reset()  # each program compiles fresh, no recompile limits across programs
        compiled = self.first_calls(prog, variant, torch.compile(
            prog.module, **({"backend": "eager"} if self.dry else COMPILE_MODES[variant])))
        prog.record["ms"][variant] = self.time_ms(lambda inputs: compiled(*inputs), prog.input_sets)

    def run(self, folders: list[Path], skip: dict[str, str]) -> None:
        """The three passes: plans with eager, then each compile mode (unless in ``skip``, with the reason)."""
        programs = []
        for folder in folders:
            prog = self.load(folder)
            if self.left() <= 0:
                prog.record["skipped"]["all"] = "time budget"
            elif self.attempt(prog, "program", self.prepare):
                self.attempt(prog, "eager", self.time_eager)
                self.attempt(prog, "eqiforge", self.check_and_time_plan)
                programs.append(prog)
        for variant in VARIANTS:
            for prog in programs:
                need = expected_seconds(variant, prog.record)
                if variant in skip:
                    prog.record["skipped"][variant] = skip[variant]
                elif self.left() < need:
                    left = max(self.left(), 0)
                    prog.record["skipped"][variant] = f"time budget ({left:.0f} s left, ~{need:.0f} s needed)"
                elif variant == INDUCTOR_PLAN:
                    self.attempt(prog, variant, self.check_and_time_inductor_plan)
                else:
                    self.attempt(prog, variant, lambda prog: self.time_compiled(prog, variant))
        self.save()

    def save(self) -> None:
        self.results["elapsed_s"] = time.monotonic() - self.started
        for record in self.results["programs"].values():
            record.update(derived(record))
        texts = [json.dumps(self.results, indent=2) + "\n", markdown(self.results),
                 "".join(json.dumps(records_line(name, self.results, self.nodes[name], self.device.type)) + "\n"
                         for name in self.results["programs"])]
        for path, text in zip(self.paths, texts):
            tmp = path.with_name(path.name + ".tmp")  # written whole, then renamed: a kill leaves a valid file
            tmp.write_text(text)
            tmp.replace(path)


#: the version of eqiforge/decide/choice.py's records this writes (the GPU machine does not import
#: eqiforge.decide.choice: its cost-model imports want scipy); tests/test_gpu_bench.py checks the two agree
RECORDS_VERSION = 3


def records_line(name: str, results: dict, nodes: list | None, device: str) -> dict:
    """One program's measurements as a record of the measured choice: every timed variant a candidate
    (``do_bench`` medians, so no rounds), EqiForge's triton plan with its predicted seconds and ``nodes``."""
    record = results["programs"][name]
    candidates = [{"name": variant, "predicted_s": record["predicted_us"] * 1e-6 if variant == "eqiforge" else None,
                   "measured_s": ms * 1e-3, "failed": None,
                   **({"nodes": nodes} if variant == "eqiforge" and nodes else {})}
                  for variant, ms in record["ms"].items()]
    candidates += [{"name": variant, "predicted_s": None, "measured_s": None, "failed": why}
                   for variant, why in record["errors"].items() if variant not in record["ms"]]
    timed = [c for c in candidates if c["measured_s"]]
    return {"version": RECORDS_VERSION, "time": time.time(), "program": name, "device": device,
            "machine": results["machine"], "runs": min(timed, key=lambda c: c["measured_s"])["name"] if timed else None,
            "rounds": None, "candidates": candidates}


def machine(device: torch.device) -> dict:
    import triton
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else \
        f"CPU ({platform.machine()}), Triton interpreter"
    return {"device": name, "torch": torch.__version__, "triton": triton.__version__, "cuda": torch.version.cuda,
            "python": platform.python_version(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "fp32_matmul_precision": torch.get_float32_matmul_precision()}


def derived(record: dict) -> dict:
    """Ratios of EqiForge's time to the others' (< 1: EqiForge is faster) and TFLOP/s where FLOPs are known."""
    ms = record["ms"]
    ours = ms.get("eqiforge")
    ratios = {f"eqiforge/{v}": ours / ms[v] for v in ("eager", *COMPILE_MODES) if ours and ms.get(v)}
    if ms.get(INDUCTOR_PLAN) and ms.get("compile"):
        ratios["eqiforge_inductor/compile"] = ms[INDUCTOR_PLAN] / ms["compile"]
    tflops = {v: record["flops"] / (t * 1e-3) / 1e12 for v, t in ms.items() if record["flops"] and t}
    return {"ratios": ratios, "tflops": tflops}


# ------------------------------------------------------------------------------------ tables

def _num(value, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _notes(r: dict) -> str:
    notes = [f"{step} skipped: {why}" for step, why in r["skipped"].items()]
    notes += [f"{step} failed: {why[:100]}" for step, why in r["errors"].items()]
    return "; ".join(notes)


COLUMNS = {
    "program": lambda name, r: name,
    "dtype": lambda name, r: r.get("dtype", "-"),
    "correct": lambda name, r: {True: "yes", False: "NO", None: "-"}[r.get("correct")],
    "max rel err": lambda name, r: _num(r.get("max_rel_err"), ".1e"),
    "vs eager here": lambda name, r: _num(r.get("max_rel_err_vs_eager"), ".1e"),
    "eager ms": lambda name, r: _num(r["ms"].get("eager"), ".3f"),
    "compile ms": lambda name, r: _num(r["ms"].get("compile"), ".3f"),
    "max-autotune ms": lambda name, r: _num(r["ms"].get("max-autotune"), ".3f"),
    "EqiForge ms": lambda name, r: _num(r["ms"].get("eqiforge"), ".3f"),
    "EqiForge-inductor ms": lambda name, r: _num(r["ms"].get(INDUCTOR_PLAN), ".3f"),
    "/eager": lambda name, r: _num(r.get("ratios", {}).get("eqiforge/eager"), ".2f"),
    "/compile": lambda name, r: _num(r.get("ratios", {}).get("eqiforge/compile"), ".2f"),
    "/max-autotune": lambda name, r: _num(r.get("ratios", {}).get("eqiforge/max-autotune"), ".2f"),
    "inductor plan /compile": lambda name, r: _num(r.get("ratios", {}).get("eqiforge_inductor/compile"), ".2f"),
    "TFLOP/s eager, EqiForge": lambda name, r: ", ".join(_num(r.get("tflops", {}).get(v), ".1f")
                                                         for v in ("eager", "eqiforge")) if r.get("flops") else "",
    "compile s": lambda name, r: ", ".join(f"{v} {s:.0f}" for v, s in r["compile_s"].items()),
    "kernels": lambda name, r: str(r.get("kernels", "-")),
    "notes": lambda name, r: _notes(r),
}
SHORT = ("program", "correct", "eager ms", "compile ms", "max-autotune ms", "EqiForge ms", "EqiForge-inductor ms",
         "/eager", "/compile", "/max-autotune", "inductor plan /compile")


def table(results: dict, columns=tuple(COLUMNS)) -> str:
    rows = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    rows += ["| " + " | ".join(COLUMNS[c](name, r) for c in columns) + " |" for name, r in results["programs"].items()]
    return "\n".join(rows)


def markdown(results: dict) -> str:
    m = results["machine"]
    return "\n".join([
        f"# GPU benchmark ({m['date']})", "",
        f"{m['device']}, torch {m['torch']}, triton {m['triton']}, CUDA {m['cuda']}; {results['mode']}; "
        f"fp32 matmul precision {m['fp32_matmul_precision']} (no TF32, like the plans' IEEE dots); "
        f"{results['elapsed_s']:.0f} s of a {results['budget_s']:.0f} s budget.", "",
        f"Median ms per call (`triton.testing.do_bench`, inputs rotated over {results['input_sets']} sets); "
        "/eager, /compile, /max-autotune: EqiForge's time over theirs (< 1: EqiForge is faster); "
        "EqiForge-inductor: the inductor backend's plan compiled by Inductor here (inductor plan /compile: its "
        "time over torch.compile's); "
        "max rel err: against the eager float32 reference of the exporting CPU; vs eager here: against "
        "eager on this device; compile s: seconds of the first calls (excluded from the times).", "",
        table(results), ""])


# ------------------------------------------------------------------------------------ main

def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--plans", type=Path, default=PLANS, help="folder of exported plans (export_plans.py)")
    p.add_argument("--out", type=Path, default=RESULTS, help="where gpu.json and gpu.md go")
    p.add_argument("--budget-s", type=float, default=420.0, help="wall seconds for all work; the rest is skipped")
    p.add_argument("--input-sets", type=int, default=4, help="input sets the timed calls rotate over")
    p.add_argument("--programs", help="comma-separated entries to run (default: all)")
    p.add_argument("--no-max-autotune", action="store_true", help="skip torch.compile(mode='max-autotune')")
    p.add_argument("--dry-run-cpu", action="store_true",
                   help="check the (tiny) plans on a CPU under the Triton interpreter; torch.compile uses its "
                        "'eager' backend; writes gpu_dry_run.json/.md")
    args = p.parse_args(argv)
    if args.dry_run_cpu:
        os.environ["TRITON_INTERPRET"] = "1"  # before the plans import triton
    elif not torch.cuda.is_available():
        print(NO_CUDA)
        return 0
    folders = sorted((f.parent for f in args.plans.glob("*/program.json")),
                     key=lambda f: json.loads((f / "program.json").read_text())["order"])
    if args.programs:
        folders = [f for f in folders if f.name in args.programs.split(",")]
    if not folders:
        print(f"run.py: no exported plans under {args.plans}: run bench/gpu/export_plans.py where egglog is "
              "installed and carry bench/gpu/plans here")
        return 1
    torch.set_float32_matmul_precision("highest")
    args.out.mkdir(parents=True, exist_ok=True)
    session = Session(args)
    session.run(folders, skip={"max-autotune": "--no-max-autotune"} if args.no_max_autotune else {})
    print(f"\nwritten: {', '.join(map(str, session.paths))}\n")
    print(table(session.results, SHORT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
