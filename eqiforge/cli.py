"""``eqiforge`` on the command line: optimize a program, list rule sets and examples, synthesize and check
rules; plot, ablate, draw; profile, train and evaluate the learned cost model; fuzz; see and clear the cache.
The settings' flags are pipeline/options.py's (one meaning each, in every subcommand)."""
from __future__ import annotations

import argparse
import sys
import warnings

import torch

from .errors import EqiforgeError
from .profiling.commands import add_commands as add_cost_commands
from .synth.commands import add_commands as add_rules_commands
from .viz.commands import add_commands


def _optimize(args) -> int:
    import json

    from . import __version__, api
    from .frontend import targets
    from .pipeline.options import from_arguments

    fn, inputs = targets.load_target(args.target, args.example)
    print(f"optimizing {args.example or args.target} ...", file=sys.stderr)
    with torch.no_grad():  # inference: the candidates include Inductor's compiles, which record no autograd
        opt = api.optimize(fn, inputs, progress=not (args.json or args.quiet), **from_arguments(args))
    check = _check(fn, opt, inputs)
    where = opt.export(args.out, inputs) if args.out else None
    if args.json:
        print(json.dumps({"program": args.example or args.target, "eqiforge": __version__, "torch": torch.__version__,
                          "output_check": check, "report": opt.report.as_dict(),
                          "plan": opt.plan.format() if args.show_plan else None,
                          "written": str(where) if where else None}, indent=2))
        return 0
    print(opt.report.summary())
    print(f"{'output check':<19}  {check}")
    if args.show_plan:
        print()
        print(opt.plan.format())
    if where:
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
    from . import __version__
    from .caches import add_commands as add_cache_commands
    from .examples import add_arguments as add_program_arguments
    from .fuzz.__main__ import add_commands as add_fuzz_commands
    from .pipeline.options import add_arguments

    p = argparse.ArgumentParser(prog="eqiforge", description="Equality-saturation optimizer for PyTorch programs")
    p.add_argument("--version", action="version", version=f"eqiforge {__version__} (torch {torch.__version__})")
    loud = p.add_mutually_exclusive_group()
    loud.add_argument("-v", "--verbose", action="count", default=0,
                      help="say more on stderr: -v each stage's start and end and each measured decision, -vv "
                           "debugging detail")
    loud.add_argument("-q", "--quiet", action="store_true", help="errors only on stderr (no progress, no warnings)")
    sub = p.add_subparsers(dest="command", required=True)
    o = sub.add_parser("optimize", help="optimize a program and print what happened")
    add_program_arguments(o)
    add_arguments(o)
    o.add_argument("--out", help="write the plan here: plan.py (its source), params.pt, meta.json, check.pt "
                                 "(every backend)")
    o.add_argument("--show-plan", action="store_true", help="print the chosen program")
    o.add_argument("--json", action="store_true",
                   help="print the report as JSON (predicted and measured times, what runs and why, seconds per "
                        "stage, e-graph sizes, the plan check) instead of the table: attach it to a bug report")
    o.set_defaults(run=_optimize)
    add_rules_commands(sub)  # rules [synthesize|check]
    sub.add_parser("examples", help="list built-in examples").set_defaults(run=_examples)
    add_commands(sub)  # growth, ablate, draw
    add_cost_commands(sub)  # cost profile|gpu|train|eval
    add_fuzz_commands(sub)  # fuzz
    add_cache_commands(sub)  # cache info|clear
    return p


def _logging(verbose: int, quiet: bool) -> None:
    """The ``eqiforge`` logger's messages on stderr at the level the flags ask for (one handler, this call's)."""
    import logging
    log = logging.getLogger("eqiforge")
    for handler in [h for h in log.handlers if getattr(h, "eqiforge_cli", False)]:
        log.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("eqiforge: %(message)s"))
    handler.eqiforge_cli = True
    log.addHandler(handler)
    log.setLevel(logging.ERROR if quiet else logging.DEBUG if verbose > 1 else logging.INFO if verbose else
                 logging.WARNING)


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    _logging(args.verbose, args.quiet)
    try:
        with warnings.catch_warnings():
            if args.quiet:  # errors only
                warnings.simplefilter("ignore")
            return args.run(args)
    except EqiforgeError as err:
        print(f"eqiforge: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
