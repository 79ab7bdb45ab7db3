"""The ``eqiforge growth``, ``eqiforge ablate`` and ``eqiforge draw`` sub-commands.

Registered by ``eqiforge.cli``; the heavy imports (torch, matplotlib, egglog) happen when a command runs,
so listing rules or examples stays fast.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def add_commands(sub) -> None:
    """Add the three sub-commands to ``sub`` (the CLI's sub-parsers)."""
    from ..sweep.cli import add_arguments as sweep_arguments
    g = _program_parser(sub, "growth", "plot how the e-graph grew during saturation (PNG or SVG)")
    g.add_argument("--out", required=True, help="picture to write: growth.png or growth.svg")
    g.set_defaults(run=_growth)
    a = _program_parser(sub, "ablate", "optimize over rule-set combinations; write a table, CSV and chart (with "
                                       "--zoo, over programs: a heatmap of each rule set's loss)")
    a.add_argument("--zoo", help="ablate every program of a zoo leave-one-out instead of one program: 'examples' "
                                 "(the built-in examples) or a folder of program files; writes zoo.md, zoo.csv and "
                                 "zoo.png (programs x rule sets)")
    a.add_argument("--mode", default="leave-one-out", choices=("all", "leave-one-out", "each", "subsets"),
                   help="all: every set together; leave-one-out (default): all, then all but one for each set; "
                        "each: none, then each set alone; subsets: all 2^n subsets (n <= 6)")
    a.add_argument("--out", required=True, help="folder for ablation.md, ablation.csv and ablation.png (and, while "
                                                "it runs, sweep.jsonl: the runs done, from which --resume goes on)")
    a.add_argument("--time", action="store_true", default=None,
                   help="also time each optimized module, one at a time per machine (median of --repeats calls); "
                        "default: only where CUDA is available")
    a.add_argument("--repeats", type=int, default=20, help="timed calls per combination with --time")
    sweep_arguments(a)
    a.set_defaults(run=_ablate)
    d = _program_parser(sub, "draw", "draw the e-graph (extracted e-nodes highlighted) or the chosen plan")
    d.add_argument("--what", default="egraph", choices=["egraph", "plan"], help="egraph (default) or plan")
    d.add_argument("--out", required=True, help="picture to write: .png or .svg")
    d.add_argument("--max-nodes", type=int, default=None,
                   help="draw a summary beyond this many nodes (default: 150 e-nodes, 80 plan nodes)")
    d.set_defaults(run=_draw)


def _program_parser(sub, name: str, help_text: str) -> argparse.ArgumentParser:
    """A sub-parser taking a program (file or --example) and the flags of ``eqiforge optimize`` that change what
    is optimized (rule sets, limits, backend, priced device, extractor, cost model)."""
    from ..examples import add_arguments as add_program_arguments
    from ..pipeline.options import add_arguments
    p = sub.add_parser(name, help=help_text, description=help_text)
    add_program_arguments(p)
    add_arguments(p, search_only=True, backend="torch")
    return p


def _program(args):
    """(callable, example inputs, display name, optimize options) from the common arguments."""
    from ..frontend import targets
    from ..pipeline.options import from_arguments
    fn, inputs = targets.load_target(args.target, args.example)
    name = args.example or Path(args.target.partition(":")[0]).name
    options = from_arguments(args)
    options.pop("rules", None)  # each command passes _rules(args) itself
    return fn, inputs, name, options


def _rules(args):
    return args.rules.split(",") if args.rules else None


def _growth(args) -> int:
    from .. import api
    from .figures import check_path
    from .growth import plot_growth
    out = check_path(args.out)  # before the work, not after
    fn, inputs, name, options = _program(args)
    opt = api.optimize(fn, inputs, rules=_rules(args), progress=True, **options)
    plot_growth(opt.report, out, title=name)
    r = opt.report
    print(f"wrote {out}: {r.enodes} e-nodes, {r.eclasses} e-classes after {r.iterations} iterations; "
          f"stopped because {r.stop_reason}")
    return 0


def _ablate(args) -> int:
    """One program's table, or a zoo's, from one sweep on the executor the flags ask for."""
    from .. import sweep
    started = time.perf_counter()
    results = sweep.results_file(args.out, args.resume)
    with sweep.executor_of(args) as executor:
        table, what = (_zoo_table if args.zoo else _program_table)(args, executor, results)
    results.unlink()  # the table is written: nothing left to resume
    paths = table.save(args.out)
    print(table.to_markdown())
    print(f"{what} in {time.perf_counter() - started:.1f} s; wrote {', '.join(str(p) for p in paths.values())}",
          file=sys.stderr)
    return 0


def _program_table(args, executor, results):
    from ..frontend import targets
    from .ablation import ProgramSource, ablate
    fn, inputs, name, options = _program(args)
    path, colon, factory = (args.target or "").partition(":")
    target = f"{Path(path).resolve()}{colon}{factory}" if path else None  # workers may start elsewhere
    table = ablate(fn, inputs, rules=_rules(args), mode=args.mode, measure=args.time, repeats=args.repeats,
                   progress=not args.quiet, name=name, executor=executor, results_path=results,
                   source=ProgramSource(targets.load_target, (target, args.example)), **options)
    return table, f"{len(table.rows)} runs"


def _zoo_table(args, executor, results):
    from ..frontend.targets import load_zoo
    from ..pipeline.options import from_arguments
    from .zoo import ablate_zoo, zoo_sources
    options = from_arguments(args)
    options.pop("rules", None)
    programs = load_zoo(args.zoo)
    table = ablate_zoo(programs, _rules(args), progress=not args.quiet, executor=executor, results_path=results,
                       sources=zoo_sources(args.zoo, programs), **options)
    return table, f"{len(table.loss)} programs"


def _draw(args) -> int:
    from .. import api
    from .egraph_drawing import draw_egraph
    from .figures import check_path
    from .plan_drawing import draw_plan
    from .trace import trace_egraph
    out = check_path(args.out)
    fn, inputs, name, options = _program(args)
    limit = {} if args.max_nodes is None else {"max_nodes": args.max_nodes}
    if args.what == "egraph":
        drawing = draw_egraph(trace_egraph(fn, inputs, rules=_rules(args), **options), out, title=name, **limit)
    else:
        plan = api.optimize(fn, inputs, rules=_rules(args), **options).plan
        drawing = draw_plan(plan, out, title=name, **limit)
    if drawing.summarised:
        print(f"note: {drawing.message}")
    print(f"wrote {out}")
    return 0
