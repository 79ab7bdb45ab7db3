"""The bounded plan cache behind changing shapes (runtime/plan_cache.py)."""
import pytest
import torch

from eqiforge.runtime.plan_cache import PlanCache, signature


def test_a_plan_is_built_once_per_key_and_no_more_than_capacity_are_built():
    built = []
    cache = PlanCache(build=lambda key: built.append(key) or f"plan{key}", capacity=2)
    assert cache.get(1) == "plan1" and cache.get(2) == "plan2" and cache.get(1) == "plan1"
    assert built == [1, 2] and cache.keys() == [1, 2] and 1 in cache and 3 not in cache
    assert cache.has_room(1) and not cache.has_room(3)
    with pytest.raises(ValueError, match="has_room"):
        cache.get(3)
    assert built == [1, 2] and cache.summary() == "2 plan(s) cached (capacity 2); 2 built"


def test_a_failed_build_takes_no_room():
    def build(key):
        if key == "bad":
            raise RuntimeError("no plan")
        return key
    cache = PlanCache(build=build, capacity=1)
    with pytest.raises(RuntimeError):
        cache.get("bad")
    assert cache.has_room("good") and cache.get("good") == "good" and cache.builds == 1


def test_signature_is_shapes_and_dtypes():
    a, b = torch.randn(2, 3), torch.randn(2, 3, dtype=torch.float64)
    assert signature([a, 4]) == (((2, 3), torch.float32), 4)
    assert signature([a]) != signature([b]) and signature([a]) == signature([torch.randn(2, 3)])


def test_capacity_must_be_positive():
    with pytest.raises(ValueError, match="at least one plan"):
        PlanCache(build=str, capacity=0)
