"""Real models from Hugging Face transformers on the CPU: eager, torch.compile, torch.compile with the eqiforge
backend, and eqiforge.optimize, side by side in one process (bench/measure.py's interleaved, shuffled timing).

Small configs built here (random weights, no downloads, dropout off): GPT-2, BERT, Llama with grouped-query
attention, Qwen2, the T5 encoder, ViT. Inference runs under torch.no_grad(); a training step is forward, a
mean loss, backward and an SGD step, each variant on its own copy of the weights, its gradients compared with
eager's (largest difference over the largest eager gradient, all parameters). The speed-up over torch.compile
is the median over rounds of the ratio of the two variants' times in that round (each round calls every
variant once, in a shuffled order), which cancels the drift of a shared machine that a ratio of two medians
keeps.

First calls (what a compiler takes before the first result, inference) are timed each in a fresh process, as
a user meets them: *warm*, with the disk caches a previous run filled (Inductor's FX graph and AOTAutograd
caches, EqiForge's saturation and extraction caches: one untimed process per variant fills them first), the
median of ``--first-call-runs`` processes; and *cold*, with empty caches (fresh folders), one process each.

    python bench/hf_models.py                        # -> bench/results/cpu_hf_models.md
    python bench/hf_models.py --models gpt2,llama --repeats 20 --no-train --first-call-runs 0
"""
from __future__ import annotations

import argparse
import copy
import datetime
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

import eqiforge
from gpu.hf_blocks import first_tensor
from measure import TOLERANCE, provenance, rel_error, steady_allocator, time_round_robin

OUT = Path(__file__).resolve().parent / "results" / "cpu_hf_models.md"
BATCH, SEQ, HIDDEN, LAYERS, HEADS, VOCAB = 2, 128, 256, 4, 4, 1024


def _decoder(cls_name: str, config_name: str, **extra):
    def make():
        import transformers as T
        cfg = getattr(T, config_name)(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=4 * HIDDEN,
                                      num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                                      max_position_embeddings=2 * SEQ, **extra)
        return getattr(T, cls_name)(cfg), (torch.randint(0, VOCAB, (BATCH, SEQ)),)
    return make


def _gpt2():
    import transformers as T
    cfg = T.GPT2Config(vocab_size=VOCAB, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS, n_positions=2 * SEQ,
                       resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    return T.GPT2LMHeadModel(cfg), (torch.randint(0, VOCAB, (BATCH, SEQ)),)


def _bert():
    import transformers as T
    cfg = T.BertConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=4 * HIDDEN, num_hidden_layers=LAYERS,
                       num_attention_heads=HEADS, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return T.BertModel(cfg), (torch.randint(0, VOCAB, (BATCH, SEQ)),)


def _t5_encoder():
    import transformers as T
    cfg = T.T5Config(vocab_size=VOCAB, d_model=HIDDEN, d_kv=HIDDEN // HEADS, d_ff=4 * HIDDEN, num_layers=LAYERS,
                     num_heads=HEADS, dropout_rate=0.0)
    return T.T5EncoderModel(cfg), (torch.randint(0, VOCAB, (BATCH, SEQ)),)


def _vit():
    import transformers as T
    cfg = T.ViTConfig(hidden_size=HIDDEN, intermediate_size=4 * HIDDEN, num_hidden_layers=LAYERS,
                      num_attention_heads=HEADS, image_size=64, patch_size=8, hidden_dropout_prob=0.0,
                      attention_probs_dropout_prob=0.0)
    return T.ViTModel(cfg), (torch.randn(BATCH, 3, 64, 64),)


MODELS = {
    "gpt2": _gpt2,
    "bert": _bert,
    "llama_gqa": _decoder("LlamaForCausalLM", "LlamaConfig", num_key_value_heads=2),
    "qwen2": _decoder("Qwen2ForCausalLM", "Qwen2Config", num_key_value_heads=2),
    "t5_encoder": _t5_encoder,
    "vit": _vit,
}


def _loss(out) -> torch.Tensor:
    """A loss whose gradients are not rounding noise (the mean of a normalised output has gradients ~1e-9)."""
    return first_tensor(out).float().square().mean()


#: the torch.compile backend of each first-call variant
FIRST_CALL_BACKENDS = {"compile": "inductor", "eqiforge_compile": "eqiforge"}


def first_call_here(model_name: str, variant: str) -> float:
    """Seconds of ``variant``'s first inference call of ``model_name`` in this process (building the model
    and its input apart)."""
    torch.manual_seed(0)
    model, example = MODELS[model_name]()
    model = model.eval()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = torch.compile(model, backend=FIRST_CALL_BACKENDS[variant])
        t0 = time.perf_counter()
        compiled(*example)
        return time.perf_counter() - t0


def first_call(model_name: str, variant: str, cache_root: str | None = None) -> float:
    """``first_call_here`` in a fresh process; ``cache_root``: a folder holding that process's Inductor and
    EqiForge caches (None: the user's own)."""
    env = dict(os.environ)
    if cache_root:
        env.update(TORCHINDUCTOR_CACHE_DIR=os.path.join(cache_root, "inductor"),
                   EQIFORGE_CACHE_DIR=os.path.join(cache_root, "eqiforge"))
    out = subprocess.run([sys.executable, __file__, "--first-call", model_name, variant], env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["seconds"]


def first_calls(model_name: str, runs: int) -> dict:
    """Per variant: the median warm first call over ``runs`` fresh processes (after one that fills the caches)
    and one cold first call (empty caches)."""
    result = {}
    for variant in FIRST_CALL_BACKENDS:
        first_call(model_name, variant)  # fills the disk caches
        warm = statistics.median(first_call(model_name, variant) for _ in range(runs))
        with tempfile.TemporaryDirectory(prefix="eqiforge-bench-cold-") as root:
            result[variant] = {"warm": warm, "cold": first_call(model_name, variant, root)}
    return result


def paired_speedup(samples: dict, base: str = "compile", new: str = "eqiforge_compile") -> float:
    """Median over rounds of ``base``'s time over ``new``'s in the same round."""
    return statistics.median(b / n for b, n in zip(samples[base], samples[new]))


def inference(model, example, repeats: int) -> dict:
    """Medians (ms) of each variant and the paired speed-up, after checking each variant against eager;
    eqiforge.optimize's first call in seconds (in this process)."""
    model = model.eval()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = first_tensor(model(*example))
        variants = {"eager": model, "compile": torch.compile(model),
                    "eqiforge_compile": torch.compile(model, backend="eqiforge")}
        for name in ("compile", "eqiforge_compile"):
            _check(name, variants[name](*example), ref)
        t0 = time.perf_counter()
        try:
            variants["eqiforge"] = eqiforge.optimize(model, example)
            optimize_s = time.perf_counter() - t0
            _check("eqiforge", variants["eqiforge"](*example), ref)
        except eqiforge.EqiforgeError as err:
            optimize_s = f"fails: {str(err).splitlines()[0][:80]}"
        sets = [tuple(torch.randn_like(t) if t.is_floating_point() else torch.randint_like(t, VOCAB) for t in example)
                for _ in range(len(variants) + 1)]
        samples = time_round_robin(variants, sets, repeats)
    return {"ms": {v: statistics.median(s) * 1e3 for v, s in samples.items()}, "speedup": paired_speedup(samples),
            "optimize_s": optimize_s}


def training(model, example, repeats: int) -> dict:
    """Medians (ms) of a training step per variant, and each variant's largest gradient error vs eager."""
    model = model.train()
    copies = {v: copy.deepcopy(model) for v in ("eager", "compile", "eqiforge_compile")}
    forwards = {"eager": copies["eager"], "compile": torch.compile(copies["compile"]),
                "eqiforge_compile": torch.compile(copies["eqiforge_compile"], backend="eqiforge")}
    grads = {}
    for name, fwd in forwards.items():
        _loss(fwd(*example)).backward()
        grads[name] = {k: p.grad.clone() if p.grad is not None else torch.zeros_like(p)
                       for k, p in copies[name].named_parameters()}
    scale = max(r.abs().max().item() for r in grads["eager"].values())  # gradients near 0 have no relative error
    errors = {n: max((grads[n][k] - r).abs().max().item() for k, r in grads["eager"].items()) / scale
              for n in forwards}
    steps = {}
    for name, fwd in forwards.items():
        opt = torch.optim.SGD(copies[name].parameters(), lr=1e-4)

        def step(*inputs, fwd=fwd, opt=opt):
            with torch.enable_grad():
                opt.zero_grad(set_to_none=True)
                _loss(fwd(*inputs)).backward()
                opt.step()
        steps[name] = step
    samples = time_round_robin(steps, [example], repeats, warmup=2)
    return {"ms": {v: statistics.median(s) * 1e3 for v, s in samples.items()}, "speedup": paired_speedup(samples),
            "errors": errors}


def _check(name, out, ref) -> None:
    err = rel_error(first_tensor(out), ref)
    if err > TOLERANCE:
        raise AssertionError(f"{name} differs from eager by {err:.2e}")


def _secs(v) -> str:
    return f"{v:.1f}" if isinstance(v, float) else str(v)


def _geomean(values: list[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", help=f"comma-separated, of {sorted(MODELS)} (default: all)")
    p.add_argument("--repeats", type=int, default=100)
    p.add_argument("--no-train", action="store_true", help="inference only")
    p.add_argument("--first-call-runs", type=int, default=3,
                   help="fresh processes per variant for the warm first call (0: no first-call columns)")
    p.add_argument("--first-call", nargs=2, metavar=("MODEL", "VARIANT"), help=argparse.SUPPRESS)  # one process's
    args = p.parse_args()
    if args.first_call:
        print(json.dumps({"seconds": first_call_here(*args.first_call)}))
        return
    allocator = steady_allocator()
    names = args.models.split(",") if args.models else list(MODELS)
    inf_rows, train_rows, speedups, train_speedups, first_ratios = [], [], [], [], []
    for name in names:
        torch.manual_seed(0)
        model, example = MODELS[name]()
        r = inference(model, example, args.repeats)
        ms = r["ms"]
        speedups.append(r["speedup"])
        opt = f"{ms['eqiforge']:.2f}" if "eqiforge" in ms else "-"
        first = ["-"] * 5
        if args.first_call_runs:
            f = first_calls(name, args.first_call_runs)
            first_ratios.append(f["eqiforge_compile"]["warm"] / f["compile"]["warm"])
            first = [f"{f['compile']['warm']:.1f}", f"{f['eqiforge_compile']['warm']:.1f}", f"{first_ratios[-1]:.2f}",
                     f"{f['compile']['cold']:.1f}", f"{f['eqiforge_compile']['cold']:.1f}"]
        inf_rows.append(f"| {name} | {ms['eager']:.2f} | {ms['compile']:.2f} | {ms['eqiforge_compile']:.2f} | {opt} | "
                        f"{r['speedup']:.3f} | {' | '.join(first)} | {_secs(r['optimize_s'])} |")
        print(inf_rows[-1], flush=True)
        if not args.no_train:
            t = training(model, example, max(args.repeats // 3, 5))
            tm = t["ms"]
            train_speedups.append(t["speedup"])
            train_rows.append(f"| {name} | {tm['eager']:.1f} | {tm['compile']:.1f} | {tm['eqiforge_compile']:.1f} | "
                              f"{t['speedup']:.3f} | {t['errors']['compile']:.1e} | "
                              f"{t['errors']['eqiforge_compile']:.1e} |")
            print(train_rows[-1], flush=True)
    command = " ".join(["python bench/hf_models.py", *sys.argv[1:]])
    lines = [f"# Hugging Face models on the CPU ({datetime.date.today()}, torch {torch.__version__}, "
             f"{torch.get_num_threads()} threads, {allocator})", "",
             f"`{command}` — batch {BATCH}, sequence {SEQ}, hidden {HIDDEN}, {LAYERS} layers, {HEADS} heads; "
             f"medians of {args.repeats} interleaved rounds (ms); the speed-up is the median of per-round ratios "
             f"torch.compile / eqiforge backend; first calls in seconds, each in a fresh process (warm: median of "
             f"{args.first_call_runs} with filled disk caches; cold: empty caches).", "",
             "## Inference (torch.no_grad)", "",
             "| model | eager | torch.compile | compile(backend=eqiforge) | eqiforge.optimize | speed-up vs "
             "torch.compile | first call warm: compile | eqiforge backend | ratio | first call cold: compile | "
             "eqiforge backend | optimize (in process) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|", *inf_rows, "",
             f"Geomean speed-up of the eqiforge backend over torch.compile: {_geomean(speedups):.3f}x."]
    if first_ratios:
        lines.append(f"Warm first call, eqiforge backend over torch.compile: {min(first_ratios):.2f}-"
                     f"{max(first_ratios):.2f}x.")
    if train_rows:
        lines += ["", "## Training step (forward, mean-square loss, backward, SGD)", "",
                  "| model | eager | torch.compile | compile(backend=eqiforge) | speed-up vs torch.compile | "
                  "grad error compile | grad error eqiforge |", "|---|---|---|---|---|---|---|", *train_rows, "",
                  f"Geomean speed-up of the eqiforge backend over torch.compile: {_geomean(train_speedups):.3f}x."]
    OUT.write_text("\n".join([*lines, "", provenance()]) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
