"""Load generated Triton source as a Python module, and compile a kernel for a GPU target without a GPU.

Triton's ``@triton.jit`` reads a kernel's source with ``inspect``, so generated text must live in a file:
``load_module`` writes it to the ``kernels`` folder of EqiForge's cache (eqiforge/paths.py's, spelled out here)
under a name keyed by the hash of the text, and imports it once per process.

Under the interpreter (``TRITON_INTERPRET=1``, which must be set before triton is imported) the loaded
kernels run on the CPU. Such a process cannot also compile for CUDA: triton.language's own helpers were
defined as interpreted functions at import. ``compile_for_target`` then compiles in a subprocess without
the variable. This file imports nothing from eqiforge so that it can run as that subprocess's script.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType

_LOADED: dict[str, ModuleType] = {}


class StaticCompileUnavailable(RuntimeError):
    """This machine's Triton cannot compile for the requested GPU target (no NVIDIA backend or tools)."""


def cache_dir() -> Path:
    path = Path(os.environ.get("EQIFORGE_CACHE_DIR") or Path.home() / ".cache" / "eqiforge") / "kernels"
    path.mkdir(parents=True, exist_ok=True)
    return path


def load_module(source: str, module_name: str) -> ModuleType:
    """Import ``source`` as a module (written to the cache dir first; loaded once per process per text)."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    key = f"{module_name}_{digest}"
    if key in _LOADED:
        return _LOADED[key]
    path = cache_dir() / f"{key}.py"
    if not path.exists():  # write then rename: concurrent writers never expose a half-written file
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(source)
        os.replace(tmp, path)
    spec = importlib.util.spec_from_file_location(key, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[key] = module  # inspect (used by Triton) finds the source through the module
    spec.loader.exec_module(module)
    _LOADED[key] = module
    return module


def compile_for_target(source: str, kernel: str, signature: dict, constexprs: dict, divisible: list[str],
                       num_warps: int, num_stages: int | None, arch: int = 90) -> dict:
    """Compile ``kernel`` of ``source`` for NVIDIA compute capability ``arch`` and read its static resources.

    ``divisible`` names the parameters known to be multiples of 16 (as a launch would find them).
    Returns ``n_regs`` (registers per thread), ``n_spills`` (32-bit words of per-thread local memory, as the
    CUDA driver reports spills: nonzero means the kernel spills registers), ``shared`` (bytes of shared
    memory per program) and the launch options. Runs in a subprocess when this process interprets Triton.
    """
    request = {"source": source, "kernel": kernel, "signature": signature, "constexprs": constexprs,
               "divisible": divisible, "num_warps": num_warps, "num_stages": num_stages, "arch": arch}
    import triton
    if not triton.knobs.runtime.interpret:
        return _compile(request)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, __file__], input=json.dumps(request), capture_output=True, text=True,
                          env=env)
    if done.returncode:
        unavailable = "StaticCompileUnavailable" in done.stderr
        raise (StaticCompileUnavailable if unavailable else RuntimeError)(
            f"compiling {kernel} for sm_{arch} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _compile(request: dict) -> dict:
    import triton
    from triton.backends.compiler import GPUTarget
    fn = getattr(load_module(request["source"], "eqiforge_static"), request["kernel"])
    options = {"num_warps": request["num_warps"]}
    if request["num_stages"] is not None:
        options["num_stages"] = request["num_stages"]
    attrs = {(fn.arg_names.index(name),): [["tt.divisibility", 16]] for name in request["divisible"]}
    src = triton.compiler.ASTSource(fn=fn, signature=request["signature"], constexprs=request["constexprs"],
                                    attrs=attrs)
    try:
        compiled = triton.compile(src, target=GPUTarget("cuda", request["arch"], 32), options=options)
    except (FileNotFoundError, RuntimeError) as e:
        if "ptxas" in str(e) or isinstance(e, FileNotFoundError):
            raise StaticCompileUnavailable(f"cannot compile for CUDA here: {e}") from e
        raise
    regs, stack = _cubin_resources(compiled.asm["cubin"])
    return {"n_regs": regs, "n_spills": stack // 4, "shared": compiled.metadata.shared, **options}


def _cubin_resources(cubin: bytes) -> tuple[int, int]:
    """Registers per thread and stack (local memory) bytes per thread, read with ``cuobjdump -res-usage``."""
    import triton
    tool = triton.knobs.nvidia.cuobjdump.path
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        try:
            text = subprocess.run([tool, "-res-usage", f.name], capture_output=True, text=True, check=True).stdout
        except (FileNotFoundError, subprocess.CalledProcessError) as e:
            raise StaticCompileUnavailable(f"cuobjdump ({tool}) could not read the cubin: {e}") from e
    found = re.search(r"REG:(\d+) STACK:(\d+)", text)
    if not found:
        raise StaticCompileUnavailable(f"no resource usage in cuobjdump's output:\n{text}")
    return int(found.group(1)), int(found.group(2))


if __name__ == "__main__":  # the subprocess of compile_for_target: a JSON request on stdin, JSON on stdout
    print(json.dumps(_compile(json.loads(sys.stdin.read()))))
