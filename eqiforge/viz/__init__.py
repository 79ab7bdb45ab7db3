"""See and study the optimizer: growth plots, rule-set ablations, e-graph and plan drawings.

Everything here works from outside the pipeline (reports, plans, or the stages re-run) and returns
matplotlib Figures (and data) so that tests and notebooks can inspect what is drawn. The names below are
imported on first use, so the command line registers its subcommands without the pipeline's imports.
"""
import importlib

_PUBLIC = {"plot_growth": "growth", "ablate": "ablation", "combinations": "ablation", "MODES": "ablation",
           "AblationTable": "table", "trace_egraph": "trace", "draw_egraph": "egraph_drawing",
           "draw_plan": "plan_drawing"}
__all__ = list(_PUBLIC)


def __getattr__(name: str):
    if name in _PUBLIC:
        return getattr(importlib.import_module(f".{_PUBLIC[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
