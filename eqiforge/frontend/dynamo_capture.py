"""Capture a program with Dynamo's graph capture (the path torch.compile takes), as one graph.

capture.py's last path, for programs that defeat torch.export and AOTAutograd but Dynamo takes whole. GPT-2
called with ``use_cache=False``: export's decomposition views a non-contiguous tensor in its Conv1D, and
AOTAutograd's trace stops on a data-dependent check of transformers' mask code (packed sequences), which
transformers skips while Dynamo traces. Dynamo traces the program once with ``fullgraph=True`` (a graph
break is an error, said by its reason and place) and hands its FX graph of torch calls to a backend that
keeps it. :class:`DynamoGraph` is that graph as a module of the call's tensor leaves that reads the
program's parameters and buffers as its own attributes, so AOTAutograd lowers it to core ATen with the
state named as on the other paths.
"""
from __future__ import annotations

import operator
import os
import re
import types

import torch
from torch._dynamo.exc import TorchDynamoException

#: a frame of the user's code in Dynamo's error text: file, line, function, and its code when there is source
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)(?:\n[ \t]+(\S.*))?')


class NotOneGraph(RuntimeError):
    """Dynamo did not capture the program as one graph of the call's tensors and the program's state."""


class DynamoGraph(torch.nn.Module):
    """Dynamo's graph as a function of the call's tensor leaves, returning the program's output leaves.
    Where each graph input and each output comes from is a source: ``("input", i)`` the call's i-th tensor,
    ``("state", fqn)`` a parameter or buffer of ``program``, ``("graph", k)`` the graph's k-th result."""

    def __init__(self, program: torch.nn.Module, graph: torch.fx.GraphModule, args: list, outputs: list):
        super().__init__()
        self.program, self.graph = program, graph  # program: its state keeps capture's names (program.*)
        self.args, self.outputs = args, outputs

    def forward(self, *tensors):
        def value(source, results=()):
            kind, key = source
            if kind == "input":
                return tensors[key]
            return results[key] if kind == "graph" else operator.attrgetter(key)(self)
        results = self.graph(*[value(source) for source in self.args])
        return tuple(value(source, results) for source in self.outputs)


def one_graph(flat: torch.nn.Module, inputs: tuple) -> DynamoGraph:
    """capture's ``_Flat`` program as Dynamo captures it at ``inputs``, in inference (no grad); a
    NotOneGraph when Dynamo cannot take it as one graph or its graph is not the whole program."""
    keep = _Keep()
    try:
        with torch.no_grad():
            leaves = torch.compile(_fresh_method(flat), backend=keep, fullgraph=True, dynamic=False)(*inputs)
    except TorchDynamoException as err:
        raise NotOneGraph(_reason(err)) from err
    if len(keep.graphs) != 1:
        raise NotOneGraph(f"Dynamo made {len(keep.graphs)} graphs of the program, not one")
    graph, graph_inputs, results = keep.graphs[0]
    sources = {id(tensor): ("input", i) for i, tensor in enumerate(inputs)}
    for fqn, tensor in [*flat.named_parameters(remove_duplicate=False), *flat.named_buffers(remove_duplicate=False)]:
        sources.setdefault(id(tensor), ("state", fqn))
    args = [_source(sources, tensor, "Dynamo's graph reads") for tensor in graph_inputs]
    for k, tensor in enumerate(results):
        sources.setdefault(id(tensor), ("graph", k))
    outputs = [_source(sources, tensor, "the program returns") for tensor in leaves]
    return DynamoGraph(flat.program, graph, args, outputs)


class _Keep:
    """A Dynamo backend that keeps each graph it is handed, with its example inputs and, once run, its
    results (the program's outputs are found among them by identity)."""

    def __init__(self):
        self.graphs: list[list] = []  # [graph, example inputs, results]

    def __call__(self, graph: torch.fx.GraphModule, example_inputs: list):
        entry = [graph, list(example_inputs), ()]
        self.graphs.append(entry)

        def run(*args):
            entry[2] = graph(*args)
            return entry[2]
        return run


def _fresh_method(flat: torch.nn.Module):
    """``flat.forward`` as a function of its own (code object and globals copied): Dynamo keeps what it
    compiles in the code object's cache and the function's globals, so nothing stays behind on ``_Flat``
    (where each capture would add an entry until later ones hit Dynamo's recompile limit) or in its module."""
    function = type(flat).forward
    copy = types.FunctionType(function.__code__.replace(), dict(function.__globals__), function.__name__,
                              function.__defaults__, function.__closure__)
    return types.MethodType(copy, flat)


def _source(sources: dict, tensor, what: str) -> tuple:
    if not isinstance(tensor, torch.Tensor) or id(tensor) not in sources:
        raise NotOneGraph(f"{what} a {type(tensor).__name__} that is neither a tensor of the call, a parameter or "
                          "buffer of the program, nor computed by Dynamo's graph (a global or a closure's tensor?): "
                          "pass it as an input or register it as a buffer")
    return sources[id(tensor)]


def _reason(err: Exception) -> str:
    """Dynamo's error in one line: its first line, its explanation, and where in the user's code it stopped."""
    text = str(err).strip()
    reason = text.splitlines()[0] if text else type(err).__name__
    explanation = re.search(r"^\s*Explanation: (.+)$", text, re.MULTILINE)
    if explanation:
        reason += f": {explanation.group(1).strip()}"
    frames = _FRAME.findall(text.partition("from user code:")[2])
    if frames:
        file, line, function, code = frames[-1]
        reason += f" (at {os.path.basename(file)}:{line} in {function}{': ' + code.strip() if code else ''})"
    return reason
