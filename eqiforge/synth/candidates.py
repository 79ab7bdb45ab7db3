"""Enumeration by size into classes of equal fingerprints; a term that joins an earlier class is a candidate.

Terms of size n are built over the representatives of sizes below n (``terms.new_terms``); each is evaluated
at the instantiations and fingerprinted. A new fingerprint opens a class and the term represents it; an
existing one makes the candidate ``term = representative``. Terms whose value is one number whatever the
inputs (``W / W``) and terms with a non-finite value are dropped (counted): the IR writes constants as Fills.
An equality up to commuting and regrouping commutative ops is left out (``terms.ac_normal``), and commutative
ops are built in one operand order. A candidate is kept only if it can be a rewrite one way or the other
(``egg.orientable``), and once per
renaming of its variables and size symbols (``sum(A^T) = sum(A)^T`` over A[i, j] and over W[j, k] is one
rule: a rule's variables and sizes are bound by matching).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from .egg import orientable
from .terms import Var, ac_normal, new_terms
from .values import Evaluator, constant, fingerprint


@dataclass
class Candidate:
    """``lhs = rhs`` found by equal fingerprints; ``rhs`` is the class's representative (never larger)."""

    lhs: object
    rhs: object

    @property
    def size(self) -> tuple[int, int]:
        return (max(self.lhs.size, self.rhs.size), self.lhs.size + self.rhs.size)

    def text(self) -> str:
        return f"{self.lhs.text()} = {self.rhs.text()}"

    def canonical(self) -> str:
        """The text with variables and size symbols renamed in order of first appearance (shapes included)."""
        names: dict[str, str] = {}
        symbols: dict[str, str] = {}

        def walk(t) -> str:
            if isinstance(t, Var):
                if t.name not in names:
                    names[t.name] = f"x{len(names)}"
                shape = "s" if t.scalar else ",".join("+".join(rename(d)) or "1" for d in t.shape)
                return f"{names[t.name]}:{shape}"
            return f"{t.op}({','.join(walk(k) for k in t.kids)};{attrs(t.attrs)})"

        def rename(d):
            return [symbols.setdefault(s, f"d{len(symbols)}") for s in d]

        def attrs(a):
            if isinstance(a, tuple) and all(isinstance(x, str) for x in a) and a:
                return "+".join(rename(a))
            if isinstance(a, tuple):
                return "(" + ",".join(attrs(x) for x in a) + ")"
            return str(a)
        return f"{walk(self.lhs)}={walk(self.rhs)}"


@dataclass
class Enumeration:
    terms: int = 0  # enumerated, all sizes
    classes: int = 0
    constant: int = 0
    cancelling: int = 0  # a variable of the term cancels out (A + (s - A)): its value does not depend on it
    not_finite: int = 0
    unorientable: int = 0  # equal values, but each side has a variable the other lacks (A - A = B - B)
    renamings: int = 0  # candidates equal to an earlier one up to renaming variables and sizes
    commuted: int = 0  # equalities up to commuting and regrouping Add, Mul, Maximum, Minimum only
    per_size: dict = field(default_factory=dict)  # size -> terms enumerated
    candidates: list = field(default_factory=list)
    stopped: str = ""  # why enumeration ended before --max-size ("time limit"), else ""


def enumerate_candidates(vars_: list[Var], ops: list[str], max_size: int, symbols: list[str], seed: int = 0,
                         deadline: float | None = None, progress=None) -> Enumeration:
    """Terms up to ``max_size`` ops over ``vars_`` and ``ops``; stops at ``deadline`` (time.monotonic)."""
    evaluator = Evaluator(vars_, symbols, seed=seed)
    found = Enumeration()
    classes = {fingerprint(v.shape, evaluator.kept[v]): v for v in vars_ if not v.scalar}
    seen: set[str] = set()
    by_size = {0: list(vars_)}
    for size in range(1, max_size + 1):
        by_size[size] = []
        count = 0
        for op in ops:
            for term in new_terms(op, size, by_size, symbols):
                count += 1
                if progress is not None:
                    progress.update()
                if deadline is not None and count % 500 == 0 and time.monotonic() > deadline:
                    found.stopped = "time limit"
                    break
                values = evaluator.values(term)
                if values is None:
                    found.not_finite += 1
                    continue
                if constant(values):
                    found.constant += 1
                    continue
                redrawn = evaluator.redrawn(term)
                if evaluator.cancels(term, values, redrawn):
                    found.cancelling += 1
                    continue
                key = fingerprint(term.shape, values)
                rep = classes.get(key)
                if rep is None:
                    classes[key] = term
                    by_size[size].append(term)
                    evaluator.keep(term, values, redrawn)
                elif ac_normal(term) == ac_normal(rep):
                    found.commuted += 1
                elif orientable(term, rep) or orientable(rep, term):
                    candidate = Candidate(term, rep)
                    key = candidate.canonical()
                    if key in seen:
                        found.renamings += 1
                    else:
                        seen.add(key)
                        found.candidates.append(candidate)
                else:
                    found.unorientable += 1
            if found.stopped:
                break
        found.per_size[size] = count
        found.terms += count
        if found.stopped:
            break
    found.classes = len(classes)
    return found
