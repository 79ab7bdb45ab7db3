"""A device by name, with the figures it is priced by: the CPU's measured here (calibrate.py), a GPU's from the
table (devices.py) with the figures fitted to published timings (gpu_fit.py). It sits above all three, so the
table knows neither how a CPU is measured nor how a GPU's figures are fitted (both build on its ``Device``)."""
from __future__ import annotations

from ..errors import EqiforgeError
from . import calibrate, gpu_fit  # called through the modules: a recalibration or refit is seen at once
from .devices import DEFAULT_DEVICE, DEVICES, Device


def get_device(name: str | Device | None = None, datasheet: bool = False) -> Device:
    """A device from the table by name (case-insensitive), ``cpu`` for this machine's, the default when None.
    A GPU comes with the figures fitted to published timings where there are some for it, unless ``datasheet``."""
    if isinstance(name, Device):
        return name
    if isinstance(name, str) and name.lower() == "cpu":
        return calibrate.cpu_device()
    key = (name or DEFAULT_DEVICE).upper().replace("NVIDIA", "").replace(" ", "")
    for dev_name, dev in DEVICES.items():
        if dev_name.upper() == key:
            return dev if datasheet else gpu_fit.fitted_device(dev, gpu_fit.load_figures())
    raise EqiforgeError(f"unknown device {name!r}; known devices: {sorted(DEVICES) + ['cpu']}")
