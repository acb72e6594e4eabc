"""The Markdown renderer: a diagnosis' or a compare's ticket body (``--markdown``).

The bodies live in their own modules, ``diagnosis_markdown.py`` and ``compare_markdown.py``,
below every renderer that shows them: the HTML reports embed the same text for their copy
button, so the HTML renderer imports those modules and never this one.
"""

from __future__ import annotations

from traceinsight.render.compare_markdown import render_compare_markdown
from traceinsight.render.diagnosis_markdown import render_markdown

__all__ = ["render_compare_markdown", "render_markdown"]
