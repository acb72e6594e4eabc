"""A small progress bar on stderr, shown only for work that takes more than about a second.

No dependency: one line redrawn with ``\\r`` on a terminal; on a pipe or CI log, one plain
line per stage once the work has been running for a second. ``quiet`` silences it.

``update`` suits work that reports its own fraction often (parsing a file); ``stage`` suits a
phase that runs without telling anything until it ends (attribution, metrics, rules,
rendering): a heartbeat thread keeps the line alive, so a phase that passes the second shows
while it runs, with its elapsed time ticking on a terminal.
"""

from __future__ import annotations

import re
import sys
import threading
import time
from typing import TextIO

from traceinsight import settings

SHOW_AFTER_S = 1.0
#: on a pipe, the shortest interval between two lines of one counting stage (seconds)
PIPE_EVERY_S = 5.0
_COUNTS_RE = re.compile(r"[0-9][0-9,./]*")


class Progress:
    def __init__(
        self,
        label: str,
        *,
        quiet: bool = False,
        stream: TextIO | None = None,
        show_after_s: float = SHOW_AFTER_S,
    ) -> None:
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.quiet = quiet or bool(settings.get("TRACEINSIGHT_NO_PROGRESS"))
        self.start = time.monotonic()
        self.show_after_s = show_after_s
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.shown = False
        self.last_stage = ""
        self.last_draw = 0.0
        self._lock = threading.Lock()
        self._current: tuple[str, float] | None = None
        self._stop: threading.Event | None = None
        self._ticker: threading.Thread | None = None

    def stage(self, stage: str, fraction: float) -> None:
        """Enter a phase at ``fraction`` of the work; shown (and kept alive) while it runs."""
        if self.quiet:
            return
        self._current = (stage, fraction)
        self.update(stage, fraction)
        if self._ticker is None:
            self._stop = threading.Event()
            self._ticker = threading.Thread(
                target=self._beat, args=(self._stop,), daemon=True, name="traceinsight-progress"
            )
            self._ticker.start()

    def _beat(self, stop: threading.Event) -> None:
        while not stop.wait(0.2):
            cur = self._current
            if cur is not None:
                self.update(*cur)

    def stop(self) -> None:
        """End the heartbeat of :meth:`stage` (``done`` does it too); idempotent."""
        if self._stop is not None:
            self._stop.set()
        if self._ticker is not None and self._ticker is not threading.current_thread():
            self._ticker.join(timeout=1.0)
        self._ticker = None
        self._stop = None

    def update(self, stage: str, fraction: float) -> None:
        if self.quiet:
            return
        with self._lock:
            self._update(stage, fraction)

    def _update(self, stage: str, fraction: float) -> None:
        now = time.monotonic()
        elapsed = now - self.start
        if elapsed < self.show_after_s:
            return
        fraction = max(0.0, min(1.0, fraction))
        if self.tty:
            if now - self.last_draw < 0.1 and fraction < 1.0 and stage == self.last_stage:
                return
            width = 28
            filled = round(width * fraction)
            bar = "█" * filled + "░" * (width - filled)
            line = f"\r{self.label} {stage:<9} {bar} {fraction * 100:5.1f}%  {elapsed:5.1f}s"
            self.stream.write(line)
            self.stream.flush()
            self.last_draw = now
        elif stage != self.last_stage:
            # on a pipe, a stage that only counts ("161/10000 ranks") is a new line at most
            # every PIPE_EVERY_S: a CI log of a 10,000-rank job stays readable
            kind = _COUNTS_RE.sub("#", stage)
            if kind == _COUNTS_RE.sub("#", self.last_stage) and now - self.last_draw < PIPE_EVERY_S:
                return
            self.stream.write(f"{self.label}: {stage} ({elapsed:.1f}s)\n")
            self.stream.flush()
            self.last_draw = now
        self.shown = True
        self.last_stage = stage

    def done(self, message: str | None = None) -> None:
        self.stop()
        if self.quiet or not self.shown:
            return
        elapsed = time.monotonic() - self.start
        if self.tty:
            self.stream.write("\r\x1b[2K")
        self.stream.write(f"{self.label}: {message or 'done'} in {elapsed:.1f}s\n")
        self.stream.flush()
