"""Frontend: PyTorch programs -> IR graph.

- ``capture``: torch.export a module or function at example inputs, decompose to core ATen, convert.
- ``fx_to_ir``: convert an ATen-level FX graph (torch.export, aot_autograd, make_fx) whose nodes carry
  ``meta['val']``.
- ``aten``: the table of ATen overloads and the builders that map them onto IR ops; anything else becomes
  an ``Extern`` that runs in PyTorch.
"""
from .capture import Captured, capture
from .fx_to_ir import fx_to_ir

__all__ = ["Captured", "capture", "fx_to_ir"]
