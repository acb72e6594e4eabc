"""Loaded by every Python process that ``traceinsight profile`` starts (this folder leads their
PYTHONPATH): records the process with :mod:`traceinsight.capture.profile_child`, then runs the
``sitecustomize`` this one shadows, if any. Nothing happens without TRACEINSIGHT_PROFILE set."""

import os
import sys


def _chain() -> None:
    """Run the next ``sitecustomize`` on sys.path (the one this file shadows)."""
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        if not entry or os.path.abspath(entry) == here:
            continue
        path = os.path.join(entry, "sitecustomize.py")
        if os.path.isfile(path):
            spec = importlib.util.spec_from_file_location("_traceinsight_next_sitecustomize", path)
            if spec and spec.loader:
                spec.loader.exec_module(importlib.util.module_from_spec(spec))
            return


# the one read of a TRACEINSIGHT_* variable outside traceinsight.settings: this file runs in
# every process the command starts, before traceinsight is known to be importable there
if os.environ.get("TRACEINSIGHT_PROFILE"):
    try:
        from traceinsight.capture.profile_child import start
    except ImportError as _e:  # another interpreter than the one traceinsight is installed in
        print(
            f"traceinsight profile: this Python ({sys.executable}) cannot import traceinsight "
            f"({_e}); nothing is recorded. Run the command with the Python traceinsight is "
            "installed in.",
            file=sys.stderr,
        )
    else:
        start()
try:
    _chain()
except Exception as _e:  # never break the user's program
    print(f"traceinsight profile: the shadowed sitecustomize failed: {_e}", file=sys.stderr)
