"""Greedy decoding with a cache through ``eqiforge.optimize()``: one symbolic plan for every cache length.

Small Llama (grouped-query attention) and GPT-2 configs, random weights. For each model: the tokens of
``--tokens`` greedy steps through the optimized module must equal eager's; every call must run an EqiForge
plan or the program where the plan was measured slower (``opt.calls``: no fallback) and at most 3 plans may
be built in all (the prompt's, the first step's, and the one
for every later cache length). Then per-token time, paired: each round decodes ``--tokens`` tokens with
each candidate (eager, the optimized module, ``torch.compile(dynamic=True)``) in a random order, an untimed
decode right before the timed one (``measure.time_round_robin``, the loop EqiForge decides by), and the
report gives the median over rounds of each candidate's time per token and of its ratio to eager's.

    python bench/decode_symbolic.py [--tokens 64] [--rounds 7] [--out bench/results/decode_symbolic.md]
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
import transformers

import eqiforge
from eqiforge.examples import greedy
from measure import time_round_robin, write_results

VOCAB = 128


def models() -> dict:
    common = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, max_position_embeddings=256)
    return {
        "llama (GQA, 4 query / 2 key-value heads)":
            lambda: transformers.LlamaForCausalLM(transformers.LlamaConfig(**common, num_key_value_heads=2)),
        "gpt2": lambda: transformers.GPT2LMHeadModel(transformers.GPT2Config(
            n_layer=2, n_embd=64, n_head=4, vocab_size=VOCAB, n_positions=256)),
    }


def run(name: str, build, tokens: int, rounds: int) -> dict:
    torch.manual_seed(0)
    model = build().eval()
    prompt = torch.randint(0, VOCAB, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        start = time.perf_counter()
        opt = eqiforge.optimize(model, (prompt,))  # default options: measured choice of the code generator
        want = greedy(model, prompt, tokens)
        got = greedy(opt, prompt, tokens)
        first = time.perf_counter() - start
        compiled = torch.compile(model, dynamic=True)
        greedy(compiled, prompt, tokens)  # compiled before timing
        candidates = {"eager": model, "eqiforge": opt, "torch.compile(dynamic=True)": compiled}
        decodes = {k: (lambda m=m: greedy(m, prompt, tokens)) for k, m in candidates.items()}
        seconds = time_round_robin(decodes, [()], rounds, warmup=0)  # the loop EqiForge decides by
        times = {k: [s / tokens for s in v] for k, v in seconds.items()}
    ratios = {k: statistics.median(t / e for t, e in zip(times[k], times["eager"])) for k in candidates}
    return {"name": name, "equal": torch.equal(got, want), "calls": opt.calls, "plans": 1 + opt.plans.builds,
            "first": first, "per_token": {k: statistics.median(v) for k, v in times.items()}, "ratio": ratios,
            "symbolic": next((m.report.symbolic for m in opt.plans.values() if m.symbolic), "none")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "decode_symbolic.md")
    args = parser.parse_args()
    transformers.logging.set_verbosity_error()
    torch.set_num_threads(2)
    rows = [run(name, build, args.tokens, args.rounds) for name, build in models().items()]
    lines = [f"# Greedy decoding of {args.tokens} tokens through optimize() (CPU, {torch.get_num_threads()} "
             f"threads, {args.rounds} paired rounds, medians)", "",
             "| model | tokens equal eager's | calls over every decode (plan / original chosen / fallback) "
             "| plans built "
             "| optimize + first decode s | eager us/token | eqiforge us/token (x eager) "
             "| torch.compile(dynamic=True) us/token (x eager) |",
             "|---|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        t, q = r["per_token"], r["ratio"]
        calls = " / ".join(str(r["calls"][k]) for k in ("plan", "original", "fallback"))
        lines.append(f"| {r['name']} | {r['equal']} | {calls} | {r['plans']} "
                     f"| {r['first']:.1f} | {t['eager'] * 1e6:.0f} | {t['eqiforge'] * 1e6:.0f} ({q['eqiforge']:.2f}) "
                     f"| {t['torch.compile(dynamic=True)'] * 1e6:.0f} ({q['torch.compile(dynamic=True)']:.2f}) |")
    lines += ["", "Symbolic dims of the decoding step's plan:", ""] + [f"- {r['name']}: {r['symbolic']}" for r in rows]
    lines.append("")
    write_results(args.out, lines)
    if not all(r["equal"] and r["calls"]["fallback"] == 0 and r["plans"] <= 3 for r in rows):
        raise SystemExit("acceptance not met: see the table")


if __name__ == "__main__":
    main()
