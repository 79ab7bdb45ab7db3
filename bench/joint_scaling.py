"""How the joint e-graph (algebra and kernel layers: ``backend="triton"``) scales on real transformer blocks,
priced for the H100: e-graph size, iterations, why saturation stopped, the extraction, seconds per stage and
the plan's predicted time, one row per block.

Blocks are Hugging Face transformers layers at their published sizes, built by gpu/hf_blocks.py with random
weights (no downloads, eval mode, batch 1; the GPU suite exports the same blocks' plans): a BertLayer of BERT-base
(sequence 128), a GPT2Block (768 wide, sequence 128), a LlamaDecoderLayer at Llama-2-7B width with grouped-query
attention (hidden 4096, 32 heads, 8 key/value heads, intermediate 11008; rotary tables built by the wrapper; sequence
128), the first T5Block of t5-base's encoder (sequence 128), a ViTLayer of ViT-base (197 tokens), and ``bert12``,
BERT-base's 12-layer encoder (the repeated-block path: its wall time and report matter). Each block is optimized in a
fresh process with ``validate=False, cache=False, measure="never"``; ``--raised`` raises the saturation limits,
``--unguided`` runs the kernel layer on every algebraic form (``kernel_guide=None``; default: cost-guided,
egraph/guide.py). For ``bert`` the matches per rule and per rule set, the growth per iteration and the e-nodes per op
kind are printed too.

    python bench/joint_scaling.py                          # -> bench/results/joint_scaling.md
    python bench/joint_scaling.py --blocks bert --raised --out bench/results/joint_scaling_raised.md
    python bench/joint_scaling.py --unguided --out bench/results/joint_scaling_unguided.md
"""
from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import torch

from gpu import hf_blocks
from measure import provenance

OUT = Path(__file__).resolve().parent / "results" / "joint_scaling.md"
SEQ = 128
RAISED = {"enodes": 400_000, "seconds": 60.0, "iterations": 20}
DETAILED = "bert"  # the block whose growth is broken down


def _hidden(width: int, tokens: int = SEQ) -> tuple[torch.Tensor]:
    return (torch.randn(1, tokens, width),)


BLOCKS = {"bert": lambda: (hf_blocks.bert_layer(), _hidden(768)),
          "gpt2": lambda: (hf_blocks.gpt2_block(), _hidden(768)),
          "llama": lambda: (hf_blocks.llama_layer(max_positions=2 * SEQ), _hidden(4096)),
          "t5": lambda: (hf_blocks.t5_block(), _hidden(768)),
          "vit": lambda: (hf_blocks.vit_layer(), _hidden(768, 197)),
          "bert12": lambda: (hf_blocks.bert_encoder(), _hidden(768))}


def measure_here(name: str, raised: bool, unguided: bool) -> dict:
    """Optimize block ``name`` in this process; what its report says, as plain data."""
    import eqiforge
    print(f"eqiforge: {eqiforge.__file__}", file=sys.stderr, flush=True)
    torch.manual_seed(0)
    model, inputs = BLOCKS[name]()
    limits = eqiforge.Limits(**RAISED) if raised else eqiforge.Limits()
    optimize = eqiforge.optimize  # imports the pipeline (lazily loaded, seconds): not the call's time
    with torch.no_grad():
        model = model.eval()
        t0 = time.perf_counter()
        opt = optimize(model, inputs, backend="triton", priced_device="H100", limits=limits, validate=False,
                       cache=False, measure="never", **({"kernel_guide": None} if unguided else {}))
        wall = time.perf_counter() - t0
    r = opt.report
    result = {"enodes": r.enodes, "eclasses": r.eclasses, "iterations": r.iterations, "stop": str(r.stop_reason),
              "extraction": r.extraction_method, "stages": r.stage_seconds, "wall": wall,
              "predicted_us": r.predicted_after * 1e6, "before_us": r.predicted_before * 1e6,
              "repeated_blocks": r.repeated_blocks, "summary": r.summary()}
    if name == DETAILED:
        per_set: Counter = Counter()
        for step in r.saturation.steps:
            per_set[step.ruleset] += sum(step.matches.values())
        snap = opt.extraction.snapshot
        nodes, classes = Counter(snap.node_op), Counter()
        for members in snap.class_nodes():
            classes.update({snap.node_op[n] for n in members})
        result.update(matches_per_rule=r.matches_per_rule(), matches_per_set=dict(per_set.most_common()),
                      guided=r.saturation.guided or "unguided: the kernel layer on every e-class",
                      per_iteration=r.per_iteration(),
                      ops={op: (n, classes[op]) for op, n in nodes.most_common()})
    return result


def measure(name: str, raised: bool, unguided: bool) -> dict:
    """``measure_here`` in a fresh process (a block's e-graph and weights go with it); a failure's last line."""
    t0 = time.perf_counter()
    run = subprocess.run([sys.executable, __file__, "--one", name] + (["--raised"] if raised else [])
                         + (["--unguided"] if unguided else []),
                         capture_output=True, text=True)
    sys.stderr.write(run.stderr if run.returncode else "".join(
        line + "\n" for line in run.stderr.splitlines() if line.startswith("eqiforge: ")))
    if run.returncode:
        tail = (run.stderr.strip().splitlines() or [f"exit status {run.returncode}"])[-1]
        return {"error": f"exit {run.returncode}: {tail[:160]}", "wall": time.perf_counter() - t0}
    return json.loads(run.stdout.strip().splitlines()[-1])


def row(name: str, r: dict) -> str:
    if "error" in r:
        return f"| {name} | failed after {r['wall']:.1f} s: {r['error']} |" + " |" * 10
    s = r["stages"]
    return (f"| {name} | {r['enodes']} | {r['eclasses']} | {r['iterations']} | {r['stop']} | {r['extraction']} | "
            + "".join(f"{s.get(stage, 0.0):.2f} | " for stage in ("capture", "saturate", "extract", "lower"))
            + f"{r['wall']:.2f} | {r['before_us']:.1f} -> {r['predicted_us']:.1f} |")


def breakdown(r: dict) -> list[str]:
    """The detailed block's growth: rule sets, top rules, iterations, op kinds."""
    lines = [f"## {DETAILED}: where the e-graph grows", "", f"Kernel layer: {r['guided']}.", "",
             "Matches per rule set: " + ", ".join(
        f"{k} {v}" for k, v in r["matches_per_set"].items()), "", "| rule (top 15 by matches) | matches |",
        "|---|---|", *(f"| {k} | {v} |" for k, v in list(r["matches_per_rule"].items())[:15]), "",
        "| iteration | e-nodes | e-classes | matches | seconds |", "|---|---|---|---|---|",
        *(f"| {i['iteration']} | {i['enodes']} | {i['eclasses']} | {i['matches']} | {i['seconds']:.2f} |"
          for i in r["per_iteration"]), "",
        "| op (top 15 by e-nodes) | e-nodes | e-classes holding it | e-nodes per such e-class |", "|---|---|---|---|",
        *(f"| {op} | {n} | {c} | {n / c:.2f} |" for op, (n, c) in list(r["ops"].items())[:15])]
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--blocks", default=",".join(BLOCKS), help=f"comma-separated, of {list(BLOCKS)}")
    p.add_argument("--raised", action="store_true",
                   help=f"raised saturation limits: {RAISED['enodes']} e-nodes, {RAISED['seconds']:g} s, "
                        f"{RAISED['iterations']} iterations")
    p.add_argument("--unguided", action="store_true", help="the kernel layer on every algebraic form "
                                                           "(kernel_guide=None)")
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--one", help=argparse.SUPPRESS)  # one block, in this process: its JSON on stdout
    args = p.parse_args()
    if args.one:
        print(json.dumps(measure_here(args.one, args.raised, args.unguided)))
        return
    names = args.blocks.split(",")
    unknown = sorted(set(names) - set(BLOCKS))
    if unknown:
        p.error(f"unknown blocks {unknown}; known: {list(BLOCKS)}")
    results, rows = {}, []
    for name in names:
        results[name] = measure(name, args.raised, args.unguided)
        rows.append(row(name, results[name]))
        print(rows[-1], flush=True)
    limits = "raised: " + ", ".join(f"{k} {v:g}" for k, v in RAISED.items()) if args.raised else "default limits"
    command = " ".join(["python bench/joint_scaling.py", *sys.argv[1:]])
    lines = [f"# The joint e-graph on transformer blocks ({datetime.date.today()}, 2-core CPU, torch "
             f"{torch.__version__})", "",
             f"`{command}` — backend triton (algebra and kernel layers, the kernel layer "
             f"{'unguided' if args.unguided else 'cost-guided'}), priced for the H100, {limits}; batch 1; "
             "validate=False, cache=False, measure=never. Seconds; predicted times in us (program as captured -> "
             "plan); wall: the whole optimize call.", "",
             "| block | e-nodes | e-classes | iterations | stopped because | extraction | capture | saturate | "
             "extract | lower | wall | predicted us |", "|---" * 12 + "|", *rows]
    if "bert12" in results and "summary" in results["bert12"]:
        lines += ["", "## bert12: the report", "", "```text", results["bert12"]["summary"], "```"]
    if "matches_per_rule" in results.get(DETAILED, {}):
        lines += ["", *breakdown(results[DETAILED])]
        print("\n".join(breakdown(results[DETAILED])))
    args.out.write_text("\n".join([*lines, "", provenance()]) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
