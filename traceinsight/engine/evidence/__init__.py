"""Evidence providers: the tables a finding shows, registered by name (``core.provider``).

Importing the package registers every provider: the step, idle and launch tables (``core``), the
idle-cause tables (``idle``), the memory-snapshot tables (``memory``) and the cross-rank tables
(``ranks``)."""

from traceinsight.engine.evidence import core, idle, memory, ranks

__all__ = ["core", "idle", "memory", "ranks"]
