"""EqiForge: an equality-saturation optimizer for PyTorch programs.

    opt = eqiforge.optimize(model, example_inputs)     # drop-in callable
    opt.report, opt.plan                               # what happened, what runs
    torch.compile(model, backend="eqiforge")           # as a torch.compile backend
"""
from .api import Options, optimize
from .egraph.saturate import Limits
from .errors import EqiforgeError
from .lower.plan import Plan
from .report import Report

__all__ = ["optimize", "Options", "Limits", "EqiforgeError", "Plan", "Report"]
