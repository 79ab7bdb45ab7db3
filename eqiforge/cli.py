"""``eqiforge`` on the command line: optimize a program, list rule sets and examples, synthesize and check
rules; plot, ablate, draw; profile, train and evaluate the learned cost model."""
from __future__ import annotations

import argparse
import os
import sys

import torch

from .errors import EqiforgeError
from .profiling.commands import add_commands as add_cost_commands
from .synth.commands import add_commands as add_rules_commands
from .viz.commands import add_commands


def _optimize(args) -> int:
    from . import api
    from .frontend import targets
    from .egraph.saturate import Limits

    fn, inputs = targets.load_target(args.target, args.example)
    limits = Limits(iterations=args.iterations, enodes=args.enodes, seconds=args.seconds)
    rules = args.rules.split(",") if args.rules else None
    print(f"optimizing {args.example or args.target} ...", file=sys.stderr)
    with torch.no_grad():  # inference: the candidates include Inductor's compiles, which record no autograd
        opt = api.optimize(fn, inputs, rules=rules, limits=limits, extractor=args.extractor, device=args.device,
                           cost_model=args.cost_model, backend=args.backend, fold_constants=not args.no_fold,
                           assume_finite=not args.no_assume_finite, validate=not args.no_validate,
                           cache=not args.no_cache, measure=args.measure, progress=True)
    print(opt.report.summary())
    print(f"{'output check':<19}  {_check(fn, opt, inputs)}")
    if args.show_plan:
        print()
        print(opt.plan.format())
    if args.out:
        where = opt.export(args.out, inputs)
        print(f"{'written':<19}  {where}/plan.py (generated source), params.pt, meta.json, check.pt")
    return 0


def _check(fn, opt, inputs) -> str:
    """Compare the optimized module with the original on the example inputs."""
    import torch.utils._pytree as pytree
    with torch.no_grad():
        want = [t for t in pytree.tree_leaves(fn(*inputs)) if isinstance(t, torch.Tensor)]
        got = [t for t in pytree.tree_leaves(opt(*inputs)) if isinstance(t, torch.Tensor)]
    errs = [((g.double() - w.double()).norm() / (w.double().norm() + 1e-12)).item() for g, w in zip(got, want)]
    worst = max(errs, default=0.0)
    verdict = "matches eager" if worst <= 1e-4 else "DIFFERS from eager"
    return f"{verdict} (largest relative error {worst:.1e} over {len(errs)} outputs)"


def _examples(_args) -> int:
    from . import examples
    for name, factory in sorted(examples.EXAMPLES.items()):
        doc = (factory()[0].__class__.__doc__ or "").strip().splitlines()
        print(f"{name:<20} {doc[0] if doc else ''}")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="eqiforge", description="Equality-saturation optimizer for PyTorch programs")
    sub = p.add_subparsers(dest="command", required=True)
    o = sub.add_parser("optimize", help="optimize a program and print what happened")
    o.add_argument("target", nargs="?", help="path.py (Model + get_inputs) or path.py:factory")
    o.add_argument("--example", help="a built-in example instead of a file (see `eqiforge examples`)")
    o.add_argument("--rules", help="comma-separated rule sets (default: all; see `eqiforge rules`)")
    o.add_argument("--backend", default="auto", choices=["auto", "torch", "triton", "inductor"],
                   help="auto (default: torch code, or on a CPU whichever of it and Inductor's compile of it is "
                        "measured faster), torch (PyTorch ops, runs anywhere), triton (generated kernels; CUDA, or "
                        "the Triton interpreter with TRITON_INTERPRET=1) or inductor (the plan compiled by "
                        "torch.compile's Inductor)")
    o.add_argument("--out", help="with --backend triton: write the plan (plan.py, params.pt, meta.json) here")
    o.add_argument("--extractor", default="auto", choices=["auto", "greedy", "ilp"],
                   help="auto (default): exact ILP on e-graphs up to 20k e-nodes, greedy beyond")
    o.add_argument("--device", default=None, help="device the cost model prices for (default H100)")
    o.add_argument("--cost-model", default="roofline", choices=["roofline", "learned"],
                   help="roofline (default) or learned (the model in bench/data/<device>/; the report names "
                        "the prior if there is none)")
    o.add_argument("--iterations", type=int, default=10)
    o.add_argument("--enodes", type=int, default=50_000)
    o.add_argument("--seconds", type=float, default=8.0)
    o.add_argument("--no-fold", action="store_true", help="do not precompute parameter-only expressions")
    o.add_argument("--no-assume-finite", action="store_true",
                   help="leave out rules exact for finite values only: NaN/inf as in eager (docs/numerics.md)")
    o.add_argument("--no-validate", action="store_true", help="skip the plan check against the captured program")
    o.add_argument("--no-cache", action="store_true",
                   help="saturate and extract again, even where EqiForge's disk cache holds the answer")
    o.add_argument("--measure", default=os.environ.get("EQIFORGE_MEASURE", "always"),
                   choices=["always", "auto", "never"],
                   help="time the program and the plan on this machine and run the faster (always: the command's "
                        "default, else $EQIFORGE_MEASURE), only where the prediction does not decide (auto, "
                        "optimize()'s default), or not")
    o.add_argument("--show-plan", action="store_true", help="print the chosen program")
    o.set_defaults(run=_optimize)
    add_rules_commands(sub)  # rules [synthesize|check]
    sub.add_parser("examples", help="list built-in examples").set_defaults(run=_examples)
    add_commands(sub)  # growth, ablate, draw
    add_cost_commands(sub)  # cost profile|train|eval
    return p


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.run(args)
    except EqiforgeError as err:
        print(f"eqiforge: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
