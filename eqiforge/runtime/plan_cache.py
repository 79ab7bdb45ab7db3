"""Plans per input signature: the policy for programs called at changing shapes.

A plan is specialised to static shapes. A program called at a new shape (another sequence length, a decoding
step with a longer cache) gets its own plan, built on first use and kept in a bounded cache; the least
recently used plan is dropped when the cache is full. Both ``optimize()``'s drop-in module and the
torch.compile backend use it, so both behave the same way and say the same thing about it.
"""
from __future__ import annotations

from collections import OrderedDict
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
    """``get(key)`` returns the plan for ``key``, calling ``build(key)`` on first use."""

    build: Callable[[Hashable], object]
    capacity: int = DEFAULT_CAPACITY
    builds: int = 0  # plans built (a key built again after eviction counts twice)
    evictions: int = 0
    _plans: OrderedDict = field(default_factory=OrderedDict)

    def __post_init__(self):
        if self.capacity < 1:
            raise ValueError(f"a plan cache holds at least one plan, got capacity={self.capacity}")

    def get(self, key: Hashable):
        if key in self._plans:
            self._plans.move_to_end(key)
            return self._plans[key]
        plan = self.build(key)
        self.builds += 1
        self._plans[key] = plan
        if len(self._plans) > self.capacity:
            self._plans.popitem(last=False)
            self.evictions += 1
        return plan

    def __len__(self) -> int:
        return len(self._plans)

    def keys(self) -> list:
        """The cached keys, least recently used first."""
        return list(self._plans)

    def summary(self) -> str:
        """One line for a report or a log."""
        return (f"{len(self)} plan(s) cached (capacity {self.capacity}); {self.builds} built, "
                f"{self.evictions} evicted")
