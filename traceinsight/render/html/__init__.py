"""The self-contained HTML reports: the diagnosis of a :class:`DiagnosisResult` and a compare.

One file, no network: CSS and JS are inlined from ``templates/assets``, charts are inline SVG
computed here (geometry only; every text goes through Jinja's autoescape), and the little data
the script needs (the Markdown ticket body) is embedded once as ``<script type="application/json"
id="ti-data">``; a Content-Security-Policy allows only the report's own script.

Modules: ``environment`` (Jinja, assets, CSP), ``cells`` (table cells and table views), ``svg``
(SVG primitives), ``charts/`` (one module per chart), ``diagnose_page`` and ``compare_page`` (the
view of each report: plain dicts and lists, so the templates hold no logic beyond loops).
"""

from __future__ import annotations

from traceinsight.render.html.charts.waterfall import WATERFALL_TOP, waterfall_rows
from traceinsight.render.html.compare_page import build_compare_view, render_compare_html
from traceinsight.render.html.diagnose_page import build_view, render_html

__all__ = [
    "WATERFALL_TOP",
    "build_compare_view",
    "build_view",
    "render_compare_html",
    "render_html",
    "waterfall_rows",
]
