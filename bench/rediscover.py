"""Rediscovery: leave shipped rules out, synthesize, and see which come back (issue 25's acceptance).

    python bench/rediscover.py                       # -> bench/results/rediscover.md, found rules in /tmp

The ten rules of REMOVED were chosen before the first run: the products, sums and transposes the algebra
relies on most (both directions of reassociation and of the transpose of a product count as two rules each).
Each identity of IDENTITIES states one or two of them over the synthesis's default variables (A, B: [i, j];
W: [j, k]; V: [k, l]; r: [1, j]; s: a scalar). It must be derivable by the full rules and not by the rules
less REMOVED, else it says nothing; it *comes back* when the rules less REMOVED plus the synthesized ones
derive it (the same rule, or an equivalent set: Ruler's test).
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from measure import write_results

REMOVED = ("matmul-assoc-right", "matmul-assoc-left", "sum-last-through-matmul", "sum-rows-through-matmul",
           "sum-of-add", "sum-of-scaled", "transpose-of-matmul-2", "matmul-of-transposes-2", "permute-out-of-add",
           "expand-out-of-matmul")


def identities():
    """(rules it states, candidate) per identity."""
    from eqiforge.synth.candidates import Candidate
    from eqiforge.synth.terms import Term, applications, parse_vars, symbols_of
    vs = {v.name: v for v in parse_vars("A:i,j B:i,j W:j,k V:k,l r:1,j s:scalar")}
    symbols = symbols_of(list(vs.values()))
    A, B, W, V, r, s = (vs[n] for n in "ABWVrs")

    def t(op, *kids, attrs=None):
        found = [(a, sh) for a, sh in applications(op, kids, symbols) if attrs is None or a == attrs]
        assert len(found) == 1, (op, attrs, found)
        return Term(op, kids, *found[0], 1 + sum(k.size for k in kids))
    T = lambda x: t("Permute", x)  # noqa: E731
    return [
        (("matmul-assoc-right", "matmul-assoc-left"),
         Candidate(t("MatMul", t("MatMul", A, W), V), t("MatMul", A, t("MatMul", W, V)))),
        (("sum-last-through-matmul",), Candidate(t("Sum", t("MatMul", A, W), attrs=((1,),)),
                                                 t("MatMul", A, t("Sum", W, attrs=((1,),))))),
        (("sum-rows-through-matmul",), Candidate(t("Sum", t("MatMul", A, W), attrs=((0,),)),
                                                 t("MatMul", t("Sum", A, attrs=((0,),)), W))),
        (("sum-of-add",), Candidate(t("Sum", t("Add", A, B), attrs=((1,),)),
                                    t("Add", t("Sum", A, attrs=((1,),)), t("Sum", B, attrs=((1,),))))),
        (("sum-of-scaled",), Candidate(t("Sum", t("Mul", A, s), attrs=((1,),)),
                                       t("Mul", t("Sum", A, attrs=((1,),)), s))),
        (("transpose-of-matmul-2", "matmul-of-transposes-2"),
         Candidate(T(t("MatMul", A, W)), t("MatMul", T(W), T(A)))),
        (("permute-out-of-add",), Candidate(t("Add", T(A), T(B)), T(t("Add", A, B)))),
        (("expand-out-of-matmul",),
         Candidate(t("MatMul", t("Expand", r, attrs=((("i",), ("j",)),)), W),
                   t("Expand", t("MatMul", r, W), attrs=((("i",), ("k",)),)))),
    ], symbols


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--max-size", type=int, default=3)
    p.add_argument("--time-limit", type=float, default=600.0)
    p.add_argument("--found", default="/tmp/eqiforge-rediscover", help="folder for the synthesized rules")
    p.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "rediscover.md"))
    from eqiforge.sweep import add_arguments, executor_of, results_file
    add_arguments(p)
    args = p.parse_args()
    from eqiforge.synth import derive, minimize, run
    checks, symbols = identities()
    cands = [c for _, c in checks]
    full, _ = derive.derivable(cands, symbols)
    reduced, _ = derive.derivable(cands, symbols, without=REMOVED)
    start = time.monotonic()
    with executor_of(args) as executor:
        out = run.synthesize(max_size=args.max_size, time_limit=args.time_limit, without=REMOVED, executor=executor,
                             results=results_file(args.found, args.resume))
    run.write(out, args.found)
    back, _ = derive.derivable(cands, symbols, minimize.rule_texts(out.kept), without=REMOVED)
    seconds = time.monotonic() - start
    rows = ["# Rediscovery of left-out rules", "",
            f"Left out: {', '.join(REMOVED)}. `eqiforge rules synthesize --max-size {args.max_size} --without ...` "
            f"on the default vocabulary kept {len(out.kept)} rules in {seconds:.0f} s "
            f"({len(out.enumeration.candidates)} candidates, {out.derivable} derivable by the rules left).", "",
            "| rules | identity | full rules | without them | with the synthesized |", "|---|---|---|---|---|"]
    found = 0
    for (rules, c), f, r, b in zip(checks, full, reduced, back):
        rows.append(f"| {', '.join(rules)} | `{c.text()}` | {'derived' if f else 'NOT derived'} | "
                    f"{'derived (no test)' if r else 'not derived'} | {'**found**' if b else 'missed'} |")
        found += len(rules) if (b and f and not r) else 0
    rows += ["", f"Found again: {found} of {len(REMOVED)} rules.", ""]
    write_results(Path(args.out), rows)


if __name__ == "__main__":
    main()
