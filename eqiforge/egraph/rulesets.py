"""Load the rule files: ``rules/schema.egg`` plus one rule set per ``rules/<name>.egg``.

The file name is the rule set's name (the loader assigns it, so adding a rule set is adding a file and an
ablation is a choice of names). A rule file may hold only named rules and rewrites; anything else, a parse
error, a missing name or a ``:ruleset`` naming another set is reported with the file it came from, when
that rule set is selected (a broken file does not block the others).

Header fields, comment lines at the top of a file: ``; layer: kernel`` (default ``algebra``) and
``; assumes finite: rule-a, rule-b`` (may repeat): rules that are equalities only for finite values
(``x * 0 = 0``, a softmax dropping a row constant, ``(x * 1000) * 0.001 = x``); ``assume_finite=False``
leaves them out, so that NaN and inf propagate as in eager PyTorch.

What follows mechanically from the op table is generated from it here, not written in the files: the
schema's ``T`` datatype of algebra ops (before schema.egg), the elementwise shape rules and the algebra ops'
dtype rules of its ``analysis`` set (after it), and the one-op pointwise kernels of ``fusion`` (before the
file's own rules).
"""
from __future__ import annotations

import itertools

import os
import re
import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import egglog.bindings as eb

from .. import ops
from ..errors import EqiforgeError

SPAN = eb.RustSpan("eqiforge", 0, 0)

SCHEMA_FILE = "schema.egg"
ANALYSIS = "analysis"  # the rule set in schema.egg that derives shapes and dtypes


def rules_dir() -> Path:
    """The rules folder: $EQIFORGE_RULES_DIR, else ``rules/`` beside the package (source checkout or install)."""
    env = os.environ.get("EQIFORGE_RULES_DIR")
    if env:
        if not (Path(env) / SCHEMA_FILE).is_file():
            raise EqiforgeError(f"EQIFORGE_RULES_DIR={env!r} is not a rules folder (it has no {SCHEMA_FILE}); "
                                f"unset it to use the rules that ship with eqiforge")
        return Path(env)
    shipped = shipped_rules_dir()
    if shipped is None:
        raise EqiforgeError(f"cannot find the rules folder (looked in {', '.join(map(str, _shipped_places()))})")
    return shipped


def _shipped_places() -> list[Path]:
    here = Path(__file__).resolve().parent.parent
    return [here.parent / "rules", here / "_rules"]


def shipped_rules_dir() -> Path | None:
    """The rules that ship with eqiforge (source checkout or install), whatever $EQIFORGE_RULES_DIR says."""
    return next((c for c in _shipped_places() if (c / SCHEMA_FILE).is_file()), None)


@contextmanager
def rules_folder_with(files: dict[str, str], keep_shipped: bool = True, without: tuple[str, ...] = ()):
    """A temporary rules folder (the current one's schema, its rule files unless ``keep_shipped`` is False,
    less the rules named in ``without``, and ``files``: rule-set name -> text) as the rules folder while the
    block runs; yields the new names."""
    folder = Path(tempfile.mkdtemp(prefix="eqiforge-rules-"))
    before = os.environ.get("EQIFORGE_RULES_DIR")
    try:
        source, left = rules_dir(), set(without)
        for p in source.glob("*.egg"):
            if keep_shipped or p.name == SCHEMA_FILE:
                text = p.read_text()
                if left and p.name != SCHEMA_FILE:
                    text, removed = without_rules(text, left)
                    left -= removed
                (folder / p.name).write_text(text)
        if left:
            raise EqiforgeError(f"rules {sorted(left)} are in no rule file of {source} (generated ones cannot be "
                                "left out)")
        for name, text in files.items():
            (folder / f"{name}.egg").write_text(text)
        os.environ["EQIFORGE_RULES_DIR"] = str(folder)
        yield list(files)
    finally:
        if before is None:
            os.environ.pop("EQIFORGE_RULES_DIR", None)
        else:
            os.environ["EQIFORGE_RULES_DIR"] = before
        shutil.rmtree(folder, ignore_errors=True)
        _LOADED.pop(folder, None)


def without_rules(text: str, names: set[str]) -> tuple[str, set[str]]:
    """A rule file's text less its top-level commands named in ``names`` (and those names in its
    ``; assumes finite:`` lines); with the names it removed."""
    kept, removed, depth, start, in_string = [], set(), 0, 0, False
    i = 0
    while i < len(text):
        ch = text[i]
        if in_string:
            in_string = ch != '"' or text[i - 1] == "\\"
        elif ch == '"':
            in_string = True
        elif ch == ";" and depth == 0:
            end = text.find("\n", i)
            i = len(text) if end < 0 else end
            continue
        elif ch == "(":
            if depth == 0:
                kept.append(text[start:i])
                start = i
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                form = text[start:i + 1]
                name = re.search(r':name\s+"([^"]+)"', form)
                if name and name.group(1) in names:
                    removed.add(name.group(1))
                else:
                    kept.append(form)
                start = i + 1
        i += 1
    kept.append(text[start:])
    out = "".join(kept)
    if removed:  # the names of an assumes-finite line, its remark (after two spaces or a parenthesis) kept
        out = _FINITE_LINE.sub(lambda m: m.group(1) + " " + ", ".join(
            n.strip() for n in m.group(2).split(",") if n.strip() and n.strip() not in removed) + (m.group(3) or ""),
            out)
    return out, removed


_FINITE_LINE = re.compile(r"^(; assumes finite:)(.*?)((?:\s{2,}|\s*\().*)?$", re.M)


LAYERS = ("algebra", "kernel")


@dataclass(frozen=True)
class RuleSet:
    name: str
    path: Path
    rule_names: tuple[str, ...]
    commands: tuple  # parsed egglog commands, ruleset assigned: AddRuleset, then one per rule name
    layer: str = "algebra"  # header field "; layer: kernel" marks the kernel layer (layouts, tiles, fusion)
    assumes_finite: tuple[str, ...] = ()  # header field "; assumes finite: ...": rules exact for finite values only

    def without_finite_only(self) -> "RuleSet":
        """This rule set less the rules that assume finite values (for NaN/inf semantics as in eager)."""
        keep = [k for k, n in enumerate(self.rule_names) if n not in self.assumes_finite]
        return RuleSet(self.name, self.path, tuple(self.rule_names[k] for k in keep),
                       (self.commands[0],) + tuple(self.commands[1 + k] for k in keep), self.layer)


def _parse(path: Path) -> list:
    try:
        return eb.EGraph().parse_program(path.read_text(), filename=str(path.name))
    except eb.EggSmolError as err:
        raise EqiforgeError(f"rule file {path.name} does not parse: {err}") from None


def _pattern(op: ops.OpDef) -> str:
    """``(Add a0 a1)``, ``(Permute a0 p0)``: an op's term with a variable per argument."""
    operands = [f"a{i}" for i in range(op.arity)] + [f"p{i}" for i in range(len(op.attrs))]
    return f"({' '.join([op.name] + operands)})"


def term_datatype() -> str:
    """The sort Dims and ``(datatype T ...)``: a constructor per algebra op (Extern and the kernel-layer ops
    read sorts declared later, in schema.egg)."""
    algebra = [o for o in ops.OPS.values() if o.kind not in ("extern", "kernel")]
    constructors = [f"({' '.join([o.name] + [ops.ATTR_SORTS.get(k, k) for k in o.signature])})" for o in algebra]
    return f"(sort {ops.ATTR_SORTS['dims']} (Vec i64))\n(datatype T {' '.join(constructors)})"


ELEMENTWISE_KINDS = ("unary", "binary", "compare", "where")
#: an algebra op's dtype by its kind: an operand's (a0 the first), or a constant
DTYPE_OF = {"unary": "a0", "binary": "a0", "movement": "a0", "matmul": "a0", "reduce": "a0", "scan": "a0",
            "band": "a0", "conv": "a0", "pool": "a0", "where": "a1", "compare": '"bool"'}


def analysis_rules() -> str:
    """Elementwise ops: equal operand shapes, the result's too. Dtypes: comparisons give bool, Where its
    branches', the other algebra ops (bar Cast and leaves) their first operand's."""
    rules = []
    for op in ops.OPS.values():
        if op.kind in ELEMENTWISE_KINDS:
            same = " ".join(f"(= s (shape a{i}))" for i in range(op.arity))
            rules.append(f'(rule ((= y {_pattern(op)}) {same}) ((set (shape y) s)) :ruleset {ANALYSIS} '
                         f':name "shape-{op.name}")')
        if op.kind in DTYPE_OF:
            source = DTYPE_OF[op.kind]
            query, value = ("", source) if source.startswith('"') else (f" (= d (dtype {source}))", "d")
            rules.append(f'(rule ((= y {_pattern(op)}){query}) ((set (dtype y) {value})) :ruleset {ANALYSIS} '
                         f':name "dtype-{op.name}")')
    return "\n".join(rules)


def pointwise_rules() -> str:
    """Each unary and binary math op is a one-op pointwise kernel (where guided: egraph/guide.py); a binary
    one whose second operand is a scalar (a Fill) reads it as a constant of the expression instead."""
    def kernel(name: str, term: str, expr: str, inputs: str) -> str:
        guards = " ".join(["(promising y)"] + [f"(reached {x})" for x in inputs.split()])
        return (f'(rule ((= y {term}) (= s (shape y)) {guards}) ((union y (PointwiseK {expr} s (vec-of {inputs})))) '
                f':name "{name}")')
    unary = [o for o in ops.EPI.values() if o.arity == 1]
    binary = [o for o in ops.EPI.values() if o.arity == 2]
    rules = [kernel(f"pointwise-{o.epi}", _pattern(o), f'(EUn "{o.epi}" (EIn 0))', "a0") for o in unary]
    rules += [kernel(f"pointwise-{o.epi}", _pattern(o), f'(EBin "{o.epi}" (EIn 0) (EIn 1))', "a0 a1")
              for o in binary]
    rules += [kernel(f"pointwise-{o.epi}-scalar", f"({o.name} a0 (Fill v t d))",
                     f'(EBin "{o.epi}" (EIn 0) (EConst v))', "a0") for o in binary]
    return "\n".join(rules)


def broadcast_rules() -> str:
    """Elementwise work on the small side of a broadcast (Expand only repeats values): a one-operand op of a
    broadcast, a two-operand op of two equal broadcasts or of a broadcast and a scalar, and a cast, run on
    the small tensor and broadcast once."""
    elementwise = [o for o in ops.OPS.values() if o.kind in ("unary", "binary", "compare")]
    rules = []
    for o in elementwise:
        name = rule_name(o)
        if o.arity == 1:
            rules.append(f'(rewrite ({o.name} (Expand a s)) (Expand ({o.name} a) s) :name "expand-out-of-{name}")')
            continue
        rules.append(f'(rule ((= y ({o.name} (Expand a s) (Expand b s))) (= (shape a) (shape b))) '
                     f'((union y (Expand ({o.name} a b) s))) :name "expand-out-of-{name}")')
        rules.append(f'(rule ((= y ({o.name} (Expand a s) (Fill v t d))) (= sa (shape a))) '
                     f'((union y (Expand ({o.name} a (Fill v sa d)) s))) :name "expand-out-of-{name}-scalar")')
        rules.append(f'(rule ((= y ({o.name} (Fill v t d) (Expand a s))) (= sa (shape a))) '
                     f'((union y (Expand ({o.name} (Fill v sa d) a) s))) :name "expand-out-of-scalar-{name}")')
    rules.append('(rewrite (Cast (Expand a s) d) (Expand (Cast a d) s) :name "expand-out-of-cast")')
    return "\n".join(rules)


def reorder_rules() -> str:
    """Elementwise work commutes with a reordering (a flip or a roll permutes positions, not values): an op of
    a reordered operand, or of two operands reordered alike, is the reordered op, so reorderings meet (and
    cancel, or drop under a reduction)."""
    rules = []
    for o in (o for o in ops.OPS.values() if o.kind in ("unary", "binary", "compare")):
        name = rule_name(o)
        for reorder, args in (("Flip", "d"), ("Roll", "k d")):
            kind = reorder.lower()
            if o.arity == 1:
                rules.append(f'(rewrite ({o.name} ({reorder} a {args})) ({reorder} ({o.name} a) {args}) '
                             f':name "{kind}-out-of-{name}")')
            else:
                rules.append(f'(rewrite ({o.name} ({reorder} a {args}) ({reorder} b {args})) '
                             f'({reorder} ({o.name} a b) {args}) :name "{kind}-out-of-{name}")')
    return "\n".join(rules)


def unit_guards(perm: tuple[int, ...], shape: str) -> str:
    """egglog guards that ``perm`` moves unit dims of ``shape`` (a variable bound to a shape) alone: every
    pair of dims it swaps has a 1 in it ("" for the identity)."""
    swapped = [(perm[i], perm[j]) for i, j in itertools.combinations(range(len(perm)), 2) if perm[i] > perm[j]]
    return " ".join(f"(= 1 (min (vec-get {shape} {a}) (vec-get {shape} {b})))" for a, b in swapped)


def unit_permute_rules() -> str:
    """A permute that moves unit dims alone (every pair of dims it swaps has a 1 in it) moves no element: it
    is a reshape, and as a reshape it composes away with the reshapes around it (einsum, head splits and the
    sum rules leave such permutes). One rule per permutation of rank 2-4, guarded on its inversions."""
    rules = []
    for rank in (2, 3, 4):
        for perm in itertools.permutations(range(rank)):
            guards = unit_guards(perm, "sx")
            if not guards:
                continue
            rules.append(f'(rule ((= y (Permute x (vec-of {" ".join(map(str, perm))}))) (= sx (shape x)) {guards} '
                         f'(= sy (shape y))) ((union y (Reshape x sy))) :name "unit-permute-is-reshape-'
                         f'{"".join(map(str, perm))}")')
    return "\n".join(rules)


def one_dim_moves(rank: int) -> list[tuple[int, ...]]:
    """The permutations of ``rank`` dims that move one dim to another place (the others keep their order):
    the permutes views make (a unit dim added at the end and moved in, a head dim moved out). Each generated
    rule costs every saturation step a query (~0.5 ms on a CPU), so the generated sets stop at these."""
    moves = set()
    for src, dst in itertools.permutations(range(rank), 2):
        order = [d for d in range(rank) if d != src]
        order.insert(dst, src)
        moves.add(tuple(order))
    return sorted(moves)


def neighbour_swaps(rank: int) -> list[tuple[int, ...]]:
    """The permutations of ``rank`` dims that swap two neighbouring dims (``transpose(d, d + 1)``)."""
    return [tuple(d + 1 if d == i else i if d == i + 1 else d for d in range(rank)) for i in range(rank - 1)]


def unit_reshape_rules() -> str:
    """The converse for rank 4: a reshape that moves one unit dim alone is a permute, so the permutes on either
    side of it (einsum's, around a running sum on a transposed copy) compose and cancel."""
    rules = []
    for perm in one_dim_moves(4):
        guards = unit_guards(perm, "sx")
        target = " ".join(f"(vec-get sx {d})" for d in perm)
        rules.append(f'(rule ((= y (Reshape x t)) (= sx (shape x)) (= 4 (vec-length sx)) (= t (vec-of {target})) '
                     f'{guards}) ((union y (Permute x (vec-of {" ".join(map(str, perm))})))) '
                     f':name "unit-reshape-is-permute-{"".join(map(str, perm))}")')
    return "\n".join(rules)


def permute_out_of_broadcast_mul_rules() -> str:
    """A permuted tensor times a broadcast (a per-head gain on heads split off by a permute) is the product
    before the permute, the broadcast operand seen unpermuted: then the permute meets the one that merges the
    heads back, and both cancel. Only where unpermuting the broadcast operand moves its unit dims alone (a
    reshape), so no new permute is made. One rule per swap of neighbouring dims of rank 3-4 (a head split's
    transpose(1, 2)) and operand order: the rule costs most of the generated ones per saturation step."""
    rules = []
    for rank in (3, 4):
        for perm in neighbour_swaps(rank):
            inverse = tuple(perm.index(d) for d in range(rank))
            guards = unit_guards(inverse, "sg")
            p = " ".join(map(str, perm))
            unpermuted = (f"(Expand (Reshape g (vec-of {' '.join(f'(vec-get sg {d})' for d in inverse)})) "
                          f"(vec-of {' '.join(f'(vec-get s {d})' for d in inverse)}))")
            for name, product, result in (("", "(Mul pa e)", f"(Mul a {unpermuted})"),
                                          ("-swapped", "(Mul e pa)", f"(Mul {unpermuted} a)")):
                rules.append(f'(rule ((= y {product}) (= pa (Permute a (vec-of {p}))) (= e (Expand g s)) '
                             f'(= sg (shape g)) {guards}) ((union y (Permute {result} (vec-of {p})))) '
                             f':name "permute-out-of-broadcast-mul-{"".join(map(str, perm))}{name}")')
    return "\n".join(rules)


def transpose_rules() -> str:
    """transpose.egg's generated rules: permutes and reshapes that move unit dims alone, and permutes out of
    products with broadcasts."""
    return "\n".join([unit_permute_rules(), unit_reshape_rules(), permute_out_of_broadcast_mul_rules()])


def rule_name(op: ops.OpDef) -> str:
    """A rule-name form of an op's name: its fused-expression name, else its name in lower case."""
    return op.epi or op.name.lower()


#: rules generated from the op table, by the rule file they join (before the file's own)
GENERATED = {"fusion": pointwise_rules, "broadcast": broadcast_rules, "reorder": reorder_rules,
             "transpose": transpose_rules}


def _generated(text: str) -> list:
    return eb.EGraph().parse_program(text, filename="generated from eqiforge/ops.py")


def assign(cmd, ruleset: str, path: Path):
    """Return (rule name, command placed in ``ruleset``); reject anything that is not a named rule."""
    if isinstance(cmd, (eb.RewriteCommand, eb.BiRewriteCommand)):
        name, declared = cmd.rewrite.name, cmd.name
        new = (eb.RewriteCommand(ruleset, cmd.rewrite, cmd.subsume) if isinstance(cmd, eb.RewriteCommand)
               else eb.BiRewriteCommand(ruleset, cmd.rewrite))
    elif isinstance(cmd, eb.RuleCommand):
        r = cmd.rule
        name, declared = r.name, r.ruleset
        new = eb.RuleCommand(eb.Rule(r.span, r.head, r.body, r.name, ruleset))
    else:
        raise EqiforgeError(f"rule file {path.name} may only contain rules and rewrites, found: {str(cmd)[:80]}")
    if not name:
        raise EqiforgeError(f"rule file {path.name}: every rule needs a :name, this one has none: {str(cmd)[:120]}")
    if declared not in ("", ruleset):
        raise EqiforgeError(f"rule {name!r} in {path.name} declares :ruleset {declared}; the file name "
                            f"({ruleset}) is its rule set, drop the :ruleset")
    return name, new


def load_ruleset(path: Path) -> RuleSet:
    name = path.stem
    names, commands = [], []
    for cmd in (_generated(GENERATED[name]()) if name in GENERATED else []) + _parse(path):
        rule_name, new = assign(cmd, name, path)
        if rule_name in names:
            raise EqiforgeError(f"rule file {path.name}: rule name {rule_name!r} is used twice")
        names.append(rule_name)
        commands.append(new)
    fields = header_fields(path.read_text())
    layer = fields.get("layer", ["algebra"])[-1]
    if layer not in LAYERS:
        raise EqiforgeError(f"rule file {path.name}: unknown layer {layer!r}; use one of {LAYERS}")
    finite = tuple(n.strip() for line in fields.get("assumes finite", []) for n in line.split(",") if n.strip())
    stray = [n for n in finite if n not in names]
    if stray:
        raise EqiforgeError(f"rule file {path.name}: 'assumes finite' names rules it does not define: {stray}")
    return RuleSet(name, path, tuple(names), tuple([eb.AddRuleset(SPAN, name)] + commands), layer, finite)


HEADER_FIELDS = ("layer", "assumes finite")


def header_fields(text: str) -> dict[str, list[str]]:
    """The ``; key: value`` lines of a rule file's leading comment block, for the keys in HEADER_FIELDS
    (the value ends at two spaces or a parenthesis, so a field can carry a remark)."""
    fields: dict[str, list[str]] = {}
    for line in text.splitlines():
        if not line.startswith(";"):
            break
        m = re.match(r";\s*([a-z ]+):\s*(.*)$", line)
        if m and m.group(1).strip() in HEADER_FIELDS:
            fields.setdefault(m.group(1).strip(), []).append(re.split(r"\s{2,}|\s*\(", m.group(2))[0].strip())
    return fields


#: rules folder -> its schema and rule sets, the last LOADED_FOLDERS read. A loaded folder holds about 0.2 GB
#: (parsed egglog commands), so a temporary folder's entry goes with the folder (``rules_folder_with``): a
#: synthesis worker that kept every one it had made grew by gigabytes.
_LOADED: dict[Path, tuple] = {}
LOADED_FOLDERS = 8


def _load_dir(directory: Path) -> tuple[tuple, dict[str, RuleSet | EqiforgeError]]:
    """The schema and every rule set of ``directory`` (read once; see _LOADED)."""
    if directory in _LOADED:
        _LOADED[directory] = _LOADED.pop(directory)  # most recently used last
    else:
        _LOADED[directory] = _read_dir(directory)
        while len(_LOADED) > LOADED_FOLDERS:
            _LOADED.pop(next(iter(_LOADED)))
    return _LOADED[directory]


def _read_dir(directory: Path) -> tuple[tuple, dict[str, RuleSet | EqiforgeError]]:
    """The schema and every rule set of ``directory``; a file that fails to load maps to its error, raised
    when that rule set is selected."""
    schema = tuple(_generated(term_datatype()) + _parse(directory / SCHEMA_FILE) + _generated(analysis_rules()))
    sets: dict[str, RuleSet | EqiforgeError] = {}
    for p in sorted(directory.glob("*.egg")):
        if p.name != SCHEMA_FILE:
            try:
                sets[p.stem] = load_ruleset(p)
            except EqiforgeError as err:
                sets[p.stem] = err
    return schema, sets


def schema_commands() -> tuple:
    return _load_dir(rules_dir())[0]


def _loaded(rs: RuleSet | EqiforgeError) -> RuleSet:
    if isinstance(rs, EqiforgeError):
        raise rs
    return rs


def available() -> dict[str, RuleSet]:
    """All rule sets by name, sorted; a broken rule file raises its error here."""
    return {name: _loaded(rs) for name, rs in _load_dir(rules_dir())[1].items()}


def select(names: list[str] | None, layers: tuple[str, ...] = LAYERS, *, assume_finite: bool = True) -> list[RuleSet]:
    """The rule sets called ``names`` (when None: all of the given layers), or a clear error listing the
    known names; with ``assume_finite=False`` without their rules that hold for finite values only."""
    sets = _load_dir(rules_dir())[1]
    if names is None:
        chosen = [_loaded(rs) for rs in sets.values()]
        chosen = [rs for rs in chosen if rs.layer in layers]
    else:
        if isinstance(names, str):
            names = [names]
        unknown = [n for n in names if n not in sets]
        if unknown:
            raise EqiforgeError(f"unknown rule set(s) {unknown}; available: {sorted(sets)}")
        chosen = [_loaded(sets[n]) for n in dict.fromkeys(names)]
    return chosen if assume_finite else [rs.without_finite_only() for rs in chosen]
