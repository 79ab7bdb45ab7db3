"""KernelBench's published GPU timings, joined to each timed program's ATen calls as written, in one file.

    python bench/kernelbench_data.py --repo KERNELBENCH_GIT_DIR [--out FILE] [--jobs N]

KernelBench (github.com/ScalingIntelligence/KernelBench, MIT licence) publishes, per GPU setup and torch
configuration (eager, inductor, ...), the mean time of each of its ~250 reference programs, measured with
PyTorch 2.5 / CUDA 12.4 (results/timing/README.md). That is a free, many-GPU yardstick for a cost model, if
one knows exactly which program at which sizes each time belongs to. This script reads the timing files of
two commits (the snapshot's HEAD: H100_Modal, H100_PCIe_LambdaLabs; b08d959: the nine setups there, not
old/) and pairs each file with the problem sources of the commit that last wrote it: b08d959 scaled the
problem sizes up, yet its timing files are from Jan-Mar 2025, timed at the sizes of their own commits.

Each distinct problem source (git blob) is captured once, in a worker process (time limit, one thread):
model and inputs are built on the meta device (no memory, whatever the sizes; an explicit ``cuda`` device
in old versions is forced to meta; ``linspace`` schedules, read with ``.item()``, stay real), the model in the mode it
is constructed in (training, as timed), then ``torch.export`` and ``eqiforge.frontend.as_written.written_calls`` record
its calls. A program that fails (``.item()`` on meta, a missing module, a hang) is listed under "skipped" with the
reason. Two level-3 programs (Mamba2) import einops: ``pip install einops`` first to capture them. A timing KernelBench
published as null (the program failed under that config) is kept as a row with ``ms`` null.
"""
from __future__ import annotations

import argparse
import gzip
import json
import multiprocessing as mp
import re
import subprocess
import time
from multiprocessing.connection import wait
from pathlib import Path

from tqdm import tqdm

from eqiforge.cost.devices import CUDA_NAMES

FORMAT = "eqiforge-published-timings/1"
SETS = {"HEAD": ["H100_Modal", "H100_PCIe_LambdaLabs"], "b08d959": None}  # None: every setup but old/
#: a row's GPU is the device table's name of its "hardware" (CUDA_NAMES: a setup's rows are not all from one card,
#: A10G_modal's are partly from A10s, A100_modal's partly from 80 GB cards), by its setup where a row has none
#: (a time KernelBench could not measure)
GPUS = {"H100_Modal": "H100", "H100_together": "H100", "H100_PCIe_LambdaLabs": "H100_PCIE", "B200_together": "B200",
        "L40S_matx3": "L40S", "L40S_modal": "L40S", "A100_modal": "A100_40GB", "A100-80GB_modal": "A100",
        "A10G_modal": "A10G", "L4_modal": "L4", "T4_modal": "T4"}
CONFIGS = {"torch": "eager", "torch_compile_inductor_default": "inductor",
           "torch_compile_inductor_max-autotune": "max-autotune",
           "torch_compile_inductor_max-autotune-no-cudagraphs": "max-autotune-no-cudagraphs",
           "torch_compile_inductor_reduce-overhead": "reduce-overhead", "torch_compile_cudagraphs": "cudagraphs"}
TIME_LIMIT_S = 600  # a recurrent program (GRU, 512 steps) takes ~50-100 s: its shapes are traced step by step


def git(repo: str, *args: str) -> str:
    return subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True, text=True).stdout


def timing_files(repo: str) -> list[dict]:
    """One entry per timing file: its setup, config, the commit it is read at and the commit that wrote it."""
    files = []
    for read_at, setups in SETS.items():
        sha = git(repo, "rev-parse", read_at).strip()
        for path in git(repo, "ls-tree", "-r", "--name-only", sha, "results/timing/").split():
            m = re.fullmatch(r"results/timing/([^/]+)/baseline_time_(.+)\.json", path)
            if not m or m[1] == "old" or (setups is not None and m[1] not in setups):
                continue
            writer, when = git(repo, "log", "-1", "--format=%H %ct", sha, "--", path).split()
            files.append({"setup": m[1], "config": CONFIGS[m[2]], "path": path, "read_at": read_at, "sha": sha,
                          "commit": writer, "time": int(when)})
    return files


def problem_blobs(repo: str, commit: str) -> dict[str, str]:
    """'level1/19_ReLU.py' -> blob id, for the problems of a commit."""
    out = {}
    for line in git(repo, "ls-tree", "-r", commit, "KernelBench/").splitlines():
        meta, path = line.split("\t", 1)
        if re.fullmatch(r"KernelBench/level\d/[^/]+\.py", path):
            out[path.removeprefix("KernelBench/")] = meta.split()[2]
    return out


# --- capture, in a worker process ---

def _to_meta(value):
    import torch
    is_cuda = (isinstance(value, str) and value.startswith("cuda")) or (isinstance(value, torch.device)
                                                                         and value.type == "cuda")
    return torch.device("meta") if is_cuda else value


def capture(source: str, name: str) -> list:
    """The program's ATen calls as written, built and exported on the meta device."""
    import torch

    from eqiforge.frontend.as_written import written_calls

    small_ranges = (torch.linspace, torch.logspace)  # a schedule of a few numbers read with .item(): real

    class CudaToMeta(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = {k: _to_meta(v) if k == "device" else v for k, v in (kwargs or {}).items()}
            if func in small_ranges:  # Swin's drop-path rates
                kwargs["device"] = "cpu"
            if func is torch.Tensor.cuda:
                return args[0]
            if func is torch.Tensor.to:
                args = tuple(_to_meta(a) for a in args)
            return func(*args, **kwargs)

    namespace = {"__name__": "kernelbench_problem"}
    with torch.device("meta"), CudaToMeta():
        exec(compile(source, name, "exec"), namespace)  # noqa: S102 - running the problem is the point
        model = namespace["Model"](*namespace["get_init_inputs"]())  # not .eval(): timed as constructed
        inputs = tuple(namespace["get_inputs"]())
        ep = torch.export.export(model, inputs, strict=False)
    return [[c.op, c.in_shapes, c.in_dtypes, c.out_shapes, c.out_dtypes, [_round(a) for a in c.args], c.sources]
            for c in written_calls(ep.graph_module)]


def _round(value):
    return float(f"{value:.6g}") if isinstance(value, float) else value


def _serve(conn) -> None:
    """Worker loop: (blob, source, name) in, (blob, calls or None, reason) out."""
    import warnings

    import torch
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    while True:
        blob, source, name = conn.recv()
        try:
            conn.send((blob, capture(source, name), None))
        except BaseException as e:  # noqa: BLE001 - any failure of a program is a reason to skip it
            first = (str(e).strip().splitlines() or [""])[0][:200]
            conn.send((blob, None, f"{type(e).__name__}: {first}"))


def capture_all(tasks: dict[str, tuple[str, str]], jobs: int) -> dict[str, tuple]:
    """blob -> (calls, None) or (None, reason), each task in one of `jobs` workers; a hung or crashed worker is
    replaced and its task skipped."""
    ctx, todo, results, busy = mp.get_context("spawn"), sorted(tasks), {}, {}
    bar = tqdm(total=len(todo), desc="capture", unit="program")

    def start():
        here, there = ctx.Pipe()
        proc = ctx.Process(target=_serve, args=(there,), daemon=True)
        proc.start()
        return here, proc

    workers = [start() for _ in range(jobs)]
    while todo or busy:
        for i, (conn, _) in enumerate(workers):
            if i not in busy and todo:
                blob = todo.pop()
                conn.send((blob, *tasks[blob]))
                busy[i] = (blob, time.monotonic())
        ready = wait([workers[i][0] for i in busy], timeout=5)
        for i, (blob, started) in list(busy.items()):
            conn, proc = workers[i]
            reason = None
            if conn in ready:
                try:
                    _, calls, reason = conn.recv()
                    results[blob] = (calls, reason)
                except EOFError:
                    proc.join(5)
                    reason = f"worker died (exit code {proc.exitcode})"
            elif time.monotonic() - started > TIME_LIMIT_S:
                reason = f"timed out after {TIME_LIMIT_S} s"
            else:
                continue
            if blob not in results:
                proc.kill()
                proc.join()
                workers[i] = start()
                results[blob] = (None, reason)
            del busy[i]
            bar.update()
    for conn, proc in workers:
        proc.kill()
    bar.close()
    return results


def torch_version() -> str:
    import torch
    return torch.__version__


# --- the dataset ---

def read_timings(repo: str, files: list[dict]) -> tuple[list[dict], dict, set]:
    """The timing rows; blob -> (problem, the earliest commit that timed it); (problem, commit) with no file."""
    blobs_at = {f["commit"]: problem_blobs(repo, f["commit"]) for f in files}
    rows, first_seen, missing = [], {}, set()
    for f in sorted(files, key=lambda f: (f["time"], f["setup"], f["config"])):
        times = json.loads(git(repo, "show", f"{f['sha']}:{f['path']}"))
        for level_key in sorted(times, key=lambda k: int(k.removeprefix("level"))):
            level = int(level_key.removeprefix("level"))
            for problem, t in times[level_key].items():
                t = t or {}  # null: KernelBench could not time it (kept, with ms null)
                path = f"level{level}/{problem}"
                blob = blobs_at[f["commit"]].get(path)
                if blob is None:
                    missing.add((path, f["commit"]))
                first_seen.setdefault(blob, (path, f["commit"]))
                gpu = CUDA_NAMES[t["hardware"]] if t.get("hardware") else GPUS[f["setup"]]
                rows.append({"setup": f["setup"], "gpu": gpu, "hardware": t.get("hardware"),
                             "config": f["config"], "level": level, "problem": problem, "program": blob,
                             "ms": _round(t.get("mean")), "std": _round(t.get("std"))})
    first_seen.pop(None, None)
    rows.sort(key=lambda r: (r["setup"], r["config"], r["level"], _number(r["problem"]), r["problem"]))
    return rows, first_seen, missing


def build(repo: str, jobs: int) -> dict:
    files = timing_files(repo)
    rows, first_seen, missing = read_timings(repo, files)
    tasks = {b: (git(repo, "cat-file", "blob", b), f"{p}@{c[:7]}") for b, (p, c) in first_seen.items()}
    results = capture_all(tasks, jobs)
    programs = {}
    skipped = [{"program": None, "problem": p, "commit": c, "reason": "no such problem file at that commit"}
               for p, c in sorted(missing)]
    for blob, (problem, commit) in sorted(first_seen.items(), key=lambda kv: (kv[1], kv[0])):
        calls, reason = results[blob]
        if calls is None:
            skipped.append({"program": blob, "problem": problem, "commit": commit, "reason": reason})
        else:
            programs[blob] = {"problem": problem, "level": int(problem[5]), "commit": commit, "calls": calls}
    for r in rows:
        r["program"] = r["program"] if r["program"] in programs else None  # null: skipped (see "skipped")
    return {"format": FORMAT,
            "source": {"repository": "ScalingIntelligence/KernelBench", "licence": "MIT",
                       "snapshot": git(repo, "rev-parse", "HEAD").strip(),
                       "timing_files": {f"{f['setup']}/{f['config']}": {"commit": f["commit"], "read_at": f["read_at"]}
                                        for f in files},
                       "torch": torch_version()},
            "programs": programs, "timings": rows, "skipped": skipped}


def _number(problem: str) -> int:
    return int(problem.split("_", 1)[0]) if problem.split("_", 1)[0].isdigit() else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", required=True, help="KernelBench git directory (bare is fine)")
    parser.add_argument("--out", default="bench/data/gpu/kernelbench.json.gz")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    data = build(args.repo, args.jobs)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    with open(out, "wb") as fh, gzip.GzipFile(fileobj=fh, mode="wb", mtime=0, filename="") as gz:
        gz.write(text.encode())
    print(f"{out}: {len(data['timings'])} timings, {len(data['programs'])} programs captured, "
          f"{len(data['skipped'])} skipped, {out.stat().st_size / 1e3:.0f} kB")


if __name__ == "__main__":
    main()
