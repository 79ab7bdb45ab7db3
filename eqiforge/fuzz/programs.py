"""Random programs over the ops EqiForge knows, written as standalone Python source.

A program is a deterministic function of (seed, profile): ``generate`` draws a dtype, shapes and a short
chain of ops from a ``random.Random`` seeded by the pair and writes them as source that defines
``make_program()`` (a function, or an nn.Module with parameters so that constant folding runs) and
``make_inputs(seed)`` (its inputs, from a seeded torch.Generator). The source is what runs, in the worker
and in a reproducer, so what failed is exactly what a reader sees.

Every value's shape, dtype and rough magnitude are tracked while drawing, so a program is valid by
construction: logs see |x| + 1, divisions see values away from zero, exponentials see bounded arguments,
float16 stays below its overflow and no tensor passes the profile's element limit. The ``triton`` profile
draws tiny programs, whose kernels stay within a few dozen program instances under the Triton interpreter.
"""
from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass

DTYPES = ("float32", "float16", "bfloat16", "float64")
LOW_PRECISION = ("float16", "bfloat16")
PRECISION_ORDER = ("bfloat16", "float16", "float32", "float64")  # least precise first: the judge's floor


@dataclass(frozen=True)
class Profile:
    sizes: tuple[int, ...]  # dimension sizes drawn from (size-1 dims included on purpose)
    input_numel: int  # a drawn input shape holds at most this many elements
    max_numel: int  # no value holds more
    ops: tuple[int, int]  # how many ops a program draws (inclusive range)


PROFILES = {
    "torch": Profile((1, 2, 3, 4, 5, 7, 8, 12, 16, 24, 32), 4096, 16384, (2, 7)),
    "triton": Profile((1, 2, 3, 4, 5, 8, 16), 512, 1024, (1, 4)),
}


@dataclass(frozen=True)
class Program:
    """A generated program: its source and what the judge and the summary need to know about it."""

    seed: int
    profile: str
    source: str  # defines make_program() and make_inputs(seed); imports torch only
    dtype: str  # the least precise floating dtype it computes in (sets the judge's rounding floor)
    families: tuple[str, ...]  # op families it uses, for the per-family summary


def generate(seed: int, profile: str = "torch") -> Program:
    """The program drawn for ``seed`` under ``profile`` (``torch`` or ``triton``): always the same one."""
    builder = _Builder(seed, profile)
    builder.draw()
    return Program(seed, profile, builder.source(), builder.least_precise(), tuple(sorted(builder.families)))


def load(source: str):
    """``(make_program, make_inputs)`` from a program's source (or a reproducer's)."""
    namespace = {"__name__": "eqiforge_fuzz_program"}
    exec(compile(source, "<fuzz program>", "exec"), namespace)  # noqa: S102 - running generated programs is the point
    return namespace["make_program"], namespace["make_inputs"]


# ------------------------------------------------------------------------------------------ the builder

MAG_LIMIT = {"float16": 3e4, "bfloat16": 1e5, "float32": 1e5, "float64": 1e5}  # rough largest |value| allowed


@dataclass
class Value:
    name: str
    shape: tuple[int, ...]
    dtype: str
    mag: float  # rough largest |element|: keeps exponentials bounded and float16 finite
    contiguous: bool = False  # known to be contiguous, so that .view is valid
    positive: bool = False  # known to be at least 0.5, so a safe divisor
    finite: bool = True  # False for masked scores holding -inf: only their softmax may use them
    leaf: bool = False  # an input or a parameter: the same values in eager, the plan and float64


@dataclass
class _Input:
    value: Value
    scale: float  # a normal input is randn * scale; a positive one is drawn from [0.5, 1.5)


class _Builder:
    """Draws one program: inputs, parameters (module programs) and a chain of ops, kept as source lines."""

    def __init__(self, seed: int, profile: str):
        self.seed, self.profile = seed, PROFILES[profile]
        self.rng = random.Random(f"eqiforge-fuzz:{profile}:{seed}")
        self.dtype = self.rng.choice(DTYPES)
        self.is_module = self.rng.random() < 0.4
        self.mixed = self.rng.random() < 0.2  # casts between dtypes may be drawn
        self.inputs: list[_Input] = []
        self.init_lines: list[str] = []  # nn.Module.__init__ body
        self.lines: list[str] = []  # the program body
        self.values: list[Value] = []  # what the ops computed
        self.operands: list[Value] = []  # those, the inputs and the parameters: what later ops may combine
        self.families: set[str] = set()
        self.dtypes = {self.dtype}
        self.outputs: list[Value] = []  # what the program returns (the last value, sometimes one more)
        self._names = itertools.count()

    # ----------------------------------------------------------------------------- drawing helpers

    def size(self) -> int:
        return self.rng.choice(self.profile.sizes)

    def shape(self) -> tuple[int, ...]:
        rank = self.rng.choice((1, 2, 2, 3, 3, 4))
        while True:
            shape = tuple(self.size() for _ in range(rank))
            if math.prod(shape) <= self.profile.input_numel:
                return shape

    def fits(self, shape) -> bool:
        return math.prod(shape) <= self.profile.max_numel

    def input(self, shape, dtype=None, positive=False, scale=1.0) -> Value:
        value = self._leaf(f"x{len(self.inputs)}", shape, dtype, positive, scale)
        self.inputs.append(_Input(value, scale))
        return value

    def _leaf(self, name, shape, dtype, positive, scale) -> Value:
        value = Value(name, tuple(shape), dtype or self.dtype, 1.5 if positive else 4 * scale, True, positive,
                      leaf=True)
        self.operands.append(value)
        self.dtypes.add(value.dtype)
        return value

    def tensor(self, shape, dtype=None, positive=False, scale=1.0) -> Value:
        """A new operand: a parameter in a module program (when it can share the module's dtype), else an input."""
        dtype = dtype or self.dtype
        if not (self.is_module and dtype == self.dtype and self.rng.random() < 0.7):
            return self.input(shape, dtype, positive, scale)
        name = f"self.w{len(self.init_lines)}"
        dims = ", ".join(map(str, shape))
        init = f"torch.rand({dims}) + 0.5" if positive else f"torch.randn({dims}) * {scale!r}"
        self.init_lines.append(f"{name} = torch.nn.Parameter({init})")
        return self._leaf(name, shape, dtype, positive, scale)

    def submodule(self, kind: str, constructor: str, init: tuple[str, ...] = ()) -> str:
        name = f"self.{kind}{len(self.init_lines)}"
        self.init_lines.append(f"{name} = {constructor}")
        self.init_lines.extend(line.format(m=name) for line in init)
        return name

    def emit(self, family: str, expr: str, shape, dtype: str, mag: float, contiguous=False, finite=True):
        """Bind ``expr`` to a new name, unless the value would be too large or overflow its dtype."""
        if not self.fits(shape) or mag > MAG_LIMIT[dtype]:
            return None
        value = Value(f"v{next(self._names)}", tuple(shape), dtype, mag, contiguous, finite=finite)
        self.lines.append(f"{value.name} = {expr}")
        self.values.append(value)
        self.operands.append(value)
        self.families.add(family)
        self.dtypes.add(dtype)
        return value

    def existing(self, want) -> Value | None:
        """A random earlier value for which ``want(value)`` holds, if any."""
        found = [v for v in self.operands if v.finite and want(v)]
        return self.rng.choice(found) if found else None

    # ---------------------------------------------------------------------------------- the program

    def draw(self):
        start = self.input(self.shape())
        for _ in range(self.rng.randint(*self.profile.ops)):
            for _attempt in range(20):
                recent = ([v for v in self.values if v.finite] or [start])[-3:]
                operand = self.rng.choice(recent)
                family = self.rng.choices(list(FAMILIES), weights=[w for w, _ in FAMILIES.values()])[0]
                if family == "cast" and not self.mixed:
                    continue
                if FAMILIES[family][1](self, operand) is not None:
                    break
        if not self.values:  # every draw was rejected: fall back to one always-valid op
            _unary(self, start)
        last, others = self.values[-1], [v for v in self.values[:-1] if v.finite]
        self.outputs = [last, self.rng.choice(others)] if others and self.rng.random() < 0.2 else [last]

    def least_precise(self) -> str:
        return next(d for d in PRECISION_ORDER if d in self.dtypes)

    def source(self) -> str:
        outputs = ", ".join(v.name for v in self.outputs)
        args = ", ".join(i.value.name for i in self.inputs)
        lines = ["import torch", "import torch.nn.functional as F", "", f"DTYPE = torch.{self.dtype}", "", ""]
        if self.is_module:
            lines += ["class Program(torch.nn.Module):", "    def __init__(self):", "        super().__init__()"]
            lines += [f"        {line}" for line in self.init_lines]
            lines += ["", f"    def forward(self, {args}):"] + [f"        {line}" for line in self.lines]
            lines += [f"        return {outputs}", "", "",
                      "def make_program():", f"    torch.manual_seed({self.seed})",
                      "    return Program().to(DTYPE).eval()"]
        else:
            lines += [f"def program({args}):"] + [f"    {line}" for line in self.lines]
            lines += [f"    return {outputs}", "", "", "def make_program():", "    return program"]
        lines += ["", "", "def make_inputs(seed):", "    gen = torch.Generator().manual_seed(seed)", "    return ("]
        lines += [f"        {_input_source(i)}," for i in self.inputs]
        lines += ["    )", ""]
        return "\n".join(lines)


def _input_source(inp: _Input) -> str:
    value = inp.value
    dims = ", ".join(map(str, value.shape))
    draw = (f"torch.rand({dims}, generator=gen).add_(0.5)" if value.positive
            else f"torch.randn({dims}, generator=gen).mul_({inp.scale!r})")
    return f"{draw}.to(torch.{value.dtype})"


# -------------------------------------------------------------------------------------- shape helpers

def _broadcast(s, t):
    out = []
    for x, y in itertools.zip_longest(reversed(s), reversed(t), fillvalue=1):
        if x != y and 1 not in (x, y):
            return None
        out.append(max(x, y))
    return tuple(reversed(out))


def _variant(b: _Builder, shape) -> tuple[int, ...]:
    """A shape that broadcasts against ``shape``: some dims 1, maybe fewer leading dims, maybe one more."""
    dims = [1 if b.rng.random() < 0.3 else d for d in shape]
    if len(dims) > 1 and b.rng.random() < 0.3:
        dims = dims[b.rng.randint(1, len(dims) - 1):]
    elif len(dims) < 4 and b.rng.random() < 0.1:
        dims.insert(0, b.size())
    return tuple(dims) or (1,)


def _dim(b: _Builder, rank: int) -> int:
    """A dimension index, negative half the time."""
    d = b.rng.randrange(rank)
    return d - rank if b.rng.random() < 0.5 else d


def _subscript(rank: int, dim: int, item: str) -> str:
    """``[:, :, item]`` (or ``[..., item]`` from the end) selecting ``item`` along ``dim``."""
    dim %= rank
    if dim == rank - 1 and rank > 1:
        return f"[..., {item}]"
    return "[" + ", ".join([":"] * dim + [item]) + "]"


# ----------------------------------------------------------------------------------------- matmul

def _matmul(b: _Builder, a: Value):
    if not a.shape:
        return None
    k, n = a.shape[-1], b.size()
    scale = round(k ** -0.5, 3)
    if len(a.shape) == 1:
        w = b.tensor((k, n), a.dtype, scale=scale)
        return b.emit("matmul", f"{a.name} @ {w.name}", (n,), a.dtype, a.mag * 1.5, True)
    batch, m = a.shape[:-2], a.shape[-2]
    form = b.rng.choice(("@", "matmul", "bmm", "vector", "left", "einsum", "chain", "existing"))
    if form == "existing":
        other = b.existing(lambda v: v.dtype == a.dtype and v.name != a.name and len(v.shape) >= 2 and v.shape[-1] == k
                           and _broadcast(batch, v.shape[:-2]) is not None)
        if other is not None:  # a @ other^T, as attention scores are written
            out = _broadcast(batch, other.shape[:-2]) + (m, other.shape[-2])
            return b.emit("matmul", f"{a.name} @ {other.name}.transpose(-2, -1)", out, a.dtype,
                          a.mag * other.mag * math.sqrt(k), True)
        form = "@"
    if form == "bmm" and len(a.shape) == 3:
        w = b.tensor((a.shape[0], k, n), a.dtype, scale=scale)
        return b.emit("matmul", f"torch.bmm({a.name}, {w.name})", (a.shape[0], m, n), a.dtype, a.mag * 1.5, True)
    if form == "vector":
        w = b.tensor((k,), a.dtype, scale=scale)
        return b.emit("matmul", f"{a.name} @ {w.name}", a.shape[:-1], a.dtype, a.mag * 1.5, True)
    if form == "left":
        wbatch = _variant(b, batch) if batch and b.rng.random() < 0.5 else ()
        w = b.tensor(wbatch + (n, m), a.dtype, scale=round(m ** -0.5, 3))
        return b.emit("matmul", f"torch.matmul({w.name}, {a.name})", _broadcast(wbatch, batch) + (n, k), a.dtype,
                      a.mag * 1.5, True)
    if form == "einsum":
        w = b.tensor((k, n), a.dtype, scale=scale)
        return b.emit("matmul", f"torch.einsum('...ij,jk->...ik', {a.name}, {w.name})", batch + (m, n), a.dtype,
                      a.mag * 1.5, True)
    if form == "chain":
        p = b.size()
        w1, w2 = b.tensor((k, p), a.dtype, scale=scale), b.tensor((p, n), a.dtype, scale=round(p ** -0.5, 3))
        return b.emit("matmul", f"{a.name} @ {w1.name} @ {w2.name}", batch + (m, n), a.dtype, a.mag * 2, True)
    wbatch = _variant(b, batch) if batch and b.rng.random() < 0.4 else ()
    w = b.tensor(wbatch + (k, n), a.dtype, scale=scale)
    expr = f"{a.name} @ {w.name}" if form == "@" else f"torch.matmul({a.name}, {w.name})"
    return b.emit("matmul", expr, _broadcast(batch, wbatch) + (m, n), a.dtype, a.mag * 1.5, True)


# ------------------------------------------------------------------------------------------ views

def _reshaped(b: _Builder, shape) -> tuple[int, ...]:
    choices = [(math.prod(shape),)]
    if len(shape) >= 2:
        i = b.rng.randrange(len(shape) - 1)
        choices.append(shape[:i] + (shape[i] * shape[i + 1],) + shape[i + 2:])
    if len(shape) < 4:
        splits = [(i, f) for i, d in enumerate(shape) for f in range(2, d) if d % f == 0]
        if splits:
            i, f = b.rng.choice(splits)
            choices.append(shape[:i] + (f, shape[i] // f) + shape[i + 1:])
        i = b.rng.randint(0, len(shape))
        choices.append(shape[:i] + (1,) + shape[i:])
    return b.rng.choice(choices)


def _view(b: _Builder, a: Value):
    if not a.shape:
        return None
    rank, form = len(a.shape), b.rng.choice(("reshape", "reshape", "flatten", "unsqueeze", "squeeze", "expand"))
    if form == "reshape":
        shape = _reshaped(b, a.shape)
        dims = list(map(str, shape))
        if b.rng.random() < 0.3:
            dims[b.rng.randrange(len(dims))] = "-1"
        method = "view" if a.contiguous and b.rng.random() < 0.5 else "reshape"
        return b.emit("view", f"{a.name}.{method}({', '.join(dims)})", shape, a.dtype, a.mag, a.contiguous)
    if form == "flatten" and rank >= 2:
        start = b.rng.randrange(rank - 1)
        end = b.rng.randrange(start + 1, rank)
        shape = a.shape[:start] + (math.prod(a.shape[start:end + 1]),) + a.shape[end + 1:]
        return b.emit("view", f"torch.flatten({a.name}, {start}, {end})", shape, a.dtype, a.mag, a.contiguous)
    if form == "unsqueeze" and rank < 4:
        d = b.rng.randint(-rank - 1, rank)
        at = d % (rank + 1)
        return b.emit("view", f"{a.name}.unsqueeze({d})", a.shape[:at] + (1,) + a.shape[at:], a.dtype, a.mag,
                      a.contiguous)
    ones = [i for i, s in enumerate(a.shape) if s == 1]
    if form == "squeeze" and ones and rank > 1:
        if b.rng.random() < 0.3 and len(ones) < rank:
            return b.emit("view", f"{a.name}.squeeze()", tuple(s for s in a.shape if s != 1), a.dtype, a.mag,
                          a.contiguous)
        d = b.rng.choice(ones)
        return b.emit("view", f"{a.name}.squeeze({d})", a.shape[:d] + a.shape[d + 1:], a.dtype, a.mag, a.contiguous)
    if form == "expand" and ones:
        shape = tuple(b.size() if s == 1 else s for s in a.shape)
        dims = ", ".join(str(n) if s == 1 else "-1" for n, s in zip(shape, a.shape))
        return b.emit("view", f"{a.name}.expand({dims})", shape, a.dtype, a.mag)
    return None


def _permute(b: _Builder, a: Value):
    rank = len(a.shape)
    if rank < 2:
        return None
    form = b.rng.choice(("permute", "transpose", "mT", "contiguous"))
    if form == "permute" and rank > 2:
        perm = list(range(rank))
        while perm == sorted(perm):
            b.rng.shuffle(perm)
        expr = (f"{a.name}.permute({', '.join(map(str, perm))})" if b.rng.random() < 0.5
                else f"torch.permute({a.name}, {tuple(perm)})")
        return b.emit("permute", expr, tuple(a.shape[p] for p in perm), a.dtype, a.mag)
    if form == "mT" or rank == 2 and form == "permute":
        expr = f"{a.name}.t()" if rank == 2 and b.rng.random() < 0.3 else f"{a.name}.mT"
        return b.emit("permute", expr, a.shape[:-2] + (a.shape[-1], a.shape[-2]), a.dtype, a.mag)
    i, j = sorted(b.rng.sample(range(rank), 2))
    shape = list(a.shape)
    shape[i], shape[j] = shape[j], shape[i]
    expr = f"{a.name}.transpose({i - rank if b.rng.random() < 0.3 else i}, {j})"
    if form == "contiguous":
        return b.emit("permute", f"{expr}.contiguous()", shape, a.dtype, a.mag, True)
    return b.emit("permute", expr, shape, a.dtype, a.mag)


# ------------------------------------------------------------------------------------ elementwise

def _operand(b: _Builder, a: Value, positive=False) -> Value:
    """A tensor to combine with ``a``: an earlier value that broadcasts with it, or a new one that does."""
    if not positive and b.rng.random() < 0.35:
        other = b.existing(lambda v: v.name != a.name and _broadcast(a.shape, v.shape) is not None
                           and b.fits(_broadcast(a.shape, v.shape)))
        if other is not None:
            return other
    return b.tensor(_variant(b, a.shape), a.dtype, positive=positive)


def _promote(s: str, t: str) -> str:
    if s == t:
        return s
    if {s, t} == set(LOW_PRECISION):
        return "float32"
    return max(s, t, key=PRECISION_ORDER.index)


def _arith(b: _Builder, a: Value):
    op = b.rng.choice("+-*/") if b.rng.random() < 0.85 else b.rng.choice(("maximum", "minimum", "clamp"))
    if op == "clamp":
        expr = b.rng.choice((f"{a.name}.clamp(-1.0, 1.0)", f"torch.clamp({a.name}, min=0.0)"))
        return b.emit("arith", expr, a.shape, a.dtype, a.mag)
    if b.rng.random() < 0.25:  # a Python scalar
        s = b.rng.choice((0.5, 2.0, 3, -1.5, 0.125))
        if op == "/":
            expr, mag = (f"{a.name} / {s!r}", a.mag / min(abs(s), 1)) if b.rng.random() < 0.6 else \
                (f"{s!r} / ({a.name}.abs() + 1)", abs(s))
        elif op in "+-*":
            expr = f"{a.name} {op} {s!r}" if b.rng.random() < 0.6 else f"{s!r} {op} {a.name}"
            mag = a.mag * abs(s) if op == "*" else a.mag + abs(s)
        else:
            expr, mag = f"torch.{op}({a.name}, torch.tensor({s!r}, dtype={a.name}.dtype))", max(a.mag, abs(s))
        return b.emit("arith", expr, a.shape, a.dtype, mag)
    other = _operand(b, a, positive=op == "/" and b.rng.random() < 0.5)
    shape, dtype = _broadcast(a.shape, other.shape), _promote(a.dtype, other.dtype)
    if op == "/":
        denominator = other.name if other.positive else f"({other.name}.abs() + 1)"
        return b.emit("arith", f"{a.name} / {denominator}", shape, dtype, a.mag * 2)
    if op in ("maximum", "minimum"):
        return b.emit("arith", f"torch.{op}({a.name}, {other.name})", shape, dtype, max(a.mag, other.mag))
    mag = a.mag * other.mag if op == "*" else a.mag + other.mag
    expr = f"{a.name} {op} {other.name}" if b.rng.random() < 0.7 else f"{other.name} {op} {a.name}"
    return b.emit("arith", expr, shape, dtype, mag)


def _square(b: _Builder, a: Value):
    expr = b.rng.choice(("{a} ** 2", "{a}.pow(2)", "torch.pow({a}, 2)", "torch.square({a})", "{a} * {a}"))
    return b.emit("pow", expr.format(a=a.name), a.shape, a.dtype, a.mag ** 2)


UNARY = {  # template -> magnitude of the result given the operand's
    "torch.log({a}.abs() + 1)": lambda m: math.log(m + 1),
    "torch.sqrt({a}.abs())": math.sqrt,
    "torch.rsqrt({a}.abs() + 0.5)": lambda m: 1.5,
    "torch.tanh({a})": lambda m: 1.0,
    "torch.sigmoid({a})": lambda m: 1.0,
    "{a}.sigmoid() * {a}": lambda m: m,
    "F.relu({a})": lambda m: m,
    "torch.relu({a})": lambda m: m,
    "F.gelu({a})": lambda m: m,
    "F.gelu({a}, approximate='tanh')": lambda m: m,
    "F.silu({a})": lambda m: m,
    "{a}.abs()": lambda m: m,
    "-{a}": lambda m: m,
    "torch.neg({a})": lambda m: m,
    "torch.reciprocal({a}.abs() + 0.5)": lambda m: 2.0,
    "1 / ({a} * {a} + 1)": lambda m: 1.0,
    "torch.erf({a})": lambda m: 1.0,
    "F.mish({a})": lambda m: m,
    "torch.selu({a})": lambda m: 1.06 * m,
}


def _unary(b: _Builder, a: Value):
    if b.rng.random() < 0.15:  # exponentials get a bounded argument
        factor = min(1.0, 2.0 / a.mag)
        arg = a.name if factor == 1.0 else f"{a.name} * {round(factor, 3)!r}"
        return b.emit("unary", f"torch.exp({arg})", a.shape, a.dtype, math.exp(2.0))
    template = b.rng.choice(list(UNARY))
    return b.emit("unary", template.format(a=a.name), a.shape, a.dtype, UNARY[template](a.mag))


def _cast(b: _Builder, a: Value):
    """Mixed-dtype programs: up to float32 and back, as mixed-precision code does."""
    if a.dtype in LOW_PRECISION:
        return b.emit("cast", f"{a.name}.float()", a.shape, "float32", a.mag, a.contiguous)
    if a.dtype != b.dtype:
        method = {"float16": ".half()", "bfloat16": ".bfloat16()"}.get(b.dtype, ".to(DTYPE)")
        return b.emit("cast", f"{a.name}{method}", a.shape, b.dtype, a.mag, a.contiguous)
    if a.dtype == "float32":
        return b.emit("cast", f"{a.name}.to(torch.float16)", a.shape, "float16", a.mag, a.contiguous)
    return b.emit("cast", f"{a.name}.float()", a.shape, "float32", a.mag, a.contiguous)


# ------------------------------------------------------------------------------------- reductions

def _reduce_dims(b: _Builder, rank: int):
    """None (all dims), one dim, or a tuple of several."""
    r = b.rng.random()
    if r < 0.15:
        return None
    if r < 0.7 or rank == 1:
        return _dim(b, rank)
    return tuple(sorted(b.rng.sample(range(rank), b.rng.randint(2, rank))))


def _reduce(b: _Builder, a: Value):
    if not a.shape:
        return None
    rank, op = len(a.shape), b.rng.choice(("sum", "mean", "amax", "amin", "max"))
    dims, keepdim = _reduce_dims(b, rank), b.rng.random() < 0.5
    reduced = range(rank) if dims is None else [d % rank for d in ((dims,) if isinstance(dims, int) else dims)]
    count = math.prod(a.shape[d] for d in reduced)
    if dims is None:
        shape, keepdim = (), False
    else:
        shape = tuple(1 if i in reduced else s for i, s in enumerate(a.shape) if keepdim or i not in reduced)
    mag = a.mag * count if op == "sum" else a.mag
    if dims is None:
        expr = {"sum": "{a}.sum()", "mean": "{a}.mean()", "amax": "torch.amax({a})", "amin": "{a}.amin()",
                "max": "{a}.max()"}[op]
    elif op == "max" and isinstance(dims, int):
        expr = f"{{a}}.max(dim={dims}, keepdim={keepdim}).values"
    else:
        fn = "amax" if op == "max" else op
        expr = (f"{{a}}.{fn}({dims}, keepdim={keepdim})" if b.rng.random() < 0.5
                else f"torch.{fn}({{a}}, dim={dims}, keepdim={keepdim})")
    return b.emit("reduction", expr.format(a=a.name), shape, a.dtype, mag)


def _softmax(b: _Builder, a: Value):
    if not a.shape:
        return None
    d = _dim(b, len(a.shape))
    n = a.shape[d]
    forms = {
        f"torch.softmax({a.name}, {d})": 1.0, f"F.softmax({a.name}, dim={d})": 1.0, f"{a.name}.softmax({d})": 1.0,
        f"F.log_softmax({a.name}, dim={d})": 2 * a.mag + math.log(n + 1),
        f"{a.name}.log_softmax({d})": 2 * a.mag + math.log(n + 1),
    }
    if b.rng.random() < 0.2:
        shape = a.shape[:d % len(a.shape)] + a.shape[d % len(a.shape) + 1:]
        return b.emit("softmax", f"torch.logsumexp({a.name}, {d})", shape, a.dtype, a.mag + math.log(n + 1))
    if b.rng.random() < 0.2:  # written by hand, max-subtracted
        e = b.emit("softmax", f"torch.exp({a.name} - {a.name}.amax({d}, keepdim=True))", a.shape, a.dtype, 1.0)
        return e and b.emit("softmax", f"{e.name} / {e.name}.sum({d}, keepdim=True)", a.shape, a.dtype, 1.0)
    if b.mixed and a.dtype in LOW_PRECISION and b.rng.random() < 0.3:
        return b.emit("softmax", f"torch.softmax({a.name}, {d}, dtype=torch.float32)", a.shape, "float32", 1.0)
    expr = b.rng.choice(list(forms))
    return b.emit("softmax", expr, a.shape, a.dtype, forms[expr])


# ------------------------------------------------------------------------------------------ norms

def _norm(b: _Builder, a: Value):
    if not a.shape:
        return None
    n, eps = a.shape[-1], b.rng.choice((1e-5, 1e-6, 1e-3) if a.dtype in LOW_PRECISION else (1e-5, 1e-6, 1e-3, 1e-12))
    form = b.rng.choice(("by hand", "by hand var", "layer_norm", "module", "rms by hand", "rms_norm"))
    mag = 4.0 if n > 1 else 1.0
    affine = b.rng.random() < 0.6
    weight = b.tensor((n,), a.dtype, positive=True) if affine and form != "module" else None
    bias = b.tensor((n,), a.dtype, scale=0.5) if affine and form in ("by hand", "layer_norm") and b.rng.random() < 0.7 \
        else None
    if form == "module" and b.is_module and a.dtype == b.dtype:
        init = ("torch.nn.init.uniform_({m}.weight, 0.5, 1.5)", "torch.nn.init.uniform_({m}.bias, -0.5, 0.5)")
        norm = b.submodule("norm", f"torch.nn.LayerNorm({n}, eps={eps!r}, elementwise_affine={affine})",
                           init if affine else ())
        return b.emit("norm", f"{norm}({a.name})", a.shape, a.dtype, mag)
    if form in ("layer_norm", "module"):
        args = f", {weight.name if weight else None}, {bias.name if bias else None}"
        return b.emit("norm", f"F.layer_norm({a.name}, ({n},){args if weight else ''}, eps={eps!r})", a.shape,
                      a.dtype, mag * 1.5)
    if form == "rms_norm":
        w = f", {weight.name}" if weight else ""
        return b.emit("norm", f"F.rms_norm({a.name}, ({n},){w}, eps={eps!r})", a.shape, a.dtype, mag * 1.5)
    if form == "rms by hand":
        y = b.emit("norm", f"{a.name} * torch.rsqrt({a.name}.pow(2).mean(-1, keepdim=True) + {eps!r})", a.shape,
                   a.dtype, mag)
    else:
        c = b.emit("norm", f"{a.name} - {a.name}.mean(-1, keepdim=True)", a.shape, a.dtype, 2 * a.mag)
        if c is None:
            return None
        if form == "by hand":
            y = b.emit("norm", f"{c.name} / torch.sqrt(({c.name} * {c.name}).mean(-1, keepdim=True) + {eps!r})",
                       a.shape, a.dtype, mag)
        else:
            y = b.emit("norm", f"{c.name} * torch.rsqrt({a.name}.var(-1, keepdim=True, unbiased=False) + {eps!r})",
                       a.shape, a.dtype, mag)
    if y is not None and weight is not None:
        y = b.emit("norm", f"{y.name} * {weight.name}" + (f" + {bias.name}" if bias else ""), a.shape, a.dtype,
                   mag * 2)
    return y


# ----------------------------------------------------------------------------- indexing and concat

def _index(b: _Builder, a: Value):
    if not a.shape:
        return None
    rank, form = len(a.shape), b.rng.choice(("cat", "cat", "stack", "slice", "slice", "narrow", "int", "chunk"))
    d = _dim(b, rank)
    at, n = d % rank, a.shape[d]
    if form in ("cat", "stack"):
        if form == "stack" or b.rng.random() < 0.3:
            other = b.existing(lambda v: v.shape == a.shape and v.name != a.name) or a
        else:
            shape = list(a.shape)
            shape[at] = b.size()
            other = b.tensor(tuple(shape), a.dtype)
        dtype = _promote(a.dtype, other.dtype)
        if form == "stack":
            s = b.rng.randint(0, rank)
            return b.emit("index", f"torch.stack([{a.name}, {other.name}], dim={s})", a.shape[:s] + (2,) + a.shape[s:],
                          dtype, max(a.mag, other.mag), True)
        shape = a.shape[:at] + (n + other.shape[at],) + a.shape[at + 1:]
        return b.emit("index", f"torch.cat([{a.name}, {other.name}], dim={d})", shape, dtype, max(a.mag, other.mag),
                      True)
    if form == "int" and rank > 1:
        i = b.rng.randrange(-n, n)
        return b.emit("index", f"{a.name}{_subscript(rank, d, str(i))}", a.shape[:at] + a.shape[at + 1:], a.dtype,
                      a.mag)
    if n < 2:
        return None
    if form == "chunk":
        chunks = b.rng.randint(2, n)
        sizes = [len(r) for r in _chunks(n, chunks)]
        j = b.rng.randrange(len(sizes))
        return b.emit("index", f"{a.name}.chunk({chunks}, dim={d})[{j}]",
                      a.shape[:at] + (sizes[j],) + a.shape[at + 1:], a.dtype, a.mag)
    start = b.rng.randrange(n - 1)
    stop = b.rng.randint(start + 1, n)
    if form == "narrow":
        return b.emit("index", f"{a.name}.narrow({d}, {start}, {stop - start})",
                      a.shape[:at] + (stop - start,) + a.shape[at + 1:], a.dtype, a.mag)
    step = b.rng.choice((1, 1, 2))
    item = (f"{start - n}:" if b.rng.random() < 0.2 else f"{start}:{stop}") + (f":{step}" if step > 1 else "")
    length = len(range(n)[_slice(item)])
    return b.emit("index", f"{a.name}{_subscript(rank, d, item)}", a.shape[:at] + (length,) + a.shape[at + 1:], a.dtype,
                  a.mag)


def _slice(item: str) -> slice:
    parts = [int(p) if p else None for p in item.split(":")]
    return slice(*parts)


def _chunks(n: int, chunks: int) -> list[range]:
    """How torch.chunk splits ``n`` into ``chunks`` pieces (ceil-sized, the last may be shorter or missing)."""
    size = -(-n // chunks)
    return [range(i, min(i + size, n)) for i in range(0, n, size)]


# ------------------------------------------------------------------------------------------ masks

def _condition(b: _Builder, a: Value) -> str:
    """A boolean mask that broadcasts to ``a``, compared from inputs and parameters only: a comparison of a
    computed value flips where the plan rounds differently from eager, which is no error of the plan."""
    def leaf():
        found = b.existing(lambda v: v.leaf and _broadcast(a.shape, v.shape) == a.shape)
        return found or b.input(tuple(1 if b.rng.random() < 0.3 else d for d in a.shape), a.dtype)
    x, y = leaf(), leaf()
    forms = [f"{x.name} > 0", f"{x.name} < 0.5", f"{x.name} >= -0.25", f"({x.name} > 0) & ({x.name} < 1)"]
    if x.name != y.name:
        forms += [f"{x.name} < {y.name}", f"({x.name} > 0) | ({y.name} > 0)"]
    return b.rng.choice(forms)


def _mask(b: _Builder, a: Value):
    if not a.shape:
        return None
    if len(a.shape) >= 2 and b.rng.random() < 0.5:
        return _causal(b, a)
    cond = _condition(b, a)
    form = b.rng.choice(("where scalar", "where tensor", "where zeros", "masked_fill"))
    if form == "masked_fill":
        fill = b.rng.choice((0.0, -1.0, 2.5))
        return b.emit("mask", f"{a.name}.masked_fill({cond}, {fill!r})", a.shape, a.dtype, max(a.mag, 2.5))
    if form == "where zeros":
        return b.emit("mask", f"torch.where({cond}, {a.name}, torch.zeros_like({a.name}))", a.shape, a.dtype, a.mag)
    if form == "where scalar":
        return b.emit("mask", f"torch.where({cond}, {a.name}, -0.5)", a.shape, a.dtype, a.mag)
    other = _operand(b, a)
    shape = _broadcast(a.shape, other.shape)
    return b.emit("mask", f"torch.where({cond}, {other.name}, {a.name})", shape, _promote(a.dtype, other.dtype),
                  max(a.mag, other.mag))


def _causal(b: _Builder, a: Value):
    """A causal (triangular) mask on the last two dims, filled with -inf (or the dtype's lowest value, as HF
    code does) and softmaxed."""
    m, n = a.shape[-2:]
    k = b.rng.randint(1, 2)  # diagonal >= 1: every row keeps its first column, so no row is all -inf
    masks = (f"torch.triu(torch.ones({m}, {n}, dtype=torch.bool), diagonal={k})",
             f"torch.ones({m}, {n}).triu({k}).bool()",
             f"torch.tril(torch.ones({m}, {n}), diagonal={k - 1}) == 0")
    form = b.rng.choice(("masked_fill", "where", "additive", "lowest"))
    if form == "masked_fill":
        expr = f"{a.name}.masked_fill({b.rng.choice(masks)}, float('-inf'))"
    elif form == "lowest":
        expr = f"{a.name}.masked_fill({b.rng.choice(masks)}, torch.finfo({a.name}.dtype).min)"
    elif form == "where":
        expr = f"torch.where({b.rng.choice(masks)}, float('-inf'), {a.name})"
    else:
        expr = f"{a.name} + torch.full(({m}, {n}), float('-inf'), dtype={a.name}.dtype).triu({k})"
    scores = b.emit("mask", expr, a.shape, a.dtype, a.mag, finite=False)
    return scores and b.emit("mask", f"torch.softmax({scores.name}, dim=-1)", a.shape, a.dtype, 1.0)


# ------------------------------------------------------------------------------- linear, attention

def _linear(b: _Builder, a: Value):
    if not a.shape:
        return None
    k, n = a.shape[-1], b.size()
    form = b.rng.choice(("linear", "linear", "parallel", "mlp"))
    if b.is_module and a.dtype == b.dtype and b.rng.random() < 0.6:
        def project(x: str, width_in: int, width: int) -> str:
            layer = b.submodule("linear", f"torch.nn.Linear({width_in}, {width}, bias={b.rng.random() < 0.7})")
            return f"{layer}({x})"
    else:
        def project(x: str, width_in: int, width: int) -> str:
            w = b.tensor((width, width_in), a.dtype, scale=round(width_in ** -0.5, 3))
            bias = b.tensor((width,), a.dtype, scale=0.5).name if b.rng.random() < 0.6 else None
            return f"F.linear({x}, {w.name}, {bias})" if bias else f"F.linear({x}, {w.name})"
    shape = a.shape[:-1] + (n,)
    if form == "parallel":  # projections of one input: the merge-projections rules' pattern
        combine = b.rng.choice(("{p} * {q}", "{p} + {q}", "torch.cat([{p}, {q}], dim=-1)"))
        out = shape[:-1] + (2 * n,) if "cat" in combine else shape
        p, q = project(a.name, k, n), project(a.name, k, n)
        return b.emit("linear", combine.format(p=p, q=q), out, a.dtype, 4 * a.mag, True)
    if form == "mlp":
        hidden = b.size()
        act = b.rng.choice(("F.gelu", "F.relu", "F.silu", "torch.tanh"))
        return b.emit("linear", project(f"{act}({project(a.name, k, hidden)})", hidden, n), shape, a.dtype, 3 * a.mag,
                      True)
    return b.emit("linear", project(a.name, k, n), shape, a.dtype, 2 * a.mag, True)


def _attention(b: _Builder, a: Value):
    """softmax(q k^T * scale [+ mask]) v, called as SDPA or written by hand, ``a`` as the queries."""
    if len(a.shape) < 2:
        return None
    batch, (length, e) = a.shape[:-2], a.shape[-2:]
    s, ev = b.size(), b.size()
    heads = batch[-1] if len(batch) == 2 else 1
    group = b.rng.choice([g for g in (2, 4) if heads % g == 0 and heads > g] or [1])
    q = a if a.mag <= 8 else b.emit("attention", f"{a.name} * {round(4 / a.mag, 4)!r}", a.shape, a.dtype, 4.0)
    if q is None:
        return None
    if group > 1 and b.rng.random() < 0.5:  # grouped-query: fewer K/V heads, repeated as HF code does
        kv_heads = heads // group
        k0 = b.tensor(batch[:-1] + (kv_heads, s, e), a.dtype)
        v0 = b.tensor(batch[:-1] + (kv_heads, s, ev), a.dtype)
        def repeat(x: Value, width: int) -> str:
            return (f"{x.name}[:, :, None].expand({batch[0]}, {kv_heads}, {group}, {s}, {width})"
                    f".reshape({batch[0]}, {heads}, {s}, {width})")
        k = b.emit("attention", repeat(k0, e), batch + (s, e), a.dtype, k0.mag)
        v = b.emit("attention", repeat(v0, ev), batch + (s, ev), a.dtype, v0.mag)
    else:
        k, v = b.tensor(batch + (s, e), a.dtype), b.tensor(batch + (s, ev), a.dtype)
    if k is None or v is None:
        return None
    out = batch + (length, ev)
    causal_mask = f"torch.ones({length}, {s}, dtype=torch.bool).tril()"
    if b.rng.random() < 0.5:
        form = b.rng.choice(("plain", "is_causal", "bool mask", "float mask", "scale"))
        extra = {"plain": "", "is_causal": ", is_causal=True", "bool mask": f", attn_mask={causal_mask}",
                 "scale": ", scale=0.3"}.get(form)
        if form == "float mask":
            extra = f", attn_mask={b.tensor((length, s), a.dtype).name}"
        return b.emit("attention", f"F.scaled_dot_product_attention({q.name}, {k.name}, {v.name}{extra})", out,
                      a.dtype, v.mag, True)
    scale = round(e ** -0.5, 4)
    scores = b.emit("attention", b.rng.choice((f"{q.name} @ {k.name}.transpose(-2, -1) * {scale!r}",
                                               f"torch.matmul({q.name} * {scale!r}, {k.name}.mT)",
                                               f"({q.name} @ {k.name}.mT) / {round(e ** 0.5, 4)!r}")),
                    batch + (length, s), a.dtype, q.mag * k.mag * math.sqrt(e))
    if scores is None:
        return None
    if b.rng.random() < 0.5:
        scores = b.emit("attention", f"{scores.name}.masked_fill(~{causal_mask}, float('-inf'))", scores.shape,
                        a.dtype, scores.mag, finite=False)
    upcast = a.dtype in LOW_PRECISION and b.rng.random() < 0.5
    probs = (f"torch.softmax({scores.name}.float(), dim=-1).to({q.name}.dtype)" if upcast
             else f"{scores.name}.softmax(dim=-1)")
    p = b.emit("attention", probs, scores.shape, a.dtype, 1.0)
    return p and b.emit("attention", f"{p.name} @ {v.name}", out, a.dtype, v.mag, True)


# -------------------------------------------------------------------- forms the rule sets rewrite

def _rewritable(b: _Builder, a: Value):
    """A form some rule set rewrites (shared factors, transposed products, adjacent slices, rotary halves,
    identities, scalar chains, shifted softmax, ...), instantiated on ``a`` with random operands."""
    rank = len(a.shape)
    form = b.rng.choice(("factor", "matmul factor", "transposed product", "permuted sum", "adjacent slices",
                         "rotary", "identity", "scalar chain", "sum of sum", "shifted softmax", "expanded"))
    if not rank:
        form = "scalar chain"
    if form == "factor":
        u = b.tensor(_variant(b, a.shape), a.dtype)
        w = b.tensor(_variant(b, _broadcast(a.shape, u.shape)), a.dtype)
        shape = _broadcast(_broadcast(a.shape, u.shape), w.shape)
        expr = b.rng.choice((f"{a.name} * {u.name} + {a.name} * {w.name}",
                             f"{u.name} * {a.name} - {w.name} * {a.name}"))
        return b.emit("rewritable", expr, shape, a.dtype, a.mag * (u.mag + w.mag))
    if form == "matmul factor":
        k, n = a.shape[-1], b.size()
        w1, w2 = (b.tensor((k, n), a.dtype, scale=round(k ** -0.5, 3)) for _ in range(2))
        op = b.rng.choice("+-")
        return b.emit("rewritable", f"{a.name} @ {w1.name} {op} {a.name} @ {w2.name}", a.shape[:-1] + (n,), a.dtype,
                      3 * a.mag, True)
    if form == "transposed product" and rank >= 2:
        k, n, m = a.shape[-1], b.size(), a.shape[-2]
        if b.rng.random() < 0.5:
            w = b.tensor((k, n), a.dtype, scale=round(k ** -0.5, 3))
            return b.emit("rewritable", f"({a.name} @ {w.name}).mT", a.shape[:-2] + (n, m), a.dtype, 2 * a.mag)
        w = b.tensor((n, k), a.dtype, scale=round(k ** -0.5, 3))
        return b.emit("rewritable", f"{w.name} @ {a.name}.mT", a.shape[:-2] + (n, m), a.dtype, 2 * a.mag, True)
    if form == "permuted sum" and rank >= 2:
        c = b.existing(lambda v: v.shape == a.shape and v.name != a.name) or b.tensor(a.shape, a.dtype)
        perm = list(range(rank))
        while perm == sorted(perm):
            b.rng.shuffle(perm)
        p = ", ".join(map(str, perm))
        return b.emit("rewritable", f"{a.name}.permute({p}) {b.rng.choice('+*')} {c.name}.permute({p})",
                      tuple(a.shape[i] for i in perm), _promote(a.dtype, c.dtype), a.mag * max(c.mag, 2))
    d = _dim(b, rank) if rank else 0
    n = a.shape[d] if rank else 0
    if form == "adjacent slices" and n >= 2:
        k = b.rng.randint(1, n - 1)
        first, second = f"{a.name}{_subscript(rank, d, f':{k}')}", f"{a.name}{_subscript(rank, d, f'{k}:')}"
        if b.rng.random() < 0.4:
            first = f"{first} * 0.5"
        return b.emit("rewritable", f"torch.cat([{first}, {second}], dim={d})", a.shape, a.dtype, a.mag, True)
    if form == "rotary" and a.shape[-1] % 2 == 0:  # x * cos + rotate_half(x) * sin
        h = a.shape[-1] // 2
        cos, sin = (b.tensor(a.shape[-2:], a.dtype, scale=0.7) for _ in range(2))
        rotated = f"torch.cat([-{a.name}[..., {h}:], {a.name}[..., :{h}]], dim=-1)"
        return b.emit("rewritable", f"{a.name} * {cos.name} + {rotated} * {sin.name}", a.shape, a.dtype, 6 * a.mag)
    if form == "identity":
        dims = ", ".join(map(str, a.shape))
        expr = b.rng.choice((f"-(-{a.name})", f"{a.name} + 0.0", f"{a.name} * 1.0", f"({a.name} - 0) / 1",
                             f"{a.name}.reshape({dims})", f"{a.name}.expand({dims})",
                             f"{a.name}{_subscript(rank, d, ':')}", f"{a.name}.narrow({d}, 0, {n})",
                             f"{a.name}.permute({', '.join(map(str, range(rank)))})"))
        return b.emit("rewritable", expr, a.shape, a.dtype, a.mag, a.contiguous)
    if form == "sum of sum":
        c = b.existing(lambda v: v.shape == a.shape and v.name != a.name) or b.tensor(a.shape, a.dtype)
        inner = b.rng.choice((f"{a.name} + {c.name}", f"{a.name} * 2.0", f"{a.name} - {c.name} * 0.5"))
        return b.emit("rewritable", f"({inner}).sum({d})", a.shape[:d % rank] + a.shape[d % rank + 1:],
                      _promote(a.dtype, c.dtype), (a.mag + c.mag) * 2 * n)
    if form == "shifted softmax":
        row = b.tensor(a.shape[:-1] + (1,), a.dtype)
        expr = b.rng.choice((f"torch.softmax({a.name} - {a.name}.amax(-1, keepdim=True), -1)",
                             f"torch.softmax({a.name} + {row.name}, dim=-1)"))
        return b.emit("rewritable", expr, a.shape, a.dtype, 1.0)
    ones = [i for i, s in enumerate(a.shape) if s == 1]
    if form == "expanded" and ones:
        shape = tuple(b.size() if s == 1 else s for s in a.shape)
        c = b.tensor(a.shape, a.dtype)
        dims = ", ".join(map(str, shape))
        return b.emit("rewritable", f"{a.name}.expand({dims}) {b.rng.choice('+-*')} {c.name}.expand({dims})", shape,
                      a.dtype, a.mag * max(c.mag, 2))
    op = b.rng.choice(("({a} + 1.5) + 0.5", "({a} * 2) * 0.25", "2.0 * ({a} * 3)", "({a} - 1) * 0.5 + 1"))
    return b.emit("rewritable", op.format(a=a.name), a.shape, a.dtype, a.mag * 6 + 2)


# ----------------------------------------------------- structure from masks, contractions of broadcasts

def _structured(b: _Builder, a: Value):
    """Algebra that hides behind masks, broadcasts and reorderings (rules/structure.egg, reduction.egg,
    reorder.egg): products by diagonal, triangular or banded masked matrices, by a band of ones and by
    kron(I, S), traces of products, broadcast products summed, squared distances, running-sum differences,
    reductions of sorted, rolled or flipped values, running sums and reversals through products and sums
    (rules/synthesized.egg)."""
    if len(a.shape) < 2:
        return None
    rank, (n, k) = len(a.shape), a.shape[-2:]
    like = f"dtype={a.name}.dtype"
    eye = f"torch.eye({n}, {like})"
    form = b.rng.choice(("diag_embed", "eye product", "masked diagonal", "trace", "running sum", "causal ones",
                         "broadcast contraction", "distances", "cumsum diff", "reordered sum", "band", "window",
                         "kron identity", "scanned product", "reversed product", "running product",
                         "sum of running sums"))
    if form == "diag_embed":
        v = b.tensor(a.shape[:-1], a.dtype)
        return b.emit("structured", f"torch.diag_embed({v.name}) @ {a.name}", a.shape, a.dtype, a.mag * v.mag)
    if form in ("eye product", "masked diagonal", "trace"):
        s = b.tensor((n, n), a.dtype)
        if form == "eye product":
            return b.emit("structured", f"({s.name} * {eye}) @ {a.name}", a.shape, a.dtype, a.mag * s.mag)
        if form == "masked diagonal":
            mask = f"~torch.eye({n}, dtype=torch.bool)"
            return b.emit("structured", f"{s.name}.masked_fill({mask}, 0.0) @ {a.name}", a.shape, a.dtype,
                          a.mag * s.mag)
        t = b.tensor((k, n), a.dtype, scale=round(k ** -0.5, 3))
        square = f"{a.name}.reshape(-1, {n}, {k})[0]" if rank > 2 else a.name
        return b.emit("structured", f"torch.trace({square} @ {t.name})", (), a.dtype, a.mag * t.mag * n * k ** 0.5)
    if form == "band":  # a tridiagonal part of a matrix (where of a constant band mask)
        s = b.tensor((n, n), a.dtype)
        band = f"torch.ones({n}, {n}, dtype=torch.bool).triu(-1).tril(1)"
        return b.emit("structured", f"torch.where({band}, {s.name}, 0.0) @ {a.name}", a.shape, a.dtype,
                      3 * a.mag * s.mag)
    if form == "window":  # a sliding-window sum of three rows, as a product by a band of ones
        return b.emit("structured", f"torch.ones({n}, {n}, {like}).tril().triu(-2) @ {a.name}", a.shape, a.dtype,
                      3 * a.mag)
    if form == "kron identity" and n % 2 == 0:  # a block-diagonal product: kron(I_2, S) @ a
        s = b.tensor((n // 2, n // 2), a.dtype)
        return b.emit("structured", f"torch.kron(torch.eye(2, {like}), {s.name}) @ {a.name}", a.shape, a.dtype,
                      a.mag * s.mag * n // 2)
    if form in ("scanned product", "reversed product", "running product"):
        w = b.tensor((k, b.size()), a.dtype, scale=round(k ** -0.5, 3))
        out = a.shape[:-1] + w.shape[1:]
        if form == "scanned product":  # the running sums of a product's columns
            return b.emit("structured", f"torch.cumsum({a.name} @ {w.name}, dim=-1)", out, a.dtype,
                          a.mag * w.mag * k * w.shape[1])
        if form == "reversed product":  # the contracted dim reversed
            return b.emit("structured", f"{a.name}.flip(-1) @ {w.name}", out, a.dtype, a.mag * w.mag * k)
        d = b.rng.randrange(rank - 1)  # running sums along a row dim, then the product
        return b.emit("structured", f"{a.name}.cumsum({d}) @ {w.name}", out, a.dtype,
                      a.mag * w.mag * k * a.shape[d])
    if form == "sum of running sums":  # a sum over another dim than the running sums'
        d, e = b.rng.sample(range(rank), 2)
        reduced = a.shape[:e] + (1,) + a.shape[e + 1:]
        return b.emit("structured", f"torch.cumsum({a.name}, {d}).sum({e}, keepdim=True)", reduced, a.dtype,
                      a.mag * a.shape[d] * a.shape[e])
    if form in ("running sum", "causal ones"):
        lower = (f"torch.ones({n}, {n}, {like}).tril()" if form == "running sum" else
                 f"torch.where(torch.ones({n}, {n}, dtype=torch.bool).triu(1), 0.0, 1.0).to({a.name}.dtype)")
        return b.emit("structured", f"{lower} @ {a.name}", a.shape, a.dtype, a.mag * n)
    d = _dim(b, rank)
    at = d % rank  # the dim's index in a.shape (d may count from the end)
    if form == "cumsum diff" and a.shape[at] >= 2:
        return b.emit("structured", f"torch.diff(torch.cumsum({a.name}, {d}), dim={d})",
                      a.shape[:at] + (a.shape[at] - 1,) + a.shape[at + 1:], a.dtype, 2 * a.mag * a.shape[at])
    if form == "reordered sum":
        reordered = b.rng.choice((f"torch.sort({a.name}, dim={d}).values", f"torch.roll({a.name}, 1, {d})",
                                  f"{a.name}.flip({d}).flip({d})", f"torch.flip({a.name}, ({d},))"))
        reduced = a.shape[:at] + (1,) + a.shape[at + 1:]
        return b.emit("structured", f"{reordered}.sum({d}, keepdim=True)", reduced, a.dtype, a.mag * a.shape[at])
    if rank != 2:
        return None
    w = b.tensor((b.size(), k), a.dtype)
    m = a.shape[0]
    if form == "broadcast contraction":
        return b.emit("structured", f"({a.name}[:, None, :] * {w.name}[None, :, :]).sum(-1)", (m, w.shape[0]),
                      a.dtype, a.mag * w.mag * k)
    return b.emit("structured", f"(({a.name}[:, None, :] - {w.name}[None, :, :]) ** 2).sum(-1)", (m, w.shape[0]),
                  a.dtype, (a.mag + w.mag) ** 2 * k)


# ------------------------------------------------------------------------- ops PyTorch runs as-is

def _opaque(b: _Builder, a: Value):
    """Scans and reorderings (running sums, sorts, flips and rolls are IR ops; cummax is a PyTorch call):
    EqiForge must run or model them exactly and optimize around them."""
    if not a.shape:
        return None
    d = _dim(b, len(a.shape))
    n = a.shape[d]
    forms = {
        f"torch.cumsum({a.name}, dim={d})": a.mag * n,
        f"torch.sort({a.name}, dim={d}).values": a.mag,
        f"{a.name}.sort(dim={d}, descending=True).values": a.mag,
        f"torch.flip({a.name}, dims=({d},))": a.mag,
        f"torch.roll({a.name}, shifts=1, dims={d})": a.mag,
        f"torch.cummax({a.name}, dim={d}).values": a.mag,
    }
    expr = b.rng.choice(list(forms))
    return b.emit("opaque", expr, a.shape, a.dtype, forms[expr])


def _cache(b: _Builder, a: Value):
    """Keys joined to a cache that starts empty, as a Hugging Face layer's first step does: heads split off and
    moved before the sequence, a cat with an empty past, then the heads merged by ``view``. Eager's cat makes a
    new, contiguous tensor, so the view is legal; a compiler that drops the empty operand keeps the permuted
    strides, where a view fails (a Bloom layer under Inductor's decompositions did)."""
    if len(a.shape) == 4:
        batch, seq, heads, dim = a.shape
        keys = f"{a.name}.transpose(1, 2)"
    elif len(a.shape) == 3:
        splits = [f for f in range(2, a.shape[2]) if a.shape[2] % f == 0]
        if not splits:
            return None
        (batch, seq, width), heads = a.shape, b.rng.choice(splits)
        dim = width // heads
        keys = f"{a.name}.reshape({batch}, {seq}, {heads}, {dim}).transpose(1, 2)"
    else:
        return None
    past = f"{a.name}.new_zeros({batch}, {heads}, 0, {dim})"
    return b.emit("cache", f"torch.cat([{past}, {keys}], dim=2).view({batch * heads}, {seq}, {dim})",
                  (batch * heads, seq, dim), a.dtype, a.mag, True)


FAMILIES = {  # name -> (weight, drawer(builder, operand) -> Value | None)
    "matmul": (3, _matmul), "view": (3, _view), "permute": (2, _permute), "arith": (4, _arith),
    "pow": (1, _square), "unary": (3, _unary), "reduction": (2, _reduce), "softmax": (2, _softmax),
    "norm": (2, _norm), "index": (2, _index), "mask": (2, _mask), "linear": (2, _linear),
    "attention": (1, _attention), "rewritable": (4, _rewritable), "opaque": (1, _opaque), "cast": (3, _cast),
    "structured": (2, _structured), "cache": (2, _cache),
}
