"""The e-graph stage, the only package that imports egglog: schema and rule loading, encoding the IR,
the saturation driver with its limits and report, and the snapshot read back into plain Python."""
