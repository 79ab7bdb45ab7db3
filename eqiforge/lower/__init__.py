"""Lowering: the extracted e-nodes become a Plan, and a Plan becomes runnable code (the torch backend)."""
