"""EqiForge: an equality-saturation optimizer for PyTorch programs.

    opt = eqiforge.optimize(model, example_inputs)     # drop-in callable
    opt.report, opt.plan                               # what happened, what runs
    torch.compile(model, backend="eqiforge")           # as a torch.compile backend

The public names load on first use, so that parts which need no optimizer (``eqiforge.examples``, the
profiling and GPU-bench code) import on machines without egglog.
"""
import importlib

__version__ = "0.1.0"  # the one place the version is written: pyproject.toml reads it from here

_PUBLIC = {"optimize": "api", "Options": "api", "Limits": "egraph.saturate", "EqiforgeError": "errors",
           "Plan": "lower.plan", "Report": "pipeline.report"}
__all__ = list(_PUBLIC)


def __getattr__(name):
    if name in _PUBLIC:
        return getattr(importlib.import_module(f".{_PUBLIC[name]}", __name__), name)
    raise AttributeError(f"module 'eqiforge' has no attribute {name!r}")
