"""Running an inductor-backend plan: the plan as an ATen FX graph, compiled by Inductor.

EqiForge chooses the algebra (reassociation, merged projections, re-formed composites); Inductor generates
the code (fused C++/OpenMP loops on a CPU, Triton kernels on a GPU). The torch backend's generated function
is traced at example inputs with ``make_fx`` and Inductor's decompositions, so the plan's tensors (weights,
folded constants) become constants of the graph, and the graph goes to ``compile_fx_inner``: a call runs
Inductor's compiled graph, no Python between its kernels. The trace runs outside any enclosing torch.compile
(its fake mode and tracing context), so ``optimize()`` and the torch.compile backend compile a plan the same
way. Until ``compile`` is called, and where Inductor fails on the graph (``notes`` say why), the plan runs
as the torch backend's code.

Inductor's on-disk FX graph cache takes these graphs: the trace has a shape environment (static shapes), and
the graph's tensors are marked as frozen parameters, so the cache key holds their shapes and dtypes, not their
values, and a hit binds this graph's own tensors (0-d tensors, which Inductor inlines, are keyed by value). A second
process (or a model with other weights) compiling the same plan loads Inductor's code instead of generating and building
it again (seconds per model).
"""
from __future__ import annotations

import functools
import warnings

import torch
from torch._inductor.compile_fx import compile_fx_inner
from torch._inductor.decomposition import select_decomp_table
from torch._inductor.freezing_utils import record_has_frozen_params
from torch._subclasses.fake_tensor import FakeTensorMode, unset_fake_temporarily
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.experimental.symbolic_shapes import ShapeEnv

from ..lower.torch_code import TorchCode
from .torch_plan import TorchPlan


def inductor_compiled(fn, example_inputs: list, output_strides: list | None = None):
    """``fn`` (tensors in, a tuple of tensors out) traced at ``example_inputs`` to an ATen graph with
    Inductor's decompositions and compiled by Inductor; returns ``run(*tensors) -> tuple`` and the graph.
    The graph is compiled for the examples' layouts (a dense copy's where one overlaps itself, an expanded
    tensor) and ``run`` copies an input of another layout into its compiled one (a column-major example, what
    ``torch.linalg.qr`` returns, then a contiguous call: Inductor's stride assertion failed the call).
    ``output_strides`` (None entries: any) are the layouts the outputs must have: a copy into that layout is
    part of the graph, so Inductor writes the output there in the kernel that computes it."""
    if output_strides is not None:
        fn = _laying_out(fn, output_strides)
    example_inputs = [t if _dense(t) else t.contiguous() for t in example_inputs]
    strides = [t.stride() for t in example_inputs]
    with unset_fake_temporarily():
        fake_mode = FakeTensorMode(shape_env=ShapeEnv(), allow_non_fake_inputs=True)
        with torch._guards.tracing(torch._guards.TracingContext(fake_mode)):
            fakes = [fake_mode.from_tensor(t, static_shapes=True) for t in example_inputs]
            graph = make_fx(fn, decomposition_table=select_decomp_table(), tracing_mode="fake",
                            _allow_non_fake_inputs=True)(*fakes)
            _freeze_constants(graph)
            compiled = compile_fx_inner(graph, fakes)

    def run(*tensors):  # Inductor's code asserts the strides it was compiled for: another layout is copied into them
        return tuple(compiled([laid_out(t, s) for t, s in zip(tensors, strides)]))
    return run, graph


def _dense(t: torch.Tensor) -> bool:
    """Whether ``t``'s elements fill its memory once each, in some order of its dims (a copy can take its layout)."""
    expected = 1
    for stride, size in sorted((s, n) for s, n in zip(t.stride(), t.shape) if n != 1):
        if stride != expected:
            return False
        expected *= size
    return True


def laid_out(t: torch.Tensor, stride: tuple) -> torch.Tensor:
    """``t``'s values in a tensor of ``stride`` (``t`` itself when it has it)."""
    if t.stride() == tuple(stride):
        return t
    return torch.empty_strided(t.shape, stride, dtype=t.dtype, device=t.device).copy_(t)


def _laying_out(fn, strides: list):
    """``fn`` with its outputs in ``strides`` (None: as they come)."""
    def run(*tensors):
        return tuple(o if s is None else laid_out(o, s) for o, s in zip(fn(*tensors), strides))
    return run


def _freeze_constants(graph: torch.fx.GraphModule) -> None:
    """Mark the graph's tensors (the plan's weights and folded constants) as frozen parameters, as Inductor's
    freezing marks the weights it embeds: the cache keys them by metadata and binds them from the graph. Each
    is an alias of the plan's tensor (same storage), so the user's parameters are not marked. A 0-d tensor stays
    unmarked: Inductor writes its value into the code as a literal, so a key by metadata would hand another
    plan's value to a hit (the cache's own exemption covers only the small 1-D tensors it inlines)."""
    for node in graph.graph.nodes:
        tensor = getattr(graph, node.target, None) if node.op == "get_attr" else None
        if isinstance(tensor, torch.Tensor) and tensor.dim() > 0:
            alias = tensor.detach()
            if isinstance(tensor, torch.nn.Parameter):  # the module takes only a Parameter in its place
                alias = torch.nn.Parameter(alias, requires_grad=tensor.requires_grad)
            alias._is_frozen_param = True
            setattr(graph, node.target, alias)
    record_has_frozen_params(graph)


class InductorPlan(TorchPlan):
    """A TorchPlan that runs, once ``compile`` has been called, as Inductor's compiled graph of its function."""

    graph = None  # the ATen graph Inductor compiled (None: the plan runs as the torch code); a plain attribute,
    #               not a submodule, so state_dict() does not hold its constants twice

    def __init__(self, code):
        super().__init__(code)
        self.notes: list[str] = ["not compiled by Inductor yet: it runs as EqiForge's torch code"]

    @classmethod
    def of(cls, plan: TorchPlan) -> InductorPlan:
        """The same plan (its code, its tensors) to be compiled by Inductor."""
        return cls(TorchCode(plan.source, dict(plan.named_buffers()), plan._helpers))

    def compile(self, example_inputs, output_strides: list | None = None, inference_only: bool = False) -> None:
        """Trace the plan at ``example_inputs`` and compile it, its outputs in ``output_strides`` when given
        (see ``inductor_compiled``); on a failure it stays the torch code. The compiled graph records no
        autograd: with ``inference_only`` a call in grad mode on an input that requires grad runs the torch
        code, which does."""
        try:
            compiled, graph = inductor_compiled(self.torch_forward, list(example_inputs), output_strides)
            self.forward = _without_grad(compiled, self.torch_forward) if inference_only else compiled
        except Exception as err:  # noqa: BLE001 - the torch code computes the same plan
            self.notes[:] = [f"Inductor could not compile the plan ({type(err).__name__}: {str(err).strip()[:200]}); "
                             f"it runs as EqiForge's torch code"]
            return
        object.__setattr__(self, "graph", graph)
        ops = sum(n.op == "call_function" for n in graph.graph.nodes)
        self.notes[:] = [f"Inductor compiled the plan, an ATen graph of {ops} ops (static shapes)"]

    def _bind(self) -> None:  # also after a move or a copy: the torch code until compiled again
        super()._bind()
        self.torch_forward = self.forward
        if self.graph is not None:
            object.__setattr__(self, "graph", None)
            self.notes[:] = ["moved or copied after Inductor compiled it: it runs as EqiForge's torch code until "
                             "compile() is called again"]

    def __getstate__(self):  # the functions are rebuilt from the source (TorchPlan)
        return {k: v for k, v in super().__getstate__().items() if k != "torch_forward"}


def _without_grad(compiled, torch_code):
    """``compiled``, or ``torch_code`` where autograd is to record the call (grad mode, an input requiring grad)."""
    def run(*tensors):
        if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
            return torch_code(*tensors)
        return compiled(*tensors)
    return run


def compiled_original(fn):
    """The user's program compiled by Inductor as a plain ``torch.compile(fn)`` compiles it: what an inductor
    plan that is no better than the program runs instead, and a candidate of the measured choice. (With
    ``dynamic=False`` an RMSNorm and an InstanceNorm ran 8-9% slower than under a plain ``torch.compile`` here; the
    module's own shape check sends other shapes elsewhere, so no dynamic recompile follows.) Where Inductor
    fails, the program runs as written from then on, with a warning: where it fails to compile (a plain
    ``torch.compile`` fails a view of keys joined to an empty cache: its ``cat`` drops the empty operand and keeps
    the keys' permuted strides), and where its code fails a call that the program as written runs (under
    ``no_grad``, Dynamo compiles again, and Inductor's code for a float16 layer norm, exp and product on a CPU
    passed a float32 operand to its matmul: "expected m1 and m2 to have the same dtype"). A call the program
    itself fails raises the program's own error."""
    compiled, failed = torch.compile(fn), []

    def give_up(what: str, err: BaseException) -> None:
        failed.append(err)
        why = f"{type(err).__name__}: {str(err).strip().splitlines()[0][:300]}"
        warnings.warn(f"eqiforge: Inductor {what} ({why}); it runs as written", stacklevel=3)

    @functools.wraps(fn)
    def run(*args, **kwargs):
        if not failed:
            try:
                return compiled(*args, **kwargs)
            except torch._dynamo.exc.BackendCompilerFailed as err:
                give_up("failed to compile the program", err.inner_exception)
            except Exception as err:  # noqa: BLE001 - judged by whether the program as written runs the call
                out = fn(*args, **kwargs)  # the program's own error, if it has one, propagates from here
                give_up("compiled code failed a call the program runs", err)
                return out
        return fn(*args, **kwargs)
    return run
