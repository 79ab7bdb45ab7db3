"""The command line: optimize built-in examples and user files, list rules and examples, clear errors."""
import textwrap

import pytest

from eqiforge import cli
from eqiforge.egraph import rulesets


def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_optimize_example_prints_the_summary(capsys):
    code, out, _ = run(capsys, "optimize", "--example", "matmul_chain", "--show-plan")
    assert code == 0
    for row in ("program", "predicted time", "e-graph", "stopped because", "seconds per stage"):
        assert row in out
    assert "matches eager" in out and "# plan:" in out


def test_optimize_user_file_with_model_and_get_inputs(tmp_path, capsys):
    f = tmp_path / "model.py"
    f.write_text(textwrap.dedent("""
        import torch
        class Model(torch.nn.Module):
            def __init__(self, n):
                super().__init__()
                self.w = torch.nn.Parameter(torch.randn(n, n))
            def forward(self, x):
                return (x @ self.w).sum(-1)
        def get_init_inputs():
            return [32]
        def get_inputs():
            return [torch.randn(8, 32)]
    """))
    code, out, _ = run(capsys, "optimize", str(f), "--rules", "reduction,matmul")
    assert code == 0 and "matches eager" in out and "reduction, matmul" in out


def test_optimize_user_factory(tmp_path, capsys):
    f = tmp_path / "prog.py"
    f.write_text("import torch\ndef make():\n"
                 "    return (lambda a, b: a @ b + a, (torch.randn(4, 4), torch.randn(4, 4)))\n")
    code, out, _ = run(capsys, "optimize", f"{f}:make")
    assert code == 0 and "matches eager" in out


@pytest.mark.parametrize("argv,message", [
    (["optimize"], "give a target file"),
    (["optimize", "--example", "nope"], "unknown example"),
    (["optimize", "missing.py"], "no such file"),
    (["optimize", "--example", "mlp", "--rules", "matmul,nope"], "unknown rule set"),
])
def test_errors_are_one_clear_line(capsys, argv, message):
    code, _, err = run(capsys, *argv)
    last = err.strip().splitlines()[-1]
    assert code == 2 and last.startswith("eqiforge: error:") and message in last


def test_rules_lists_every_rule(capsys):
    code, out, _ = run(capsys, "rules")
    assert code == 0
    for rs in rulesets.available().values():
        assert rs.name in out and all(name in out for name in rs.rule_names)


def test_examples_lists_builtins(capsys):
    code, out, _ = run(capsys, "examples")
    assert code == 0 and "transformer_layer" in out and "matmul_chain" in out


@pytest.mark.parametrize("source,message", [
    ("import torch\nclass Model(torch.nn.Module):\n    def __init__(self):\n        raise ValueError('no weights')\n"
     "def get_inputs():\n    return [torch.randn(2)]\n",
     r"Model\(\*get_init_inputs\(\)\) failed: ValueError: no weights"),
    ("import sys\nsys.exit(3)\n", r"importing .*bad.py failed: it called sys.exit\(3\)"),
    ("import torch\nclass Model(torch.nn.Module):\n    pass\ndef get_inputs():\n    raise SystemExit('x')\n",
     r"get_inputs\(\) failed: it called sys.exit\('x'\)"),
])
def test_errors_in_the_users_file_are_one_clear_line(tmp_path, capsys, source, message):
    import re
    (tmp_path / "bad.py").write_text(source)
    code, _, err = run(capsys, "optimize", str(tmp_path / "bad.py"))
    last = err.strip().splitlines()[-1]
    assert code == 2 and last.startswith("eqiforge: error:") and re.search(message, last), last


def test_optimize_without_finite_only_rules_and_without_the_check(capsys):
    code, out, _ = run(capsys, "optimize", "--example", "mlp", "--no-assume-finite", "--no-validate")
    assert code == 0 and "off (validate=False)" in out and "matches eager" in out


def test_version_is_the_packages(capsys):
    import eqiforge
    with pytest.raises(SystemExit) as exited:
        cli.main(["--version"])
    assert exited.value.code == 0 and capsys.readouterr().out.split()[:2] == ["eqiforge", eqiforge.__version__]


def test_optimize_json_is_the_report_as_data_and_verbose_logs_the_stages(capsys):
    """--json prints one JSON object holding what a bug report needs; -v logs each stage and decision."""
    import json
    code, out, err = run(capsys, "-v", "optimize", "--example", "matmul_chain", "--measure", "always",
                         "--measure-seconds", "1.0", "--json")
    assert code == 0
    data = json.loads(out)
    report = data["report"]
    assert data["output_check"].startswith("matches eager") and data["program"] == "matmul_chain"
    assert report["predicted_after"] < report["predicted_before"] and report["runs"] and report["measured"]
    assert set(report["stage_seconds"]) >= {"capture", "saturate", "extract", "lower", "validate", "measure"}
    assert report["egraph"]["enodes"] > 0 and report["egraph"]["stop_reason"] == "saturated"
    for stage in ("capture", "saturate", "measure"):
        assert f"eqiforge: {stage} done in" in err
    assert "eqiforge: timing program, plan" in err and "eqiforge: decided: " in err  # timed: --measure always


def test_quiet_prints_no_progress_and_the_old_device_flag_is_the_priced_device(capsys):
    code, out, err = run(capsys, "-q", "optimize", "--example", "mlp", "--measure", "never", "--device", "A100")
    assert code == 0 and "A100" in out and "matches eager" in out
    assert err == "optimizing mlp ...\n"  # no log lines, no warnings, no progress bar


def test_every_flag_has_help_and_one_meaning_across_subcommands():
    """Each flag of every subcommand says what it does, and a flag name means the same wherever it appears
    (the same help text), but for a default a subcommand states itself."""
    import argparse
    import re
    seen = {}
    sub = next(a for a in cli.parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name, command in sub.choices.items():
        nested = [a for a in command._actions if isinstance(a, argparse._SubParsersAction)]
        commands = [(f"{name} {n}", c) for a in nested for n, c in a.choices.items()] or [(name, command)]
        for where, parser in commands:
            for action in parser._actions:
                if isinstance(action, argparse._HelpAction) or not action.option_strings:
                    continue
                assert action.help, f"{where} {action.option_strings} has no help"
                meaning = re.sub(r"\(default[^)]*\)", "", action.help)
                for flag in action.option_strings:
                    if flag in ("--out", "--seed", "--budget", "--records", "--data", "--model", "--device"):
                        continue  # a folder, a seed, a budget: what it is for is the subcommand's
                    seen.setdefault(flag, {})[where] = meaning
    differing = {flag: places for flag, places in seen.items() if len(set(places.values())) > 1}
    assert not differing, differing
