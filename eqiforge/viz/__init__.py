"""See and study the optimizer: growth plots, rule-set ablations, e-graph and plan drawings.

Everything here works from outside the pipeline (reports, plans, or the stages re-run) and returns
matplotlib Figures (and data) so that tests and notebooks can inspect what is drawn.
"""
from .ablate import MODES, ablate, combinations
from .egraph_drawing import draw_egraph
from .growth import plot_growth
from .plan_drawing import draw_plan
from .table import AblationTable
from .trace import trace_egraph

__all__ = ["plot_growth", "ablate", "combinations", "MODES", "AblationTable", "trace_egraph", "draw_egraph",
           "draw_plan"]
