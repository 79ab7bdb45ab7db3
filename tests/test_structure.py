"""Architecture checks: the op table and the schema agree, every op-table entry is complete, and stages
import only earlier stages."""
import ast
import re
from pathlib import Path

import egglog.bindings as eb
import pytest

from eqiforge import ops
from eqiforge.egraph import rulesets

PACKAGE = Path(__file__).resolve().parent.parent / "eqiforge"
# pipeline order; the shared core (ops, ir, errors) comes first and anything may import it
ORDER = ["paths", "errors", "caches", "dims", "examples", "ops", "ir", "frontend", "egraph", "cost", "extract",
         "lower", "runtime", "pipeline", "decide", "shapes", "sweep", "profiling", "api", "dynamo", "viz", "synth",
         "fuzz", "cli"]


def _schema_constructors() -> dict[str, list[str]]:
    text = "\n".join(map(str, rulesets.schema_commands()))  # schema.egg and what is generated for it
    body = text[text.index("(datatype T"):text.index("(sort TVec")]
    found = {m.group(1): m.group(2).split() for m in re.finditer(r"\((\w+)((?: \w+)*)\)", body)}
    found.pop("datatype", None)
    for m in re.finditer(r"\(constructor (\w+) \(([^)]*)\) T\)", text):
        found[m.group(1)] = m.group(2).split()
    return found


def test_schema_matches_op_table():
    schema = _schema_constructors()
    assert sorted(schema) == sorted(ops.OPS), "schema.egg constructors and ops.OPS differ"
    for name, op in ops.OPS.items():
        expected = [ops.ATTR_SORTS.get(kind, kind) for kind in op.signature]
        assert schema[name] == expected, f"{name}: schema has {schema[name]}, op table says {expected}"


def test_every_op_has_shape_and_dtype_analysis():
    rules = [c.rule.name for c in rulesets.schema_commands() if isinstance(c, eb.RuleCommand)]
    for name, op in ops.OPS.items():
        if name in ("Input", "Param", "Extern") or op.kind == "kernel":
            continue  # set by the encoder; kernel nodes only join e-classes that have shapes
        assert any(r == f"shape-{name}" or r.startswith(f"shape-{name}-") for r in rules), f"no shape rule for {name}"
        if op.kind not in ("leaf", "cast"):
            assert f"dtype-{name}" in rules, f"no dtype rule for {name}"


ELEMENTWISE = ("unary", "binary", "compare", "where")


def incomplete(op: ops.OpDef) -> list[str]:
    """What an elementwise entry lacks: ATen targets with a frontend builder, a reference implementation,
    PyTorch source, and for the math ops of fused kernels a Triton rendering, generated pointwise rules and
    a rule-test case (tests/rule_cases.py)."""
    from rule_cases import CASES

    from eqiforge.frontend import aten
    from eqiforge.lower.triton import epilogue
    missing = [] if op.aten else ["ATen targets"]
    missing += [f"a frontend builder for {t}" for t in op.aten if aten.lookup(aten.aten_op(t)) is None]
    missing += [] if op.torch_impl else ["a reference implementation"]
    missing += [] if op.torch_src and op.torch_src.format(*range(op.arity)) else ["PyTorch source"]
    if op.epi:
        missing += [] if op.triton or op.epi in epilogue.RENDERED_HERE else ["a Triton rendering"]
        rules = [f"pointwise-{op.epi}"] + ([f"pointwise-{op.epi}-scalar"] if op.arity == 2 else [])
        fusion = rulesets.available()["fusion"].rule_names
        missing += [f"rule {r}" for r in rules if r not in fusion]
        missing += [f"a rule-test case for {r}" for r in rules if r not in CASES]
    return missing


@pytest.mark.parametrize("name", [n for n, o in ops.OPS.items() if o.kind in ELEMENTWISE])
def test_every_elementwise_entry_is_complete(name):
    assert not incomplete(ops.OPS[name]), f"{name} lacks {', '.join(incomplete(ops.OPS[name]))}"


def test_an_incomplete_entry_is_caught():
    import dataclasses
    bare = dataclasses.replace(ops.OPS["Exp"], name="Expm1", aten=(), torch_src=None, triton=None)
    assert incomplete(bare) == ["ATen targets", "PyTorch source", "a Triton rendering", "rule pointwise-expm1",
                                "a rule-test case for pointwise-expm1"]
    unmapped = dataclasses.replace(ops.OPS["Exp"], aten=("expm1",))
    assert incomplete(unmapped) == ["a frontend builder for expm1"]


def _imported_stages(path: Path, rel: Path) -> list[str]:
    """Top-level eqiforge modules that ``path`` imports: import statements, relative or absolute, and
    string imports (``importlib.import_module("eqiforge.x")``, ``__import__``), which hide from a reader."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = list(rel.parts[:-node.level]) if node.level <= len(rel.parts) else []
            target = (base + (node.module or "").split("."))[0] if base or node.module else ""
            found += [target] if target else [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("eqiforge."):
            found.append(node.module.split(".")[1])
        elif isinstance(node, ast.ImportFrom) and node.module == "eqiforge":
            found += [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            found += [a.name.split(".")[1] for a in node.names if a.name.startswith("eqiforge.")]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) and \
                isinstance(node.args[0].value, str) and node.args[0].value.startswith("eqiforge."):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("import_module", "__import__"):
                found.append(node.args[0].value.split(".")[1])
    return found


def backward_imports(package: Path) -> list[str]:
    """Every import of a later pipeline stage by a module of ``package`` (its __init__ excepted)."""
    backward = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).with_suffix("")
        own = rel.parts[0]
        if own == "__init__" or own not in ORDER:
            continue
        for imported in _imported_stages(path, rel):
            if imported in ORDER and ORDER.index(imported) > ORDER.index(own):
                backward.append(f"{rel} imports {imported}")
    return backward


def test_stages_import_only_earlier_stages():
    assert not backward_imports(PACKAGE)


def test_the_map_of_the_code_in_the_docs_is_the_pipeline_order():
    """docs/concepts.md's "Where the code is" lists every module and package of eqiforge/, in ORDER."""
    page = (PACKAGE.parent / "docs" / "concepts.md").read_text()
    section = page[page.index("## Where the code is"):]
    listed = re.findall(r"^- `(\w+)(?:/|\.py)`", section, re.M)
    present = {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"} | \
              {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert listed == ORDER, "docs/concepts.md's map and ORDER differ"
    assert set(ORDER) == present, f"ORDER and eqiforge/ differ: {sorted(set(ORDER) ^ present)}"


def module_imports(package: Path, name: str = "eqiforge") -> dict[str, set[str]]:
    """Module -> the modules of ``package`` it imports (statements at any depth: a lazy import inside a
    function is an arrow too); ``from . import x`` names module x where there is one, else the package."""
    paths = {".".join((name, *p.relative_to(package).with_suffix("").parts)).removesuffix(".__init__"): p
             for p in package.rglob("*.py")}
    graph = {}
    for module, path in paths.items():
        here = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = ".".join(here.split(".")[:len(here.split(".")) - node.level + 1]) if node.level else ""
                source = ".".join(filter(None, (base, node.module)))
                targets |= {f"{source}.{a.name}" if f"{source}.{a.name}" in paths else source for a in node.names}
            elif isinstance(node, ast.Import):
                targets |= {a.name for a in node.names}
        for target in targets:
            while target not in paths and "." in target:
                target = target.rsplit(".", 1)[0]
            if target in paths and target != module:
                graph.setdefault(module, set()).add(target)
    return graph


def import_cycles(package: Path) -> list[list[str]]:
    import networkx as nx
    return list(nx.simple_cycles(nx.DiGraph([(m, t) for m, ts in module_imports(package).items() for t in ts])))


def test_no_module_imports_one_that_imports_it_back():
    """No circle in the import drawing, lazy imports included (cost/devices and cost/calibrate made one
    until the device lookup moved above both, issue 43)."""
    assert not import_cycles(PACKAGE)


def test_the_cycle_check_sees_a_lazy_import(tmp_path):
    (tmp_path / "__init__.py").write_text("")
    (tmp_path / "table.py").write_text("def lookup():\n    from .measure import measured\n    return measured()\n")
    (tmp_path / "measure.py").write_text("from .table import lookup\n")
    assert [sorted(c) for c in import_cycles(tmp_path)] == [["eqiforge.measure", "eqiforge.table"]]


def test_structure_check_sees_string_imports(tmp_path):
    (tmp_path / "runtime.py").write_text('import importlib\nviz = importlib.import_module("eqiforge.viz")\n')
    (tmp_path / "ir.py").write_text('api = __import__("eqiforge.api")\nfrom eqiforge import ops, viz\n')
    assert sorted(backward_imports(tmp_path)) == ["ir imports api", "ir imports viz", "runtime imports viz"]


def test_pyproject_ships_every_package_and_the_rules():
    import tomllib
    pyproject = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())
    listed = set(pyproject["tool"]["setuptools"]["packages"])
    present = {"eqiforge"} | {"eqiforge." + ".".join(p.parent.relative_to(PACKAGE).parts)
                              for p in PACKAGE.rglob("*/__init__.py")}
    assert present | {"eqiforge._rules"} == listed
    assert pyproject["tool"]["setuptools"]["package-dir"] == {"eqiforge._rules": "rules"}


def test_every_algebra_op_has_a_pytorch_rendering_for_generated_code():
    from eqiforge.ir import Node
    from eqiforge.lower.pytorch_source import torch_call
    samples = {"dims": (0,), "str": "float32", "i64": 0, "f64": 1.0}
    for name, op in ops.OPS.items():
        if op.kind in ("leaf", "extern", "kernel"):
            continue  # rendered by the module generator itself
        attrs = (0, 0, 1) if name == "Slice" else tuple(samples[a] for a in op.attrs)
        node = Node(name, tuple(range(op.arity)), attrs, (1,), "float32")
        assert torch_call(node, [f"a{i}" for i in range(op.arity)]).count("(") >= 1, name
