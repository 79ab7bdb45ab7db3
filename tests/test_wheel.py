"""The package as a user installs it: a wheel built from this checkout, installed into a fresh virtual
environment and used from outside the source tree, so that nothing the checkout holds (rules/, bench/data/,
an editable install) can stand in for what the wheel should ship.

The new environment sees this one's packages through a ``.pth`` file (torch and egglog are not downloaded
again) and gets the wheel alone (``--no-deps``); ``--ignore-installed`` keeps pip from touching the editable
install it can see there.
"""
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

import eqiforge

pytestmark = pytest.mark.slow  # a wheel built, an environment made, an optimization in a fresh process (16-31 s)

ROOT = Path(__file__).resolve().parent.parent
NOT_SOURCE = shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache",
                                    ".ruff_cache")

FIND_MODEL = """
from eqiforge.cost import learned
path = learned.model_path("cpu")
print(path)
print(learned.LearnedModel.load(path).header["device"])
"""


def run(cmd, cwd, env, timeout=300) -> str:
    done = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{cmd} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(the wheel, the new environment's python, its site-packages, a folder outside the source tree, its
    environment variables): the checkout copied and built there (the checkout's own build/ untouched)."""
    tmp = tmp_path_factory.mktemp("wheel")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    source = tmp / "source"
    shutil.copytree(ROOT, source, ignore=NOT_SOURCE)
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", tmp / "dist",
         "."], source, env)
    wheel, = (tmp / "dist").glob("eqiforge-*.whl")
    venv = tmp / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", venv], tmp, env)  # this interpreter's base python
    python = venv / "bin" / "python"
    site = Path(run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp, env).strip())
    ours = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))  # this process's packages
    (site / "dependencies.pth").write_text("".join(f"{p}\n" for p in ours))
    run([python, "-m", "pip", "install", "--no-deps", "--no-index", "--ignore-installed", wheel], tmp, env)
    elsewhere = tmp / "elsewhere"
    elsewhere.mkdir()
    return wheel, python, site, elsewhere, env


def test_the_wheel_ships_the_licence_the_typing_marker_the_rules_and_the_learned_model(installed):
    names = set(zipfile.ZipFile(installed[0]).namelist())
    info = f"eqiforge-{eqiforge.__version__}.dist-info"
    assert {f"{info}/licenses/LICENSE", f"{info}/licenses/NOTICE", "eqiforge/py.typed",
            "eqiforge/cost/gpu_figures.json", "eqiforge/cost/models/cpu/model.npz"} <= names
    shipped_rules = {n.rsplit("/", 1)[1] for n in names if n.startswith("eqiforge/_rules/") and n.endswith(".egg")}
    assert shipped_rules == {p.name for p in (ROOT / "rules").glob("*.egg")}


def test_the_installed_package_is_the_wheels_and_has_this_version(installed):
    _, python, site, elsewhere, env = installed
    version, where = run([python, "-c", "import eqiforge; print(eqiforge.__version__, eqiforge.__file__)"],
                         elsewhere, env).split()
    assert version == eqiforge.__version__
    assert Path(where).is_relative_to(site) and not Path(where).is_relative_to(ROOT)


def test_the_installed_command_optimizes_an_example(installed):
    _, python, _, elsewhere, env = installed
    out = run([python.parent / "eqiforge", "optimize", "--example", "matmul_chain", "--measure", "never"],
              elsewhere, env)
    assert "matches eager" in out


def test_the_learned_cpu_model_is_found_in_the_installed_package(installed):
    _, python, site, elsewhere, env = installed
    path, device = run([python, "-c", FIND_MODEL], elsewhere, env).split()
    assert Path(path) == site / "eqiforge" / "cost" / "models" / "cpu" / "model.npz" and Path(path).is_file()
    assert device == "cpu"
