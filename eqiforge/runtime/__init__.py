"""Running optimized plans: the drop-in module that checks its inputs and calls the lowered plan."""
from .module import OptimizedModule

__all__ = ["OptimizedModule"]
