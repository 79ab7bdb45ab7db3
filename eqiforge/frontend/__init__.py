"""Frontend: PyTorch programs -> IR graph.

- ``capture``: torch.export a module or function at example inputs, decompose to core ATen, convert.
- ``fx_to_ir``: convert an ATen-level FX graph (torch.export, aot_autograd, make_fx) whose nodes carry
  ``meta['val']``.
- ``aten``: the table of ATen overloads and the builders that map them onto IR ops; anything else becomes
  an ``Extern`` that runs in PyTorch.
- ``masks``: constant structured masks (causal, diagonal, triangular), recognised by value and stated as facts.
- ``coverage``: the op coverage table, which torch calls with algebraic content the IR sees into (docs/ops.md).
"""
from .capture import Captured, capture, capture_symbolic, decomposition_table
from .fx_to_ir import fx_to_ir
from .masks import mark_structured_masks

__all__ = ["Captured", "capture", "capture_symbolic", "decomposition_table", "fx_to_ir", "mark_structured_masks"]
