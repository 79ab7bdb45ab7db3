"""The joint e-graph of one BERT-base layer, guided and unguided: growth plots and rule-set ablations.

The layer of bench/joint_scaling.py (``backend="triton"`` priced for the H100, default limits, validate=False),
optimized with the cost-guided kernel layer (``kernel_guide=1.5``, the default) and without it
(``kernel_guide=None``: the kernel rules run on every algebraic form). For each: the growth figure and a
leave-one-out ablation over every rule set (its table and figure), under docs/images/joint/.

    python bench/joint_figures.py            # about 3 minutes on 2 cores
"""
from __future__ import annotations

import argparse
from pathlib import Path

import torch

import joint_scaling

OUT = Path(__file__).resolve().parent.parent / "docs" / "images" / "joint"
RUNS = {"guided": 1.5, "unguided": None}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args()
    import eqiforge
    from eqiforge import viz
    args.out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    model, inputs = joint_scaling.BLOCKS[joint_scaling.DETAILED]()
    model = model.eval()
    options = dict(backend="triton", priced_device="H100", validate=False, cache=False)
    for label, factor in RUNS.items():
        with torch.no_grad():
            opt = eqiforge.optimize(model, inputs, kernel_guide=factor, measure="never", **options)
            viz.plot_growth(opt.report, args.out / f"growth_{label}.png",
                            title=f"BERT-base layer, joint e-graph ({label})")
            table = viz.ablate(model, inputs, mode="leave-one-out", name=f"BERT-base layer ({label})",
                               measure=False, kernel_guide=factor, **options)
        table.save(args.out / f"ablation_{label}")
        print(f"{label}: {opt.report.enodes} e-nodes, {opt.report.stop_reason}; tables in {args.out}", flush=True)


if __name__ == "__main__":
    main()
