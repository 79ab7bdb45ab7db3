"""The bounded plan cache behind changing shapes (runtime/plan_cache.py)."""
import pytest
import torch

from eqiforge.runtime.plan_cache import PlanCache, signature


def test_a_plan_is_built_once_per_key_and_the_least_recently_used_is_evicted():
    built = []
    cache = PlanCache(build=lambda key: built.append(key) or f"plan{key}", capacity=2)
    assert cache.get(1) == "plan1" and cache.get(2) == "plan2" and cache.get(1) == "plan1"
    assert built == [1, 2]
    cache.get(3)  # evicts 2, the least recently used
    assert cache.keys() == [1, 3] and cache.evictions == 1
    cache.get(2)
    assert built == [1, 2, 3, 2] and cache.builds == 4
    assert cache.summary() == "2 plan(s) cached (capacity 2); 4 built, 2 evicted"


def test_signature_is_shapes_and_dtypes():
    a, b = torch.randn(2, 3), torch.randn(2, 3, dtype=torch.float64)
    assert signature([a, 4]) == (((2, 3), torch.float32), 4)
    assert signature([a]) != signature([b]) and signature([a]) == signature([torch.randn(2, 3)])


def test_capacity_must_be_positive():
    with pytest.raises(ValueError, match="at least one plan"):
        PlanCache(build=str, capacity=0)
