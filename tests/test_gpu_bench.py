"""The GPU benchmark's plumbing on the CPU: a tiny suite exported, then run.py --dry-run-cpu on it.

The real run happens on a machine with a GPU but without egglog, so what can be checked here is that the
exported plans load and run with only torch and triton (egglog made unimportable), match the recorded
references under the Triton interpreter, and that the result files carry the expected columns.
"""
import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # the export optimizes and writes a dozen plans (~40 s on 2 cores)

GPU = Path(__file__).resolve().parent.parent / "bench" / "gpu"

# run.py as on the GPU machine: egglog cannot be imported; reports which eqiforge modules got loaded
DRY_RUN = """
import importlib.util, json, sys
sys.modules["egglog"] = None
spec = importlib.util.spec_from_file_location("gpu_run", sys.argv[1])
run = sys.modules["gpu_run"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(run)
code = run.main(["--dry-run-cpu", "--plans", sys.argv[2], "--out", sys.argv[3]])
print(json.dumps({"code": code, "eqiforge": sorted(m for m in sys.modules if m.startswith("eqiforge."))}))
"""


def _python(*args, **env):
    return subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TRITON_INTERPRET": "1", **env})


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    out = tmp_path_factory.mktemp("plans")
    done = _python(GPU / "export_plans.py", "--tiny", "--out", out)
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def test_export_writes_standalone_plans(plans):
    folders = sorted(f.parent for f in plans.glob("*/program.json"))
    assert {f.name for f in folders} >= {"transformer_layer_fp16", "mlp_fp32", "layernorm_softmax_fp16",
                                        "hf_bert_layer_fp16", "hf_gpt2_block_fp16", "hf_llama_layer_fp16",
                                        "hf_t5_block_fp32", "hf_vit_layer_fp16"}
    # a merged projection's weight travels as the recipe that makes it from the rebuilt block's weights
    made = json.loads((plans / "hf_llama_layer_fp16" / "program.json").read_text())["params_from_module"]
    assert {"dim": 1, "dtype": "float16", "parts": [[f"layer.mlp.{w}_proj.weight", True] for w in ("gate", "up")]} \
        in made.values(), made
    for folder in folders:
        assert {f.name for f in folder.iterdir()} >= {"plan.py", "params.pt", "meta.json", "check.pt"}
        body = ast.parse((folder / "plan.py").read_text()).body
        imports = {alias.name for node in body if isinstance(node, (ast.Import, ast.ImportFrom))
                   for alias in node.names}
        assert imports <= {"torch", "triton", "triton.language"}, (folder.name, imports)
        inductor = json.loads((folder / "program.json").read_text())["inductor"]
        assert (folder / "inductor").is_dir() == inductor["runs_plan"], (folder.name, inductor)
        assert inductor["runs_plan"] == (inductor["runs"] == "the plan"), (folder.name, inductor)
    inductor_plans = sorted(f.parent.parent.name for f in plans.glob("*/inductor/plan.py"))
    assert {"transformer_layer_fp32", "low_rank_fp32"} <= set(inductor_plans), inductor_plans
    for name in inductor_plans:  # PyTorch code and the torch-only helpers it calls: no egglog, no triton
        body = ast.parse((plans / name / "inductor" / "plan.py").read_text()).body
        imports = {node.module if isinstance(node, ast.ImportFrom) else alias.name
                   for node in body if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in node.names}
        assert imports <= {"torch", "eqiforge.ops.native"}, (name, imports)


#: the fields of a measured choice's record (eqiforge/decide/choice.py), which the GPU run writes as well
RECORD_FIELDS = {"version", "time", "program", "device", "machine", "runs", "rounds", "candidates"}


def test_dry_run_checks_every_plan_without_egglog(plans, tmp_path):
    done = _python("-c", DRY_RUN, GPU / "run.py", plans, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["code"] == 0
    # the inductor plans' helpers: eqiforge.ops.native and the torch-only modules it reads
    assert set(report["eqiforge"]) <= {"eqiforge.examples", "eqiforge.errors", "eqiforge.ops.native", "eqiforge.ops",
                                       "eqiforge.ops.kernel_semantics"}, report["eqiforge"]
    results = json.loads((tmp_path / "gpu_dry_run.json").read_text())
    assert len(results["programs"]) == len(list(plans.glob("*/program.json")))
    for name, r in results["programs"].items():
        assert r["correct"] and not r["errors"], (name, r)
        assert r["max_rel_err_vs_eager"] <= r["tolerance"]
        if "_s33_" in name:  # the long-sequence entries: no CPU reference, checked against eager only
            assert r["max_rel_err"] is None and "CPU reference" in r["skipped"], (name, r)
        else:
            assert r["max_rel_err"] <= r["tolerance"]
        assert set(r["ms"]) == {"eager", "compile", "max-autotune", "eqiforge", "eqiforge_inductor"}, (name, r["ms"])
        assert set(r["ratios"]) == {"eqiforge/eager", "eqiforge/compile", "eqiforge/max-autotune",
                                    "eqiforge_inductor/compile"}
        if (plans / name / "inductor").is_dir():  # checked like the triton plan; compiled apart from the timing
            assert r["max_rel_err_inductor_vs_eager"] <= r["tolerance"], (name, r)
            assert (r["max_rel_err_inductor"] or 0.0) <= r["tolerance"] and "eqiforge_inductor" in r["compile_s"]
        else:  # the backend runs the program compiled by Inductor: torch.compile's time
            assert r["ms"]["eqiforge_inductor"] == r["ms"]["compile"]
            assert r["skipped"]["eqiforge_inductor"].startswith("runs torch.compile's program: the original"), r
    assert results["programs"]["mlp_fp16"]["tflops"]  # GEMM-heavy: FLOPs recorded at export
    records = [json.loads(line) for line in (tmp_path / "gpu_dry_run_records.jsonl").read_text().splitlines()]
    assert [r["program"] for r in records] == list(results["programs"])  # the measured choice's format:
    from eqiforge.decide import choice
    from eqiforge.cost import plans as plan_data
    assert all(r["version"] == choice.VERSION and set(r) == RECORD_FIELDS for r in records)
    for r in records:
        ms = results["programs"][r["program"]]["ms"]
        assert {c["name"]: c["measured_s"] for c in r["candidates"]} == {v: t * 1e-3 for v, t in ms.items()}
        [plan] = [c for c in r["candidates"] if c["name"] == "eqiforge"]
        assert plan["predicted_s"] > 0 and plan["nodes"] and r["runs"] == min(ms, key=ms.get)
        assert [plan_data.node_record(n) for n in plan["nodes"]]  # priceable by a cost model
    long = results["programs"]["attention_causal_s33_d16_bf16"]
    assert long["flops"] == 4 * 2 * 33 * 33 * 16  # QK^T and PV on the meta device (causal: SDPA counts all)
    header = (tmp_path / "gpu_dry_run.md").read_text().split("\n| program |")[1].splitlines()[0]
    for column in ("correct", "max rel err", "eager ms", "compile ms", "max-autotune ms", "EqiForge ms",
                   "EqiForge-inductor ms", "/eager", "/compile", "/max-autotune", "inductor plan /compile"):
        assert f"| {column} |" in header
    last_row = done.stdout.rstrip().splitlines()[-2]  # the table is printed last
    assert last_row.startswith("| hf_vit_layer_fp16 |") and "| yes |" in last_row


def test_without_cuda_says_so_and_exits_cleanly(plans, tmp_path):
    done = _python(GPU / "run.py", "--plans", plans, "--out", tmp_path, CUDA_VISIBLE_DEVICES="")
    assert done.returncode == 0, done.stderr
    assert "no CUDA device" in done.stdout
    assert not list(tmp_path.iterdir())
