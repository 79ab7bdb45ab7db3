"""The e-graph stage, the only package that imports egglog: schema and rule loading (``rulesets``),
encoding the IR (``encode``), the saturation schedule as data (``schedule``: steps, back-off, limits), the
driver that follows it in a forked child (``saturate``) with its report, and the snapshot read back into
plain Python (``snapshot``).

egglog's rayon thread pool does not survive a fork (a child whose pool had several workers waits forever
for them), so it gets one worker: set before egglog is first imported.
"""
import os
import warnings

if os.environ.get("RAYON_NUM_THREADS", "1") != "1":
    warnings.warn(f"eqiforge: RAYON_NUM_THREADS={os.environ['RAYON_NUM_THREADS']} set to 1: egglog runs in a "
                  "forked child, whose rayon pool can only have one worker", stacklevel=2)
os.environ["RAYON_NUM_THREADS"] = "1"
