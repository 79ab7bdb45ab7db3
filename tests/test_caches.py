"""EqiForge's cache folder seen and cleared kind by kind (eqiforge/caches.py): counts checked against the files a
real optimization wrote, clearing that removes the named kinds and nothing else, the records' bound under
concurrent appenders, and the ``eqiforge cache`` command's output."""
import argparse
import json
import multiprocessing
import shutil
from pathlib import Path

import pytest
import torch

import eqiforge
from eqiforge import caches
from eqiforge.errors import EqiforgeError
from eqiforge.lower.triton.loader import load_module
from eqiforge.paths import write_entry

#: each kind's files as a reader of the code that writes them finds them (independent of caches.KINDS's globs)
ON_DISK = {
    "calibration": lambda root: root.glob("cpu-*.json"),
    "saturate": lambda root: (root / "saturate").rglob("*"),
    "extract": lambda root: (root / "extract").rglob("*"),
    "decisions": lambda root: [p for p in (root / "measure").glob("*") if not p.name.startswith("records")],
    "records": lambda root: (root / "measure").glob("records*"),
    "kernels": lambda root: (root / "kernels").rglob("*"),
    "static": lambda root: (root / "static").rglob("*"),
    "rulecheck": lambda root: (root / "rulecheck").rglob("*"),
}


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> Path:
    """A cache folder as a real optimization (timed, priced for this CPU) leaves it, plus an entry of each kind
    it does not write, made by their writers, and a temporary file a killed writer left behind."""
    root = tmp_path_factory.mktemp("written") / "eqiforge"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EQIFORGE_CACHE_DIR", str(root))
        a, b, v = (torch.randn(64, 64) for _ in range(3))
        eqiforge.optimize(lambda a, b, v: a @ b @ v, (a, b, v), backend="torch", priced_device="cpu",
                          measure="always", measure_seconds=1.0)
        load_module("ANSWER = 42\n", "probe")
        write_entry("static", "probe.json", b'{"n_regs": 32}')
        write_entry("rulecheck", "probe.json", b"[]")
    assert (root / "measure").is_dir(), "the optimization timed nothing (a machine too busy for 1 s of rounds?)"
    (root / "measure" / "probe.json.123.tmp").write_bytes(b"{")
    return root


@pytest.fixture
def root(written, tmp_path, monkeypatch) -> Path:
    """This test's copy of the written cache folder, as ``$EQIFORGE_CACHE_DIR``."""
    root = tmp_path / "eqiforge"
    shutil.copytree(written, root)
    monkeypatch.setenv("EQIFORGE_CACHE_DIR", str(root))
    return root


def files_of(name: str, root: Path) -> list[Path]:
    return [p for p in ON_DISK[name](root) if p.is_file()]


def by_name(usages) -> dict[str, caches.Usage]:
    return {u.kind.name: u for u in usages}


def test_info_counts_each_kind_as_on_disk(root):
    usages = by_name(caches.info())
    assert list(usages) == list(ON_DISK)
    for name, usage in usages.items():
        files = files_of(name, root)
        assert (usage.entries, usage.bytes) == (len(files), sum(p.stat().st_size for p in files)), name
    for written in ("calibration", "saturate", "extract", "decisions", "records", "kernels", "static", "rulecheck"):
        assert usages[written].entries >= 1, written
    assert usages["decisions"].entries == 2  # the decision and the killed writer's leftover
    every = [p for p in root.rglob("*") if p.is_file()]
    assert sum(u.entries for u in usages.values()) == len(every)  # every file is of one kind


def test_clear_one_kind_removes_it_alone(root):
    before = by_name(caches.info())
    removed = caches.clear(["saturate"])
    assert [(u.kind.name, u.entries, u.bytes) for u in removed] == \
           [("saturate", before["saturate"].entries, before["saturate"].bytes)]
    after = by_name(caches.info())
    assert after["saturate"].entries == 0 and not (root / "saturate").exists()
    assert {n: (u.entries, u.bytes) for n, u in after.items() if n != "saturate"} == \
           {n: (u.entries, u.bytes) for n, u in before.items() if n != "saturate"}


def test_clear_all_removes_ours_and_nothing_else(root):
    (root.parent / "beside.txt").write_text("not in the cache")
    (root / "notes.txt").write_text("the user's")
    (root / "foreign").mkdir()
    (root / "foreign" / "cpu-1.json").write_text("{}")  # named like a calibration, but not where one lives
    (root / "measure" / "mine.txt").write_text("unknown to every kind")
    before = by_name(caches.info())
    removed = by_name(caches.clear())
    assert {n: (u.entries, u.bytes) for n, u in removed.items()} == \
           {n: (u.entries, u.bytes) for n, u in before.items()}
    assert all(u.entries == u.bytes == 0 for u in caches.info())
    left = sorted(str(p.relative_to(root.parent)) for p in root.parent.rglob("*"))
    assert left == ["beside.txt", "eqiforge", "eqiforge/foreign", "eqiforge/foreign/cpu-1.json", "eqiforge/measure",
                    "eqiforge/measure/mine.txt", "eqiforge/notes.txt"]


def test_an_unknown_kind_is_refused_naming_the_kinds(root):
    with pytest.raises(EqiforgeError, match=r"unknown cache kind 'saturations': the kinds are calibration, "
                                            r"saturate, .*, rulecheck"):
        caches.clear(["saturate", "saturations"])
    assert by_name(caches.info())["saturate"].entries == 1  # refused before anything was removed


def test_a_missing_folder_is_empty_and_stays_missing(tmp_path, monkeypatch):
    monkeypatch.setenv("EQIFORGE_CACHE_DIR", str(tmp_path / "none"))
    assert all(u.entries == 0 for u in caches.info())
    assert all(u.entries == 0 for u in caches.clear())
    assert not (tmp_path / "none").exists()


def lines_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_append_bounded_rotates_into_two_files(tmp_path):
    path = tmp_path / "records.jsonl"
    for i in range(100):
        caches.append_bounded(path, json.dumps({"i": i, "pad": "x" * 40}), max_bytes=1000)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["records.1.jsonl", "records.jsonl"]
    older, newer = lines_of(tmp_path / "records.1.jsonl"), lines_of(path)
    assert all(p.stat().st_size <= 1000 for p in tmp_path.iterdir())
    kept = [r["i"] for r in older + newer]
    assert kept == list(range(100 - len(kept), 100)) and len(kept) > 1000 // 60  # the newest, in order
    assert newer[-1]["i"] == 99


def test_append_bounded_into_a_read_only_place_writes_nothing_quietly(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    caches.append_bounded(blocker / "records.jsonl", "{}", max_bytes=100)  # its folder is a file: OSError
    assert blocker.read_text() == ""


def _append_lines(path: str, worker: int, max_bytes: int, start) -> None:
    start.wait()
    for i in range(200):
        caches.append_bounded(Path(path), json.dumps({"worker": worker, "i": i, "pad": "y" * 3000}), max_bytes)


@pytest.mark.parametrize("max_bytes", [2**30, 200_000])
def test_concurrent_appenders_leave_whole_lines(tmp_path, max_bytes):
    path = tmp_path / "records.jsonl"
    context = multiprocessing.get_context("fork")
    start = context.Barrier(4)  # all four append at once
    workers = [context.Process(target=_append_lines, args=(str(path), w, max_bytes, start)) for w in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert all(w.exitcode == 0 for w in workers)
    assert {p.name for p in tmp_path.iterdir()} <= {"records.jsonl", "records.1.jsonl"}
    records = lines_of(tmp_path / "records.1.jsonl") + lines_of(path)  # a torn line fails json.loads
    seen = [(r["worker"], r["i"]) for r in records]
    assert len(seen) == len(set(seen))
    if max_bytes == 2**30:
        assert sorted(seen) == [(w, i) for w in range(4) for i in range(200)]
    else:
        assert sum(p.stat().st_size for p in tmp_path.iterdir()) <= 2 * max_bytes


def test_the_records_bound_is_16_mib_unless_set(monkeypatch):
    monkeypatch.delenv("EQIFORGE_RECORDS_MAX_BYTES", raising=False)
    assert caches.records_max_bytes() == 16 * 2**20
    monkeypatch.setenv("EQIFORGE_RECORDS_MAX_BYTES", "4096")
    assert caches.records_max_bytes() == 4096
    for wrong in ("lots", "0", "-5"):
        monkeypatch.setenv("EQIFORGE_RECORDS_MAX_BYTES", wrong)
        with pytest.raises(EqiforgeError, match=f"EQIFORGE_RECORDS_MAX_BYTES='{wrong}' is not a positive number"):
            caches.records_max_bytes()


def test_human_sizes():
    assert [caches.human(n) for n in (0, 1023, 1024, 1536 * 1024, 3 * 2**40)] == \
           ["0 B", "1023 B", "1.0 KiB", "1.5 MiB", "3072.0 GiB"]


def run_cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="eqiforge")
    caches.add_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(list(argv))
    return args.run(args)


def row(text: str, name: str) -> list[str]:
    return next(line.split() for line in text.splitlines() if line.startswith(name + " "))


@pytest.mark.parametrize("argv", [("cache",), ("cache", "info")])
def test_cache_info_prints_the_folder_each_kind_and_inductors(root, capsys, monkeypatch, argv):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(root.parent / "inductor"))
    assert run_cli(*argv) == 0
    out = capsys.readouterr().out
    assert f"EqiForge's cache: {root} (from $EQIFORGE_CACHE_DIR)" in out
    for usage in caches.info():
        assert row(out, usage.kind.name)[:2] == [usage.kind.name, str(usage.entries)]
        assert f" {caches.human(usage.bytes)}  {usage.kind.where}" in out and usage.kind.holds in out
    total = sum(u.entries for u in caches.info())
    assert row(out, "total")[:2] == ["total", str(total)]
    assert f"Inductor's own cache is separate: {root.parent / 'inductor'} ($TORCHINDUCTOR_CACHE_DIR)" in out
    assert "neither counted nor touched" in out


def test_cache_clear_prints_what_it_removed(root, capsys):
    saturate = by_name(caches.info())["saturate"]
    assert run_cli("cache", "clear", "saturate") == 0
    out = capsys.readouterr().out
    assert f"removed from {root}:" in out
    assert row(out, "saturate")[:2] == ["saturate", str(saturate.entries)] and caches.human(saturate.bytes) in out
    assert "extract" not in out and not (root / "saturate").exists()
    before = sum(u.entries for u in caches.info())
    assert run_cli("cache", "clear") == 0
    out = capsys.readouterr().out
    assert row(out, "saturate")[:3] == ["saturate", "0", "0"]
    assert row(out, "total")[:2] == ["total", str(before)]
    assert not [p for p in root.rglob("*") if p.is_file()]


def test_cache_clear_refuses_an_unknown_kind(root):
    with pytest.raises(EqiforgeError, match="unknown cache kind 'everything'"):
        run_cli("cache", "clear", "everything")
