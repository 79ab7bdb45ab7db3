"""Load the rule files: ``rules/schema.egg`` plus one rule set per ``rules/<name>.egg``.

The file name is the rule set's name (the loader assigns it, so adding a rule set is adding a file and an
ablation is a choice of names). A rule file may hold only named rules and rewrites; anything else, a parse
error, a missing name or a ``:ruleset`` naming another set is reported with the file it came from.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import egglog.bindings as eb

from ..errors import EqiforgeError

SPAN = eb.RustSpan("eqiforge", 0, 0)

SCHEMA_FILE = "schema.egg"
ANALYSIS = "analysis"  # the rule set in schema.egg that derives shapes and dtypes


def rules_dir() -> Path:
    """The rules folder: $EQIFORGE_RULES_DIR, else ``rules/`` beside the package (source checkout or install)."""
    env = os.environ.get("EQIFORGE_RULES_DIR")
    candidates = [Path(env)] if env else []
    here = Path(__file__).resolve().parent.parent
    candidates += [here.parent / "rules", here / "_rules"]
    for c in candidates:
        if (c / SCHEMA_FILE).is_file():
            return c
    raise EqiforgeError(f"cannot find the rules folder (looked in {', '.join(map(str, candidates))})")


LAYERS = ("algebra", "kernel")


@dataclass(frozen=True)
class RuleSet:
    name: str
    path: Path
    rule_names: tuple[str, ...]
    commands: tuple  # parsed egglog commands, ruleset assigned
    layer: str = "algebra"  # a header line "; layer: kernel" marks the kernel layer (layouts, tiles, fusion)


def _parse(path: Path) -> list:
    try:
        return eb.EGraph().parse_program(path.read_text(), filename=str(path.name))
    except eb.EggSmolError as err:
        raise EqiforgeError(f"rule file {path.name} does not parse: {err}") from None


def _assign(cmd, ruleset: str, path: Path):
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
    for cmd in _parse(path):
        rule_name, new = _assign(cmd, name, path)
        if rule_name in names:
            raise EqiforgeError(f"rule file {path.name}: rule name {rule_name!r} is used twice")
        names.append(rule_name)
        commands.append(new)
    layer = re.search(r"^; layer: (\w+)", path.read_text(), re.M)
    layer = layer.group(1) if layer else "algebra"
    if layer not in LAYERS:
        raise EqiforgeError(f"rule file {path.name}: unknown layer {layer!r}; use one of {LAYERS}")
    return RuleSet(name, path, tuple(names), tuple([eb.AddRuleset(SPAN, name)] + commands), layer)


@lru_cache(maxsize=8)
def _load_dir(directory: Path) -> tuple[tuple, dict[str, RuleSet]]:
    schema = tuple(_parse(directory / SCHEMA_FILE))
    sets = {p.stem: load_ruleset(p) for p in sorted(directory.glob("*.egg")) if p.name != SCHEMA_FILE}
    return schema, sets


def schema_commands() -> tuple:
    return _load_dir(rules_dir())[0]


def available() -> dict[str, RuleSet]:
    """All rule sets by name, sorted."""
    return dict(_load_dir(rules_dir())[1])


def select(names: list[str] | None, layers: tuple[str, ...] = LAYERS) -> list[RuleSet]:
    """The rule sets called ``names`` (when None: all of the given layers), or a clear error listing the
    known names."""
    sets = available()
    if names is None:
        return [rs for rs in sets.values() if rs.layer in layers]
    if isinstance(names, str):
        names = [names]
    unknown = [n for n in names if n not in sets]
    if unknown:
        raise EqiforgeError(f"unknown rule set(s) {unknown}; available: {sorted(sets)}")
    return [sets[n] for n in dict.fromkeys(names)]
