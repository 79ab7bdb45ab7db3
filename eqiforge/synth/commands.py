"""``eqiforge rules``: list the rule sets; ``rules synthesize``: find new rules; ``rules check FILE``: verify a file."""
from __future__ import annotations

import sys


def _list(_args) -> int:
    from ..egraph import rulesets
    for rs in rulesets.available().values():
        print(f"{rs.name} ({len(rs.rule_names)} rules, {rs.path.name})")
        for name in rs.rule_names:
            print(f"    {name}")
    return 0


def _synthesize(args) -> int:
    from . import run
    ops = args.ops.split(",") if args.ops else None
    without = tuple(args.without.split(",")) if args.without else ()
    from ..sweep import executor_of, results_file
    results = results_file(args.out, args.resume)
    with executor_of(args) as executor:
        out = run.synthesize(ops, args.vars, args.max_size, args.seed, args.time_limit, args.device,
                             without=without, executor=executor, results=results)
    egg, report = run.write(out, args.out)
    e = out.enumeration
    print(f"{e.terms} terms, {len(e.candidates)} candidates, {out.derivable} derivable by the shipped rules, "
          f"{len(out.kept)} kept and verified ({out.seconds:.0f} s){'; ' + out.stopped if out.stopped else ''}")
    print(f"written {egg} and {report}")
    return 0


def _check(args) -> int:
    from ..egraph.rulecheck import check_file, summary
    verdicts = check_file(args.file, args.seed)
    for v in verdicts:
        print(v.line())
    print(f"{args.file}: {summary(verdicts)}", file=sys.stderr)
    return 1 if any(v.status == "unsound" for v in verdicts) else 0


def add_commands(sub) -> None:
    from ..pipeline.options import priced_device_help
    from ..sweep import add_arguments as add_sweep_arguments
    from .terms import DEFAULT_OPS, DEFAULT_VARS
    rules = sub.add_parser("rules", help="list rule sets and their rules; synthesize new rules; check a rule file")
    rules.set_defaults(run=_list)
    verbs = rules.add_subparsers(dest="rules_command")
    s = verbs.add_parser("synthesize", help="enumerate terms, keep the verified rules the shipped ones cannot "
                                            "derive, write DIR/candidates.egg and DIR/report.md")
    s.add_argument("--ops", help=f"comma-separated op vocabulary (default {','.join(DEFAULT_OPS)})")
    s.add_argument("--vars", default=DEFAULT_VARS,
                   help=f"variables NAME:DIM,DIM (size symbols or 1) or NAME:scalar (default {DEFAULT_VARS!r})")
    s.add_argument("--max-size", type=int, default=3, help="ops per side, at most (default 3)")
    s.add_argument("--out", required=True, help="folder for candidates.egg and report.md")
    s.add_argument("--seed", type=int, default=0, help="seed of the random tensors rules are checked on (default 0)")
    s.add_argument("--time-limit", type=float, default=600.0, help="seconds (default 600): stops and writes")
    s.add_argument("--priced-device", "--device", dest="device",
                   help=priced_device_help("$EQIFORGE_DEVICE, else cpu"))
    s.add_argument("--without", help="comma-separated shipped rules to leave out (do they come back?)")
    add_sweep_arguments(s)
    s.set_defaults(run=_synthesize)
    c = verbs.add_parser("check", help="verify every rule of a rule file numerically; exit 1 on an unsound one")
    c.add_argument("file", help="a rule file (.egg)")
    c.add_argument("--seed", type=int, default=0, help="seed of the random tensors rules are checked on (default 0)")
    c.set_defaults(run=_check)
