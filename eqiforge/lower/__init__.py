"""Lowering: the extracted e-nodes become a Plan (``plan``), and a Plan becomes runnable code.

``kernels``: the kernel layer read back into specs; ``writer``: the one walk over a plan that both backends
share, with their renderings in ``pytorch_source`` (PyTorch text), ``torch_code`` (the torch backend: one
Python function) and ``triton_module`` (the triton backend: a standalone module of Triton kernels rendered by
``triton/`` and PyTorch glue).
"""
