"""``eqiforge rules synthesize``: enumerate, fingerprint, drop what the rules derive, minimize, verify, write.

    terms (terms.py) -> candidates (candidates.py) -> not derivable (derive.py) -> minimized size by size,
    smallest first, each kept one made general (generalize.py), verified (verify.py) and checked as written in
    the e-graph (minimize.py) ->
    none derivable from the others -> DIR/candidates.egg (egg.py's rules, the house header) and DIR/report.md

The long steps (the last size's terms, derivation, verification, minimization's parts) run as tasks of a sweep
executor where one is given (shards.py: local workers or Ray), in fixed shards merged in order: the same rules
as in one process; with a results file, a run started again skips the tasks that finished.
Deterministic for a seed and options, as long as the time limit is not what stops it (the report says).
"""
from __future__ import annotations

import collections
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from .. import cost
from ..cost.plans import graph_nodes, node_record
from ..egraph import rulesets
from ..errors import EqiforgeError
from ..ir import Graph
from . import shards
from .candidates import Enumeration, enumerate_candidates
from .minimize import Kept, Setting, minimize
from .terms import DEFAULT_OPS, DEFAULT_VARS, SUPPORTED, parse_vars, symbols_of, variables
from .values import shape_text, to_graph

#: sizes the report prices a rule's witness at (a symbol each, in order)
PRICE_SIZES = (512, 256, 384, 128, 640, 192)


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
    steps: list[shards.Step] = field(default_factory=list)  # where the time went


def synthesize(ops: list[str] | None = None, vars_spec: str = DEFAULT_VARS, max_size: int = 3, seed: int = 0,
               time_limit: float = 600.0, device: str | None = None, progress: bool = True,
               without: tuple[str, ...] = (), executor=None, results: str | Path | None = None) -> Synthesis:
    """Rules over ``ops`` and the variables of ``vars_spec`` up to ``max_size`` ops a side (see the module),
    against the shipped rules less those named in ``without`` (rediscovery: are they found again?). The long
    parts run as tasks of ``executor`` (``eqiforge.sweep``; None: in this process): the same rules either way;
    ``results``: the file that keeps finished tasks' results (``shards.Runner``)."""
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
    runner = shards.Runner(executor, results)
    with tqdm(desc="terms", unit=" terms", disable=not progress) as bar, runner.step("enumeration"):
        out.enumeration = enumerate_candidates(vars_, ops, max_size, symbols, seed, deadline, bar,
                                               shards.last_size_outcomes(runner, vars_spec, ops, max_size, seed))
    candidates = sorted(out.enumeration.candidates, key=lambda c: (c.size, c.text()))
    with tqdm(total=len(candidates), desc="derivable", disable=not progress) as bar, \
            runner.step("derivable by the shipped rules"):
        joined, out.limited = shards.derivable(runner, candidates, symbols, progress=bar, without=out.without)
    remaining = [c for c, j in zip(candidates, joined) if not j]
    out.derivable = len(candidates) - len(remaining)
    taken = {n for rs in rulesets.available().values() for n in rs.rule_names} - set(out.without)  # unique names
    setting = Setting(vars_, symbols, seed, out.without, tuple(sorted(taken)))
    with tqdm(total=len(remaining), desc="minimize", disable=not progress) as bar:
        found = minimize(remaining, setting, runner, deadline, bar)
    out.kept, out.rejected, out.followed, out.redundant = found.kept, found.rejected, found.followed, found.redundant
    out.limited += found.limited
    if found.unexamined:
        out.stopped = f"time limit ({time_limit:g} s) with {found.unexamined} candidates left unexamined"
    out.steps = list(runner.steps.values())
    _price(out.kept, symbols, device)
    out.seconds = time.monotonic() - start
    return out


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


def _steps_table(out: Synthesis) -> list[str]:
    """Where the time went: each step's wall seconds and its tasks (here, through the executor, read from the
    results file); the widest sweep of a step bounds the nodes it could use."""
    if not out.steps:
        return []
    head = "| step | seconds | tasks here | tasks sent | tasks read back | widest sweep |"
    lines = ["## Where the time went", "", head, "|---|---:|---:|---:|---:|---:|"]
    lines += [f"| {s.name} | {s.seconds:.0f} | {s.here} | {s.sent} | {s.stored} | {s.widest} |" for s in out.steps]
    return lines + [f"| all | {out.seconds:.0f} | | | | |", ""]


def report_text(out: Synthesis) -> str:
    e = out.enumeration
    lines = [
        "# Synthesized rules", "",
        f"`eqiforge rules synthesize --ops {','.join(out.ops)} --vars \"{out.vars_spec}\" --max-size {out.max_size} "
        f"--seed {out.seed}{_without_flag(out)}`: {out.seconds:.0f} s.", "",
        "| stage | count |", "|---|---:|",
        f"| terms enumerated (by size: {', '.join(f'{s}: {n}' for s, n in e.per_size.items())}) | {e.terms} |",
        f"| classes of equal values | {e.classes} |",
        f"| terms dropped: constant ({e.constant}), a variable cancels and no class has its value ({e.cancelling}), "
        f"not finite ({e.not_finite}) | {e.constant + e.cancelling + e.not_finite} |",
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
        reasons = collections.Counter(out.limited).most_common()
        lines += [f"{len(out.limited)} derivation graph(s) stopped at a limit or failed: some of their candidates "
                  "may be derivable after all. Why:", ""] + [f"- {n} x {why}" for why, n in reasons] + [""]
    lines += _steps_table(out)
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
