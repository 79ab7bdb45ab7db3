"""Which rule sets matter across a zoo of small Hugging Face models (random weights, no downloads): each model
ablated leave-one-out (``eqiforge.viz.zoo.ablate_zoo``, the whole zoo one sweep), predicted plan times, inference.

    python bench/zoo_ablation.py --out docs/images/zoo

writes zoo.md, zoo.csv and zoo.png (programs x rule sets: the predicted time without each set over the time
with all) into ``--out`` and prints the table. The models are bench/hf_models.py's six and six more decoder
families at the same sizes (batch 2, sequence 128, hidden 256, 4 layers, 4 heads). Local worker processes load
each model by name themselves (``--workers``); ``--cluster ray`` / ``--address`` run the sweep on Ray (its
workers need this folder on their path), ``--resume`` goes on from ``--out``'s sweep.jsonl.
"""
from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import torch

from hf_models import MODELS, _decoder

ZOO = {
    **MODELS,
    "mistral": _decoder("MistralForCausalLM", "MistralConfig", num_key_value_heads=2),
    "phi": _decoder("PhiForCausalLM", "PhiConfig"),
    "gpt_neox": _decoder("GPTNeoXForCausalLM", "GPTNeoXConfig"),
    "gemma": _decoder("GemmaForCausalLM", "GemmaConfig", num_key_value_heads=2, head_dim=64),
    "qwen3": _decoder("Qwen3ForCausalLM", "Qwen3Config", num_key_value_heads=2, head_dim=64),
    "granite": _decoder("GraniteForCausalLM", "GraniteConfig", num_key_value_heads=2),
}


def zoo_model(name: str):
    """(model, example inputs) of the zoo's ``name``: seeded random weights, frozen for inference; what a worker
    loads. transformers' deprecation notices are silenced in the process that loads it."""
    warnings.simplefilter("ignore")
    torch.manual_seed(0)
    model, example = ZOO[name]()
    return model.eval().requires_grad_(False), example


def main() -> None:
    from eqiforge import sweep
    from eqiforge.viz.ablation import ProgramSource
    from eqiforge.viz.zoo import ablate_zoo
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="docs/images/zoo", help="folder for zoo.md, zoo.csv and zoo.png")
    p.add_argument("--models", help=f"comma-separated, of {', '.join(ZOO)} (default: all)")
    sweep.add_arguments(p)
    args = p.parse_args()
    names = args.models.split(",") if args.models else list(ZOO)
    programs = {name: zoo_model(name) for name in names}
    started = time.perf_counter()
    results = sweep.results_file(args.out, args.resume)
    with sweep.executor_of(args) as executor:
        table = ablate_zoo(programs, progress=True, executor=executor, results_path=results,
                           sources={name: ProgramSource(zoo_model, (name,)) for name in names})
    results.unlink()
    paths = table.save(Path(args.out))
    print(table.to_markdown())
    print(f"{len(programs)} models in {time.perf_counter() - started:.0f} s; wrote "
          f"{', '.join(str(p) for p in paths.values())}")


if __name__ == "__main__":
    main()
