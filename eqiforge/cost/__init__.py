"""Cost models: features per node, the analytical roofline prior, and (later) the learned model.

A cost model has ``name`` and ``predict(list[NodeFeatures]) -> np.ndarray`` of seconds.
"""
from ..errors import EqiforgeError
from .devices import DEVICES, Device, get_device
from .features import NodeFeatures, constant_classes, node_features, snapshot_features
from .roofline import RooflinePrior

__all__ = ["DEVICES", "Device", "get_device", "NodeFeatures", "constant_classes", "node_features",
           "snapshot_features", "RooflinePrior", "get_cost_model"]


def get_cost_model(name: str = "roofline", device=None, kernels: bool = False):
    """The cost model called ``name`` for ``device``; ``kernels``: price the kernel layer (triton backend)."""
    if name == "roofline":
        return RooflinePrior(device, kernels)
    raise EqiforgeError(f"unknown cost model {name!r}; available: ['roofline'] (the learned model needs "
                        "profiling data, see issue 5)")
