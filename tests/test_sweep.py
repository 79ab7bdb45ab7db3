"""Sweeps: the local executor and the resumable results file, choosing an executor, the fuzz campaign's task run
in a child process; in the slow tier, the same on a local Ray cluster bound to 127.0.0.1 (a fuzz sample equal to
the local run's, a task that kills its worker retried)."""
import json
import os
import sys
import time

import pytest

from eqiforge import sweep
from eqiforge.errors import EqiforgeError
from eqiforge.fuzz import programs, runner
from eqiforge.fuzz.__main__ import main as fuzz_main
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


def tasks(count, payload=lambda i: i):
    return [sweep.Task(f"t{i}", "square", payload(i)) for i in range(count)]


def test_local_sweep_returns_results_in_task_order_and_appends_each(tmp_path):
    path = tmp_path / "results.jsonl"
    results = sweep.run_sweep(sweep.LocalExecutor(2), square, tasks(6), path)
    assert [r["value"] for r in results] == [i * i for i in range(6)]
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert sorted(entry["id"] for entry in lines) == [f"t{i}" for i in range(6)]


def test_a_sweep_started_again_skips_the_ids_its_results_file_holds(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps({"id": "t1", "result": {"status": "ok", "value": "stored"}}) + "\n" + '{"id": "t2", ')
    results = sweep.run_sweep(sweep.LocalExecutor(2), square, tasks(4), path)
    assert [r["value"] for r in results] == [0, "stored", 4, 9]  # t1 not run again; t2's cut line run again
    ran = [json.loads(line)["id"] for line in path.read_text().splitlines()[2:]]
    assert sorted(ran) == ["t0", "t2", "t3"]


@pytest.mark.slow
def test_a_raising_task_and_a_dying_worker_are_crash_records(tmp_path):
    raising = sweep.run_sweep(sweep.LocalExecutor(2), square, tasks(3, lambda i: None if i == 1 else i),
                              tmp_path / "raising.jsonl")
    assert raising[1]["status"] == "crash" and "TypeError" in raising[1]["error"]
    assert [raising[0]["value"], raising[2]["value"]] == [0, 4]
    dying = sweep.LocalExecutor(1, max_retries=1).map(always_die, tasks(1))
    assert [(task.id, result["status"]) for task, result in dying] == [("t0", "crash")]
    marker = [sweep.Task("m", "die", str(tmp_path / "marker"))]
    assert [result for _, result in sweep.LocalExecutor(1).map(die_once, marker)] == [{"status": "ok"}]


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
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    monkeypatch.delenv("EQIFORGE_CLUSTER", raising=False)
    with pytest.raises(EqiforgeError, match=r"pip install 'eqiforge\[cluster\]'"):
        sweep.executor_from("ray")
    assert isinstance(sweep.executor_from(), sweep.LocalExecutor)  # the default needs no Ray
    assert fuzz_main(["--programs", "1", "--cluster", "ray", "--out", str(tmp_path)]) == 2
    assert "pip install 'eqiforge[cluster]'" in capsys.readouterr().err


@pytest.mark.slow
def test_a_fuzz_task_runs_in_a_child_with_the_jobs_timeout():
    """What a Ray task runs per fuzz job: a hang is a hang outcome (the child killed), the next job a fresh child."""
    hanging_source = "import time\nimport torch\n\ndef make_program():\n    time.sleep(600)\n\n" \
                     "def make_inputs(seed):\n    return (torch.randn(3),)\n"
    hanging = runner.Job(programs.Program(-1, "torch", hanging_source, "float32", ()), "default", {}, 2.0)
    normal = runner.plan_jobs(1, 0, ("default",), per_program=1)[0]
    hung = runner.outcome_from(runner.run_task(sweep.Task(hanging.name, "fuzz", hanging)))
    assert hung.status == "hang" and 2.0 <= hung.seconds < 3.5
    assert runner.outcome_from(runner.run_task(sweep.Task(normal.name, "fuzz", normal))).status in ("ok", "rejected")
    assert runner.outcome_from({"status": "crash", "error": "WorkerCrashedError: gone"}).status == "crash"


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
    assert [r for _, r in sweep.RayExecutor(max_retries=2).map(die_once, marker)] == [{"status": "ok"}]
    [(_, crashed)] = sweep.RayExecutor(max_retries=1).map(always_die, tasks(1))
    assert crashed["status"] == "crash" and "Worker" in crashed["error"]
