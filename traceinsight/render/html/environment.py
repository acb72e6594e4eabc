"""The Jinja environment of the HTML reports, their inlined assets and the Content-Security-Policy.

Templates live in ``templates/`` (``report.html`` and ``compare.html`` on ``base.html``); the CSS
and JS in ``templates/assets`` are inlined, so a report is one file with no network. The CSP
allows no network at all and only the report's own script (by hash), so even a name that escaped
escaping could not run or load anything.
"""

from __future__ import annotations

import base64
import hashlib
import re
from functools import cache
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup

from traceinsight.util import fmt, kernelname
from traceinsight.util.resources import data_dir
from traceinsight.util.safetext import scrubbed

#: the script every report runs (inlined; allowed by the CSP by its hash)
SCRIPT = "report.js"


@cache
def env() -> Environment:
    """The one Jinja environment: autoescape on, undefined names are errors."""
    root = data_dir("templates")
    e = Environment(
        loader=FileSystemLoader(str(root)),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=False,
    )
    e.filters.update(
        ns=fmt.fmt_ns,
        bytes=fmt.fmt_bytes,
        pct=fmt.fmt_pct,
        num=fmt.fmt_num,
        rate=fmt.fmt_rate,
        kname=kernelname.simplify,
        cell=fmt.format_cell,
    )
    e.globals["include_file"] = include_file
    return e


@cache
def asset(name: str) -> str:
    """The text of ``templates/assets/NAME`` (a .css or .js file with no closing tag in it)."""
    root = (data_dir("templates") / "assets").resolve()
    path = (root / name).resolve()
    if path.parent != root or path.suffix not in (".css", ".js"):
        raise ValueError(f"not a report asset: {name}")
    text = path.read_text(encoding="utf-8")
    if re.search(r"</(script|style)", text, re.I):
        raise ValueError(f"{name} must not contain a closing script/style tag")
    return text


def include_file(name: str) -> Markup:
    """The text of ``templates/assets/NAME`` (our own CSS/JS, never data), unescaped."""
    return Markup(asset(name))


def sha256_b64(text: str) -> str:
    return base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii")


def csp() -> str:
    """No network, inline styles, data: images, and only the report's own script."""
    return (
        "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; "
        "form-action 'none'; script-src 'sha256-" + sha256_b64(asset(SCRIPT)) + "'"
    )


def render_page(template: str, view: dict[str, Any], payload: dict[str, Any]) -> str:
    """A template on ``base.html`` with its view, the embedded JSON payload and the CSP."""
    # names from a trace may hold control or bidi characters: they read as visible escapes
    view, payload = scrubbed(view), scrubbed(payload)  # type: ignore[assignment]
    return env().get_template(template).render(view=view, payload=payload, csp=csp())
