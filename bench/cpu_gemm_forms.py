"""What the algebra could change in a transformer layer's projections on this CPU, measured: the forms
EqiForge's rules can choose between for ``x @ W.T + b`` with the weights as constants (inference).

- **merged projections**: Q, K and V (or gate and up) as one GEMM over the concatenated weights, split after
  (``matmul-merge-shared-left``), against the separate GEMMs the model writes;
- **weight layout**: the weight read as the transposed view nn.Linear stores (``W.T``), against a copy laid
  out ``[K, N]`` contiguous (what folding a transpose would store).

Shapes are those of ``bench/hf_models.py`` (batch 2 x 128 tokens, hidden 256, GQA with 2 of 4 heads for K/V,
intermediate 1024; ViT's 2 x 65 tokens). Timing is ``measure.time_round_robin`` (interleaved, shuffled);
the speed-up is the median of per-round ratios. Writes ``bench/results/cpu_gemm_forms.md``.

    python bench/cpu_gemm_forms.py [--repeats 300]
"""
from __future__ import annotations

import argparse
import datetime
import statistics
from pathlib import Path

import torch

from measure import provenance, steady_allocator, time_round_robin

OUT = Path(__file__).resolve().parent / "results" / "cpu_gemm_forms.md"
#: (what, rows, input width, output widths of the projections that read the same input)
CASES = [
    ("Q, K, V (multi-head)", 256, 256, (256, 256, 256)),
    ("Q, K, V (grouped-query)", 256, 256, (256, 128, 128)),
    ("gate, up (SwiGLU)", 256, 256, (1024, 1024)),
    ("Q, K, V (ViT, 2 x 65 tokens)", 130, 256, (256, 256, 256)),
]


def _paired(samples: dict, base: str, new: str) -> float:
    return statistics.median(b / n for b, n in zip(samples[base], samples[new]))


def merged_vs_separate(rows: int, width: int, outs: tuple, repeats: int) -> dict:
    """Median microseconds of the separate and merged forms, and the merged form's speed-up."""
    gen = torch.Generator().manual_seed(0)
    weights = [torch.randn(n, width, generator=gen) for n in outs]
    biases = [torch.randn(n, generator=gen) for n in outs]
    merged_w, merged_b = torch.cat(weights), torch.cat(biases)  # folded once: weights are constants

    def separate(x):
        return [torch.addmm(b, x, w.t()) for w, b in zip(weights, biases)]

    def merged(x):
        return torch.addmm(merged_b, x, merged_w.t()).split(list(outs), -1)
    inputs = [(torch.randn(rows, width, generator=gen),) for _ in range(4)]
    samples = time_round_robin({"separate": separate, "merged": merged}, inputs, repeats)
    return {"separate": statistics.median(samples["separate"]) * 1e6,
            "merged": statistics.median(samples["merged"]) * 1e6, "speedup": _paired(samples, "separate", "merged")}


def layouts(rows: int, width: int, out: int, repeats: int) -> dict:
    """Median microseconds with the weight as a transposed view and laid out [K, N], and the latter's speed-up."""
    gen = torch.Generator().manual_seed(1)
    w, b = torch.randn(out, width, generator=gen), torch.randn(out, generator=gen)
    laid_out = w.t().contiguous()

    def view(x):
        return torch.addmm(b, x, w.t())

    def contiguous(x):
        return torch.addmm(b, x, laid_out)
    inputs = [(torch.randn(rows, width, generator=gen),) for _ in range(4)]
    samples = time_round_robin({"view": view, "contiguous": contiguous}, inputs, repeats)
    return {"view": statistics.median(samples["view"]) * 1e6,
            "contiguous": statistics.median(samples["contiguous"]) * 1e6,
            "speedup": _paired(samples, "view", "contiguous")}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=300)
    args = p.parse_args()
    allocator = steady_allocator()
    lines = [f"# GEMM forms on the CPU ({datetime.date.today()}, torch {torch.__version__}, "
             f"{torch.get_num_threads()} threads, {allocator})", "",
             f"`python bench/cpu_gemm_forms.py --repeats {args.repeats}`: medians in microseconds; speed-up = median "
             f"of per-round ratios (> 1: the rewritten form is faster).", "",
             "## Merged projections (one GEMM over concatenated weights, split after)", "",
             "| projections | rows x width -> outputs | separate | merged | speed-up |", "|---|---|---|---|---|"]
    for what, rows, width, outs in CASES:
        r = merged_vs_separate(rows, width, outs, args.repeats)
        lines.append(f"| {what} | {rows} x {width} -> {'+'.join(map(str, outs))} | {r['separate']:.0f} | "
                     f"{r['merged']:.0f} | {r['speedup']:.3f} |")
        print(lines[-1], flush=True)
    lines += ["", "## Weight layout (nn.Linear's transposed view vs [K, N] contiguous)", "",
              "| GEMM | view | contiguous | speed-up |", "|---|---|---|---|"]
    for rows, width, out in sorted({(r, w, n) for _, r, w, outs in CASES for n in outs} | {(256, 1024, 256)}):
        r = layouts(rows, width, out, args.repeats)
        lines.append(f"| {rows} x {width} -> {out} | {r['view']:.0f} | {r['contiguous']:.0f} | {r['speedup']:.3f} |")
        print(lines[-1], flush=True)
    OUT.write_text("\n".join([*lines, "", provenance()]) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
