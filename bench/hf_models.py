"""Real models from Hugging Face transformers on the CPU: eager, torch.compile, torch.compile with the eqiforge
backend, and eqiforge.optimize, side by side in one process (bench/measure.py's interleaved, shuffled timing).

Small configs built here (random weights, no downloads, dropout off): GPT-2, BERT, Llama with grouped-query
attention, Qwen2, the T5 encoder, ViT. Inference runs under torch.no_grad(); a training step is forward, a
mean loss, backward and an SGD step, each variant on its own copy of the weights, its gradients compared with
eager's (largest difference over the largest eager gradient, all parameters). First-call times (what each compiler takes before the first result) are reported beside the
steady-state medians.

    python bench/hf_models.py                        # -> bench/results/cpu_hf_models.md
    python bench/hf_models.py --models gpt2,llama --repeats 20 --no-train
"""
from __future__ import annotations

import argparse
import copy
import datetime
import math
import statistics
import time
import warnings
from pathlib import Path

import torch

import eqiforge
from measure import TOLERANCE, rel_error, steady_allocator, time_round_robin

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


def _first_tensor(out) -> torch.Tensor:
    """The model's main output (logits or last hidden state), whatever structure holds it."""
    if isinstance(out, torch.Tensor):
        return out
    return out[0] if isinstance(out, (tuple, list)) else next(iter(out.values()))


def _loss(out) -> torch.Tensor:
    """A loss whose gradients are not rounding noise (the mean of a normalised output has gradients ~1e-9)."""
    return _first_tensor(out).float().square().mean()


def _first_call(fn, inputs) -> tuple[object, float]:
    t0 = time.perf_counter()
    out = fn(*inputs)
    return out, time.perf_counter() - t0


def inference(model, example, repeats: int) -> dict:
    """Medians (ms) and first-call seconds of each variant, after checking each against eager."""
    model = model.eval()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = _first_tensor(model(*example))
        variants, first = {"eager": model}, {}
        builders = {"compile": lambda: torch.compile(model),
                    "eqiforge_compile": lambda: torch.compile(model, backend="eqiforge")}
        for name, make in builders.items():
            variants[name] = make()
            out, first[name] = _first_call(variants[name], example)
            _check(name, out, ref)
        t0 = time.perf_counter()
        try:
            variants["eqiforge"] = eqiforge.optimize(model, example)
            first["eqiforge"] = time.perf_counter() - t0
            _check("eqiforge", variants["eqiforge"](*example), ref)
        except eqiforge.EqiforgeError as err:
            first["eqiforge"] = f"fails: {str(err).splitlines()[0][:80]}"
        sets = [tuple(torch.randn_like(t) if t.is_floating_point() else torch.randint_like(t, VOCAB) for t in example)
                for _ in range(len(variants) + 1)]
        samples = time_round_robin(variants, sets, repeats)
    return {"ms": {v: statistics.median(s) * 1e3 for v, s in samples.items()}, "first": first}


def training(model, example, repeats: int) -> dict:
    """Medians (ms) of a training step per variant, and each variant's largest gradient error vs eager."""
    model = model.train()
    copies = {v: copy.deepcopy(model) for v in ("eager", "compile", "eqiforge_compile")}
    forwards = {"eager": copies["eager"], "compile": torch.compile(copies["compile"]),
                "eqiforge_compile": torch.compile(copies["eqiforge_compile"], backend="eqiforge")}
    grads, first = {}, {}
    for name, fwd in forwards.items():
        t0 = time.perf_counter()
        _loss(fwd(*example)).backward()
        first[name] = time.perf_counter() - t0
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
    return {"ms": {v: statistics.median(s) * 1e3 for v, s in samples.items()}, "first": first, "errors": errors}


def _check(name, out, ref) -> None:
    err = rel_error(_first_tensor(out), ref)
    if err > TOLERANCE:
        raise AssertionError(f"{name} differs from eager by {err:.2e}")


def _secs(v) -> str:
    return f"{v:.1f}" if isinstance(v, float) else str(v)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", help=f"comma-separated, of {sorted(MODELS)} (default: all)")
    p.add_argument("--repeats", type=int, default=30)
    p.add_argument("--no-train", action="store_true", help="inference only")
    args = p.parse_args()
    allocator = steady_allocator()
    names = args.models.split(",") if args.models else list(MODELS)
    inf_rows, train_rows, ratios = [], [], []
    for name in names:
        torch.manual_seed(0)
        model, example = MODELS[name]()
        r = inference(model, example, args.repeats)
        ms, first = r["ms"], r["first"]
        ratios.append(ms["compile"] / ms["eqiforge_compile"])
        opt = f"{ms['eqiforge']:.2f}" if "eqiforge" in ms else "-"
        inf_rows.append(f"| {name} | {ms['eager']:.2f} | {ms['compile']:.2f} | {ms['eqiforge_compile']:.2f} | {opt} | "
                        f"{ms['compile'] / ms['eqiforge_compile']:.2f} | {_secs(first['compile'])} | "
                        f"{_secs(first['eqiforge_compile'])} | {_secs(first['eqiforge'])} |")
        print(inf_rows[-1], flush=True)
        if not args.no_train:
            t = training(model, example, max(args.repeats // 3, 5))
            tm = t["ms"]
            train_rows.append(f"| {name} | {tm['eager']:.1f} | {tm['compile']:.1f} | {tm['eqiforge_compile']:.1f} | "
                              f"{tm['compile'] / tm['eqiforge_compile']:.2f} | {t['errors']['compile']:.1e} | "
                              f"{t['errors']['eqiforge_compile']:.1e} |")
            print(train_rows[-1], flush=True)
    geomean = math.exp(sum(map(math.log, ratios)) / len(ratios))
    lines = [f"# Hugging Face models on the CPU ({datetime.date.today()}, torch {torch.__version__}, "
             f"{torch.get_num_threads()} threads, {allocator})", "",
             f"`python bench/hf_models.py{' --models ' + args.models if args.models else ''}`"
             f" — batch {BATCH}, sequence {SEQ}, hidden {HIDDEN}, {LAYERS} layers, {HEADS} heads; medians of "
             f"{args.repeats} interleaved calls (ms); first call in seconds.", "",
             "## Inference (torch.no_grad)", "",
             "| model | eager | torch.compile | compile(backend=eqiforge) | eqiforge.optimize | speed-up vs "
             "torch.compile | first call: compile | eqiforge backend | optimize |",
             "|---|---|---|---|---|---|---|---|---|", *inf_rows, "",
             f"Geomean speed-up of the eqiforge backend over torch.compile: {geomean:.2f}x."]
    if train_rows:
        lines += ["", "## Training step (forward, mean-square loss, backward, SGD)", "",
                  "| model | eager | torch.compile | compile(backend=eqiforge) | speed-up vs torch.compile | "
                  "grad error compile | grad error eqiforge |", "|---|---|---|---|---|---|---|", *train_rows]
    OUT.write_text("\n".join(lines) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
