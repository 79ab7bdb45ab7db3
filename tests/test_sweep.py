"""Sweeps: the local executor and the resumable results file, progress per node, timeouts, timed tasks that never
share a node, choosing an executor, the fuzz campaign's task run in a child process, an ablation and a zoo as one
sweep; in the slow tier, the same on a local Ray cluster bound to 127.0.0.1 (a fuzz sample and ablation tables
equal to the local runs', a task that kills its worker retried, a timeout, timed tasks one at a time).

Workers import this module for its task functions: it imports nothing heavy at the top (the fuzz campaign and the
optimizer are imported by the tests that need them)."""
import json
import os
import shutil
import socket
import sys
import time

import pytest

from eqiforge import sweep
from eqiforge.errors import EqiforgeError
from eqiforge.sweep.ray_executor import LOOPBACK, SINGLE_MACHINE

os.environ.setdefault(SINGLE_MACHINE, "0")  # before this module's tests import ray: a cluster on 127.0.0.1 only


def square(task):
    """A task whose later ids finish first (so completion order is not task order); a payload of None raises."""
    time.sleep(0.05 * (4 - int(task.id[1:]) % 4))
    return {"status": "ok", "value": task.payload ** 2}


def die_once(task):
    """Kills its own worker process on its first attempt (its payload: a marker file), then succeeds."""
    if not os.path.exists(task.payload):
        open(task.payload, "w").close()
        os._exit(1)
    return {"status": "ok"}


def always_die(task):
    os._exit(1)


def nap(task):
    """Sleeps ``payload`` seconds; its result says when it ran (wall clock, comparable across processes) and the
    CPUs its executor reserved for it."""
    start = time.time()
    time.sleep(task.payload)
    return {"status": "ok", "start": start, "end": time.time(), "cpus": sweep.task_cpus(), "node": sweep.this_node()}


def meet(task):
    """Says it started (a file named after it in the payload's folder) and waits, up to 60 s, for the other task
    of its pair to say so too: whether the two ran at once (a test of parallelism that no worker start delays)."""
    folder, me, other = task.payload
    (folder / me).touch()
    deadline = time.monotonic() + 60
    while not (folder / other).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return {"status": "ok", "met": (folder / other).exists(), "cpus": sweep.task_cpus()}


def pair(folder):
    return [sweep.Task("a", "meet", (folder, "a", "b")), sweep.Task("b", "meet", (folder, "b", "a"))]


def overlaps(spans) -> bool:
    spans = sorted((r["start"], r["end"]) for r in spans)
    return any(later_start < end for (_, end), (later_start, _) in zip(spans, spans[1:]))


def tasks(count, payload=lambda i: i):
    return [sweep.Task(f"t{i}", "square", payload(i)) for i in range(count)]


def test_local_sweep_returns_results_in_task_order_and_appends_each_with_progress_per_node(tmp_path, capsys):
    path = tmp_path / "results.jsonl"
    with sweep.LocalExecutor(2) as executor:
        results = sweep.run_sweep(executor, square, tasks(6, lambda i: None if i == 5 else i), path)
    assert [r["value"] for r in results[:5]] == [i * i for i in range(5)] and results[5]["status"] == "crash"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert sorted(entry["id"] for entry in lines) == [f"t{i}" for i in range(6)]
    assert {entry["node"] for entry in lines} == {socket.gethostname()}  # metadata beside the result
    final = capsys.readouterr().err.split("\r")[-1]
    assert "6/6" in final and "failed=1" in final and "running=0" in final and f"{socket.gethostname()}=6" in final


def test_a_sweep_started_again_skips_the_ids_its_results_file_holds(tmp_path):
    path = tmp_path / "results.jsonl"
    stored = {"id": "t1", "result": {"status": "ok", "value": "stored"}, "code": sweep.code_digest()}
    path.write_text(json.dumps(stored) + "\n" + '{"id": "t2", ')
    results = sweep.run_sweep(sweep.LocalExecutor(2), square, tasks(4), path)
    assert [r["value"] for r in results] == [0, "stored", 4, 9]  # t1 not run again; t2's cut line run again
    ran = [json.loads(line)["id"] for line in path.read_text().splitlines()[2:]]
    assert sorted(ran) == ["t0", "t2", "t3"]


def test_results_written_by_other_code_or_rules_run_again_and_say_so(tmp_path, monkeypatch, capsys):
    """A results file from before an edit or an upgrade that kept the version number is not trusted: the digest
    covers the package's source and the rule files, and a line of another digest (or of none) runs again."""
    path = tmp_path / "results.jsonl"
    old = [{"id": "t0", "result": {"status": "ok", "value": "old"}, "code": "0" * 64},
           {"id": "t1", "result": {"status": "ok", "value": "unmarked"}}]
    path.write_text("".join(json.dumps(entry) + "\n" for entry in old))
    results = sweep.run_sweep(sweep.LocalExecutor(2), square, tasks(2), path, progress=False)
    assert [r["value"] for r in results] == [0, 1]
    assert "2 results were written by other eqiforge code or rules" in capsys.readouterr().err
    assert sweep.run_sweep(Recording(), square, tasks(2), path, progress=False) == results  # now they hold

    from eqiforge.egraph import rulesets
    shipped = sweep.code_digest()
    edited = tmp_path / "rules"
    shutil.copytree(rulesets.rules_dir(), edited)
    a_rule_file = sorted(edited.glob("*.egg"))[1]
    a_rule_file.write_text(a_rule_file.read_text() + "\n; an edit\n")
    monkeypatch.setenv("EQIFORGE_RULES_DIR", str(edited))
    sweep.code_digest.cache_clear()
    try:
        assert sweep.code_digest() != shipped
    finally:
        sweep.code_digest.cache_clear()


def test_a_task_past_its_timeout_is_a_timeout_record_and_the_others_keep_their_results(tmp_path, capsys):
    """The sleeper's worker is killed after 3 s; the task then in flight beside it (started at 1.5 s, 2.5 s long)
    runs again without counting a retry (none are allowed here), in the pool started again."""
    work = [sweep.Task("sleeper", "nap", 60), sweep.Task("first", "nap", 1.5), sweep.Task("beside", "nap", 2.5)]
    started = time.monotonic()
    with sweep.LocalExecutor(2, max_retries=0) as executor:
        results = sweep.run_sweep(executor, nap, work, tmp_path / "results.jsonl", timeout_s=3)
    assert time.monotonic() - started < 30
    assert results[0] == sweep.timeout(3) and results[0]["status"] == "timeout"
    assert [r["status"] for r in results[1:]] == ["ok", "ok"]
    assert results[2]["start"] > results[1]["end"] + 1  # "beside" ran again after the kill
    assert "failed=1" in capsys.readouterr().err.split("\r")[-1]


def test_timed_tasks_run_one_at_a_time_holding_the_machine_and_untimed_ones_in_parallel(tmp_path):
    with sweep.LocalExecutor(2) as executor:
        untimed = sweep.run_sweep(executor, meet, pair(tmp_path), tmp_path / "untimed.jsonl")
        timed = sweep.run_sweep(executor, nap, tasks(4, lambda i: 0.5), tmp_path / "timed.jsonl", timed=True)
    assert [r["met"] for r in untimed] == [True, True] and not overlaps(timed)
    assert {r["cpus"] for r in untimed} == {None} and {r["cpus"] for r in timed} == {len(os.sched_getaffinity(0))}
    assert {r["node"] for r in timed} == {socket.gethostname()}


@pytest.mark.slow
def test_a_raising_task_and_a_dying_worker_are_crash_records(tmp_path):
    raising = sweep.run_sweep(sweep.LocalExecutor(2), square, tasks(3, lambda i: None if i == 1 else i),
                              tmp_path / "raising.jsonl")
    assert raising[1]["status"] == "crash" and "TypeError" in raising[1]["error"]
    assert [raising[0]["value"], raising[2]["value"]] == [0, 4]
    dying = sweep.LocalExecutor(1, max_retries=1).map(always_die, tasks(1))
    assert [(done.task.id, done.result["status"]) for done in dying] == [("t0", "crash")]
    marker = [sweep.Task("m", "die", str(tmp_path / "marker"))]
    assert [done.result for done in sweep.LocalExecutor(1).map(die_once, marker)] == [{"status": "ok"}]


def test_executor_is_chosen_by_arguments_then_environment(monkeypatch):
    monkeypatch.delenv("EQIFORGE_CLUSTER", raising=False)
    assert isinstance(sweep.executor_from(workers=3), sweep.LocalExecutor)
    assert sweep.executor_from(workers=3).workers == 3
    with pytest.raises(EqiforgeError, match="unknown cluster"):
        sweep.executor_from("slurm")
    pytest.importorskip("ray")
    assert isinstance(sweep.executor_from("ray"), sweep.RayExecutor)
    assert sweep.executor_from(address="127.0.0.1:6379").address == "127.0.0.1:6379"
    monkeypatch.setenv("EQIFORGE_CLUSTER", "ray")
    assert isinstance(sweep.executor_from(), sweep.RayExecutor)
    assert isinstance(sweep.executor_from("local"), sweep.LocalExecutor)


def test_without_ray_asking_for_it_says_how_to_install_it(monkeypatch, tmp_path, capsys):
    from eqiforge import cli
    from eqiforge.fuzz.__main__ import main as fuzz_main
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    monkeypatch.delenv("EQIFORGE_CLUSTER", raising=False)
    with pytest.raises(EqiforgeError, match=r"pip install 'eqiforge\[cluster\]'"):
        sweep.executor_from("ray")
    assert isinstance(sweep.executor_from(), sweep.LocalExecutor)  # the default needs no Ray
    assert fuzz_main(["--programs", "1", "--cluster", "ray", "--out", str(tmp_path)]) == 2
    assert "pip install 'eqiforge[cluster]'" in capsys.readouterr().err
    for zoo in ([], ["--zoo", "examples"]):  # the same flags, before any work
        assert cli.main(["ablate", "--example", "matmul_chain", *zoo, "--cluster", "ray", "--out", str(tmp_path)]) == 2
        assert "pip install 'eqiforge[cluster]'" in capsys.readouterr().err


@pytest.mark.slow
def test_a_fuzz_task_runs_in_a_child_with_the_jobs_timeout():
    """What a Ray task runs per fuzz job: a hang is a hang outcome (the child killed), the next job a fresh child."""
    from eqiforge.fuzz import programs, runner
    hanging_source = "import time\nimport torch\n\ndef make_program():\n    time.sleep(600)\n\n" \
                     "def make_inputs(seed):\n    return (torch.randn(3),)\n"
    hanging = runner.Job(programs.Program(-1, "torch", hanging_source, "float32", ()), "default", {}, 2.0)
    normal = runner.plan_jobs(1, 0, ("default",), per_program=1)[0]
    hung = runner.outcome_from(runner.run_task(sweep.Task(hanging.name, "fuzz", hanging)))
    assert hung.status == "hang" and 2.0 <= hung.seconds < 3.5
    assert runner.outcome_from(runner.run_task(sweep.Task(normal.name, "fuzz", normal))).status in ("ok", "rejected")
    assert runner.outcome_from({"status": "crash", "error": "WorkerCrashedError: gone"}).status == "crash"


# ------------------------------------------------------------------------------------------ ablation, zoo

ZOO_RULES = ["matmul", "reduction"]
TIMINGS = ("saturate_s", "extract_s")


def untimed(rows):
    return [{k: v for k, v in row.items() if k not in TIMINGS} for row in rows]


def small_zoo():
    from eqiforge import examples
    return {name: examples.load(name) for name in ("matmul_chain", "row_sums")}


class Recording:
    """An executor that records what it is asked to run and runs nothing (a resumed sweep asks for nothing)."""

    def __init__(self):
        self.asked = []

    def map(self, fn, tasks, **how):
        self.asked += tasks
        return iter(())


@pytest.mark.slow
def test_a_zoo_is_one_sweep_finding_the_rule_set_each_program_needs_and_resumes_from_its_file(tmp_path):
    """Leave-one-out over two rule sets on two programs, all six runs one sweep: the matrix chain loses its
    reassociation without matmul and nothing without reduction, the row sums the other way round; files and
    heatmap follow; the same call again finds every run in the results file and runs nothing."""
    import csv

    from eqiforge.viz.zoo import ablate_zoo
    path = tmp_path / "zoo.jsonl"
    with sweep.LocalExecutor(2) as executor:
        table = ablate_zoo(small_zoo(), ZOO_RULES, executor=executor, results_path=path)
    ids = [json.loads(line)["id"] for line in path.read_text().splitlines()]
    assert sorted(ids) == sorted(f"{program}/{label}" for program in ("matmul_chain", "row_sums")
                                 for label in ("all", "all - matmul", "all - reduction"))
    assert table.rulesets == ZOO_RULES
    assert table.loss["matmul_chain"]["matmul"] > 2 and table.loss["matmul_chain"]["reduction"] == pytest.approx(1)
    assert table.loss["row_sums"]["reduction"] > 2 and table.loss["row_sums"]["matmul"] == pytest.approx(1)
    paths = table.save(tmp_path / "out")
    rows = list(csv.DictReader(paths["csv"].open()))
    assert [r["program"] for r in rows] == ["matmul_chain", "row_sums"]
    assert float(rows[0]["matmul"]) == pytest.approx(table.loss["matmul_chain"]["matmul"])
    assert "| matmul_chain |" in paths["markdown"].read_text() and paths["heatmap"].stat().st_size > 0
    assert [t.get_text() for t in table.heatmap().axes[0].get_yticklabels()] == ["matmul_chain", "row_sums"]
    again = Recording()
    assert ablate_zoo(small_zoo(), ZOO_RULES, executor=again, results_path=path).loss == table.loss
    assert again.asked == []


# ------------------------------------------------------------------------------------------ on Ray (slow)
@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray instance of 2 CPUs on the loopback address, shut down after the module's tests."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, _node_ip_address=LOOPBACK, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": os.path.dirname(__file__)}})  # this module, for its tasks
    yield ray
    ray.shutdown()


@pytest.mark.slow
def test_a_local_ray_cluster_is_bound_to_the_loopback_address(ray_cluster):
    assert [node["NodeManagerAddress"] for node in ray_cluster.nodes()] == ["127.0.0.1"]
    assert ray_cluster.util.get_node_ip_address() == "127.0.0.1"
    assert ray_cluster.cluster_resources()["CPU"] == 2


@pytest.mark.slow
def test_a_fuzz_sample_through_ray_equals_the_local_run(ray_cluster, tmp_path):
    from eqiforge.fuzz.__main__ import main as fuzz_main
    sample = ["--programs", "4", "--per-program", "2", "--configs", "default,greedy", "--seed", "3"]
    assert fuzz_main(sample + ["--out", str(tmp_path / "local")]) == 0
    assert fuzz_main(sample + ["--cluster", "ray", "--out", str(tmp_path / "ray")]) == 0
    timeless = ("job", "config", "status", "detail", "validation", "interventions", "rules", "sizes")

    def records(name):
        lines = (tmp_path / name / "results.jsonl").read_text().splitlines()
        return [{key: record[key] for key in timeless} for record in map(json.loads, lines)]
    assert len(records("ray")) == 8 and records("ray") == records("local")


@pytest.mark.slow
def test_a_task_that_kills_its_ray_worker_is_retried_and_one_that_always_does_is_a_crash(ray_cluster, tmp_path):
    marker = [sweep.Task("m", "die", str(tmp_path / "marker"))]
    assert [done.result for done in sweep.RayExecutor(max_retries=2).map(die_once, marker)] == [{"status": "ok"}]
    [crashed] = sweep.RayExecutor(max_retries=1).map(always_die, tasks(1))
    assert crashed.result["status"] == "crash" and "Worker" in crashed.result["error"]


@pytest.mark.slow
def test_on_ray_a_task_past_its_timeout_is_cancelled_and_the_others_keep_their_results(ray_cluster, tmp_path):
    """Counted from submission there (worker start included): this module's workers are warmed first."""
    executor = sweep.RayExecutor()
    sweep.run_sweep(executor, nap, tasks(2, lambda i: 0), tmp_path / "warm.jsonl")
    work = [sweep.Task("sleeper", "nap", 600), sweep.Task("t1", "nap", 0), sweep.Task("t2", "nap", 0)]
    started = time.monotonic()
    results = sweep.run_sweep(executor, nap, work, tmp_path / "results.jsonl", timeout_s=10)
    assert time.monotonic() - started < 60
    assert results[0]["status"] == "timeout" and [r["status"] for r in results[1:]] == ["ok", "ok"]


@pytest.mark.slow
def test_on_ray_timed_tasks_hold_their_node_one_at_a_time_and_untimed_ones_share_it(ray_cluster, tmp_path, capsys):
    executor = sweep.RayExecutor()
    untimed = sweep.run_sweep(executor, meet, pair(tmp_path), tmp_path / "untimed.jsonl")
    timed = sweep.run_sweep(executor, nap, tasks(4, lambda i: 0.5), tmp_path / "timed.jsonl", timed=True)
    assert [r["met"] for r in untimed] == [True, True] and not overlaps(timed)
    assert {r["cpus"] for r in timed} == {2} and {r["cpus"] for r in untimed} == {None}
    [node] = ray_cluster.nodes()
    assert {r["node"] for r in timed} == {f"127.0.0.1/{node['NodeID'][:8]}"}
    lines = [json.loads(line) for line in (tmp_path / "timed.jsonl").read_text().splitlines()]
    assert {line["node"] for line in lines} == {f"127.0.0.1/{node['NodeID'][:8]}"}
    assert f"127.0.0.1/{node['NodeID'][:8]}=4" in capsys.readouterr().err.split("\r")[-1]  # progress per node


@pytest.mark.slow
def test_an_ablation_table_is_the_same_in_one_worker_two_and_on_ray_and_measured_rows_name_their_node(ray_cluster):
    from eqiforge import examples
    from eqiforge.viz import ablate
    chain = examples.load("matmul_chain")
    tables = []
    for executor in (sweep.LocalExecutor(1), sweep.LocalExecutor(2), sweep.RayExecutor()):
        with executor:
            tables.append(ablate(*chain, rules=["matmul", "transpose"], mode="each", executor=executor))
    assert untimed(tables[0].rows) == untimed(tables[1].rows) == untimed(tables[2].rows)
    assert [row["combination"] for row in tables[2].rows] == ["none", "matmul only", "transpose only"]
    measured = ablate(*chain, rules=["matmul"], mode="all", measure=True, repeats=2, executor=sweep.RayExecutor())
    [node] = ray_cluster.nodes()
    assert measured.rows[0]["measured_us"] > 0 and measured.rows[0]["node"] == f"127.0.0.1/{node['NodeID'][:8]}"


@pytest.mark.slow
def test_a_zoo_table_on_ray_equals_the_local_one(ray_cluster):
    from eqiforge.viz.zoo import ablate_zoo
    local = ablate_zoo(small_zoo(), ZOO_RULES, jobs=1)
    on_ray = ablate_zoo(small_zoo(), ZOO_RULES, executor=sweep.RayExecutor())
    assert (on_ray.loss, on_ray.predicted_us, on_ray.rulesets) == (local.loss, local.predicted_us, local.rulesets)


@pytest.mark.slow
def test_a_synthesis_on_ray_finds_the_rules_it_finds_in_one_process(ray_cluster, monkeypatch):
    """Its shards (the last size's terms by root operator, derivation and verification chunks) as Ray tasks."""
    from eqiforge.synth import derive, run, shards
    monkeypatch.setattr(shards, "MIN_TASKS", 1)  # every step through the executor, however small
    ops, vars_spec = ["Sum", "Expand", "Mul"], "A:i,j r:1,j s:scalar"
    here = run.synthesize(ops, vars_spec, 2, progress=False, device="H100")
    with sweep.RayExecutor() as executor:
        on_ray = run.synthesize(ops, vars_spec, 2, progress=False, device="H100", executor=executor)
    assert derive.CHUNK >= len(here.enumeration.candidates)  # one derivation chunk: the graphs are the same
    assert [c.text() for c in on_ray.enumeration.candidates] == [c.text() for c in here.enumeration.candidates]
    assert here.kept and run.egg_file(on_ray) == run.egg_file(here)


@pytest.mark.slow
def test_a_profile_on_ray_runs_on_its_node_and_stamps_the_records_with_it(ray_cluster, tmp_path):
    from eqiforge import cli
    from eqiforge.cost.dataset import read_records
    assert cli.main(["cost", "profile", "--device", "cpu", "--records", "2", "--cluster", "ray",
                     "--out", str(tmp_path)]) == 0
    records = read_records(tmp_path / "cpu" / "records.jsonl")
    node = ray_cluster.nodes()[0]
    assert len(records) == 2 and all(r["node"] == f"127.0.0.1/{node['NodeID'][:8]}" and r["fingerprint"]["cpu"]
                                     and r["seconds"] > 0 for r in records)


@pytest.mark.slow
def test_local_workers_exit_when_the_process_that_started_them_is_killed(tmp_path):
    """A main process killed outright (the OOM killer ended a synthesis so) leaves no workers behind."""
    import signal
    import subprocess
    pids = tmp_path / "pids"
    script = (f"import sys, time; sys.path.insert(0, {os.path.dirname(__file__)!r})\n"
              "from eqiforge import sweep\nimport test_sweep\n"
              "if __name__ == '__main__':\n"
              "    executor = sweep.LocalExecutor(2)\n"
              f"    for _ in executor.map(test_sweep.write_pid, [sweep.Task(str(i), 'pid', {str(pids)!r}) "
              "for i in range(2)]): pass\n"
              "    time.sleep(600)\n")
    main = subprocess.Popen([sys.executable, "-c", script])
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(pids.read_text().split() if pids.exists() else []) < 2:
        time.sleep(0.2)
    workers = [int(p) for p in pids.read_text().split()]
    assert len(set(workers)) >= 1
    main.send_signal(signal.SIGKILL)
    main.wait()
    time.sleep(5)
    alive = [p for p in workers if os.path.exists(f"/proc/{p}") and "Z" not in
             open(f"/proc/{p}/stat").read().split()[2]]
    assert not alive, f"workers {alive} outlived the process that started them"


def write_pid(task):
    """Append this worker's pid to the file the task names; wait a little, so both workers take one."""
    with open(task.payload, "a") as f:
        f.write(f"{os.getpid()}\n")
    time.sleep(1)
    return {"pid": os.getpid()}
