"""The drop-in replacement a user gets back from ``eqiforge.optimize``.

It takes the same arguments as the original program (flattened as at capture: ``frontend.calls.CallSpec``),
checks them against the structure, shapes and dtypes the plan was optimized for (a symbolic plan's sizes
against their expressions), runs the lowered plan and rebuilds the original output structure. A call whose
tensors differ from a signature seen before only in sizes gets a plan for every value of those dims
(``generalize``), kept and tried before building; a call at another signature (dtypes, structure or constants)
runs a plan built for it on first use and kept in a ``PlanCache``, for up to its capacity of signatures (later
ones run the original program, as the torch.compile backend's later shapes run its fallback), or, with
``shapes="static"``, is a clear error (:meth:`OptimizedModule.plan_calls`). The example's own signature takes
the fast path: one generated function checks the inputs inline and runs the plan.
"""
from __future__ import annotations

import json
import logging
import operator
import time
import warnings
from pathlib import Path

import torch

from .. import ops
from ..errors import EqiforgeError
from ..frontend.calls import TENSOR, CallSpec, flatten_call
from ..dims import SymInt, is_symbolic, variable
from ..lower.symbolic import symbols_of
from .plan_cache import DEFAULT_CAPACITY, PlanCache, signature
from .rebuild import rebuilder
from .torch_plan import BucketedPlan, TorchPlan, compile_function, standalone_source

log = logging.getLogger("eqiforge")

#: what served a call, in ``calls``: a plan; the program compiled by Inductor or as written, chosen over the
#: plan; the program as written because no plan could serve the call
SERVED = ("plan", "inductor", "original", "fallback")
FALLBACK = SERVED.index("fallback")


class OptimizedModule(torch.nn.Module):
    """Callable like the original; ``plan``, ``report`` and ``source`` show what it runs.

    ``runner`` is the lowered plan: a TorchPlan (torch backend) or a TritonPlan (triton backend),
    called with the flat input tensors and returning a tuple of outputs.
    """

    def __init__(self, runner, source: str, input_specs: list[tuple[str, tuple, str]], out_spec, plan, report):
        super().__init__()
        self.runner = runner
        self._source = source
        self.input_specs = input_specs  # (name, shape, dtype) per flattened tensor input
        self.out_spec = out_spec
        self._rebuild = rebuilder(out_spec) if out_spec is not None and not out_spec.is_leaf() else None
        self.plan = plan
        self.report = report
        self.call = CallSpec.positional(len(input_specs))  # how calls flatten (plan_calls sets the program's)
        self._arity = len(input_specs)  # a call of this many positional arguments and no keywords: fast path
        self._signature = tuple((tuple(shape), ops.DTYPES[dtype]) for _, shape, dtype in input_specs)
        self._original = None
        self.next_plans = None  # pipeline/lowering.NextPlans while a measured choice may time them
        self._replan = None  # (args, kwargs, dynamic dims or None) -> OptimizedModule for a new signature; None:
        #                      shapes="static"
        self._original_program = None  # what runs a new signature that gets no plan
        self.plans: PlanCache | None = None  # the plans of other signatures, built on first use
        self.shape_log: list[str] = []  # per new signature: the plan built (why, how long), or why none was
        self._unplanned: dict = {}  # signatures whose plan could not be built: why
        self._past_capacity = False  # a new signature came after the cache's capacity of plans was built
        self._pending = None  # the call whose plan the PlanCache is building
        self.symbolic: dict[str, int] = {}  # a plan for every value of these symbols (their lower bounds)
        self._symbolic_plans: list[OptimizedModule] = []  # built for other signatures, tried before building
        self._counts = [0] * len(SERVED)  # calls answered, by what served them (SERVED's order)
        self._original_served = SERVED.index("original")  # the counter of the original chosen (run_original)
        self._set_entry(self._plan_result())

    def run_original(self, fn, why: str, compiled: bool = False) -> None:
        """Calls run ``fn``, the program as the user wrote it (``compiled``: by Inductor), behind the same input
        check: the plan is no better (``why``). ``runner`` and ``source`` still show the plan."""
        self._original = fn
        self._original_served = SERVED.index("inductor" if compiled else "original")
        if isinstance(fn, torch.nn.Module):
            self.original = fn  # a submodule: it moves with .to() and shows in state_dict()
        self._set_entry("original({args})", runs_original=True)
        what = "the original program compiled by Inductor" if compiled else "the original program"
        self.report.runs = f"{what} ({why})"

    def alternative(self, runner, source: str, plan) -> OptimizedModule:
        """A module running another plan of the same program, called as this one is (to time the two alike)."""
        other = OptimizedModule(runner, source, self.input_specs, self.out_spec, plan, self.report)
        other.plan_calls(self.call)
        return other

    def use_plan(self, plan, runner, source: str) -> None:
        """Calls run another plan of the same program (``runner`` lowered from ``plan``): one measured faster."""
        self.plan, self._source = plan, source
        self.run_plan_as(runner)

    def run_plan_as(self, runner, what: str | None = None) -> None:
        """Calls run the plan through ``runner``: the same plan generated another way, such as compiled by
        Inductor (``what`` says so in the report)."""
        self.runner = runner
        self._set_entry(self._plan_result())
        if what:
            self.report.runs = what

    def generalize(self, runner, source: str, shapes: dict[str, tuple], lower_bounds: dict[str, int]) -> None:
        """Calls at every value of the symbolic dims in ``shapes`` (input name -> shape of SymInts, each symbol
        at least its lower bound) run ``runner``, the plan lifted to them (shapes/generalize.py)."""
        self.input_specs = [(name, tuple(shapes[name]), dtype) for name, _, dtype in self.input_specs]
        self.symbolic = {s: max(2, lower_bounds.get(s, 2)) for s in symbols_of(shapes.values())}
        self._signature = None
        self._source = source
        self.run_plan_as(runner)

    @property
    def runs_plan(self) -> bool:
        """Whether a call at the example's signature runs an EqiForge plan (else the original program, as
        ``report.runs`` says)."""
        return not self._runs_original

    @property
    def calls(self) -> dict[str, int]:
        """Calls so far, by what served them (``SERVED``): an EqiForge plan (``"plan"``, however compiled); the
        program compiled by Inductor (``"inductor"``) or as written (``"original"``), chosen because it was
        predicted or measured no slower than the plan (``report.runs`` says which and why); and the program as
        written because no plan could serve the call (``"fallback"``: past the plan cache's capacity, or a plan
        that could not be built, said in ``shape_log``); this module's and those of the plans it built for
        other signatures."""
        counts = dict(zip(SERVED, self._counts))
        for module in self.plans.values() if self.plans is not None else ():
            for k, v in module.calls.items():
                counts[k] += v
        return counts

    def reset_calls(self) -> None:
        """Start ``calls`` from zero (what EqiForge ran while choosing this module's plan is not the user's)."""
        self._counts[:] = [0] * len(SERVED)  # in place: the generated entry counts into this list

    def plan_calls(self, call: CallSpec, replan=None, original=None, capacity: int = DEFAULT_CAPACITY) -> None:
        """Calls flatten like ``call`` (the example's). With ``replan``, a call at another signature runs the
        module ``replan(args, kwargs)`` builds for it, kept in a PlanCache, for up to ``capacity`` signatures;
        later ones, and one whose plan cannot be built, run ``original`` (warned once, in ``shape_log``).
        Without it such a call is an error."""
        self.call = call
        self._arity = call.arity if call.arity is not None else -1
        self._replan, self._original_program = replan, original
        self.plans = PlanCache(self._build, capacity) if replan is not None else None
        self._set_entry(self._result, self._runs_original)

    def forward(self, *args, **kwargs):
        return self._dispatch(*args, **kwargs)

    # a drop-in replacement is called every step: a call goes straight to the generated ``_dispatch``, found
    # in C (no nn.Module hook dispatch, which it registers none for, and no Python frame of forward's)
    __call__ = property(operator.attrgetter("_dispatch"))

    def _structured(self, args, kwargs, leaves=None, tree=None):
        """A call flattened first (to ``leaves, tree`` unless the caller already did: a decoding step's kwargs
        and cache flatten in ~20 us, so a call routed to another signature's module flattens once)."""
        if leaves is None:
            leaves, tree = flatten_call(args, kwargs)
        tensors = self.call.tensors(leaves, tree)
        if tensors is None or not self.accepts(tensors):
            return self._other(args, kwargs, leaves, tree)
        return self._accepted(args, kwargs, tensors)

    def _accepted(self, args, kwargs, tensors):
        """A call this module's plan is for (its tensor leaves ``tensors``): the plan, or the original program."""
        if self._original is None:
            return self._entry(*tensors)
        self._counts[self._original_served] += 1
        return self._original(*args, **kwargs)

    def accepts(self, tensors: list) -> bool:
        """Whether this module's plan is for calls with these tensor leaves (shapes and dtypes; symbolic
        dims at any value they take)."""
        if self._signature is not None:
            return signature(tensors) == self._signature
        return self._accepts(*tensors)

    def _other(self, args, kwargs=None, leaves=None, tree=None):
        """A call at another signature: the plan built for it on first use (up to the cache's capacity), else
        the original program; with shapes="static", an error."""
        kwargs = kwargs or {}
        if leaves is None:
            leaves, tree = flatten_call(args, kwargs)
        if self.plans is None:
            self._static_error(leaves, tree)
        key = (tree, signature(leaves))
        if key in self.plans:
            return self.plans.get(key)._structured(args, kwargs, leaves, tree)
        for module in self._symbolic_plans:
            tensors = module.call.tensors(leaves, tree)
            if tensors is not None and module.accepts(tensors):
                return module._accepted(args, kwargs, tensors)
        if key in self._unplanned or not self.plans.has_room(key):
            if key not in self._unplanned and not self._past_capacity:  # said once, for all later signatures
                self._past_capacity = True
                self._note(f"past the {self.plans.capacity} signatures this module builds plans for: calls at "
                           "other new signatures run the original program", warn=True)
            self._counts[FALLBACK] += 1
            return self._original_program(*args, **kwargs)
        why, start = self._difference(leaves, tree), time.perf_counter()
        dynamic = self._changed_dims(key)
        module, not_symbolic = self._build_plan(key, args, kwargs, dynamic) if dynamic else (None, "")
        if module is None:  # no plan for every size (or none asked): one for this signature
            module, failed = self._build_plan(key, args, kwargs, None)
        if module is None:
            self._unplanned[key] = failed
            self._note(f"no plan for a call at another signature than the example's ({why}): {failed}; it runs "
                       "the original program", warn=True)
            self._counts[FALLBACK] += 1
            return self._original_program(*args, **kwargs)
        if module.symbolic:
            self._symbolic_plans.append(module)
        what = f"a plan for every value of {sorted(module.symbolic)}" if module.symbolic else "a plan"
        self._note(f"built {what} for a call at another signature than the example's ({why}) in "
                   f"{time.perf_counter() - start:.1f} s; it runs {module.report.runs}"
                   + (f" (none for every size of {dynamic}: {not_symbolic})" if not_symbolic else ""))
        return module(*args, **kwargs)

    def _build_plan(self, key, args, kwargs, dynamic) -> tuple[OptimizedModule | None, str]:
        """(the module built for ``key``, symbolic in ``dynamic``'s dims when given; or None, and why not)."""
        self._pending = (args, kwargs, dynamic)
        try:
            return self.plans.get(key), ""
        except Exception as err:  # noqa: BLE001 - a call the original program takes must not fail for EqiForge
            return None, str(err)
        finally:
            self._pending = None

    def _changed_dims(self, key) -> dict[int, tuple[int, ...]] | None:
        """The dims of the tensor leaves that changed size between a signature seen before (the example's,
        or one a plan was built for) and ``key``, when nothing else did: those become symbolic. None when no
        such signature was seen."""
        example = None
        if self._signature is not None:
            specs = iter(self._signature)
            example = (self.call.tree, tuple(next(specs) if c is TENSOR else c for c in self.call.constants))
        for tree, old in [k for k in (example, *self.plans.keys()) if k is not None]:
            changed = _changed_dims(old, key[1]) if tree == key[0] else None
            if changed:
                return changed
        return None

    def _build(self, _key) -> OptimizedModule:
        args, kwargs, dynamic = self._pending
        return self._replan(args, kwargs, dynamic)

    def _note(self, note: str, warn: bool = False) -> None:
        self.shape_log.append(note)
        log.info("eqiforge: %s", note)
        if warn:
            warnings.warn(f"eqiforge: {note}", stacklevel=3)

    def _plan_result(self) -> str:
        """What the entry returns when it runs the plan: its outputs in the original structure."""
        if self.out_spec is not None and self.out_spec.is_leaf():
            return "runner.forward({args})[0]"
        if self.out_spec is not None:
            return "rebuild(runner.forward({args}))"
        return "runner.forward({args})"

    def _set_entry(self, result: str, runs_original: bool = False) -> None:
        """Generate ``_entry(*inputs)`` and ``_dispatch(*args, **kwargs)`` (``_entry``'s body behind a test for the
        example's positional tensors; other calls are flattened first), which return ``result`` (the original
        program's outputs where ``runs_original``: counted as such)."""
        self._result, self._runs_original = result, runs_original
        self._entry, self._dispatch = self._compile_entry(result)

    def _compile_entry(self, result: str):
        """``entry(*inputs)``: checks every input's type, shape and dtype inline, counts the call, then returns
        ``result`` (the plan's outputs, or the original program's), in one generated function (a per-input
        helper call and loop cost ~10 us per call on a CPU with cold caches, measured by bench/run_cpu.py).
        A static plan's entry first asks ``fast`` (``_FastCheck``), which answers most calls in C; the inline
        checks decide the rest. A symbolic plan's entry binds its sizes from the inputs and checks every dim
        against them; the same checks make ``_accepts``."""
        names = [f"x{i}" for i in range(len(self.input_specs))]
        namespace = {"Tensor": torch.Tensor, "runner": self.runner, "mismatch": self._other,
                     "structured": self._structured,
                     "rebuild": self._rebuild,
                     "original": getattr(self, "_original", None), "counts": self._counts,
                     "fast": _FastCheck()}
        first, sized, bindings = [], [], {}
        for i, (x, (_, shape, dtype)) in enumerate(zip(names, self.input_specs)):
            namespace[f"dtype_{i}"] = ops.DTYPES[dtype]
            if not is_symbolic(shape):
                namespace[f"shape_{i}"] = torch.Size(shape)
                first.append(f"isinstance({x}, Tensor) and {x}.shape == shape_{i} and {x}.dtype == dtype_{i}")
                continue
            first.append(f"isinstance({x}, Tensor) and {x}.dim() == {len(shape)} and {x}.dtype == dtype_{i}")
            for d, size in enumerate(shape):
                if isinstance(size, SymInt) and len(size.poly.terms) == 1 and size.poly.terms[0][1] == 1 \
                        and len(size.poly.terms[0][0]) == 1 and size.poly.terms[0][0][0] not in bindings:
                    bindings[size.poly.terms[0][0][0]] = f"{x}.shape[{d}]"
                sized.append(f"{x}.shape[{d}] == {size!r}")
        sized += [f"{variable(s)} >= {low}" for s, low in sorted(self.symbolic.items())]
        args = ", ".join(names)
        call = f"(({args}{',' if names else ''}))"
        bind = [f"    {variable(s)} = {where}" for s, where in sorted(bindings.items())]
        guard = [f"    if not ({' and '.join(first)}):", f"        return mismatch{call}"] if first else []
        if first and not sized and _FastCheck.available:
            guard = [f"    if not fast.check({args}):", *("    " + line for line in guard),
                     f"        fast.learn({args})"]
        guard += bind + ([f"    if not ({' and '.join(sized)}):", f"        return mismatch{call}"] if sized else [])
        counter = f"counts[{self._original_served if self._runs_original else 0}] += 1"
        body = [*guard, f"    {counter}", f"    return {result.format(args=args)}"]
        unpack = [f"    {args}{',' if len(names) == 1 else ''} = args"] if names else []
        dispatch = ["    if kwargs or len(args) != " + str(len(names)) + ":", "        return structured(args, kwargs)",
                    *unpack, *body] if self._arity == len(names) else ["    return structured(args, kwargs)"]
        source = "\n".join([f"def entry({args}):", *body, "", "def dispatch(*args, **kwargs):", *dispatch, ""])
        if self._signature is None:  # a plan for every size (whose symbolic dims may all be unread: none here)
            checks = ["def accepts(" + args + "):", f"    if not ({' and '.join(first) or 'True'}):",
                      "        return False", *bind, f"    return {' and '.join(sized) or 'True'}", ""]
            self._accepts = compile_function("\n".join(checks), "accepts", dict(namespace))
        return compile_function(source, "entry", namespace), namespace["dispatch"]

    @property
    def source(self) -> str:
        """The generated code of the lowered plan (as it is now: a kernel that failed to build is PyTorch code)."""
        return getattr(self.runner, "source", self._source)

    def export(self, directory, example_inputs=None) -> Path:
        """Write the plan as a standalone deployment: ``plan.py`` (the generated module: the triton backend's
        imports only torch and triton; the torch and inductor backends' code imports torch and eqiforge.ops.native,
        no egglog, and ``torch.compile`` of its ``bind(params)`` is what the inductor backend runs),
        ``params.pt`` (its parameters) and ``meta.json`` (inputs and how to call it). With ``example_inputs``,
        ``check.pt`` holds them and this module's outputs, to verify the plan elsewhere."""
        if isinstance(self.runner, BucketedPlan):
            raise EqiforgeError("this module runs a plan per range of its symbolic size (buckets), which export "
                                "does not write; export the plan of one range: optimize with dynamic=None")
        if isinstance(self.runner, TorchPlan):
            params = {name: t.detach() for name, t in self.runner.named_buffers()}
            source = standalone_source(self.runner.source, self.runner._helpers, list(params))
        elif self.runner.generated.externs:
            raise EqiforgeError(f"the plan calls {sorted(self.runner.generated.externs)} which cannot be "
                                "written as code; it can only run in this process")
        else:
            params, source = self.runner.params, self.source
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        (out / "plan.py").write_text(source)
        torch.save(params, out / "params.pt")
        meta = {"inputs": [{"name": n, "shape": list(s), "dtype": d} for n, s, d in self.input_specs],
                "call": "plan.forward(*inputs, params=params)", "predicted_us": self.plan.predicted_seconds * 1e6,
                "cost_model": self.plan.cost_model}
        (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
        if example_inputs is not None:
            with torch.no_grad():
                outputs = self.runner(*example_inputs)
            torch.save({"inputs": list(example_inputs), "outputs": list(outputs)}, out / "check.pt")
        return out

    def _static_error(self, leaves: list, tree) -> None:
        raise EqiforgeError(f"{self._difference(leaves, tree)}; this module was optimized with shapes='static': "
                            "call eqiforge.optimize again with example inputs like these, or optimize without it "
                            "(a call at a new signature then gets its own plan)")

    def _difference(self, leaves: list, tree) -> str:
        """How a call flattened to ``leaves, tree`` differs from the example call, in words."""
        n = len(self.input_specs)
        if tree != self.call.tree:
            got = sum(isinstance(leaf, torch.Tensor) for leaf in leaves)
            return f"expected {n} tensor inputs, got {got}" if got != n else \
                "the arguments are structured differently from the example inputs"
        specs = iter(self.input_specs)
        found = []
        for leaf, constant in zip(leaves, self.call.constants):
            if constant is not TENSOR:
                if type(leaf) is not type(constant) or leaf != constant:
                    found.append(f"an argument is {leaf!r} where the example had {constant!r}")
                continue
            name, shape, dtype = next(specs)
            if not isinstance(leaf, torch.Tensor):
                found.append(f"input {name!r} is a {type(leaf).__name__}, expected a tensor {dtype}{list(shape)}")
            elif tuple(leaf.shape) != shape or ops.DTYPE_NAMES.get(leaf.dtype) != dtype:
                found.append(f"input {name!r} is {ops.DTYPE_NAMES.get(leaf.dtype, leaf.dtype)}{list(leaf.shape)} "
                             f"but the plan was optimized for {dtype}{list(shape)}")
        return "; ".join(found[:3]) + (f" (and {len(found) - 3} more)" if len(found) > 3 else "")


class _FastCheck:
    """The inputs' types, devices, dtypes, sizes, grad flags and dispatch keys compared in C (Dynamo's
    ``TensorGuards``, strides left free) against the last call that passed the entry's own checks: ~0.1 us per
    input instead of ~0.23 us in Python, most of the wrapper's cost on a plan of a few microseconds. A
    ``False`` is only "not known": the entry's checks decide, and a call they accept is learned."""

    try:
        from torch._C._dynamo.guards import TensorGuards as _guards
        available = True
    except ImportError:  # another torch build: the entry's checks alone
        _guards, available = None, False

    def __init__(self):
        self.check = self._unknown

    @staticmethod
    def _unknown(*_tensors) -> bool:
        return False

    def learn(self, *tensors) -> None:
        self.check = self._guards(*tensors, dynamic_dims_sizes=[list(t.shape) for t in tensors],
                                  dynamic_dims_strides=[[None] * t.dim() for t in tensors]).check


def _changed_dims(old: tuple, new: tuple) -> dict[int, tuple[int, ...]] | None:
    """Tensor leaf index -> the dims whose size differs between two signatures (``plan_cache.signature`` of
    all leaves), or None when anything else differs: a constant, a dtype, a rank, or a size of 0 or 1 (those
    stay specialised, as Dynamo's do)."""
    if len(old) != len(new):
        return None
    changed, leaf = {}, 0
    for a, b in zip(old, new):
        if not (isinstance(a, tuple) and isinstance(b, tuple)):
            if a != b or isinstance(a, tuple) or isinstance(b, tuple):
                return None
            continue
        (sa, da), (sb, db) = a, b
        if da != db or len(sa) != len(sb) or any(x != y and min(x, y) < 2 for x, y in zip(sa, sb)):
            return None
        dims = tuple(d for d, (x, y) in enumerate(zip(sa, sb)) if x != y)
        if dims:
            changed[leaf] = dims
        leaf += 1
    return changed or None
