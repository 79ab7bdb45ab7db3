"""A program's inputs at other sizes than the example's, for the symbolic-shape configurations.

A generated program's sizes are literals (views, parameter widths, slices), so which dims may change is
found by trying: a *size class* is every input dim of one size n >= 2 (dims of size 0 and 1 stay
specialised, as Dynamo's do); its variants grow every dim of the class to n + 1 and 2n + 1 and shrink it to
n - 1 (n >= 3). A class is used when eager runs at least two of its variants, the first of which must grow
(the call that makes the dim symbolic). Grown positions take values of another seeded draw of the same
inputs, wrapped, so every value comes from the input's own distribution (positive inputs stay positive).
"""
from __future__ import annotations

import torch

#: size classes tried, in order of first appearance among the inputs' dims
MAX_CLASSES = 4


def size_classes(inputs) -> list[int]:
    """Input dim sizes >= 2, in order of first appearance (the first input's leading dim first)."""
    seen = []
    for x in inputs:
        for n in x.shape:
            if n >= 2 and n not in seen:
                seen.append(n)
    return seen


def resized(inputs, other, old: int, new: int) -> tuple:
    """``inputs`` with every dim of size ``old`` at size ``new``: kept positions hold ``inputs``' values,
    positions past ``old`` hold ``other``'s (the same inputs drawn with another seed), wrapped."""
    out = []
    for x, y in zip(inputs, other):
        dims = [d for d, n in enumerate(x.shape) if n == old]
        if not dims:
            out.append(x)
            continue
        index = torch.arange(new) % old
        grown = torch.zeros((), dtype=torch.bool)
        for d in dims:
            x, y = x.index_select(d, index), y.index_select(d, index)
            shape = [1] * x.dim()
            shape[d] = new
            grown = grown | (torch.arange(new) >= old).view(shape)
        out.append(torch.where(grown, y, x).contiguous())
    return tuple(out)


def variants(make_program, make_inputs) -> tuple[int | None, list[tuple[int, tuple]]]:
    """(the size class used, [(its new size, inputs at that size)...] that eager runs), or (None, []) when no
    class of the seed-1 inputs can change size."""
    inputs, other = make_inputs(1), make_inputs(2)
    for old in size_classes(inputs)[:MAX_CLASSES]:
        sizes = [old + 1, 2 * old + 1] + ([old - 1] if old >= 3 else [])
        runs = []
        for new in sizes:
            candidate = resized(inputs, other, old, new)
            try:
                with torch.no_grad():
                    make_program()(*candidate)
            except Exception:  # noqa: BLE001 - a literal size of the program rules this class out
                continue
            runs.append((new, candidate))
        if len(runs) >= 2 and runs[0][0] > old:
            return old, runs
    return None, []
