"""Figures without pyplot: every picture is a ``matplotlib.figure.Figure`` rendered by the Agg (PNG) or SVG
canvas, so drawing never opens a window, never touches pyplot's global state and works in a worker process
or on a server. Functions return the Figure (tests and notebooks inspect it) and save it when given a path.
"""
from __future__ import annotations

import io
from pathlib import Path

from matplotlib.figure import Figure
from PIL import Image

from ..errors import EqiforgeError

FORMATS = (".png", ".svg")
DPI = 100  # modest: the committed pictures stay small
#: one colour per rule set, in rule-set order (tab10 then tab20 for more)
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94"]


def new_figure(width: float, height: float) -> Figure:
    """A figure of ``width`` x ``height`` inches with constrained layout (the saved size is exactly that)."""
    return Figure(figsize=(width, height), dpi=DPI, layout="constrained")


def colors_for(names) -> dict[str, str]:
    """A stable colour per name, in the order given."""
    return {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(names)}


def check_path(path) -> Path:
    """``path`` as a Path, or a clear error when its extension is not one we can write."""
    path = Path(path)
    if path.suffix.lower() not in FORMATS:
        raise EqiforgeError(f"cannot write {path.name!r}: give a file ending in {' or '.join(FORMATS)}")
    return path


def save(fig: Figure, path) -> Path:
    """Write ``fig`` as PNG or SVG (chosen by the extension), creating the folder if needed."""
    path = check_path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix.lower() == ".svg":
        fig.savefig(path, dpi=DPI, metadata={"Date": None})  # no date: the same figure gives the same file
        return path
    buffer = io.BytesIO()
    fig.savefig(buffer, dpi=DPI, format="png")
    # a 256-colour palette: plots have few colours, and the file is 2-3x smaller (pictures get committed)
    Image.open(buffer).convert("RGB").quantize(256).save(path, optimize=True)
    return path


def save_table(table, folder, stem: str, picture: str, draw) -> dict[str, Path]:
    """``stem``.md, ``stem``.csv and ``stem``.png in ``folder`` (created if needed): ``table``'s Markdown and CSV
    (``to_markdown``, ``to_csv``) and the picture ``draw(path)`` makes, keyed "markdown", "csv" and ``picture``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"markdown": folder / f"{stem}.md", "csv": folder / f"{stem}.csv", picture: folder / f"{stem}.png"}
    paths["markdown"].write_text(table.to_markdown())
    table.to_csv(paths["csv"])
    draw(paths[picture])
    return paths
