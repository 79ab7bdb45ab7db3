"""What the command line can optimize: a built-in example, or a user's Python file.

A file target is either ``path.py`` defining ``Model`` plus ``get_inputs()`` (and optionally
``get_init_inputs()``, the constructor's arguments), or ``path.py:factory`` where ``factory()`` returns
``(callable, example_inputs)``.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

from .. import examples
from ..errors import EqiforgeError


def load_target(target: str | None = None, example: str | None = None):
    """(callable, example_inputs) for ``--example NAME`` or a file target."""
    if example:
        return examples.load(example)
    if not target:
        raise EqiforgeError("give a target file (path.py or path.py:factory) or --example NAME "
                            f"(built-in: {', '.join(sorted(examples.EXAMPLES))})")
    path, _, factory = target.partition(":")
    module = _import(Path(path))
    torch.manual_seed(0)
    if factory:
        fn = getattr(module, factory, None)
        if not callable(fn):
            raise EqiforgeError(f"{path} has no callable {factory!r}")
        result = _call(f"{target}()", fn)
        if not (isinstance(result, tuple) and len(result) == 2):
            raise EqiforgeError(f"{target} must return (callable, example_inputs), got {type(result).__name__}")
        return result
    if not hasattr(module, "Model") or not hasattr(module, "get_inputs"):
        raise EqiforgeError(f"{path} must define Model and get_inputs() (or name a factory: {path}:factory)")
    init = _call(f"{path}: get_init_inputs()", module.get_init_inputs) if hasattr(module, "get_init_inputs") else []
    model = _call(f"{path}: Model(*get_init_inputs())", module.Model, *init)
    if isinstance(model, torch.nn.Module):
        model = model.eval()
    return model, tuple(_call(f"{path}: get_inputs()", module.get_inputs))


def load_zoo(spec: str) -> dict:
    """name -> (callable, example_inputs) of a zoo: "examples" (every built-in example) or a folder, each of
    its ``*.py`` files a target as ``load_target`` takes one (Model + get_inputs), in name order."""
    if spec == "examples":
        return {name: examples.load(name) for name in sorted(examples.EXAMPLES)}
    folder = Path(spec)
    files = sorted(folder.glob("*.py")) if folder.is_dir() else []
    if not files:
        raise EqiforgeError(f"--zoo takes 'examples' or a folder of program files (path.py: Model + get_inputs); "
                            f"{spec!r} is {'a folder without .py files' if folder.is_dir() else 'neither'}")
    return {path.stem: load_target(str(path)) for path in files}


def _call(what: str, fn, *args):
    """``fn(*args)``; what the user's code raises (or a ``sys.exit`` in it) becomes an error naming ``what``."""
    try:
        return fn(*args)
    except (Exception, SystemExit) as err:
        raise EqiforgeError(f"{what} failed: {_describe(err)}") from err


def _describe(err: BaseException) -> str:
    if isinstance(err, SystemExit):
        return f"it called sys.exit({err.code!r})"
    return f"{type(err).__name__}: {err}"


def _import(path: Path):
    if not path.is_file():
        raise EqiforgeError(f"no such file: {path}")
    spec = importlib.util.spec_from_file_location(f"eqiforge_target_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    _call(f"importing {path}", spec.loader.exec_module, module)
    return module
