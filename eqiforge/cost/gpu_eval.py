"""Fit GPU figures to published timings and judge them on programs and a GPU setup they never saw.

The protocol (``eqiforge cost fit-gpu``, ``eqiforge cost eval-gpu``):

- **fitted on** levels 1 and 2 (single ops, fused chains) of every GPU setup but the held-out one, eager
  times: one pooled fit over all of them (efficiencies relative to each datasheet), then each GPU's own,
  held towards the pooled figures (cost/gpu_fit.py);
- **held out**: level 3 (whole architectures) everywhere, and the H100 PCIe setup whole, which is priced
  with the H100's figures on its own datasheet (``BORROW``);
- **leave one GPU out**: the pooled fit without a GPU's times prices that GPU on its datasheet;
- **the configuration choice**: per program and GPU with several published configurations, the one the
  model predicts fastest (cost/configurations.py) against the one measured fastest: top-1 regret and
  pairwise accuracy (pairs measured more than 3% apart), before (datasheets, reference host figures) and
  after (fitted figures, host figures of compiled and graph-replayed programs fitted on levels 1-2).
"""
from __future__ import annotations

import datetime
import json
from collections import defaultdict
from pathlib import Path

import numpy as np

from . import gpu_learned
from .as_written import generic_calls
from .configurations import (
    CONFIG_REFERENCE,
    config_seconds,
    config_work,
    fit_config_figures,
)
from .devices import DEVICES
from .gpu_fit import (
    FIGURES_FILE,
    FORMAT,
    accuracy,
    apply_figures,
    fit,
    predict,
    program_terms,
)
from .published import Published

HELD_OUT_SETUP = "H100_PCIe_LambdaLabs"
TRAIN_LEVELS = (1, 2)
#: GPUs priced with another's figures on their own datasheet: the same architecture, no times of their own
BORROW = {"H100_PCIE": "H100", "H200": "H100"}
APART = 0.03  # configurations measured closer than this are a tie for pairwise accuracy


def _rows(data: Published, **where):
    return [(p, t) for p, t in data.measured(**where) if t.gpu in DEVICES]


def _terms(rows):
    return program_terms([(list(p.calls), DEVICES[t.gpu]) for p, t in rows])


def fit_all(data: Published, exclude_gpu: str | None = None) -> tuple[dict, dict[str, dict]]:
    """(pooled figures, {gpu: its figures}) fitted on the training rows (eager, TRAIN_LEVELS, not the held-out
    setup, not ``exclude_gpu``)."""
    rows = [(p, t) for p, t in _rows(data, levels=TRAIN_LEVELS) if t.setup != HELD_OUT_SETUP and t.gpu != exclude_gpu]
    pooled = fit(_terms(rows), np.array([t.seconds for _, t in rows]))
    per_gpu = {}
    for gpu in sorted({t.gpu for _, t in rows}):
        mine = [(p, t) for p, t in rows if t.gpu == gpu]
        per_gpu[gpu] = fit(_terms(mine), np.array([t.seconds for _, t in mine]), reference=pooled)
    return pooled, per_gpu


def figures_for(gpu: str, pooled: dict, per_gpu: dict) -> dict:
    """The figures a GPU is priced with: its own, its architecture's (BORROW), else the pooled ones."""
    return per_gpu.get(gpu) or per_gpu.get(BORROW.get(gpu, "")) or pooled


def eager_accuracy(data: Published, figures_of, **where) -> dict:
    """accuracy() of eager predictions for the rows ``where`` selects, each GPU priced with ``figures_of(gpu)``."""
    rows = _rows(data, **where)
    if not rows:
        return accuracy([], [])
    by_gpu = defaultdict(list)
    for i, (_, t) in enumerate(rows):
        by_gpu[t.gpu].append(i)
    predicted = np.zeros(len(rows))
    for gpu, idx in by_gpu.items():
        predicted[idx] = predict(_terms([rows[i] for i in idx]), figures_of(gpu))
    return accuracy(predicted, [t.seconds for _, t in rows])


def datasheet_figures(gpu: str) -> dict:
    """The figures that reproduce the datasheet prior (no fit): every efficiency 1, the table's host costs."""
    d = DEVICES[gpu]
    return {"launch_us": d.launch_us, "view_us": d.view_us, "program_us": 0.0, "conv_call_us": 0.0,
            "bw_elementwise": 1.0, "bw_reduction": 1.0, "bw_other": 1.0, "bw_contraction": 1.0, "bw_conv": 1.0,
            "gemm_efficiency": 1.0, "conv_efficiency": 1.0, "attention_efficiency": 1.0, "conv_transposed": 1.0,
            "conv_3d": 1.0, "conv_grouped": 1.0, "conv_strided": 1.0, "conv_winograd": 1.0, "row_gbs": float("inf")}


def choice_quality(data: Published, figures_of, config_figures_of, levels) -> dict:
    """Top-1 regret and pairwise accuracy of the predicted fastest configuration, per program and GPU."""
    groups = defaultdict(dict)
    for p, t in data.measured(configs=tuple(_configs(data)), levels=levels):
        if t.gpu in DEVICES:
            groups[(t.setup, t.problem, t.level, p.key)][t.config] = (p, t)
    regrets, agree, pairs = [], 0, 0
    for by_config in groups.values():
        if len(by_config) < 2:
            continue
        configs = sorted(by_config)
        p, t0 = next(iter(by_config.values()))
        device = apply_figures(DEVICES[t0.gpu], {**figures_of(t0.gpu), **config_figures_of(t0.gpu)}, "")
        predicted = np.array([config_seconds(list(p.calls), device, c) for c in configs])
        measured = np.array([by_config[c][1].seconds for c in configs])
        regrets.append(measured[np.argmin(predicted)] / measured.min() - 1.0)
        for i in range(len(configs)):
            for j in range(i + 1, len(configs)):
                if abs(np.log(measured[i] / measured[j])) > np.log1p(APART):
                    pairs += 1
                    agree += (predicted[i] - predicted[j]) * (measured[i] - measured[j]) > 0
    return {"programs": len(regrets), "top1_regret": float(np.mean(regrets)) if regrets else float("nan"),
            "pairwise_accuracy": agree / pairs if pairs else float("nan"), "pairs": pairs}


def _configs(data: Published) -> set[str]:
    return {t.config for t in data.timings}


def fit_configs(data: Published, figures_of) -> tuple[dict, dict[str, dict]]:
    """(pooled, {gpu: its}) host figures of compiled and graph-replayed programs (configurations'
    CONFIG_REFERENCE names), fitted on the training rows' published non-eager times: the host differs by
    machine as the eager one does (each GPU's own held towards the pooled ones; a figure a GPU's data do not
    pin, such as a graph's where only Inductor's default was published, stays pooled)."""
    rows = [(p, t) for p, t in data.measured(configs=tuple(_configs(data) - {"eager"}), levels=TRAIN_LEVELS)
            if t.gpu in DEVICES and t.setup != HELD_OUT_SETUP]
    if not rows:
        return dict(CONFIG_REFERENCE), {}
    devices = {gpu: apply_figures(DEVICES[gpu], figures_of(gpu), "") for gpu in {t.gpu for _, t in rows}}
    works = [(t.config, config_work(list(p.calls), devices[t.gpu], t.config)) for p, t in rows]
    pooled = fit_config_figures(works, [t.seconds for _, t in rows])
    per_gpu = {}
    for gpu in sorted(devices):
        mine = [i for i, (_, t) in enumerate(rows) if t.gpu == gpu]
        per_gpu[gpu] = fit_config_figures([works[i] for i in mine], [rows[i][1].seconds for i in mine], pooled)
    return pooled, per_gpu


def evaluate(data: Published) -> dict:
    """Every figure of the protocol above, as a JSON-ready dict."""
    pooled, per_gpu = fit_all(data)
    fitted = lambda gpu: figures_for(gpu, pooled, per_gpu)
    pooled_configs, config_figures = fit_configs(data, fitted)
    report = {"eager": {}, "leave_one_gpu_out": {}, "choice": {}}
    setups = sorted({(t.setup, t.gpu) for t in data.timings if t.gpu in DEVICES})
    for gpu in sorted(per_gpu):
        others, _ = fit_all(data, exclude_gpu=gpu)
        report["leave_one_gpu_out"][gpu] = eager_accuracy(data, lambda _g, f=others: f, gpus=(gpu,),
                                                          setups=tuple(s for s, g in setups if s != HELD_OUT_SETUP))
    for setup, gpu in setups:
        for name, levels in (("level 1", (1,)), ("level 2", (2,)), ("level 3", (3,)), ("levels 1-3", (1, 2, 3))):
            where = {"setups": (setup,), "levels": levels}
            report["eager"][f"{setup} {name}"] = {
                "gpu": gpu, "held_out": setup == HELD_OUT_SETUP or not set(levels) <= set(TRAIN_LEVELS),
                "datasheet": eager_accuracy(data, datasheet_figures, **where),
                "fitted": eager_accuracy(data, fitted, **where)}
    for name, levels in (("held-out level 3", (3,)), ("levels 1-2 (fitted on)", TRAIN_LEVELS)):
        report["choice"][name] = {
            "datasheet": choice_quality(data, datasheet_figures, lambda _gpu: CONFIG_REFERENCE, levels),
            "fitted": choice_quality(data, fitted, lambda gpu: figures_for(gpu, pooled_configs, config_figures),
                                     levels)}
    report["figures"] = {"pooled": pooled, "per_gpu": per_gpu, "pooled_configurations": pooled_configs,
                         "configurations": config_figures}
    report["learned"] = {gpu: learned_versus_figures(data, gpu, pooled) for gpu in sorted(per_gpu)}
    report["generic_ops"] = generic_calls([c for p in data.programs.values() for c in p.calls])
    report["not_captured"] = sorted({f"{s['problem']}: {s['reason']}" for s in data.skipped})
    return report


def learned_versus_figures(data: Published, gpu: str, pooled: dict) -> dict:
    """Cross-validated (by problem) log errors of ``gpu``'s training programs: its figures alone, and with the
    learned program-level correction (cost/gpu_learned.py), and whether the correction is better by MARGIN.
    No GPU's is today (bench/data/README.md), so the package prices with the figures alone."""
    rows = [(p, t) for p, t in _rows(data, gpus=(gpu,), levels=TRAIN_LEVELS) if t.setup != HELD_OUT_SETUP]
    errors = gpu_learned.cross_validated(lambda idx: _terms([rows[i] for i in idx]),
                                         np.array([t.seconds for _, t in rows]), [t.problem for _, t in rows], pooled)
    summary = {name: {"rms_log_error": gpu_learned.rms(e), "within_1_5x": float(np.mean(np.abs(e) <= np.log(1.5)))}
               for name, e in errors.items()}
    better = summary["learned"]["rms_log_error"] < (1 - gpu_learned.MARGIN) * summary["prior"]["rms_log_error"]
    return {**summary, "programs": len(rows), "better": better}


def figures_file(report: dict, source: dict) -> dict:
    """The shipped figures (gpu_figures.json): per GPU its figures and the held-out accuracy that labels them."""
    level3 = {k.split(" level")[0]: v["fitted"] for k, v in report["eager"].items() if k.endswith("level 3")}
    gpus = {}
    for gpu, figures in report["figures"]["per_gpu"].items():
        held = [v for k, v in level3.items() if report["eager"][f"{k} level 3"]["gpu"] == gpu and v["programs"]]
        label = "published-time fit"
        if held:
            h = held[0]
            label += f": held-out level 3 {h['median_ratio']:.2f}x, {h['within_1_5x']:.0%} within 1.5x"
        configs = figures_for(gpu, report["figures"]["pooled_configurations"], report["figures"]["configurations"])
        gpus[gpu] = {"figures": {**figures, **configs}, "label": label, "held_out_level3": held[0] if held else None}
    return {"format": FORMAT, "made": datetime.date.today().isoformat(), "source": source,
            "gpus": gpus, "pooled": report["figures"]["pooled"], "borrow": BORROW}


def write_figures(report: dict, source: dict, path: Path = FIGURES_FILE) -> Path:
    Path(path).write_text(json.dumps(figures_file(report, source), indent=1, sort_keys=True) + "\n")
    return Path(path)


def tables(report: dict) -> str:
    """The report as text tables."""
    def row(name, m):
        return (f"{name:<44} {m['programs']:>5} {m['median_ratio']:>7.2f} {m['within_1_5x']:>7.0%} "
                f"{m['within_2x']:>6.0%} {m['kendall_tau']:>6.3f}")
    head = f"{'eager, predicted/measured':<44} {'progs':>5} {'median':>7} {'<=1.5x':>7} {'<=2x':>6} {'tau':>6}"
    lines = [head, "-" * len(head)]
    for name, r in report["eager"].items():
        if r["fitted"]["programs"]:
            tag = "held out" if r["held_out"] else "fitted on"
            tag = "partly held out" if name.endswith("levels 1-3") and not name.startswith(HELD_OUT_SETUP) else tag
            lines.append(row(f"{name} ({tag}), datasheet", r["datasheet"]))
            lines.append(row(f"{name} ({tag}), fitted", r["fitted"]))
    lines += ["", "leave one GPU out (pooled fit of the others, its datasheet):", head, "-" * len(head)]
    lines += [row(gpu, m) for gpu, m in report["leave_one_gpu_out"].items()]
    lines += ["", "learned program-level correction, cross-validated by problem on levels 1-2 "
                  "(rms log error; within 1.5x):"]
    for gpu, r in report["learned"].items():
        lines.append(
            f"  {gpu:<10} figures {r['prior']['rms_log_error']:.3f}; {r['prior']['within_1_5x']:.0%}   figures + "
            f"correction {r['learned']['rms_log_error']:.3f}; {r['learned']['within_1_5x']:.0%}   "
            f"{'better' if r['better'] else f'not better by {gpu_learned.MARGIN:.0%}: the figures alone price'}")
    lines += ["", "priced as one elementwise pass, no class of their own: "
              + (", ".join(report["generic_ops"]) or "none")]
    lines += ["not captured: " + ("; ".join(report["not_captured"]) or "none")]
    lines += ["", f"{'configuration choice':<44} {'progs':>5} {'top-1 regret':>13} {'pairwise':>9} {'pairs':>6}"]
    for name, r in report["choice"].items():
        for model, m in r.items():
            lines.append(f"{name + ', ' + model:<44} {m['programs']:>5} {m['top1_regret']:>13.1%} "
                         f"{m['pairwise_accuracy']:>9.1%} {m['pairs']:>6}")
    return "\n".join(lines)
