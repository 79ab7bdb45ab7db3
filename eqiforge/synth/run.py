"""``eqiforge rules synthesize``: enumerate, fingerprint, drop what the rules derive, minimize, verify, write.

    terms (terms.py) -> candidates (candidates.py) -> not derivable (derive.py) -> size by size, kept
    smallest first, each verified (verify.py) and checked as written in the e-graph -> none derivable from
    the others -> DIR/candidates.egg (egg.py's rules, the house header) and DIR/report.md

The long steps (the last size's terms, derivation, verification) run as tasks of a sweep executor where one
is given (shards.py: local workers or Ray), in fixed shards merged in order: the same rules as in one process.
Deterministic for a seed and options, as long as the time limit is not what stops it (the report says).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from .. import cost
from ..cost.plans import graph_nodes, node_record
from ..egraph import rulesets
from ..egraph.soundness import check_rules_on
from ..errors import EqiforgeError
from ..ir import Graph
from . import derive, shards
from .candidates import Candidate, Enumeration, enumerate_candidates
from .egg import orientable, rule_name, rule_text
from .terms import DEFAULT_OPS, DEFAULT_VARS, SUPPORTED, parse_vars, symbols_of, variables
from .values import shape_text, to_graph
from .verify import InEgraph, Verification

STEP_SHARE = 6  # a minimization round takes 1/STEP_SHARE of the remaining candidates, STEP_MIN to STEP_MAX
STEP_MIN, STEP_MAX = 8, 100
EGRAPH_CHUNK = 25  # candidates whose rules are checked in one e-graph
#: sizes the report prices a rule's witness at (a symbol each, in order)
PRICE_SIZES = (512, 256, 384, 128, 640, 192)


@dataclass
class Kept:
    candidate: Candidate
    rules: list[tuple[str, str]]  # (name, egglog text): one per direction that is a rewrite
    verification: Verification
    saved_s: float = 0.0  # predicted seconds the left side costs over the right at PRICE_SIZES
    witness: str = ""  # the left side as an IR program at the derivation sizes


@dataclass
class Synthesis:
    ops: list[str]
    vars_spec: str
    max_size: int
    seed: int
    enumeration: Enumeration = field(default_factory=Enumeration)
    derivable: int = 0  # by the shipped rules
    followed: int = 0  # from the shipped rules and the kept ones
    redundant: int = 0  # kept, then found derivable from the other kept rules
    kept: list[Kept] = field(default_factory=list)
    rejected: list[tuple[str, str]] = field(default_factory=list)  # (candidate, why)
    limited: list[str] = field(default_factory=list)  # derivation chunks that stopped at a limit
    without: tuple[str, ...] = ()  # shipped rules left out
    stopped: str = ""
    seconds: float = 0.0


def synthesize(ops: list[str] | None = None, vars_spec: str = DEFAULT_VARS, max_size: int = 3, seed: int = 0,
               time_limit: float = 600.0, device: str | None = None, progress: bool = True,
               without: tuple[str, ...] = (), executor=None) -> Synthesis:
    """Rules over ``ops`` and the variables of ``vars_spec`` up to ``max_size`` ops a side (see the module),
    against the shipped rules less those named in ``without`` (rediscovery: are they found again?). The long
    parts run as tasks of ``executor`` (``eqiforge.sweep``; None: in this process): the same rules either way."""
    ops = list(ops or DEFAULT_OPS)
    unknown = [o for o in ops if o not in SUPPORTED]
    if unknown:
        raise EqiforgeError(f"ops {unknown} are not in the synthesis vocabulary; choose from {list(SUPPORTED)}")
    if max_size < 1:
        raise EqiforgeError("--max-size must be at least 1")
    try:
        vars_ = parse_vars(vars_spec)
    except ValueError as err:
        raise EqiforgeError(str(err)) from None
    start = time.monotonic()
    deadline = start + time_limit
    symbols = symbols_of(vars_)
    out = Synthesis(ops, vars_spec, max_size, seed, without=tuple(without))
    with tqdm(desc="terms", unit=" terms", disable=not progress) as bar:
        out.enumeration = enumerate_candidates(vars_, ops, max_size, symbols, seed, deadline, bar,
                                               shards.last_size_outcomes(executor, vars_spec, ops, max_size, seed))
    candidates = sorted(out.enumeration.candidates, key=lambda c: (c.size, c.text()))
    with tqdm(total=len(candidates), desc="derivable", disable=not progress) as bar:
        joined, out.limited = shards.derivable(executor, candidates, symbols, progress=bar, without=out.without)
    remaining = [c for c, j in zip(candidates, joined) if not j]
    out.derivable = len(candidates) - len(remaining)
    taken = {n for rs in rulesets.available().values() for n in rs.rule_names} - set(out.without)  # unique names
    with tqdm(total=len(remaining), desc="minimize", disable=not progress) as bar:
        for level in sorted({c.size[0] for c in remaining}):
            left = _minimize([c for c in remaining if c.size[0] == level], out, vars_, symbols, taken, deadline, bar,
                             executor)
            if left:
                unexamined = left + sum(c.size[0] > level for c in remaining)
                out.stopped = f"time limit ({time_limit:g} s) with {unexamined} candidates left unexamined"
                break
    out.redundant = _drop_redundant(out, symbols, deadline, executor)
    _price(out.kept, symbols, device)
    out.seconds = time.monotonic() - start
    return out


def _minimize(level: list[Candidate], out: Synthesis, vars_, symbols, taken: set[str], deadline: float, bar,
              executor) -> int:
    """Ruler's greedy loop over the candidates of one size (the larger side's ops), smallest first: those the
    kept rules derive go; of the rest, a step's worth is verified and kept, and the others are tested again
    with the new rules added, until none is left. A size's candidates meet the smaller sizes' rules once, on
    entering, not after each of their steps: most of a larger size follows from the smaller rules, and that
    one test is a sweep's worth of independent tasks. Returns how many the deadline left unexamined."""
    remaining, tested_with = level, 0  # the kept rules the remaining candidates were tested against
    while remaining:
        if time.monotonic() > deadline:
            return len(remaining)
        if len(out.kept) > tested_with:
            joined, limited = shards.derivable(executor, remaining, symbols, rule_texts(out.kept), without=out.without)
            out.limited += limited
            out.followed += sum(joined)
            bar.update(sum(joined))
            remaining, tested_with = [c for c, j in zip(remaining, joined) if not j], len(out.kept)
        step = min(STEP_MAX, max(STEP_MIN, len(remaining) // STEP_SHARE))
        batch, remaining = remaining[:step], remaining[step:]
        out.kept += _keep(batch, vars_, symbols, out.seed, out.rejected, taken, executor)
        bar.update(len(batch))
    return 0


def _keep(batch: list[Candidate], vars_, symbols, seed: int, rejected: list, taken: set[str],
          executor) -> list[Kept]:
    """The batch's candidates that pass verification and, written as rules, fire and are sound in the
    e-graph on their left sides' programs."""
    found = []
    for c, v in zip(batch, shards.verifications(executor, batch, vars_, symbols, seed)):
        if not v.passed:
            rejected.append((c.text(), f"values differ (relative error {v.error:.2g})"))
            continue
        try:
            rules = [(n, rule_text(a, b, n)) for a, b, n in _directions(c, taken)]
        except ValueError as err:
            rejected.append((c.text(), f"cannot be written as a rule: {err}"))
            continue
        found.append(Kept(c, rules, v))
    if not found:
        return []
    sizes, scalars = derive.derive_sizes(symbols), derive.scalar_values([k.candidate for k in found])
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


def _drop_redundant(out: Synthesis, symbols, deadline: float, executor, groups: int = 8) -> int:
    """Drop kept rules that the other kept ones derive (Ruler's last minimization): the kept rules dealt into
    ``groups`` groups, each group's tested against all the others still kept, one group after another (so two
    rules that derive each other never both go)."""
    dropped, dealt = 0, list(out.kept)
    for g in range(groups):
        group = [k for i, k in enumerate(dealt) if i % groups == g]
        if not group or time.monotonic() > deadline:
            continue
        others = [k for k in out.kept if all(k is not m for m in group)]
        joined, _ = shards.derivable(executor, [k.candidate for k in group], symbols, rule_texts(others),
                                     without=out.without)
        for k, j in zip(group, joined):
            if j:
                out.kept.remove(k)
                dropped += 1
    return dropped


def _price(kept: list[Kept], symbols, device: str | None) -> None:
    """Predicted seconds each rule saves at PRICE_SIZES: its left side's price less its right side's."""
    model = cost.get_cost_model("roofline", device or os.environ.get("EQIFORGE_DEVICE") or "cpu")
    sizes = {s: PRICE_SIZES[i % len(PRICE_SIZES)] for i, s in enumerate(symbols)}
    for k in kept:
        prices = []
        for t in (k.candidate.lhs, k.candidate.rhs):
            g, memo = Graph(), {}
            g.outputs = [to_graph(g, t, sizes, {v.name: 0.5 for v in variables(t) if v.scalar}, memo)]
            prices.append(float(sum(model.predict([node_record(n) for n in graph_nodes(g)]))))
        k.saved_s = prices[0] - prices[1]


# ---------------------------------------------------------------------------------------------- output

def write(out: Synthesis, folder: str | Path) -> tuple[Path, Path]:
    """DIR/candidates.egg and DIR/report.md."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    egg, report = folder / "candidates.egg", folder / "report.md"
    egg.write_text(egg_file(out))
    report.write_text(report_text(out))
    return egg, report


def egg_file(out: Synthesis) -> str:
    finite = [n for k in out.kept if k.verification.finite_only for n, _ in k.rules]
    head = [f"; candidates.egg: rules found by `eqiforge rules synthesize` (ops {', '.join(out.ops)}; variables",
            f"; {out.vars_spec}; at most {out.max_size} ops a side; seed {out.seed}). None is derivable from the",
            "; shipped rule sets under their default schedule, or from the others here; each was verified",
            "; (values in float64 at many shapes, NaN/inf inputs, sympy where it decides, the rule as written in",
            "; the e-graph): report.md says how, with each rule's witness and the cost it saves.",
            "; Sources: enumeration of well-typed terms grouped by their values (Ruler, Nandi et al., OOPSLA 2021).",
            "; Blow-up risks: not assessed; commuting and reassociating rules grow e-graphs: review before adopting.",
            "; Rules hold at every size: each guards the ranks and size-1 dims of its operands as they were found."]
    for i in range(0, len(finite), 6):
        head.append(f"; assumes finite: {', '.join(finite[i:i + 6])}")
    body = []
    for k in out.kept:
        body.append(f"; {k.candidate.text()}")
        body += [text for _, text in k.rules]
    return "\n".join(head) + "\n\n" + "\n".join(body) + "\n"


def _without_flag(out: Synthesis) -> str:
    return f" --without {','.join(out.without)}" if out.without else ""


def report_text(out: Synthesis) -> str:
    e = out.enumeration
    lines = [
        "# Synthesized rules", "",
        f"`eqiforge rules synthesize --ops {','.join(out.ops)} --vars \"{out.vars_spec}\" --max-size {out.max_size} "
        f"--seed {out.seed}{_without_flag(out)}`: {out.seconds:.0f} s.", "",
        "| stage | count |", "|---|---:|",
        f"| terms enumerated (by size: {', '.join(f'{s}: {n}' for s, n in e.per_size.items())}) | {e.terms} |",
        f"| classes of equal values | {e.classes} |",
        f"| terms dropped: constant ({e.constant}), a variable cancels ({e.cancelling}), not finite ({e.not_finite}) "
        f"| {e.constant + e.cancelling + e.not_finite} |",
        f"| equal pairs with no rewrite direction (each side has a variable the other lacks) | {e.unorientable} |",
        f"| equal pairs that rename an earlier one | {e.renamings} |",
        f"| equal pairs up to commuting and regrouping Add, Mul, Maximum, Minimum (stated by no rule) | {e.commuted} |",
        f"| candidates | {len(e.candidates)} |",
        f"| derivable by the shipped rules | {out.derivable} |",
        f"| derivable once smaller candidates were kept | {out.followed} |",
        f"| rejected (verification, or not expressible as a rule) | {len(out.rejected)} |",
        f"| kept, then derivable from the other kept rules | {out.redundant} |",
        f"| **kept and verified** | **{len(out.kept)}** |", ""]
    if e.stopped or out.stopped:
        lines += [f"Stopped early: {e.stopped or out.stopped}.", ""]
    if out.limited:
        lines += [f"{len(out.limited)} derivation graph(s) stopped at a limit ({out.limited[0]}): some of their "
                  "candidates may be derivable after all.", ""]
    lines += ["## Kept rules", "", "Saved: predicted seconds the left side costs over the right at sizes "
              f"{', '.join(map(str, PRICE_SIZES))} for the symbols in order (negative: the rule's left side is the "
              "cheaper, and the rule is for reaching other forms).", ""]
    for k in sorted(out.kept, key=lambda k: -k.saved_s):
        v = k.verification
        lines += [f"### {' / '.join(n for n, _ in k.rules)}", "",
                  f"`{k.candidate.lhs.text()}` = `{k.candidate.rhs.text()}` : {shape_text(k.candidate.lhs.shape)}", "",
                  f"- values: {v.shapes} shapes, worst relative error {v.error:.1e}; finite only: "
                  f"{'yes' if v.finite_only else 'no'}; float16 error: left {v.half_error[0]:.1e}, right "
                  f"{v.half_error[1]:.1e}",
                  f"- symbolic: {v.symbolic}", f"- in the e-graph: {v.egraph or ''}",
                  f"- saves {k.saved_s * 1e6:.1f} us on its witness:", "", "```", k.witness, "```", ""]
    if out.rejected:
        lines += ["## Rejected", ""] + [f"- `{c}`: {why}" for c, why in out.rejected] + [""]
    return "\n".join(lines)
