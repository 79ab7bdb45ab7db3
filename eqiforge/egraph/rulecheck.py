"""``eqiforge rules check FILE.egg``: every rule of a file verified numerically in the e-graph, with a verdict.

For each rule, programs its left side matches (*witnesses*) are drawn at random: its pattern's tensor
variables become inputs of shapes drawn from a few sizes (one shape shared, some dims 1, some transposed: what
products, broadcasts and reductions need), its attribute variables values the op allows (a permutation, a
dim, a target shape); the op table's shape rules keep the ones that type. The rule alone then saturates
them, and every e-node is evaluated against its e-class on random inputs (``egraph/soundness.py``), as the
project's own rule tests do. Verdicts: **sound** (it fired, every e-node agrees), **unsound** (a
counterexample: the witness program and what disagreed), **could not instantiate** (why: no witness typed,
or the rule fired on none). ``optimize()`` runs the check on rule files of a custom rules folder that differ
from the shipped ones, once per file content (cached), and refuses a file with an unsound rule.
"""
from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path

from .. import ops
from ..errors import EqiforgeError
from ..ir import Graph
from ..paths import read_entry, write_entry
from . import rulesets
from .patterns import rule_patterns
from .soundness import check_rules_on

TRIES = 600  # random witness programs tried per rule
WITNESSES = 12  # typed witnesses kept per rule
VERSION = 1  # of the check: a change invalidates cached verdicts


@dataclass
class Verdict:
    rule: str
    status: str  # "sound" | "unsound" | "could not instantiate"
    detail: str = ""

    def line(self) -> str:
        return f"{self.rule}: {self.status}" + (f" ({self.detail})" if self.detail else "")


class _NoWitness(Exception):
    pass


class _Builder:
    """One random attempt at a program matching a pattern tree."""

    def __init__(self, rng: random.Random, shapes: dict | None = None):
        self.rng = rng
        self.shapes = shapes or {}  # what the rule's guards say of variables' shapes (patterns.py)
        self.g = Graph()
        self.rank = rng.choice((1, 2, 2, 3, 3, 4))
        self.size = rng.choice((2, 3, 4))
        self.vars: dict[str, object] = {}
        self.inputs = 0

    def leaf_shape(self, var: str | None = None) -> tuple[int, ...]:
        """A random shape: the rank and size-1 dims the guards state for ``var``, the rest drawn."""
        hint = self.shapes.get(var, {})
        rank = hint.get("rank") or self.rank
        shape = [self.size] * rank
        for d in range(rank):
            if d in hint.get("ones", ()) or (not hint and self.rng.random() < 0.2):
                shape[d] = 1
            elif self.rng.random() < 0.2:
                shape[d] = self.size + 1
        return tuple(shape)

    def tensor(self, t, like: tuple | None = None, dtype: str = "float32") -> int:
        kind = t[0]
        if kind == "var":
            if t[1] not in self.vars:
                self.inputs += 1
                self.vars[t[1]] = self.g.input(f"x{self.inputs}_{t[1]}", like or self.leaf_shape(t[1]), dtype)
            return self.vars[t[1]]
        if kind != "call" or t[1] not in ops.OPS:
            raise _NoWitness(f"a tensor position holds {t}")
        op = ops.get(t[1])
        if op.kind in ("kernel", "extern", "conv", "pool"):
            raise _NoWitness(f"{op.name} is a {op.kind} op: witnesses are drawn for algebra programs of "
                             "elementwise, movement, product and reduction ops")
        if op.name == "Fill":
            value, shape, dtype = (self.attr(a, k, None) for a, k in zip(t[2], ("f64", "shape", "dtype")))
            return self.g.fill(value, like or shape or self.leaf_shape(), dtype or "float32")
        if op.kind == "leaf":
            raise _NoWitness(f"{op.name} leaves are not drawn")
        args = t[2]
        kids = [self.tensor(args[0], dtype="bool" if op.kind == "where" else "float32")]
        for a in args[1:op.arity]:
            first = self.g.nodes[kids[0]].shape
            kids.append(self.tensor(a, like=first if self._elementwise(op) else None))
        x = self.g.nodes[kids[0]].shape
        attrs = tuple(self.attr(a, kind, x, op.name) for a, kind in zip(args[op.arity:], op.attrs))
        try:
            return self.g.add(op.name, tuple(kids), attrs)
        except (ops.ShapeError, TypeError, ValueError, IndexError) as err:
            raise _NoWitness(f"{op.name}: {err}") from None

    @staticmethod
    def _elementwise(op) -> bool:
        return op.kind in ("binary", "compare", "where")

    def attr(self, t, kind: str, x, op: str = ""):
        """An attribute: a literal as written, or for a variable a value the op allows (memoized by name)."""
        literal = _literal(t)
        if literal is not None:
            return literal
        key = t[1] if t[0] == "var" else None
        if self.vars.get(key) is not None:
            return self.vars[key]
        value = self._draw(kind, x, op, self.shapes.get(key, {}))
        if key:
            self.vars[key] = value
        return value

    def _draw(self, kind: str, x, op: str, hint: dict):
        rng = self.rng
        if kind == "f64":
            return round(rng.uniform(0.5, 2.0), 3)
        if kind == "dtype":
            return "float32"
        if kind == "shape":
            return None
        rank = len(x or ())
        if op == "Permute":
            return tuple(rng.sample(range(rank), rank))
        if op in ("Sum", "Amax", "Amin"):  # mostly one dim, as rules over reductions guard
            return tuple(sorted(rng.sample(range(rank), 1 if rng.random() < 0.8 else min(2, rank))))
        if op == "Expand":  # size-1 dims grow, but for those the guards keep at 1
            return tuple(1 if p in hint.get("ones", ()) else rng.choice((d, d + 2)) if d == 1 else d
                         for p, d in enumerate(x))
        if op == "Reshape":
            flat = [ops.numel(x)]
            return tuple(rng.choice([flat, list(x) + [1], [1] + list(x), list(x)]))
        if op in ("Concat",):
            return rng.randrange(rank)
        if kind == "i64":
            return rng.randrange(max(rank, 1))
        if kind == "str":
            return "float32"
        raise _NoWitness(f"no values drawn for a {kind} attribute of {op}")


def _literal(t):
    if t[0] == "lit":
        return t[1]
    if t[0] == "call" and t[1] == "vec-of" and all(a[0] == "lit" for a in t[2]):
        return tuple(a[1] for a in t[2])
    return None


def witnesses(side, seed: int = 0, shapes: dict | None = None) -> tuple[list[Graph], str]:
    """(up to WITNESSES typed programs of the pattern ``side``, drawn at random, variables shaped as
    ``shapes`` says where it does; why none typed)."""
    rng = random.Random(seed)
    found, why = [], "no attempt typed"
    for _ in range(TRIES):
        b = _Builder(rng, shapes)
        try:
            b.g.outputs = [b.tensor(side)]
        except _NoWitness as err:
            why = str(err)
            continue
        found.append(b.g)
        if len(found) == WITNESSES:
            break
    return found, why


def combined(programs: list[Graph]) -> Graph:
    """One program of several, inputs renamed apart (``w<k>_...``)."""
    g = Graph()
    for k, sub in enumerate(programs):
        new = {}
        for i, n in enumerate(sub.nodes):
            if n.op == "Input":
                new[i] = g.input(f"w{k}_{n.attrs[0]}", n.shape, n.dtype)
            else:
                new[i] = g.add(n.op, tuple(new[j] for j in n.inputs), n.attrs, shape=n.shape, dtype=n.dtype)
        g.outputs += [new[o] for o in sub.outputs]
    return g


def check_file(path: str | Path, seed: int = 0) -> list[Verdict]:
    """A verdict per rule of the file at ``path``."""
    path = Path(path)
    if not path.is_file():
        raise EqiforgeError(f"{path}: no such rule file")
    verdicts = []
    for rule in rule_patterns(path):
        verdicts.append(_check_rule(rule, seed))
    return verdicts


def _check_rule(rule, seed: int) -> Verdict:
    if not rule.sides:
        return Verdict(rule.name, "could not instantiate", "its query defines no tensor term")
    fired, reasons = False, []
    for k, side in enumerate(rule.sides):
        programs, why = witnesses(side, seed + k, rule.shapes)
        if not programs:
            reasons.append(f"no witness program typed in {TRIES} tries: {why}")
            continue
        verdict = _run(rule, combined(programs))
        if verdict.status == "unsound":  # the smallest witness that shows it
            for p in sorted(programs, key=lambda p: sum(ops.numel(n.shape) for n in p.nodes)):
                alone = _run(rule, p)
                if alone.status == "unsound":
                    return alone
            return verdict
        if verdict.status == "error":
            return Verdict(rule.name, "could not instantiate", verdict.detail)
        if verdict.status == "fired":
            fired = True
        else:
            reasons.append(verdict.detail)
    if fired:
        return Verdict(rule.name, "sound")
    return Verdict(rule.name, "could not instantiate", "; ".join(reasons))


def _run(rule, program: Graph) -> Verdict:
    """The rule alone on ``program``: unsound, fired (and sound), silent, or an error."""
    try:
        matches, problems = check_rules_on(rule.text, program)
    except EqiforgeError as err:
        if "unsound or lacks a shape guard" in str(err):
            return Verdict(rule.name, "unsound", "it puts terms of different shapes in one e-class; witness "
                                                 f"program:\n{program.format()}")
        return Verdict(rule.name, "error", f"egglog refused it: {str(err)[:300]}")
    except (RuntimeError, ValueError, TypeError) as err:  # a witness PyTorch cannot evaluate
        return Verdict(rule.name, "silent", f"a witness program does not run in PyTorch: {err}"[:300])
    if problems:
        return Verdict(rule.name, "unsound", f"{problems[0]}; witness program:\n{program.format()}")
    if matches.get(rule.name, 0):
        return Verdict(rule.name, "fired")
    return Verdict(rule.name, "silent", f"it fired on none of {len(program.outputs)} witness programs (its guards)")


# ---------------------------------------------------------------------------------------------- optimize()

def check_custom_rules(names: list[str] | None) -> None:
    """Refuse a custom rules folder's rule file that has an unsound rule: the files of the selected rule sets
    that differ from the shipped ones are checked once per content (cached), the rest trusted (their rules
    are checked by the project's tests)."""
    folder = rulesets.rules_dir()
    shipped = rulesets.shipped_rules_dir()
    if shipped is None or folder.resolve() == shipped.resolve():
        return
    for rs in rulesets.select(names):
        text = rs.path.read_text()
        same = shipped / rs.path.name
        if same.is_file() and same.read_text() == text:
            continue
        unsound = [v for v in _cached_verdicts(rs.path, text) if v.status == "unsound"]
        if unsound:
            raise EqiforgeError(f"rule file {rs.path} has unsound rules, refused: "
                                + "; ".join(v.line() for v in unsound)[:2000]
                                + " (`eqiforge rules check FILE` shows every verdict)")


def _cached_verdicts(path: Path, text: str) -> list[Verdict]:
    key = hashlib.sha256(json.dumps([VERSION, path.name, text]).encode()).hexdigest()[:24] + ".json"
    stored = read_entry("rulecheck", key)
    if stored is not None:
        return [Verdict(**v) for v in json.loads(stored)]
    verdicts = check_file(path)
    write_entry("rulecheck", key, json.dumps([v.__dict__ for v in verdicts]).encode())
    return verdicts


def summary(verdicts: list[Verdict]) -> str:
    counts = {s: sum(v.status == s for v in verdicts) for s in ("sound", "unsound", "could not instantiate")}
    return ", ".join(f"{n} {s}" for s, n in counts.items())

