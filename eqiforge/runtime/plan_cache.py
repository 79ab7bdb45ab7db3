"""Plans per input signature: the policy for programs called at changing shapes.

A plan is specialised to static shapes. A program called at a new shape (another sequence length, a decoding
step with a longer cache) gets its own plan, built on first use and kept; at most ``capacity`` are built,
and a later new signature gets none (``has_room`` says so): its caller runs the program unoptimized rather
than rebuilding plans for ever (decoding token by token would pay a capture and an optimization per token).
Both ``optimize()``'s drop-in module and the torch.compile backend use it, so both behave the same way and
say the same thing about it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Hashable

import torch

#: plans kept per program by default (each holds its generated code, not a copy of the weights)
DEFAULT_CAPACITY = 8


def signature(tensors) -> tuple:
    """What a plan is specialised to: each input tensor's shape and dtype, in order (other values as they
    are, for they were traced as constants)."""
    return tuple((tuple(t.shape), t.dtype) if isinstance(t, torch.Tensor) else t for t in tensors)


@dataclass
class PlanCache:
    """``get(key)`` returns the plan for ``key``, calling ``build(key)`` on first use, for at most ``capacity``
    keys."""

    build: Callable[[Hashable], object]
    capacity: int = DEFAULT_CAPACITY
    builds: int = 0  # plans built
    _plans: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.capacity < 1:
            raise ValueError(f"a plan cache holds at least one plan, got capacity={self.capacity}")

    def has_room(self, key: Hashable) -> bool:
        """Whether ``get(key)`` gives a plan: one is cached, or fewer than ``capacity`` were built."""
        return key in self._plans or self.builds < self.capacity

    def get(self, key: Hashable):
        if key in self._plans:
            return self._plans[key]
        if not self.has_room(key):
            raise ValueError(f"{self.capacity} plans were built already; ask has_room(key) first")
        plan = self._plans[key] = self.build(key)
        self.builds += 1
        return plan

    def __len__(self) -> int:
        return len(self._plans)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._plans

    def values(self) -> list:
        """The cached plans, in the order they were built."""
        return list(self._plans.values())

    def keys(self) -> list:
        """The cached keys, in the order they were built."""
        return list(self._plans)

    def summary(self) -> str:
        """One line for a report or a log."""
        return f"{len(self)} plan(s) cached (capacity {self.capacity}); {self.builds} built"
