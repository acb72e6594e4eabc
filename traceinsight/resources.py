"""Where the packaged data folders (``rules/``, ``templates/``) are found."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path
from typing import Literal

from .errors import InstallError


def data_dir(name: Literal["rules", "templates"]) -> Path:
    """The folder shipped in the wheel, else the top-level folder of a source checkout."""
    packaged = files("traceinsight") / "_data" / name
    if packaged.is_dir():
        return Path(str(packaged))
    checkout = Path(__file__).resolve().parent.parent / name
    if checkout.is_dir():
        return checkout
    raise InstallError(f"{name}/ is missing from this installation",
                       hint="reinstall traceinsight-doctor")
