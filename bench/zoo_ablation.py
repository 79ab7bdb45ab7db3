"""Which rule sets matter across a zoo of small Hugging Face models (random weights, no downloads): each model
ablated leave-one-out (``eqiforge.viz.zoo.ablate_zoo``), predicted plan times, inference.

    python bench/zoo_ablation.py --out docs/images/zoo

writes zoo.md, zoo.csv and zoo.png (programs x rule sets: the predicted time without each set over the time
with all) into ``--out`` and prints the table. The models are bench/hf_models.py's six and six more decoder
families at the same sizes (batch 2, sequence 128, hidden 256, 4 layers, 4 heads).
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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="docs/images/zoo", help="folder for zoo.md, zoo.csv and zoo.png")
    p.add_argument("--models", help=f"comma-separated, of {', '.join(ZOO)} (default: all)")
    p.add_argument("--jobs", type=int, default=2, help="worker processes per model (default 2)")
    args = p.parse_args()
    from eqiforge.viz.zoo import ablate_zoo
    names = args.models.split(",") if args.models else list(ZOO)
    programs = {}
    for name in names:
        torch.manual_seed(0)
        model, example = ZOO[name]()
        programs[name] = (model.eval(), example)
    started = time.perf_counter()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # transformers' deprecation notices
        table = ablate_zoo(programs, jobs=args.jobs, progress=True)
    paths = table.save(Path(args.out))
    print(table.to_markdown())
    print(f"{len(programs)} models in {time.perf_counter() - started:.0f} s; wrote "
          f"{', '.join(str(p) for p in paths.values())}")


if __name__ == "__main__":
    main()
