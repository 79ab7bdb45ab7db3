"""The left sides of a rule file's rules as plain trees, for building programs they match (``rules check``).

A tree is ``("call", name, [trees])``, ``("var", name)`` or ``("lit", value)``. A rewrite's left side is its
pattern; a ``rule``'s is the tensor term its query defines that no other defined term contains (``(= y
(Sum e d))``), with every variable that another atom defines as a term (``(= e (Expand a s))``) replaced by
that definition. The other atoms
are guards: they decide whether the rule fires on a program, not what the program is. A birewrite gives both
sides.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import egglog.bindings as eb

from .. import ops
from ..errors import EqiforgeError
from .rulesets import assign


@dataclass
class RulePattern:
    name: str
    text: str  # the rule as egglog text (one command)
    sides: list  # trees of the terms it matches (two for a birewrite)
    shapes: dict = field(default_factory=dict)  # variable -> {"rank": n, "ones": {positions}} its guards state


def tree(expr):
    if isinstance(expr, eb.Var):
        return ("var", expr.name)
    if isinstance(expr, eb.Lit):
        value = expr.value
        return ("lit", getattr(value, "value", None))
    return ("call", expr.name, [tree(a) for a in expr.args])


def _shape_guards(rule) -> dict:
    """What a rule's guards say of shapes: ``(= s (shape v))`` names v's shape s (a Dims variable may stand
    for itself), ``(= 3 (vec-length s))`` its rank, ``(= 1 (vec-get s 0))`` a size-1 dim."""
    shape_of, found = {}, {}
    facts = [f for f in rule.body if isinstance(f, eb.Eq)]
    for f in facts:
        for a, b in ((f.left, f.right), (f.right, f.left)):
            if isinstance(a, eb.Var) and isinstance(b, eb.Call) and b.name == "shape" and isinstance(b.args[0], eb.Var):
                shape_of[a.name] = b.args[0].name
    for f in facts:
        for a, b in ((f.left, f.right), (f.right, f.left)):
            if not (isinstance(a, eb.Lit) and isinstance(b, eb.Call) and isinstance(b.args[0], eb.Var)):
                continue
            var = shape_of.get(b.args[0].name, b.args[0].name)
            if b.name == "vec-length":
                found.setdefault(var, {"rank": None, "ones": set()})["rank"] = a.value.value
            elif b.name == "vec-get" and a.value.value == 1 and isinstance(b.args[1], eb.Lit):
                found.setdefault(var, {"rank": None, "ones": set()})["ones"].add(b.args[1].value.value)
    return found


def _rule_side(rule) -> list:
    defs = {}
    for fact in rule.body:
        if not isinstance(fact, eb.Eq):
            continue
        for var, term in ((fact.left, fact.right), (fact.right, fact.left)):
            if isinstance(var, eb.Var) and isinstance(term, eb.Call) and term.name in ops.OPS:
                defs.setdefault(var.name, tree(term))
    used = {v for t in defs.values() for v in _vars(t)}
    tops = [v for v in defs if v not in used]  # the term no other atom's term contains
    if not tops:
        return []

    def expand(t, seen=()):
        if t[0] == "var" and t[1] in defs and t[1] not in seen:
            return expand(defs[t[1]], seen + (t[1],))
        if t[0] == "call":
            return ("call", t[1], [expand(a, seen) for a in t[2]])
        return t
    return [expand(defs[tops[0]])]


def _vars(t) -> list[str]:
    if t[0] == "var":
        return [t[1]]
    return [v for a in t[2] for v in _vars(a)] if t[0] == "call" else []


def rule_patterns(path: Path) -> list[RulePattern]:
    """Every rule of the file at ``path`` with the terms its left side matches; a parse error or a rule the
    loader would refuse (no name, another rule set) is an EqiforgeError naming the file."""
    try:
        commands = eb.EGraph().parse_program(path.read_text(), filename=path.name)
    except eb.EggSmolError as err:
        raise EqiforgeError(f"rule file {path.name} does not parse: {err}") from None
    found = []
    for cmd in commands:
        name, _ = assign(cmd, path.stem, path)
        shapes = {}
        if isinstance(cmd, eb.RewriteCommand):
            sides = [tree(cmd.rewrite.lhs)]
        elif isinstance(cmd, eb.BiRewriteCommand):
            sides = [tree(cmd.rewrite.lhs), tree(cmd.rewrite.rhs)]
        else:
            sides, shapes = _rule_side(cmd.rule), _shape_guards(cmd.rule)
        text = str(cmd)  # egglog prints a rewrite without its name
        text = text if ":name" in text else f'{text[:-1]} :name "{name}")'
        found.append(RulePattern(name, text, sides, shapes))
    return found
