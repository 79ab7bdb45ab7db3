"""Cost models: features per node, the analytical roofline prior, and the learned model.

A cost model has ``name`` (it appears in the plan report: which model priced the plan) and
``predict(list[NodeFeatures]) -> np.ndarray`` of seconds.
"""
from ..errors import EqiforgeError
from .devices import DEVICES, Device
from .features import NodeFeatures, constant_classes, node_features, snapshot_features
from .learned import LearnedModel, find_model
from .lookup import get_device
from .roofline import RooflinePrior
from .vector import FEATURE_NAMES, feature_vector

__all__ = ["DEVICES", "Device", "get_device", "NodeFeatures", "constant_classes", "node_features",
           "snapshot_features", "RooflinePrior", "LearnedModel", "find_model", "FEATURE_NAMES", "feature_vector",
           "get_cost_model"]

MODELS = ("roofline", "learned")


def get_cost_model(name: str = "roofline", device=None, kernels: bool = False):
    """The cost model called ``name`` for ``device``; ``kernels``: price the kernel layer (triton backend).

    ``learned`` loads the model file matching the device (see ``learned.model_paths``); where there is none
    it falls back to the roofline prior, whose name then says why: a model serves the backend it was trained
    for (a GPU's: generated kernels; the CPU's: the torch backend's native calls) and, on a CPU, the processor.
    """
    device = get_device(device)
    if name == "roofline":
        return RooflinePrior(device, kernels)
    if name == "learned":
        model, why = find_model(device, kernels)
        if model is not None:
            return model
        prior = RooflinePrior(device, kernels)
        prior.name = f"roofline prior ({prior.device.name}; {why})"
        return prior
    raise EqiforgeError(f"unknown cost model {name!r}; available: {list(MODELS)}")
