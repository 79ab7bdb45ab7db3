"""``eqiforge cost profile|train|eval``: collect records on a GPU (or the CPU), fit the learned model, report its
decisions.

Records live in ``bench/data/<device>/``; the model in the package, ``eqiforge/cost/models/<device>/model.npz``
(``learned.shipped_model_file``), where ``--cost-model learned`` finds it and a wheel ships it.
"""
from __future__ import annotations

import copy
import json
import os
import sys
from pathlib import Path

from ..errors import EqiforgeError
from .device import profile_here, saved_model, settings_of

NO_CUDA = ("eqiforge cost profile: no CUDA device here, nothing measured (run it on a GPU machine; "
           "see bench/data/README.md)")


def _profile(args) -> int:
    if args.cluster or args.address or os.environ.get("EQIFORGE_CLUSTER"):
        from .fleet import profile_fleet
        return profile_fleet(args)
    measured = profile_here(settings_of(args), args.out)
    if measured is None:
        print(NO_CUDA, file=sys.stderr)
        return 0
    run, out, _ = measured
    print(f"measured {run.measured}, failed {run.failed}, already present {run.skipped}; stopped: {run.stop}; "
          f"records in {out}")
    return 0


def _train(args) -> int:
    from ..cost import learned
    from ..cost.dataset import read_records
    from ..cost.plans import split_programs
    from ..cost.train import train_model
    records = read_records(args.data)
    model = train_model(records, args.held_out, args.seed, args.machine, epochs=args.epochs)
    if args.plans:
        train, test = split_programs(_plan_groups(args.plans, model.machine), args.held_out, args.seed)
        model.fit_plans(train, {"held_out_programs": len(test), "split_seed": args.seed})
    where = model.save(args.out or learned.shipped_model_file(model.device))
    print(f"{model.name}: written to {where}")
    return 0


def _eval(args) -> int:
    from ..cost import learned, plans
    from ..cost.dataset import read_records
    from ..cost.metrics import table
    from ..cost.roofline import RooflinePrior
    from ..cost.train import evaluate_models, records_device
    records = read_records(args.data)
    model = learned.LearnedModel.load(args.model) if args.model else saved_model(records_device(records))
    bare = copy.deepcopy(model)  # kernels as profiled: the MLPs on the prior they were trained against
    bare.header.update(plan_figures={}, kernel_corrections=True)
    bare.header["training"].pop("plans", None)
    print(f"held-out shapes of {args.data} ({model.device.name}; the model's kernel MLPs):")
    print(table(evaluate_models(records, [bare], args.held_out, args.seed, args.machine or model.machine)))
    if args.plans:
        groups = _plan_groups(args.plans, args.machine or model.machine)
        prior = RooflinePrior(model.device, kernels=model.header.get("kernels", True))
        figures_only = copy.deepcopy(bare)
        figures_only.header["kernel_corrections"] = False
        print(f"\nprograms of {args.plans}: each program's measured plans, ranked by the sum of their prices; plan "
              f"figures fitted on {args.folds - 1} folds of programs and tested on the one left out, "
              "every fold in turn")
        print(plans.table({
            prior.name: plans.plan_metrics(groups, prior),
            "learned model, kernel MLPs only": plans.plan_metrics(groups, bare),
            f"plan figures, MLPs off ({args.folds}-fold)":
                plans.cross_validated(figures_only, groups, args.folds, args.seed, fit=figures_only.fit_figures),
            f"learned model: plan figures, MLPs if they rank ({args.folds}-fold)":
                plans.cross_validated(bare, groups, args.folds, args.seed)}))
    return 0


def _plan_groups(path, machine: str | None) -> list:
    from ..cost import plans
    from ..cost.dataset import read_records
    groups = plans.plan_groups(read_records(path), machine)
    if not groups:
        of = f" on the CPU {machine!r}" if machine else ""
        raise EqiforgeError(f"{path}: no measured choice with two plans or more{of} (records written by "
                            "`measure=\"always\"` optimizations; see docs/usage.md#measured-choice)")
    return groups


def _calibrate(args) -> int:
    from ..cost.calibrate import cache_path, cpu_device
    dev = cpu_device(remeasure=True)
    rates = ", ".join(f"{d} {t * 1e3:.1f}" for d, t in dev.peak_tflops.items())
    print(f"cpu ({dev.sms} threads): matmul GFLOP/s {rates}; elementwise {dev.vector_tflops * 1e3:.1f} GFLOP/s; "
          f"memory {dev.mem_bw_gbs:.1f} GB/s; a call {dev.launch_us:.2f} us, a view {dev.view_us:.2f} us")
    print(f"cached in {cache_path()}")
    return 0


def _gpu(args) -> int:
    """Fit GPU figures to published timings and report them on held-out programs and a held-out GPU setup."""
    from ..cost import gpu_eval
    from ..cost.published import DATASET, load_published
    args.data = args.data or DATASET
    data = load_published(args.data)
    report = gpu_eval.evaluate(data)
    print(f"{args.data}: {len(data.programs)} programs captured, {len(data.skipped)} not, "
          f"{len(data.timings)} published times (GPUs: {', '.join(data.gpus())})\n")
    print(gpu_eval.tables(report))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    if args.write:
        print(f"\nfigures written to {gpu_eval.write_figures(report, data.source)}")
    return 0


def add_commands(sub) -> None:
    from ..sweep.cli import add_cluster_arguments
    cost = sub.add_parser("cost", help="profile kernels, train and evaluate the learned cost model")
    verbs = cost.add_subparsers(dest="cost_command", required=True)
    p = verbs.add_parser("profile", help="measure kernels on this CUDA device (exits 0 with a note without one), "
                                         "or with --device cpu the torch backend's native calls on this CPU")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="what to profile (default cuda)")
    p.add_argument("--out", help="records directory (default bench/data/<device>); with --cluster, the folder of "
                                 "one per device (default bench/data)")
    p.add_argument("--budget", type=float, default=600.0, help="seconds to spend measuring (default 600)")
    p.add_argument("--records", type=int, default=None, help="stop after this many new records")
    p.add_argument("--seed", type=int, default=0, help="seed of the shapes drawn (default 0)")
    p.add_argument("--active", action="store_true",
                   help="measure where the saved model is unsure or predicts the best (needs a trained model)")
    p.add_argument("--pool", type=int, default=2000, help="--active: candidate groups to choose from")
    add_cluster_arguments(p)  # ray: every node profiles its own device, into one dataset
    p.set_defaults(run=_profile)
    g = verbs.add_parser("gpu", help="fit GPU figures to published timings (KernelBench's), judged on held-out "
                                     "programs (level 3) and a held-out GPU setup (H100 PCIe)")
    g.add_argument("--data", help="published timings (default bench/data/gpu/kernelbench.json.gz)")
    g.add_argument("--json-out", help="also write the whole report as JSON to this file")
    g.add_argument("--write", action="store_true", help="write the fitted figures to the package's gpu_figures.json")
    g.set_defaults(run=_gpu)
    c = verbs.add_parser("calibrate", help="measure this CPU for the cost model again (cached per machine)")
    c.set_defaults(run=_calibrate)
    for verb, run, about in (("train", _train, "fit the learned model on the training shapes"),
                             ("eval", _eval, "top-1/top-5 slowdown, Kendall tau and MAPE on held-out shapes")):
        v = verbs.add_parser(verb, help=about)
        v.add_argument("--data", required=True, help="a records file or a directory of *.jsonl")
        v.add_argument("--held-out", type=float, default=0.25, help="fraction of shapes held out (default 0.25)")
        v.add_argument("--seed", type=int, default=0, help="shape-split and training seed")
        v.add_argument("--machine", help="CPU records: the processor model whose records to use (default this "
                                         "one's; a model serves the CPU it was trained on)")
        v.add_argument("--plans", help="measured-choice records (a records.jsonl or a directory): fit the plan "
                                       "figures on their training programs (train), rank every program's plans "
                                       "with figures fitted on the other folds (eval)")
        if verb == "train":
            v.add_argument("--epochs", type=int, default=400, help="training epochs per member (default 400)")
            v.add_argument("--out", help="model file (default the package's, which --cost-model learned uses "
                                         "and a wheel ships: eqiforge/cost/models/<device>/model.npz)")
        else:
            v.add_argument("--model", help="model file (default the one --cost-model learned uses)")
            v.add_argument("--folds", type=int, default=5, help="--plans: folds of programs (default 5)")
        v.set_defaults(run=run)


def main(argv=None) -> int:
    """``python -m eqiforge.profiling profile|train|eval ...``: the cost commands without the rest of the CLI
    (whose other commands import egglog, which a GPU machine may lack)."""
    import argparse
    parser = argparse.ArgumentParser(prog="python -m eqiforge.profiling")
    add_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["cost", *(argv if argv is not None else sys.argv[1:])])
    try:
        return args.run(args)
    except EqiforgeError as err:
        print(f"eqiforge: error: {err}", file=sys.stderr)
        return 2
