"""Where the packaged data folders (``rules/``, ``templates/``) are found."""

from __future__ import annotations

import hashlib
from functools import cache
from importlib.resources import files
from pathlib import Path
from typing import Literal

from traceinsight.errors import InstallError


def data_dir(name: Literal["rules", "templates"]) -> Path:
    """The folder shipped in the wheel, else the top-level folder of a source checkout."""
    packaged = files("traceinsight") / "_data" / name
    if packaged.is_dir():
        return Path(str(packaged))
    checkout = Path(__file__).resolve().parents[2] / name
    if checkout.is_dir():
        return checkout
    raise InstallError(
        f"{name}/ is missing from this installation", hint="reinstall traceinsight-doctor"
    )


@cache
def code_digest() -> str:
    """sha256 of the package's Python sources and data files: a cached analysis result is
    valid only for the code that made it (a version number does not change during development)."""
    root = Path(__file__).resolve().parents[1]  # the traceinsight package
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file() and p.suffix in (".py", ".yaml", ".json") and "__pycache__" not in p.parts:
            h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()
