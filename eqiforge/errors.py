"""The one exception type users see: every failure names its cause in EqiForge's words."""


class EqiforgeError(Exception):
    """A clear, actionable EqiForge error (bad input, bad rule file, e-graph failure, ...)."""


class NoPlanForEverySize(EqiforgeError):
    """The plan extracted at the size hints does not hold at other values of the symbolic dims (or cannot read
    its sizes from its inputs): the call gets a plan for its own sizes instead."""
