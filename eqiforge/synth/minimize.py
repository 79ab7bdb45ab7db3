"""Minimization (Ruler's): of the candidates no shipped rule derives, keep few verified rules that derive the rest.

Size by size (a candidate's size: its larger side's ops), smallest first:

1. a size's candidates meet the smaller sizes' kept rules once, on entering (a sweep's worth of derivation
   tasks): most of a larger size follows from the smaller rules;
2. the survivors, cut in enumeration order into parts of at most PART (a part holds candidates of like form),
   are each minimized alone by Ruler's greedy loop, a part a task: a step's worth made general
   (generalize.py), verified and kept, the rest tested again with the new rules, until none is left;
3. after each size, kept rules that the others derive are dropped (``drop_redundant``): this also drops
   what two parts both kept; at the end a dropped rule the final ones no longer derive (within the limits)
   is put back.

The parts are what make it parallel: the greedy loop is sequential (each step's rules decide what the next
step tests), and at size 4 over the default vocabulary thousands of candidates survive step 1. A part's loop
costs about the square of its size, so cutting the survivors also cuts the work; what it costs is rules kept
twice, which step 3 removes. Parts are cut here and merged in order, and rule names are given at the merge: the
same rules in one process, in local workers and on Ray.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

from ..egraph.soundness import check_rules_on
from ..errors import EqiforgeError
from ..ir import Graph
from ..sweep import Task
from . import derive
from .candidates import Candidate
from .egg import orientable, rule_name, rule_text
from .shards import Runner, derivable, derivable_each, verifications
from .terms import ops_of
from .values import to_graph
from .verify import InEgraph, Verification

STEP_SHARE = 6  # a greedy step takes 1/STEP_SHARE of the remaining candidates, STEP_MIN to STEP_MAX
STEP_MIN, STEP_MAX = 8, 100
EGRAPH_CHUNK = 25  # candidates whose rules are checked in one e-graph
PART = 300  # survivors of a size minimized together (a task)
CHUNK_OPS = 4  # the most ops a redundancy test's derivation graph holds (``derivable_by``)


@dataclass
class Kept:
    candidate: Candidate
    rules: list[tuple[str, str]]  # (name, egglog text): one per direction that is a rewrite
    verification: Verification
    saved_s: float = 0.0  # predicted seconds the left side costs over the right at the report's sizes
    witness: str = ""  # the left side as an IR program at the derivation sizes


@dataclass
class Minimized:
    """What minimizing found: the rules kept (in order), the candidates rejected and why, how many followed
    from kept rules, the stop reasons of derivation graphs that hit a limit, and how many candidates the
    deadline left unexamined."""

    kept: list[Kept] = field(default_factory=list)
    rejected: list[tuple[str, str]] = field(default_factory=list)
    followed: int = 0
    limited: list[str] = field(default_factory=list)
    unexamined: int = 0
    redundant: int = 0  # kept, then derivable from the other kept rules


@dataclass(frozen=True)
class Setting:
    """What every step of a minimization needs: the variables and size symbols, the seed of the checks, the
    shipped rules left out, and the rule names taken (the shipped ones, and the kept ones a part is tested
    with)."""

    vars_: list
    symbols: list[str]
    seed: int
    without: tuple[str, ...]
    taken: tuple[str, ...]  # sorted: a task's payload reads the same in every process (--resume's digest)


def minimize(candidates: list[Candidate], setting: Setting, runner: Runner, deadline: float,
             bar=None) -> Minimized:
    """The module's steps over ``candidates`` (sorted by size, then text), size by size; ``bar`` counts the
    candidates examined. Step 3 runs after every size, not only the last: the smaller sizes' rules go into
    every derivation graph of the next size, and at size 3 half of those kept were redundant (1,208 rule
    texts a size-4 graph instead of about 600, each graph slower and sooner at its e-node limit). At the end,
    what was dropped must still follow from what is kept (``restore_underived``)."""
    found, taken, dropped = Minimized(), set(setting.taken), []
    for size in sorted({c.size[0] for c in candidates}):
        level = [c for c in candidates if c.size[0] == size]
        if found.unexamined or time.monotonic() > deadline:
            found.unexamined += len(level)
            continue
        if found.kept:  # step 1: the smaller sizes' rules, once
            with runner.step(f"size {size}: derivable from the smaller sizes' rules"):
                joined, limited = derivable(runner, level, setting.symbols, rule_texts(found.kept),
                                            without=setting.without)
            found.limited += limited
            found.followed += sum(joined)
            _update(bar, sum(joined))
            level = [c for c, j in zip(level, joined) if not j]
        named = replace(setting, taken=tuple(sorted(taken)))  # a part's rules meet the smaller sizes' by name
        with runner.step(f"size {size}: greedy minimization of {len(level)} "
                         f"{'in one part' if len(level) <= PART else f'in parts of {PART}'}"):
            parts = [greedy(level, found.kept, named, runner, deadline, bar)] if len(level) <= PART else \
                _in_parts(level, rule_texts(found.kept), named, runner, bar)
        for part in parts:
            _merge(found, part, taken)
        with runner.step(f"size {size}: kept rules derivable from the others"):
            dropped += drop_redundant(found.kept, setting, runner, deadline)
    with runner.step("dropped rules the final ones still derive"):
        found.redundant = len(dropped) - len(restore_underived(found.kept, dropped, setting, runner))
    return found


def _update(bar, n: int) -> None:
    if bar is not None:
        bar.update(n)


def _merge(found: Minimized, part: Minimized, taken: set[str]) -> None:
    """Add a part's findings to ``found``, its rules renamed in order so that no two share a name."""
    for k in part.kept:
        k.rules = [(n, rule_text(a, b, n)) for a, b, n in _directions(k.candidate, taken)]
    found.kept += part.kept
    found.rejected += part.rejected
    found.followed += part.followed
    found.limited += part.limited
    found.unexamined += part.unexamined


def _in_parts(level: list[Candidate], base_rules: list[str], setting: Setting, runner: Runner,
              bar) -> list[Minimized]:
    """Step 2 a part a task, in order."""
    tasks = [Task(f"minimize-{level[0].size[0]}-{start}", "synthesis-minimization",
                  (level[start:start + PART], base_rules, setting))
             for start in range(0, len(level), PART)]
    return runner.run(minimize_part, tasks, finished=lambda part: _update(bar, _examined(part)))


def _examined(part: Minimized) -> int:
    return len(part.kept) + len(part.rejected) + part.followed


def minimize_part(task: Task) -> Minimized:
    """A part's greedy loop (a task: its steps run in the process that runs it), to the end: the time limit is
    looked at before a size's parts start, so that a part's result is the same whenever it runs (and can be
    kept for --resume)."""
    part, base_rules, setting = task.payload
    return greedy(part, [], setting, Runner(), float("inf"), None, base_rules=base_rules)


def greedy(remaining: list[Candidate], kept_before: list[Kept], setting: Setting, runner: Runner, deadline: float,
           bar, base_rules: list[str] = ()) -> Minimized:
    """Ruler's greedy loop, smallest first: a step's worth is verified and kept; the others are tested again
    with the rules kept since (besides ``base_rules``, and ``kept_before``, which they were tested against
    already), until none is left. Its rules' names are provisional (``_merge`` gives the final ones)."""
    found, tested_with, taken = Minimized(), 0, set(setting.taken)
    while remaining:
        if time.monotonic() > deadline:
            found.unexamined = len(remaining)
            break
        if len(found.kept) > tested_with:
            rules = list(base_rules) + rule_texts(kept_before + found.kept)
            joined, limited = derivable(runner, remaining, setting.symbols, rules, without=setting.without)
            found.limited += limited
            found.followed += sum(joined)
            _update(bar, sum(joined))
            remaining, tested_with = [c for c, j in zip(remaining, joined) if not j], len(found.kept)
        step = min(STEP_MAX, max(STEP_MIN, len(remaining) // STEP_SHARE))
        batch, remaining = remaining[:step], remaining[step:]
        found.kept += _keep(batch, setting, taken, found, runner)
        _update(bar, len(batch))
    return found


def _keep(batch: list[Candidate], setting: Setting, taken: set[str], so_far: Minimized,
          runner: Runner) -> list[Kept]:
    """The batch's candidates, made general, that pass verification and, written as rules, fire and are sound
    in the e-graph on their left sides' programs. One that generalizes to a rule kept already (in ``so_far``
    or earlier in the batch) follows from it; the rejected are added to ``so_far``'s."""
    found, rejected = [], so_far.rejected
    seen = {k.candidate.canonical() for k in so_far.kept}
    for c, v in verifications(runner, batch, setting.vars_, setting.symbols, setting.seed):
        if c.canonical() in seen:
            so_far.followed += 1
            continue
        if not v.passed:
            rejected.append((c.text(), f"values differ (relative error {v.error:.2g})"))
            continue
        try:
            rules = [(n, rule_text(a, b, n)) for a, b, n in _directions(c, taken)]
        except ValueError as err:
            rejected.append((c.text(), f"cannot be written as a rule: {err}"))
            continue
        found.append(Kept(c, rules, v))
        seen.add(c.canonical())
    if not found:
        return []
    sizes, scalars = derive.derive_sizes(setting.symbols), derive.scalar_values([k.candidate for k in found])
    verdicts = {}
    for start in range(0, len(found), EGRAPH_CHUNK):
        verdicts.update(_in_egraph(found[start:start + EGRAPH_CHUNK], sizes, scalars))
    good = []
    for k in found:
        k.verification.egraph = verdicts[k.candidate.text()]
        if k.verification.passed:
            g, memo = Graph(), {}
            g.outputs = [to_graph(g, k.candidate.lhs, sizes, scalars, memo)]
            k.witness = g.format()
            good.append(k)
        else:
            rejected.append((k.candidate.text(), f"as a rule in the e-graph: {k.verification.egraph}"))
    return good


def _directions(c: Candidate, taken: set[str]):
    """(left, right, name) for each direction of the candidate that is a rewrite (one, where the reverse is
    the same rule with its variables and sizes renamed: ``sum(sum(A, 1), 0) = sum(sum(A, 0), 1)``)."""
    ways = [(a, b) for a, b in ((c.lhs, c.rhs), (c.rhs, c.lhs)) if orientable(a, b)]
    if len(ways) == 2 and Candidate(*ways[1]).canonical() == Candidate(*ways[0]).canonical():
        ways = ways[:1]
    return [(a, b, rule_name(a, b, taken)) for a, b in ways]


def _in_egraph(kept: list[Kept], sizes, scalars) -> dict[str, InEgraph]:
    """Each candidate's verdict as written: the batch's rules saturated together on a program of all their
    sides; where an e-node then disagrees, each rule again alone on its own sides, to say which."""
    verdicts = _run_rules(kept, sizes, scalars)
    if verdicts is None:
        verdicts = {}
        for k in kept:
            disagrees = {k.candidate.text(): InEgraph(False, "an e-node disagrees")}
            verdicts.update(_run_rules([k], sizes, scalars) or disagrees)
    return verdicts


def _run_rules(kept: list[Kept], sizes, scalars) -> dict[str, InEgraph] | None:
    """{candidate: verdict} of the rules of ``kept`` on their sides' program; None if an e-node disagrees
    and there is more than one candidate to blame."""
    g, memo = Graph(), {}
    g.outputs = [to_graph(g, t, sizes, scalars, memo) for k in kept for t in (k.candidate.lhs, k.candidate.rhs)]
    try:
        matches, problems = check_rules_on("\n".join(text for k in kept for _, text in k.rules), g)
    except EqiforgeError as err:
        if len(kept) > 1:
            return None
        return {kept[0].candidate.text(): InEgraph(False, f"does not load: {str(err)[:200]}")}
    if problems and len(kept) > 1:
        return None
    verdicts = {}
    for k in kept:
        silent = [n for n, _ in k.rules if not matches.get(n)]
        sound = not problems and not silent
        verdicts[k.candidate.text()] = InEgraph(sound, problems[0] if problems else
                                                f"did not fire: {', '.join(silent)}" if silent else "fired, sound")
    return verdicts


def rule_texts(kept: list[Kept]) -> list[str]:
    """The egglog text of every rule of ``kept``, one a string."""
    return [text for k in kept for _, text in k.rules]


def drop_redundant(kept: list[Kept], setting: Setting, runner: Runner, deadline: float,
                   groups: int = 8) -> list[Kept]:
    """Drop from ``kept`` the rules that the other kept ones derive (Ruler's last minimization): the kept rules
    dealt into ``groups`` groups, each group's tested against all the others still kept (over its ops:
    ``derivable_by``), one group after another (so two rules that derive each other never both go). Returns
    those that went."""
    dropped, dealt = [], list(kept)
    for g in range(groups):
        group = [k for i, k in enumerate(dealt) if i % groups == g]
        if not group or time.monotonic() > deadline:
            continue
        others = [k for k in kept if all(k is not m for m in group)]
        for k, j in zip(group, derivable_by(runner, group, others, setting)):
            if j:
                kept.remove(k)
                dropped.append(k)
    return dropped


def restore_underived(kept: list[Kept], dropped: list[Kept], setting: Setting, runner: Runner) -> list[Kept]:
    """Put back into ``kept`` (in enumeration order) the dropped rules that the final kept rules no longer
    derive, and return them. Derivability is tested within limits: a rule dropped after size 2, derived by a
    few rules then, can be out of reach of the hundreds kept by the end (rediscovery lost sum-of-scaled so)."""
    joined = derivable_by(runner, dropped, kept, setting)
    back = [k for k, j in zip(dropped, joined) if not j]
    kept += back
    kept.sort(key=lambda k: (k.candidate.size, k.candidate.text()))
    return back


def derivable_by(runner: Runner, tested: list[Kept], rules: list[Kept], setting: Setting) -> list[bool]:
    """Whether each of ``tested`` is derivable from the rules of ``rules`` whose ops its own include. Sorted by
    their ops and cut into chunks of at most CHUNK_OPS ops, each chunk's graph holds only the rules over its
    ops: thousands of kept rules (size 4) would not fit one egglog (about 3 MB a rule), and a rule over ops the
    sides lack rarely helps. Leaving one out can only miss a derivation, which keeps a rule: never loses one."""
    order = sorted(range(len(tested)), key=lambda i: (sorted(_ops(tested[i])), i))
    chunks: list[tuple[list[int], frozenset]] = []
    for i in order:
        ops = _ops(tested[i])
        if chunks and len(chunks[-1][0]) < derive.CHUNK_WITH_KEPT and len(chunks[-1][1] | ops) <= CHUNK_OPS:
            chunks[-1] = (chunks[-1][0] + [i], chunks[-1][1] | ops)
        else:
            chunks.append(([i], ops))
    with_rules = [(members, rule_texts([k for k in rules if _ops(k) <= ops])) for members, ops in chunks]
    with_rules = [(members, texts) for members, texts in with_rules if texts]  # none: not derivable
    joined, _ = derivable_each(runner, [([tested[i].candidate for i in members], texts)
                                        for members, texts in with_rules], setting.symbols, without=setting.without)
    found = [False] * len(tested)
    for (members, _), part in zip(with_rules, joined):
        for i, j in zip(members, part):
            found[i] = j
    return found


def _ops(k: Kept) -> frozenset[str]:
    return frozenset(ops_of(k.candidate.lhs)) | frozenset(ops_of(k.candidate.rhs))
