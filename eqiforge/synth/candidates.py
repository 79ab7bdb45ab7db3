"""Enumeration by size into classes of equal fingerprints; a term that joins an earlier class is a candidate.

Terms of size n are built over the representatives of sizes below n (``terms.new_terms``); each is evaluated
at the instantiations and fingerprinted. A new fingerprint opens a class and the term represents it; an
existing one makes the candidate ``term = representative``. Terms whose value is one number whatever the
inputs (``W / W``) and terms with a non-finite value are dropped (counted): the IR writes constants as Fills.
A term in which a variable cancels (``(A * B) / A``) never represents a class (as a parent it would only
make more such terms), but it is a candidate against the class its value joins: ``(A * B) / A = B`` is the
one rule that the larger ``(A * (A + B)) / A = A + B`` and its many like are instances of.
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
    cancelling: int = 0  # a variable cancels out (A + (s - A)) and no class has the term's value
    not_finite: int = 0
    unorientable: int = 0  # equal values, but each side has a variable the other lacks (A - A = B - B)
    renamings: int = 0  # candidates equal to an earlier one up to renaming variables and sizes
    commuted: int = 0  # equalities up to commuting and regrouping Add, Mul, Maximum, Minimum only
    per_size: dict = field(default_factory=dict)  # size -> terms enumerated
    candidates: list = field(default_factory=list)
    stopped: str = ""  # why enumeration ended before --max-size ("time limit"), else ""


#: what an evaluated term can be other than a fingerprint: the Enumeration counters of terms dropped
DROPPED = ("not_finite", "constant")
#: the outcome of a term in which a variable cancels: this prefix, then its fingerprint
CANCELS = "cancels:"


class Enumerator:
    """The state of an enumeration: the evaluator, the classes by fingerprint, the representatives by size
    (``by_size``) and the counts. ``assess`` evaluates a term (the costly part, which shards.py runs in other
    processes for the last size); ``classify`` files its outcome, in enumeration order (cheap, always here)."""

    def __init__(self, vars_: list[Var], symbols: list[str], seed: int = 0):
        self.symbols = symbols
        self.evaluator = Evaluator(vars_, symbols, seed=seed)
        self.found = Enumeration()
        self.classes = {fingerprint(v.shape, self.evaluator.kept[v]): v for v in vars_ if not v.scalar}
        self.seen: set[str] = set()
        self.by_size: dict[int, list] = {0: list(vars_)}

    def terms(self, op: str, size: int):
        return new_terms(op, size, self.by_size, self.symbols)

    def assess(self, term) -> tuple[str, tuple | None]:
        """(the term's fingerprint, (values, redrawn values) to keep if it opens a class); (CANCELS and its
        fingerprint, None) for a term in which a variable cancels; else (the DROPPED counter it falls under,
        None)."""
        values = self.evaluator.values(term)
        if values is None:
            return "not_finite", None
        if constant(values):
            return "constant", None
        redrawn = self.evaluator.redrawn(term)
        if self.evaluator.cancels(term, values, redrawn):
            return CANCELS + fingerprint(term.shape, values), None
        return fingerprint(term.shape, values), (values, redrawn)

    def classify(self, term, outcome: str, kept: tuple | None) -> None:
        """File an assessed term: dropped, a new class (its values ``kept`` for its parents, where a larger
        size follows), or a candidate against its class's representative."""
        found = self.found
        if outcome in DROPPED:
            setattr(found, outcome, getattr(found, outcome) + 1)
            return
        cancels = outcome.startswith(CANCELS)
        rep = self.classes.get(outcome.removeprefix(CANCELS))
        if rep is None and cancels:
            found.cancelling += 1
        elif rep is None:
            self.classes[outcome] = term
            self.by_size[term.size].append(term)
            if kept is not None:
                self.evaluator.keep(term, *kept)
        elif ac_normal(term) == ac_normal(rep):
            found.commuted += 1
        elif orientable(term, rep) or orientable(rep, term):
            candidate = Candidate(term, rep)
            key = candidate.canonical()
            if key in self.seen:
                found.renamings += 1
            else:
                self.seen.add(key)
                found.candidates.append(candidate)
        else:
            found.unorientable += 1

    def grow(self, ops: list[str], size: int, last: bool = False, outcomes: dict | None = None,
             deadline: float | None = None, progress=None) -> bool:
        """Enumerate the terms of ``size``, op by op; ``outcomes`` (op -> the terms' outcomes, in order) where
        they were assessed elsewhere; ``last``: no larger size follows (no values kept). False where the
        ``deadline`` stopped it."""
        self.by_size[size] = []
        count = 0
        for op in ops:
            for i, term in enumerate(self.terms(op, size)):
                count += 1
                if progress is not None:
                    progress.update()
                if deadline is not None and count % 500 == 0 and time.monotonic() > deadline:
                    self.found.stopped = "time limit"
                    break
                outcome, kept = (outcomes[op][i], None) if outcomes is not None else self.assess(term)
                self.classify(term, outcome, None if last else kept)
            if self.found.stopped:
                break
        self.found.per_size[size] = count
        self.found.terms += count
        return not self.found.stopped


def enumerate_candidates(vars_: list[Var], ops: list[str], max_size: int, symbols: list[str], seed: int = 0,
                         deadline: float | None = None, progress=None, last_outcomes=None) -> Enumeration:
    """Terms up to ``max_size`` ops over ``vars_`` and ``ops``; stops at ``deadline`` (time.monotonic).
    ``last_outcomes``: a function that assesses the last size's terms elsewhere (shards.py), given the
    enumerator that reached the size below; default: here."""
    enumerator = Enumerator(vars_, symbols, seed)
    for size in range(1, max_size + 1):
        last = size == max_size
        outcomes = last_outcomes(enumerator) if last and last_outcomes is not None and size > 1 else None
        if not enumerator.grow(ops, size, last, outcomes, deadline, progress):
            break
    enumerator.found.classes = len(enumerator.classes)
    return enumerator.found
