"""The one exception type users see: every failure names its cause in EqiForge's words."""


class EqiforgeError(Exception):
    """A clear, actionable EqiForge error (bad input, bad rule file, e-graph failure, ...)."""
