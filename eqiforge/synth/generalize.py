"""A candidate made as general as its values allow, before it is kept as a rule.

The enumeration's variables are few (two tensors of a shape, by default), so the identity
``A / (B / C) = A * (C / B)`` appears only as its instances ``A / (B / (A + A)) = A * ((A + A) / B)``,
``A / (B / (A + s)) = ...`` and so on, each not derivable from the others, each a rule of its own. Here a
subterm is replaced, wherever it occurs on either side, by a fresh variable of its shape, and kept so where
the two sides still agree at the values check's instantiations (``verify.check_values``): the general rule is
kept instead, and the instances follow from it in the e-graph (one rule, not dozens). Larger subterms are
tried first; scalars stay as they are (an IR scalar is a Fill, not any tensor).

Then a variable used more than once is split: some of its occurrences are given a fresh variable where the
sides still agree, so ``A * (B + B / A) = A * B + B`` becomes ``A * (B + X / A) = A * B + X`` (the instance
where X is B follows). Smaller sets of occurrences are tried first, and a split is tried again on what is left.

The full verification (``verify.verify``, the e-graph's check) then runs on the general candidate.
"""
from __future__ import annotations

import itertools

from .candidates import Candidate
from .egg import orientable
from .terms import Term, Var, ac_normal, variables, with_variables_of
from .verify import TOLERANCE, check_values


def generalized(c: Candidate, vars_: list[Var], symbols: list[str], seed: int) -> Candidate:
    """``c`` with each subterm that can stand for any tensor of its shape replaced by a fresh variable, then
    each variable used more than once split where its uses need not be the same tensor."""
    taken = {v.name for v in vars_} | {v.name for v in variables(c.lhs) | variables(c.rhs)}

    def holds(trial: Candidate) -> bool:
        if ac_normal(trial.lhs) == ac_normal(trial.rhs):
            return False  # commuting or regrouping only: no rule states that (terms.ac_normal)
        if not (orientable(trial.lhs, trial.rhs) or orientable(trial.rhs, trial.lhs)):
            return False
        _, error = check_values(trial.lhs, trial.rhs, with_variables_of(vars_, trial.lhs, trial.rhs), symbols,
                                seed, stop_above=TOLERANCE)
        return error <= TOLERANCE

    for sub in _subterms(c):
        if not (_occurs(sub, c.lhs) or _occurs(sub, c.rhs)):
            continue  # inside a larger subterm replaced already
        fresh = Var(_fresh_name(sub.shape, taken), sub.shape)
        trial = Candidate(_replaced(c.lhs, sub, fresh), _replaced(c.rhs, sub, fresh))
        if holds(trial):
            c = trial
            taken.add(fresh.name)
    to_split = sorted((v for v in variables(c.lhs) | variables(c.rhs) if v.shape is not None), key=lambda v: v.name)
    while to_split:
        var = to_split.pop(0)
        fresh = Var(_fresh_name(var.shape, taken), var.shape)
        split = next((trial for trial in _splits(c, var, fresh) if holds(trial)), None)
        if split is not None:
            c = split
            taken.add(fresh.name)
            to_split[:0] = [var, fresh]  # either may split again
    return c


MAX_SPLIT_USES = 8  # a variable used more often is left whole (2 ** 7 - 1 trials)


def _splits(c: Candidate, var: Var, fresh: Var):
    """``c`` with ``fresh`` in place of ``var`` at some of its uses (never the first, never all): smaller sets of
    uses first, in a fixed order."""
    uses = [("lhs", path) for path in _paths(c.lhs, var)] + [("rhs", path) for path in _paths(c.rhs, var)]
    if not 2 <= len(uses) <= MAX_SPLIT_USES:
        return
    for count in range(1, len(uses)):
        for chosen in itertools.combinations(uses[1:], count):
            yield Candidate(_renamed_at(c.lhs, {p for side, p in chosen if side == "lhs"}, fresh),
                            _renamed_at(c.rhs, {p for side, p in chosen if side == "rhs"}, fresh))


def _subterms(c: Candidate) -> list[Term]:
    """The proper tensor subterms of either side (not a side itself), largest first, in a fixed order."""
    found: dict[Term, None] = {}

    def walk(t, top: bool) -> None:
        if isinstance(t, Var):
            return
        if not top:
            found.setdefault(t)
        for k in t.kids:
            walk(k, False)
    walk(c.lhs, True)
    walk(c.rhs, True)
    return sorted(found, key=lambda t: (-t.size, t.text()))


def _occurs(sub: Term, t) -> bool:
    return t == sub or (isinstance(t, Term) and any(_occurs(sub, k) for k in t.kids))


def _replaced(t, sub: Term, var: Var):
    if t == sub:
        return var
    if isinstance(t, Var):
        return t
    kids = tuple(_replaced(k, sub, var) for k in t.kids)
    return Term(t.op, kids, t.attrs, t.shape, 1 + sum(k.size for k in kids))


def _paths(t, var: Var, path: tuple = ()) -> list[tuple]:
    """Where ``var`` occurs in ``t``: paths of kid indices, in order."""
    if isinstance(t, Var):
        return [path] if t == var else []
    return [p for n, k in enumerate(t.kids) for p in _paths(k, var, path + (n,))]


def _renamed_at(t, paths: set[tuple], var: Var, path: tuple = ()):
    if isinstance(t, Var):
        return var if path in paths else t
    if not any(p[:len(path)] == path for p in paths):
        return t
    kids = tuple(_renamed_at(k, paths, var, path + (n,)) for n, k in enumerate(t.kids))
    return Term(t.op, kids, t.attrs, t.shape, 1 + sum(k.size for k in kids))


def _fresh_name(shape, taken: set[str]) -> str:
    """``X_i_j`` for a variable of shape [i, j] (``X_i_j_2`` where taken): the name says the shape, because a
    derivation graph holds many candidates and makes one input of each variable name."""
    base = "X_" + "_".join("".join(d) or "1" for d in shape)
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}_{n}"
    return name
