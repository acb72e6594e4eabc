"""The trace store reference, ``docs/STORE.md``: the store's tables (``store/schema.py``) with
each reader's column sources (``ingest/readers``). ``make docs`` runs
``python -m traceinsight.ingest.store_doc > docs/STORE.md``; it lives here, above both, since the
store layer imports no reader."""

from __future__ import annotations

from traceinsight.ingest.readers import documented
from traceinsight.store.schema import markdown


def main() -> None:
    print(markdown(documented()))


if __name__ == "__main__":  # pragma: no cover
    main()
