"""What EqiForge's cache folder (``paths.cache_dir``) holds, kind by kind, and how it is seen and cleared:
``eqiforge cache info`` and ``eqiforge cache clear [KIND ...]``. The one kind that grows with every run, the
measurement records, is bounded here (``append_bounded``): every other kind is keyed by what was computed, so
it grows with the programs optimized, not with the runs. Inductor's and Triton's caches are theirs, not ours:
named, never counted or touched."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .errors import EqiforgeError
from .paths import cache_dir

#: the records file's bound before it is rotated: a record is ~0.5-2 KB, so 16 MiB keeps ~10-30 thousand
#: measurements (twice that with the rotated file), far more than the plan-level cost model trains on, and a
#: few tens of MiB at most on disk however long EqiForge runs
RECORDS_MAX_BYTES = 16 * 2**20


@dataclass(frozen=True)
class Kind:
    """One kind of entry: its files (globs under the cache folder; ``DIR/**/*`` is all of ``DIR``) and what
    it holds, with what clearing it costs."""

    name: str
    globs: tuple[str, ...]
    holds: str

    @property
    def where(self) -> str:
        """Where its files are, as a user looks for them (``saturate/``, ``measure/*.json``)."""
        return self.globs[0].removesuffix("**/*")


KINDS = (
    Kind("calibration", ("cpu-*.json", "cpu-*.tmp"),
         "this CPU's measured figures for the cost model; cleared: measured again (~2 s) when next priced"),
    Kind("saturate", ("saturate/**/*",),
         "saturated e-graphs; cleared: the next optimization of the same program saturates again"),
    Kind("extract", ("extract/**/*",),
         "exact (ILP) extraction answers; cleared: the next extraction of the same e-graph solves again"),
    Kind("decisions", ("measure/*.json", "measure/*.tmp"),
         "measured choices of what runs; cleared: the next optimization times its candidates again"),
    Kind("records", ("measure/records*.jsonl",),
         "every measurement (predicted and measured times), a cost model's data; bounded, rotated; cleared: lost"),
    Kind("kernels", ("kernels/**/*",),
         "generated Triton modules; cleared: written again when a Triton plan next loads them"),
    Kind("static", ("static/**/*",),
         "kernels' registers and shared memory (cost profiling); cleared: compiled again (seconds each)"),
    Kind("rulecheck", ("rulecheck/**/*",),
         "verdicts on user rule files; cleared: a rule file is checked again when next used"),
)


@dataclass
class Usage:
    """How many files of a kind there are (or were removed) and their bytes."""

    kind: Kind
    entries: int = 0
    bytes: int = 0


def kind_files(kind: Kind) -> list[Path]:
    """The files of ``kind`` now on disk (none where the cache folder does not exist)."""
    root = cache_dir()
    return sorted({p for g in kind.globs for p in root.glob(g) if not p.is_dir()})


def info() -> list[Usage]:
    """Every kind's files and bytes, in KINDS order."""
    usages = [Usage(kind) for kind in KINDS]
    for usage in usages:
        for path in kind_files(usage.kind):
            try:
                size = path.lstat().st_size
            except OSError:  # removed or replaced since it was listed
                continue
            usage.entries += 1
            usage.bytes += size
    return usages


def clear(kinds: list[str] | None = None) -> list[Usage]:
    """Remove the files of the named kinds (every kind when None) and the folders that leaves empty; what was
    removed, per kind. Only the kinds' files: anything else in the cache folder stays."""
    known = {kind.name: kind for kind in KINDS}
    unknown = [name for name in kinds or () if name not in known]
    if unknown:
        raise EqiforgeError(f"unknown cache kind {', '.join(map(repr, unknown))}: the kinds are {', '.join(known)}")
    root = cache_dir()
    removed = []
    for kind in KINDS if kinds is None else [known[name] for name in dict.fromkeys(kinds)]:
        usage = Usage(kind)
        for path in kind_files(kind):
            try:
                size = path.lstat().st_size
                path.unlink()
            except OSError:  # gone already, or not ours to remove (permissions): not counted
                continue
            usage.entries += 1
            usage.bytes += size
            _prune(path.parent, root)
        removed.append(usage)
    return removed


def _prune(folder: Path, root: Path) -> None:
    """Remove ``folder`` and its parents below ``root`` while they are empty."""
    while root in folder.parents:
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent


def records_max_bytes() -> int:
    """The records' bound: ``$EQIFORGE_RECORDS_MAX_BYTES`` where set, else RECORDS_MAX_BYTES."""
    value = os.environ.get("EQIFORGE_RECORDS_MAX_BYTES")
    if not value:
        return RECORDS_MAX_BYTES
    bound = int(value) if value.isdigit() else 0
    if bound <= 0:
        raise EqiforgeError(f"EQIFORGE_RECORDS_MAX_BYTES={value!r} is not a positive number of bytes")
    return bound


def rotated(path: Path) -> Path:
    """Where ``append_bounded`` moves a full file: ``records.jsonl`` -> ``records.1.jsonl``."""
    return path.with_name(f"{path.stem}.1{path.suffix}")


def append_bounded(path: Path, line: str, max_bytes: int) -> None:
    """Append ``line`` to the JSON-lines file ``path``; when that would take it past ``max_bytes``, first
    rotate it (to ``rotated(path)``, replacing the older one), so the two hold at most about 2x ``max_bytes``.
    The line is one ``write`` in append mode, so concurrent appenders never interleave parts of lines (two
    rotating at the same moment may drop the older file early: the records are data, not state). Nothing is
    written where the folder cannot be (caching is optional)."""
    data = (line.rstrip("\n") + "\n").encode()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists() and path.stat().st_size + len(data) > max_bytes:
            os.replace(path, rotated(path))
        with open(path, "ab", buffering=0) as f:
            f.write(data)
    except OSError:
        pass


def human(size: int) -> str:
    """Bytes in binary units: 0 B, 12.3 KiB, 4.0 MiB."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024


def inductor_cache_dir() -> str:
    """Inductor's cache folder as torch would choose it (only read: never created or touched here)."""
    if os.environ.get("TORCHINDUCTOR_CACHE_DIR"):
        return os.environ["TORCHINDUCTOR_CACHE_DIR"]
    try:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir
    except ImportError:  # an older torch chooses the same folder in another module
        return "torchinductor_<user> under the system temp dir"
    return default_cache_dir()


def _table(usages: list[Usage], total: str, holds: bool) -> None:
    """One row per kind (with what it holds under it when ``holds``), then the total."""
    print(f"{'kind':<12} {'entries':>7} {'size':>10}  where")
    for u in usages:
        print(f"{u.kind.name:<12} {u.entries:>7} {human(u.bytes):>10}  {u.kind.where}")
        if holds:
            print(f"{'':<14}{u.kind.holds}")
    print(f"{total:<12} {sum(u.entries for u in usages):>7} {human(sum(u.bytes for u in usages)):>10}")


def _info(_args) -> int:
    moved = os.environ.get("EQIFORGE_CACHE_DIR")
    print(f"EqiForge's cache: {cache_dir()} ({'from $EQIFORGE_CACHE_DIR' if moved else 'the default'})")
    _table(info(), "total", holds=True)
    print(f"records: rotated past {human(records_max_bytes())} ($EQIFORGE_RECORDS_MAX_BYTES), two files at most")
    print(f"Inductor's own cache is separate: {inductor_cache_dir()} ($TORCHINDUCTOR_CACHE_DIR);")
    print("it and Triton's ($TRITON_CACHE_DIR) are neither counted nor touched here")
    return 0


def _clear(args) -> int:
    removed = clear(args.kinds or None)
    print(f"removed from {cache_dir()}:")
    _table(removed, "total", holds=False)
    return 0


def add_commands(sub) -> None:
    """Add ``cache`` (``info``, the default, and ``clear``) to ``sub`` (the CLI's sub-parsers)."""
    cache = sub.add_parser("cache", help="what EqiForge's cache folder holds, kind by kind; clear kinds of it")
    cache.set_defaults(run=_info)
    verbs = cache.add_subparsers(dest="cache_command")
    verbs.add_parser("info", help="the folder, each kind's entries and size, and what it holds").set_defaults(run=_info)
    c = verbs.add_parser("clear", help="remove the entries of some kinds (all when none is named)")
    c.add_argument("kinds", nargs="*", metavar="KIND", help=f"of {', '.join(k.name for k in KINDS)} (default: all)")
    c.set_defaults(run=_clear)
