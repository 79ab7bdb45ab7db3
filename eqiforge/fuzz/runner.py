"""Fuzz jobs (program x configuration): run in killable workers, judged against eager, summarised.

A job optimizes its program on seed-0 inputs under its configuration, then runs the optimized module,
eager PyTorch and a float64 reference on FRESH seed-1 inputs. Verdicts:

- ``wrong``: shapes or dtypes differ from eager's, the NaN/inf pattern differs (configuration
  ``nonfinite``, assume_finite=False), or the error against the float64 reference, as a relative max-norm
  over the positions where eager and the reference are finite, exceeds max(4 x eager's own, a dtype floor);
- ``crash``: optimizing or calling raised anything but an EqiforgeError naming its cause;
- ``rejected``: a clear EqiforgeError (unsupported input is allowed; counted apart);
- ``hang``: the job passed its timeout (its worker's process group is killed and the worker replaced);
- ``invalid``: the program itself failed in eager (a generator bug, not EqiforgeError's).

Workers are spawned processes, each the leader of its own process group (saturation forks a child of
its own), set TRITON_INTERPRET before triton is imported, and warm up once so that start-up is not
charged to a job's timeout. A failing job is written out as a standalone reproducer: the program's
source and a call to :func:`check` with the configuration's options.
"""
from __future__ import annotations

import atexit
import collections
import json
import math
import multiprocessing
import os
import random
import signal
import time
import traceback
import warnings
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import wait
from pathlib import Path

import torch
import torch.utils._pytree as pytree

import eqiforge
from eqiforge import sweep
from eqiforge.egraph import rulesets
from eqiforge.errors import EqiforgeError

from . import programs, sizes
from .programs import Program

#: configurations of programs drawn with the torch profile
CONFIGS = ("default", "rules", "limits", "greedy", "ilp", "nofold", "compile", "nonfinite", "symbolic", "dynamic",
           "compile_symbolic", "inductor")
#: configurations whose jobs also call the optimized program at other sizes (``sizes.variants``): optimize()
#: making a dim symbolic at its second size, optimize(dynamic=True), the backend on Dynamo's dynamic graphs
SIZED = ("symbolic", "dynamic", "compile_symbolic")
COMPILED = ("compile", "compile_symbolic")  # configurations that run the torch.compile backend
#: configurations of programs drawn with the (tiny) triton profile, under the Triton interpreter
TRITON_CONFIGS = ("triton", "triton_rules")
FAILURES = ("wrong", "crash", "hang", "invalid")
STATUSES = ("ok", "rejected") + FAILURES
#: rounding floor of the judge, relative to the output's largest magnitude
FLOOR = {"float64": 1e-12, "float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}
EAGER_FACTOR = 4.0  # the optimized output may be this many times further from float64 than eager is
#: an EqiforgeError carrying one of these wraps an internal failure, which is a crash, not a rejection
INTERNAL_MARKERS = ("Traceback (most recent call last)", "PanicException", "saturation failed")


# ------------------------------------------------------------------------------------------- jobs

@dataclass(frozen=True)
class Job:
    program: Program
    config: str
    options: dict  # keyword arguments of eqiforge.optimize (or of the torch.compile backend)
    timeout: float

    @property
    def name(self) -> str:
        return f"{self.program.seed}_{self.config}"


def job_options(config: str, seed: int) -> dict:
    """The optimize() options of ``config``; random rule subsets are drawn from ``seed``, reproducibly."""
    rng = random.Random(f"eqiforge-fuzz-rules:{config}:{seed}")

    def some(names):
        return sorted(rng.sample(names, rng.randint(1, max(1, len(names) - 1))))

    sets = rulesets.available()
    algebra = sorted(n for n, rs in sets.items() if rs.layer == "algebra")
    kernel = sorted(n for n, rs in sets.items() if rs.layer == "kernel")
    return {
        # compile: a rejected graph runs unchanged (no Inductor compile per job), the plan as EqiForge's torch code
        "default": {}, "compile": {"fallback": "eager", "plan_backend": "torch"},
        "nonfinite": {"assume_finite": False}, "symbolic": {}, "dynamic": {"dynamic": True},
        "compile_symbolic": {"fallback": "eager", "plan_backend": "torch"},
        "rules": {"rules": some(algebra)},
        "limits": {"limits": eqiforge.Limits(iterations=2, enodes=2000, seconds=1.0)},
        "greedy": {"extractor": "greedy"}, "ilp": {"extractor": "ilp"}, "nofold": {"fold_constants": False},
        "inductor": {"backend": "inductor"},
        "triton": {"backend": "triton"},
        "triton_rules": {"backend": "triton", "rules": some(algebra) + some(kernel)},
    }[config]


def plan_jobs(count: int, seed: int, configs=CONFIGS, per_program: int = 3, triton: int = 0,
              timeout: float = 60.0) -> list[Job]:
    """``count`` torch-profile programs (seeds ``seed``...), each under ``per_program`` of ``configs`` in
    rotation (so every configuration gets its share), then ``triton`` triton-profile jobs."""
    per_program = min(per_program, len(configs))
    jobs = []
    for i in range(count):
        program = programs.generate(seed + i, "torch")
        for j in range(per_program):
            config = configs[(i * per_program + j) % len(configs)]
            jobs.append(Job(program, config, job_options(config, program.seed), timeout))
    for t in range(triton):
        program = programs.generate(seed + count + t, "triton")
        config = TRITON_CONFIGS[t % len(TRITON_CONFIGS)]
        jobs.append(Job(program, config, job_options(config, program.seed), timeout))
    return jobs


# ---------------------------------------------------------------------------------------- judging

@dataclass
class Outcome:
    status: str
    detail: str = ""  # why (first line: a one-line diagnosis; a crash's traceback follows)
    error: float | None = None  # worst output: error against float64 / largest reference magnitude
    allowed: float | None = None
    eager_error: float | None = None
    validation: list[str] = field(default_factory=list)  # opt.report.validation of each optimization
    interventions: list[bool] = field(default_factory=list)  # opt.report.plan_check_intervened of each
    rules: list[str] = field(default_factory=list)  # rules that matched while saturating, for coverage
    sizes: dict = field(default_factory=dict)  # SIZED configurations: the size class changed, the sizes called,
    #                                            calls that ran a plan / anything else there, optimizations
    seconds: float = 0.0

    @property
    def intervened(self) -> bool:
        """The optimizer's own plan check fired (found a difference, excluded e-nodes, fell back) in one of the
        optimizations."""
        return any(self.interventions)

    def __str__(self) -> str:
        lines = [f"{self.status.upper()}: {self.detail}" if self.detail else self.status.upper()]
        if self.error is not None:
            lines.append(f"error {self.error:.3g} against float64 (allowed {self.allowed:.3g}, "
                         f"eager's error {self.eager_error:.3g})")
        lines += [f"plan check: {v}" for v in self.validation if v]
        if self.sizes:
            lines.append(_sizes_line(self.sizes))
        return "\n".join(lines)


def judge(got, eager, reference, dtype: str, compare_nonfinite: bool = False, noise=None) -> Outcome:
    """Judge ``got`` (the optimized outputs) against ``eager`` and the float64 ``reference`` (with
    ``compare_nonfinite``, every NaN and infinity where eager or the reference has one); ``noise`` (the
    reference on inputs moved by a few float64 ulps, ``_perturbed``) widens what eager's rounding allows where
    an output is that sensitive (a float64 program's eager output is its reference, so eager's own error says
    nothing there: a mean of layer-normed rows, ~1e-17, may be 0.0 or -4.9e-17 by rounding alone)."""
    got, eager, reference = (pytree.tree_leaves(x) for x in (got, eager, reference))
    noise = pytree.tree_leaves(noise) if noise is not None else [None] * len(reference)
    if len(got) != len(eager):
        return Outcome("wrong", f"{len(got)} outputs, eager returns {len(eager)}")
    worst = Outcome("ok", error=0.0, allowed=FLOOR[dtype], eager_error=0.0)
    for i, (g, e, r, n) in enumerate(zip(got, eager, reference, noise)):
        if not isinstance(g, torch.Tensor) or g.shape != e.shape or g.dtype != e.dtype:
            described = f"{tuple(g.shape)} {g.dtype}" if isinstance(g, torch.Tensor) else type(g).__name__
            return Outcome("wrong", f"output {i} is {described}, eager's is {tuple(e.shape)} {e.dtype}")
        g, e, r = g.detach().double(), e.detach().double(), r.detach().double()
        if compare_nonfinite:
            # where eager's rounding alone made the class (a bfloat16 sum rounded to 0, times inf: NaN, where
            # the float64 run gives -inf), the reference's class is as right as eager's
            for what, test in (("NaN", torch.isnan), ("+inf", torch.isposinf), ("-inf", torch.isneginf)):
                differ = int(((test(g) != test(e)) & (test(g) != test(r))).sum())
                if differ:
                    return Outcome("wrong", f"output {i}: {what} pattern differs from eager's at {differ} positions")
        compared = torch.isfinite(e) & torch.isfinite(r)
        if not compared.any():
            continue
        largest = float(r[compared].abs().max())
        scale = largest if largest > 0 else 1.0
        error = float(torch.nan_to_num((g - r)[compared].abs(), nan=math.inf).max()) / scale
        eager_error = float((e - r)[compared].abs().max()) / scale
        if isinstance(n, torch.Tensor) and n.shape == r.shape:
            moved = (n.detach().double() - r)[compared & torch.isfinite(n)].abs()
            eager_error = max(eager_error, float(moved.max()) / scale if moved.numel() else 0.0)
        allowed = max(EAGER_FACTOR * eager_error, FLOOR[dtype])
        if error > allowed:
            return Outcome("wrong", f"output {i} differs from float64 beyond eager's rounding", error, allowed,
                           eager_error)
        if error / allowed > worst.error / worst.allowed:
            worst = Outcome("ok", error=error, allowed=allowed, eager_error=eager_error)
    return worst


def _sizes_line(found: dict) -> str:
    if not found.get("sizes"):
        return "other sizes: no input dim can change size"
    return (f"other sizes: dims of size {found['class']} at {', '.join(map(str, found['sizes']))}: "
            f"{found['plan calls']} calls ran a plan, {found['other calls']} anything else; "
            f"{found['optimizations']} optimizations in all")


def _nonfinite(inputs, seed: int):
    """Copies of ``inputs`` with a few positions set to NaN, +inf and -inf."""
    gen = torch.Generator().manual_seed(10_000 + seed)
    out = []
    for x in inputs:
        x = x.clone()
        flat = x.view(-1)
        positions = torch.randperm(flat.numel(), generator=gen)[:max(1, min(3, flat.numel() // 16))]
        for j, p in enumerate(positions.tolist()):
            flat[p] = (math.nan, math.inf, -math.inf)[j % 3]
        out.append(x)
    return tuple(out)


def _float64(x):
    return x.double() if x.is_floating_point() else x


def _perturbed(make_program, inputs, seed: int = 0):
    """The float64 reference on the inputs moved by up to 4 ulps of float64 each (a seeded random sign per
    element): how far rounding alone moves each output (None where the program cannot run in float64)."""
    gen = torch.Generator().manual_seed(seed)

    def nudged(x):
        if not x.is_floating_point():
            return x
        steps = torch.randint(-4, 5, x.shape, generator=gen, dtype=torch.float64)
        return x.double() * (1 + steps * 2.0 ** -52)
    return _reference(make_program, [nudged(x) for x in inputs])


def _reference(make_program, inputs):
    """The program in float64 (every floating input and parameter cast), or None if it cannot run so."""
    program = make_program()
    if isinstance(program, torch.nn.Module):
        program = program.double()
    try:
        with torch.no_grad():
            return program(*[_float64(x) for x in inputs])
    except Exception:  # noqa: BLE001 - any op without a float64 kernel: eager is the reference then
        return None


def _optimized(make_program, example, config: str, options: dict):
    """(the optimized callable, the Report of each optimization) for ``config``."""
    from eqiforge import dynamo  # imports triton: in a worker, only after TRITON_INTERPRET is set

    if config not in COMPILED:
        opt = eqiforge.optimize(make_program(), example, **options)
        return opt, [opt.report]
    torch._dynamo.reset()
    before = len(dynamo.REPORTS)
    compiled = torch.compile(make_program(), backend="eqiforge", options=options)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled(*example)
    fallbacks = [str(w.message) for w in caught if str(w.message).startswith("eqiforge:")]
    if fallbacks:
        raise EqiforgeError(fallbacks[0])  # the backend ran the graph unoptimized: a rejection
    return compiled, dynamo.REPORTS[before:]


def check(make_program, make_inputs, config: str, options: dict, dtype: str) -> Outcome:
    """Optimize the program under ``config`` and judge it on fresh inputs, then on the same values in the other
    memory layout (``other_layout``: the layout the plan was built for is no promise); a SIZED configuration
    then judges it at other sizes too (``sizes.variants``), in one call each. What a job and a reproducer run."""
    nonfinite = config == "nonfinite"
    example, fresh = make_inputs(0), make_inputs(1)
    if nonfinite:
        example, fresh = _nonfinite(example, 0), _nonfinite(fresh, 1)
    try:
        with torch.no_grad():
            eager = make_program()(*fresh)
    except Exception as err:  # noqa: BLE001
        return Outcome("invalid", f"the program fails in eager: {type(err).__name__}: {err}")
    old, resized = sizes.variants(make_program, make_inputs) if config in SIZED else (None, [])
    layouts = [fresh] + ([other_layout(fresh)] if _eager_runs(make_program, other_layout(fresh)) else [])
    cases = layouts + [inputs for _, inputs in resized]
    try:
        optimized, reports = _optimized(make_program, example, config, options)
        got = [_call(optimized, inputs, config) for inputs in layouts]
        before = _ran(optimized, config) if config in SIZED else None  # what the calls at other sizes ran
        got += [_call(optimized, inputs, config) for inputs in cases[len(layouts):]]
    except KeyboardInterrupt:
        raise
    except EqiforgeError as err:
        message = str(err)
        if message and not any(marker in message for marker in INTERNAL_MARKERS):
            return Outcome("rejected", message.splitlines()[0])
        return Outcome("crash", f"EqiforgeError wrapping an internal failure: {message}")
    except BaseException as err:  # noqa: BLE001 - a Rust panic is a BaseException
        return Outcome("crash", f"{type(err).__name__}: {err}".splitlines()[0] + "\n" + traceback.format_exc())
    outcome = _judged(make_program, cases, eager, got, dtype, nonfinite)
    if old is not None and outcome.status == "wrong":
        outcome.detail = f"at sizes {', '.join(str(n) for n, _ in resized)} of the dims of size {old}: " + \
            outcome.detail
    if config in SIZED:
        reports = reports + _later_reports(optimized, config, before)
        plans, others, _ = (now - then for now, then in zip(_ran(optimized, config), before))
        outcome.sizes = {"class": old, "sizes": [n for n, _ in resized], "plan calls": plans,
                         "other calls": others, "optimizations": len(reports)}
    outcome.validation = [r.validation for r in reports]
    outcome.interventions = [r.plan_check_intervened for r in reports]
    outcome.rules = sorted({rule for r in reports for rule, n in r.matches_per_rule().items() if n})
    return outcome


def other_layout(inputs: tuple) -> tuple:
    """``inputs`` with every tensor of two or more dims (both last ones above 1) in the other memory order of its
    last two dims: the same values, strides a plan compiled for the example's layout does not have."""
    def relaid(x):
        if not isinstance(x, torch.Tensor) or x.dim() < 2 or min(x.shape[-2:]) < 2:
            return x
        return x.transpose(-1, -2).contiguous().transpose(-1, -2)
    return tuple(relaid(x) for x in inputs)


def _eager_runs(make_program, inputs) -> bool:
    """Whether eager runs the program on ``inputs`` (torch.kron of a column-major matrix does not: a layout the
    program itself refuses is no case for the optimizer)."""
    try:
        with torch.no_grad():
            make_program()(*inputs)
    except Exception:  # noqa: BLE001 - any failure of eager's
        return False
    return True


def _call(optimized, inputs, config: str):
    if config in COMPILED:  # called as users call a compiled model: autograd on
        return optimized(*inputs)
    with torch.no_grad():
        return optimized(*inputs)


def _judged(make_program, cases: list, eager, got: list, dtype: str, nonfinite: bool) -> Outcome:
    """The first failing verdict over ``cases`` (inputs; ``eager`` is the program's output on the first),
    else the closest to failing."""
    worst, note = None, ""
    for i, (inputs, outputs) in enumerate(zip(cases, got)):
        if i:
            with torch.no_grad():
                eager = make_program()(*inputs)
        reference = _reference(make_program, inputs)
        if reference is None and not note:
            note = "no float64 run: eager is the reference"
        noise = _perturbed(make_program, inputs) if reference is not None else None
        outcome = judge(outputs, eager, eager if reference is None else reference, dtype, nonfinite, noise)
        if outcome.status != "ok":
            worst = outcome
            break
        if worst is None or outcome.error / outcome.allowed > worst.error / worst.allowed:
            worst = outcome
    if note:
        worst.detail = (worst.detail + "; " if worst.detail else "") + note
    return worst


def _ran(optimized, config: str) -> tuple[int, int, int]:
    """(calls that ran an EqiForge plan, calls that ran anything else, the backend's reports) so far: the
    backend's over the process, an OptimizedModule's own."""
    if config in COMPILED:
        from eqiforge import dynamo

        counts, reports = dynamo.call_counts(), len(dynamo.REPORTS)
    else:
        counts, reports = optimized.calls, 0
    return counts["plan"], sum(counts.values()) - counts["plan"], reports


def _later_reports(optimized, config: str, before) -> list:
    """The reports of the optimizations after the example's (``before``: ``_ran`` then)."""
    if config in COMPILED:
        from eqiforge import dynamo

        return dynamo.REPORTS[before[2]:]
    return [module.report for module in optimized.plans.values()]


# ---------------------------------------------------------------------------------------- workers

def _serve(conn, log_path):
    """A worker: its own process group, Triton in interpreter mode, warmed up, then one job per message."""
    os.setsid()
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything imports triton
    if log_path:
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)  # one core per worker
    eqiforge.optimize(lambda x: (x @ x.mT).softmax(-1), (torch.randn(4, 4),))  # first-run costs, off the clock
    conn.send("ready")
    while (job := conn.recv()) is not None:
        conn.send(run_job(job))


def run_job(job: Job) -> Outcome:
    start = time.perf_counter()
    try:
        make_program, make_inputs = programs.load(job.program.source)
    except Exception as err:  # noqa: BLE001
        return Outcome("invalid", f"the program's source does not run: {type(err).__name__}: {err}")
    outcome = check(make_program, make_inputs, job.config, job.options, job.program.dtype)
    outcome.seconds = time.perf_counter() - start
    return outcome


class _Worker:
    STARTUP_SECONDS = 180.0

    def __init__(self, ctx, log_path):
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_serve, args=(child, log_path))
        self.process.start()
        child.close()
        self.started = time.perf_counter()
        self.ready = False
        self.job: Job | None = None
        self.sent = 0.0

    def send(self, job: Job):
        self.job, self.sent = job, time.perf_counter()
        self.conn.send(job)

    def overdue(self) -> bool:
        if self.job is not None:
            return time.perf_counter() - self.sent > self.job.timeout
        return not self.ready and time.perf_counter() - self.started > self.STARTUP_SECONDS

    def kill(self):
        """Kill the worker's whole process group (the worker and any saturation child)."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):  # not yet its own group leader
            self.process.kill()
        self.process.join(10)
        self.conn.close()

    def stop(self):
        if self.process.is_alive():
            try:
                self.conn.send(None)
            except OSError:
                pass
            self.process.join(5)
        self.kill()


def run_jobs(jobs: list[Job], workers: int = 2, log_path: str | None = None):
    """Yield ``(job, Outcome)`` as jobs finish, in a pool of ``workers`` spawned worker processes; a job
    that passes its timeout is a hang, and a worker that dies or hangs is replaced."""
    ctx = multiprocessing.get_context("spawn")
    todo = collections.deque(jobs)
    pool = [_Worker(ctx, log_path) for _ in range(min(workers, len(jobs)))]
    try:
        while todo or any(w.job for w in pool):
            for w in pool:
                if w.ready and w.job is None and todo:
                    w.send(todo.popleft())
            for conn in wait([w.conn for w in pool], timeout=0.2):
                w = next(w for w in pool if w.conn is conn)
                try:
                    message = conn.recv()
                except (EOFError, OSError):
                    message = None
                if message == "ready":
                    w.ready = True
                elif isinstance(message, Outcome):
                    job, w.job = w.job, None
                    yield job, message
                else:  # the worker died
                    w.process.join(5)
                    if w.job is None:
                        raise RuntimeError(f"a fuzz worker died while starting (exit code {w.process.exitcode}); "
                                           f"see {log_path or 'its output'}")
                    w.kill()
                    pool[pool.index(w)] = _Worker(ctx, log_path)
                    yield w.job, _died(w)
            for i, w in enumerate(pool):
                if w.overdue():
                    if w.job is None:
                        raise RuntimeError(f"a fuzz worker did not start within {w.STARTUP_SECONDS:g} s")
                    w.kill()
                    pool[i] = _Worker(ctx, log_path)
                    yield w.job, _hung(w)
    finally:
        for w in pool:
            w.stop()


def _died(worker: _Worker) -> Outcome:
    return Outcome("crash", f"the worker process died (exit code {worker.process.exitcode})",
                   seconds=time.perf_counter() - worker.sent)


def _hung(worker: _Worker) -> Outcome:
    return Outcome("hang", f"passed its {worker.job.timeout:g} s timeout; killed",
                   seconds=time.perf_counter() - worker.sent)


# ------------------------------------------------------------------------- one job per task (a cluster)

_child: _Worker | None = None  # this process's warm worker: a Ray worker process runs many tasks in turn


@atexit.register
def _stop_child():
    """Stop the warm worker at exit (multiprocessing would otherwise wait for it, and it for a job)."""
    if _child is not None:
        _child.stop()


def run_in_child(job: Job, log_path: str | None = None) -> Outcome:
    """Run ``job`` in a warm worker process of this one, with the job's timeout, as the pool of
    :func:`run_jobs` does: a hang kills the worker's process group, a dead worker is a crash, and either is
    replaced at the next job. A worker that cannot start raises (on Ray: a failed task, retried elsewhere)."""
    global _child
    if _child is None:
        _child = _Worker(multiprocessing.get_context("spawn"), log_path)
    worker = _child
    if not worker.ready:
        if not worker.conn.poll(worker.STARTUP_SECONDS) or _received(worker) != "ready":
            worker.kill()
            _child = None
            raise RuntimeError(f"a fuzz worker did not start within {worker.STARTUP_SECONDS:g} s")
        worker.ready = True
    worker.send(job)
    answered = worker.conn.poll(job.timeout)
    message = _received(worker) if answered else None
    if isinstance(message, Outcome):
        worker.job = None
        return message
    worker.kill()  # hung or died: its process group goes, a fresh worker takes the next job
    _child = None
    return _died(worker) if answered else _hung(worker)


def _received(worker: _Worker):
    """The worker's next message; None where it died."""
    try:
        return worker.conn.recv()
    except (EOFError, OSError):
        return None


def run_task(task) -> dict:
    """A sweep task (``eqiforge.sweep.Task``, its payload a Job) run in a child process: its Outcome as a dict."""
    return asdict(run_in_child(task.payload))


def outcome_from(result: dict) -> Outcome:
    """The Outcome of a sweep result: ``run_task``'s dict, or the executor's crash record of a lost worker."""
    if "detail" not in result:
        return Outcome("crash", result["error"])
    return Outcome(**result)


class JobPool(sweep.Executor):
    """The local executor of fuzz tasks: :func:`run_jobs`' pool of warm workers (per-job timeouts, hangs
    killed, dead workers replaced), which runs each task as :func:`run_task` would in a child process. Its
    workers live for one map, so closing it has nothing to let go."""

    def __init__(self, workers: int = 2, log_path: str | None = None):
        self.workers, self.log_path = workers, log_path
        self.node = sweep.this_node()

    def close(self) -> None:
        pass

    def map(self, fn, tasks):
        assert fn is run_task, "the fuzz pool runs fuzz tasks only"
        by_name = {task.payload.name: task for task in tasks}
        for job, outcome in run_jobs([task.payload for task in tasks], self.workers, self.log_path):
            yield sweep.Finished(by_name[job.name], asdict(outcome), self.node)


# ------------------------------------------------------------------------------ summary, reproducers

def _counts(outcomes) -> dict:
    counts = collections.Counter(o.status for o in outcomes)
    row = {s: counts.get(s, 0) for s in STATUSES}
    row["jobs"] = len(outcomes)
    row["validation interventions"] = sum(o.intervened for o in outcomes)
    row["seconds"] = round(sum(o.seconds for o in outcomes), 2)
    return row


def rule_coverage(outcomes) -> dict:
    """Jobs in which each rule of the rule sets matched; rules that never did show what the programs miss."""
    matched = collections.Counter(rule for o in outcomes for rule in o.rules)
    every = sorted(rule for rs in rulesets.available().values() for rule in rs.rule_names)
    return {"matched": dict(matched.most_common()), "never matched": [r for r in every if r not in matched]}


def summarize(results: list[tuple[Job, Outcome]], wall_seconds: float, command: str = "") -> dict:
    by_config, by_family = collections.defaultdict(list), collections.defaultdict(list)
    for job, outcome in results:
        by_config[job.config].append(outcome)
        for family in job.program.families:
            by_family[family].append(outcome)
    outcomes = [o for _, o in results]
    return {
        "command": command,
        "programs": len({(j.program.profile, j.program.seed) for j, _ in results}),
        **_counts(outcomes), "wall seconds": round(wall_seconds, 1),
        "by config": {c: _counts(by_config[c]) for c in sorted(by_config)},
        "by family": {f: _counts(by_family[f]) for f in sorted(by_family)},
        "failures": [{"job": j.name, "status": o.status, "families": list(j.program.families),
                      "detail": o.detail.splitlines()[0] if o.detail else "", "reproducer": reproducer_name(j)}
                     for j, o in results if o.status in FAILURES],
        "rejections": dict(collections.Counter(o.detail for o in outcomes if o.status == "rejected").most_common()),
        "plan check interventions": [{"job": j.name, "reproducer": reproducer_name(j),
                                      "validation": [v for v in o.validation if v]}
                                     for j, o in results if o.intervened],
        "rules": rule_coverage(outcomes),
        "other sizes": other_sizes(results),
    }


def other_sizes(results) -> dict:
    """What the SIZED configurations' jobs did at other sizes: jobs judged there (and those whose inputs had no
    dim that could change), their calls there, and how many of them ran a plan at every such call and how many
    needed at most 2 optimizations in all (the example's, and one for every size)."""
    found = [o.sizes for _, o in results if o.sizes]
    resized = [f for f in found if f["sizes"]]
    return {"jobs": len(found), "resized": len(resized), "no dim can change": len(found) - len(resized),
            "calls": sum(f["plan calls"] + f["other calls"] for f in resized),
            "every call a plan": sum(not f["other calls"] for f in resized),
            "at most 2 optimizations": sum(f["optimizations"] <= 2 for f in resized)}


def summary_markdown(summary: dict) -> str:
    columns = ["jobs", *STATUSES, "validation interventions", "seconds"]

    def table(title, rows):
        lines = [f"| {title} | " + " | ".join(columns) + " |", "|---" + "|---:" * len(columns) + "|"]
        lines += [f"| {name} | " + " | ".join(str(row[c]) for c in columns) + " |" for name, row in rows.items()]
        return lines

    out = ["# EqiForge fuzz summary", "", f"`{summary['command']}`", "",
           f"{summary['jobs']} jobs over {summary['programs']} programs in {summary['wall seconds']} s: " +
           ", ".join(f"{summary[s]} {s}" for s in STATUSES) +
           f"; the plan check intervened in {summary['validation interventions']}.", ""]
    out += table("configuration", summary["by config"]) + [""] + table("op family", summary["by family"]) + [""]
    out += ["## Failures", ""] + ([f"- `{f['reproducer']}` {f['status']}: {f['detail']}" for f in summary["failures"]]
                                  or ["none"])
    out += ["", "## Rejections (EqiforgeError)", ""] + ([f"- {n} x {msg}" for msg, n in summary["rejections"].items()]
                                                       or ["none"])
    out += ["", "## Plan check interventions", ""] + ([f"- `{i['reproducer']}`: {'; '.join(i['validation'])}"
                                                       for i in summary["plan check interventions"]] or ["none"])
    sized = summary["other sizes"]
    if sized["jobs"]:
        out += ["", "## Other sizes (configurations " + ", ".join(SIZED) + ")", "",
                f"{sized['resized']} of {sized['jobs']} jobs judged at other sizes too ({sized['calls']} calls; the "
                f"other {sized['no dim can change']} had no input dim eager runs at another size); every such call "
                f"ran a plan in {sized['every call a plan']}, at most 2 optimizations in "
                f"{sized['at most 2 optimizations']}."]
    rules = summary["rules"]
    out += ["", "## Rule coverage (jobs in which a rule matched)", "",
            ", ".join(f"{r} {n}" for r, n in rules["matched"].items()) or "none", "",
            f"never matched ({len(rules['never matched'])}): " + (", ".join(rules["never matched"]) or "none")]
    return "\n".join(out) + "\n"


def write_summary(directory: Path, summary: dict):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (directory / "summary.md").write_text(summary_markdown(summary))


def reproducer_source(job: Job, outcome: Outcome) -> str:
    """A standalone script (torch and eqiforge only) that re-runs the job and prints its verdict."""
    found = str(outcome).splitlines()[0]
    if outcome.intervened:
        found += ("; the optimizer's plan check intervened (to see the plan it rejected, add "
                  "'validate': False to OPTIONS)")
    return "\n".join([
        f'"""EqiForge fuzz reproducer: program {job.program.seed} ({job.program.profile} profile), '
        f'configuration {job.config!r}.', "",
        f"Found: {found}", "",
        "Run: python this_file.py (optimizes the program as the fuzzer did and prints the verdict now).",
        '"""',
        "import os", "",
        'os.environ.setdefault("TRITON_INTERPRET", "1")  # triton on a CPU: before triton is imported', "",
        job.program.source, "",
        'if __name__ == "__main__":',
        "    from eqiforge import Limits  # noqa: F401 - OPTIONS may use it",
        "    from eqiforge.fuzz.runner import check", "",
        f"    OPTIONS = {job.options!r}",
        f"    print(check(make_program, make_inputs, {job.config!r}, OPTIONS, {job.program.dtype!r}))", ""])


def reproducer_name(job: Job) -> str:
    return f"repro_{job.name}.py"


def needs_reproducer(outcome: Outcome) -> bool:
    """Failures, and jobs in which the optimizer's own plan check had to intervene."""
    return outcome.status in FAILURES or outcome.intervened


def write_reproducer(directory: Path, job: Job, outcome: Outcome) -> Path:
    path = directory / reproducer_name(job)
    path.write_text(reproducer_source(job, outcome))
    return path


def as_record(job: Job, outcome: Outcome) -> dict:
    """One line of results.jsonl."""
    return {"job": job.name, "config": job.config, "profile": job.program.profile, "dtype": job.program.dtype,
            "families": list(job.program.families), **asdict(outcome)}
