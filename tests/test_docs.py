"""The README and docs/ as a user meets them: every code block runs, printed output shown after a block is what
the block prints, every link and picture exists.

A block runs as a user would run it: the CPU as the cost model's device (not the tests' H100 table), the
measured choice on (the tests' default is off), a fresh EqiForge cache (this session's CPU calibration copied in, so it
is measured once), a fresh working folder. Output (a ```text block after a code block) is compared line by line with its
numbers masked: times, sizes and errors differ between machines, the rows, words and structure must not. So does whether
Inductor's compile of the plan was measured faster (``backend="auto"``): the rows it adds are left out of both sides
and the measured row's verdict is masked.

Shell lines: ``eqiforge ...`` runs in this process; the setup of the README's two commands must be what
``.ci/run`` runs, and its test command is CI's; other ``python -m pytest`` lines are collected (paths,
``-k``, ``-m``, flags); commands that run for minutes (benchmarks, the fuzz campaign, profiling, the GPU
run) must name a script that exists and defines every flag given. A line of any other kind fails: a new kind
of command needs a way to be checked here.
"""
import contextlib
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from eqiforge import cli
from eqiforge.cost import calibrate

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CI = (ROOT / ".ci" / "run").read_text()
#: setup steps of the README's commands (checked against .ci/run, which runs them on a clean clone)
SETUP = ("python3 -m venv ", ". .venv/bin/activate", "pip install ")
#: long-running commands: the file that defines each one's flags
SCRIPTS = {"-m eqiforge.fuzz": "eqiforge/fuzz/__main__.py", "-m eqiforge.profiling": "eqiforge/profiling/commands.py"}
NUMBER = re.compile(r"\d+(?:\.\d+)?(?:e[+-]?\d+)?")
#: a time's unit follows its size on this machine (39.9 us here, 0.101 ms on a slower one)
TIME = re.compile(r"# (?:s|ms|us)\b")
#: the measured choice's machine-dependent part: a verdict of Inductor or not, the rows a win of Inductor adds
VERDICT = re.compile(r"runs: (program|plan)( under Inductor)?$")
#: which of near-equal plans won the first race is the machine's too ("runs: plan 3;" where it showed "plan;")
WHICH_PLAN = re.compile(r"runs: plan # ?;")
INDUCTOR_ROWS = ("lowering Inductor compiled the plan", "a call runs the plan, compiled by Inductor",
                 "a call runs the original program compiled by Inductor")


def fenced_blocks(page: Path) -> list[tuple[int, str, str, str | None]]:
    """(line, language, code, the output shown after it or None) of every fenced code block of a page."""
    text, blocks = page.read_text(), []
    for match in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.S | re.M):
        line, lang, code = text.count("\n", 0, match.start()) + 1, match.group(1), match.group(2)
        if lang == "text":
            assert blocks and blocks[-1][3] is None, f"{page.name}:{line}: output without a code block before it"
            blocks[-1] = (*blocks[-1][:3], code)
        else:
            assert lang in ("python", "bash"), f"{page.name}:{line}: a code block must say python, bash or text"
            blocks.append((line, lang, code, None))
    return blocks


#: blocks of 12-23 s each, run in the slow tier (page, the block's first line): the triton plan's export (twice,
#: the fast tier keeps test_triton_backend's), the rule-set ablation, a Hugging Face model optimized twice, the Python
#: tour of the pictures (its growth plot, ablation in workers and drawings each in test_viz.py's fast tests)
SLOW_BLOCKS = {
    ("gpu.md", "TRITON_INTERPRET=1 eqiforge optimize --example mlp --backend triton --out mlp_plan"),
    ("backends.md", "TRITON_INTERPRET=1 eqiforge optimize --example mlp --backend triton --show-plan --out mlp_plan"),
    ("visualize.md", "eqiforge ablate --example transformer_layer --out docs/images/ablation"),
    ("visualize.md", "eqiforge growth --example transformer_layer --out docs/images/growth.png"),
    ("usage.md", "import torch, transformers, eqiforge"),
    ("visualize.md", "import eqiforge"),
}
BLOCKS = [pytest.param(page, *block, id=f"{page.relative_to(ROOT)}:{block[0]}",
                       marks=[pytest.mark.slow] if (page.name, block[2].splitlines()[0]) in SLOW_BLOCKS else [])
          for page in PAGES for block in fenced_blocks(page)]


def masked(text: str) -> list[str]:
    """Lines with numbers and time units masked and runs of spaces as one (numbers are right-aligned in
    columns), and the measured choice's verdict on Inductor and which near-equal plan won masked (VERDICT,
    INDUCTOR_ROWS, WHICH_PLAN)."""
    lines = [WHICH_PLAN.sub("runs: plan;", TIME.sub("# <time>", re.sub(r"\s+", " ", NUMBER.sub("#", line)))).strip()
             for line in text.strip().splitlines()]
    return [VERDICT.sub(r"runs: \1 (under Inductor or not)", line) for line in lines
            if not line.startswith(INDUCTOR_ROWS)]


@pytest.fixture(scope="module")
def calibration(tmp_path_factory) -> list[Path]:
    """This CPU's calibration, measured once for the module."""
    folder = tmp_path_factory.mktemp("calibration")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EQIFORGE_CACHE_DIR", str(folder))
        calibrate.cpu_device()
    return list(folder.glob("cpu-*.json"))


@pytest.fixture
def as_a_user(tmp_path, monkeypatch, calibration):
    """A fresh working folder and EqiForge cache, the CPU device, and the environment restored afterwards."""
    cache = tmp_path / "cache"
    cache.mkdir()
    for entry in calibration:
        shutil.copy(entry, cache)
    monkeypatch.setenv("EQIFORGE_CACHE_DIR", str(cache))
    monkeypatch.delenv("EQIFORGE_DEVICE", raising=False)
    monkeypatch.delenv("EQIFORGE_MEASURE", raising=False)
    work = tmp_path / "work"
    (work / "docs" / "images").mkdir(parents=True)  # the pictures' commands write under docs/images
    monkeypatch.chdir(work)
    torch._dynamo.reset()  # as in a new process: no frame compiled before at other shapes
    environ = dict(os.environ)
    yield work
    os.environ.clear()
    os.environ.update(environ)


def run_python(code: str, where: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, where, "exec"), {"__name__": "__docs__"})
    return out.getvalue()


def shell_commands(code: str) -> list[str]:
    """The block's commands as written: continuation lines joined, comments dropped, ``&&`` chains split."""
    commands = []
    for line in code.replace("\\\n", " ").splitlines():
        line = re.sub(r"(^|\s)#.*$", "", line)
        commands += [part.strip() for part in line.split("&&") if part.strip()]
    return commands


#: setup steps .ci/run takes on a clean clone, and the README's first command's install of the package alone
SETUP_STEPS = {step.strip() for line in CI.splitlines() for step in line.split("&&")} | {"pip install -e ."}


def check_setup(command: str, where: str) -> None:
    assert command in SETUP_STEPS, f"{where}: `{command}` is not a step .ci/run takes on a clean clone"


def check_pytest(command: str, argv: list[str], where: str) -> None:
    if command in CI.splitlines() or any(f"&& {command}" in line for line in CI.splitlines()):
        return  # CI runs it as written
    argv = [arg for arg in argv if arg != "-q"]  # one -q: one test id per line
    done = subprocess.run([sys.executable, "-m", "pytest", *argv, "--collect-only", "-q", "-n", "0",
                           "-p", "no:cacheprovider"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    collected = [line for line in done.stdout.splitlines() if line.startswith("tests/") and "::" in line]
    assert done.returncode == 0 and collected, f"{where}: `{command}` collects nothing:\n{done.stdout[-2000:]}"


def check_long_command(argv: list[str], where: str) -> None:
    """The script exists and defines every flag the command gives it."""
    if argv[0] == "-m":
        script, flags = ROOT / SCRIPTS[" ".join(argv[:2])], argv[2:]
    else:
        script, flags = ROOT / argv[0], argv[1:]
    assert script.is_file(), f"{where}: no script {script}"
    source = script.read_text()
    if script.suffix == ".sh":  # a wrapper: its flags go to the Python script it runs
        source += "".join((ROOT / s).read_text() for s in re.findall(r"(bench/\S+\.py)", source))
    for flag in (f.split("=")[0] for f in flags if f.startswith("--")):
        assert f'"{flag}"' in source, f"{where}: {script.name} has no {flag}"


def run_shell(code: str, where: str, monkeypatch) -> str:
    """Run or check each command of a block; the printed output of the last one that ran."""
    printed = ""
    for command in shell_commands(code):
        words = shlex.split(command)
        while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
            name, value = words.pop(0).split("=", 1)
            monkeypatch.setenv(name, value)
        if command.startswith(SETUP):
            check_setup(command, where)
        elif words[0] == "eqiforge":
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                code_ = cli.main(words[1:])
            assert code_ == 0, f"{where}: `{command}` exited with {code_}"
            printed = out.getvalue()
        elif words[:3] == ["python", "-m", "pytest"]:
            check_pytest(command, words[3:], where)
        elif words[0] in ("python", "bash"):
            check_long_command(words[1:], where)
        else:
            pytest.fail(f"{where}: no way to check `{command}`: run it here or name a script")
    return printed


#: a first race won by another of the near-equal plans: the report and the plan printed are that plan's
OTHER_PLAN_WON = re.compile(r"runs: plan \d+;")
#: where a printed plan's code begins
PLAN_CODE = re.compile(r"^# EqiForge plan of ", re.M)


@pytest.mark.parametrize("page,line,lang,code,shown", BLOCKS)
def test_code_block_runs_and_prints_what_it_shows(page, line, lang, code, shown, as_a_user, monkeypatch):
    """Each block runs and prints what the page shows (numbers masked). Where the page shows the first plan
    winning its race and this machine's race went to another near-equal plan (a few % apart: on some machines
    one of them is faster every time), the report is checked as printed (WHICH_PLAN masks the winner) and the
    plan's code against the same block run without measuring, which keeps the first plan: every line shown is
    checked, none by luck."""
    where = f"{page.relative_to(ROOT)}:{line}"
    printed = run_python(code, where) if lang == "python" else run_shell(code, where, monkeypatch)
    if shown is not None and OTHER_PLAN_WON.search(printed) and not OTHER_PLAN_WON.search(shown):
        assert PLAN_CODE.search(printed), f"{where}: another plan won the race but no plan's code was printed"
        monkeypatch.setenv("EQIFORGE_MEASURE", "never")
        torch._dynamo.reset()
        first_plan = run_python(code, where) if lang == "python" else run_shell(code, where, monkeypatch)
        printed = printed[:PLAN_CODE.search(printed).start()] + first_plan[PLAN_CODE.search(first_plan).start():]
    if shown is not None:
        assert masked(printed) == masked(shown), f"{where}: the output shown is not what the block prints " \
                                                 f"(numbers masked); it printed:\n{printed}"


def test_the_readme_has_both_commands_and_ci_runs_the_second():
    commands = [c for _, lang, c, _ in fenced_blocks(ROOT / "README.md") if lang == "bash"][:2]
    optimize, tests = (c.strip() for c in commands)
    assert optimize.startswith("python3 -m venv .venv") and " && eqiforge optimize --example " in optimize
    assert tests.endswith("python -m pytest -q") and tests in CI.splitlines()
    assert CI.splitlines()[-1] == "python -m pytest -q -m slow"  # then the slow tier


def _slug(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_links_and_pictures_exist(page):
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if target.startswith(("http://", "https://")):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        assert file.exists(), f"{page.name}: link to a missing {target}"
        if anchor and file.suffix == ".md":
            headings = re.findall(r"^#+ (.*)$", file.read_text(), re.M)
            assert anchor in {_slug(h) for h in headings}, f"{page.name}: no heading #{anchor} in {file.name}"
        if file.suffix == ".png":
            assert file.stat().st_size < 200_000 and file.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", target
