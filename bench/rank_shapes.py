"""A real-shaped job of several ranks: one real-shaped trace (:mod:`shapes`) as every rank.

Each rank's file is the shape's file with its header's ``distributedInfo`` saying that rank and
the job's world size (and one process group of all ranks); the events are the same bytes. The
job's folder (``rank-N.json``) goes to ``bench/.cache/`` next to the shape it repeats.

Usage::

    .venv/bin/python bench/rank_shapes.py hta_a100 88 16     # 16 ranks of ~88 MB
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from shapes import CACHE, ensure_shape

_INFO = re.compile(rb'"distributedInfo": (\{.*?\}),\n')


def ensure_job(shape: str, size_mb: float, ranks: int) -> Path:
    """The folder of ``ranks`` rank files of ``shape`` at ``size_mb`` each (built once)."""
    src, _info = ensure_shape(shape, size_mb)
    folder = CACHE / f"job_{src.stem}_{ranks}r"
    if (folder / ".done").is_file():
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    with open(src, "rb") as f:
        head = f.read(1 << 20)
    m = _INFO.search(head)
    if m is None:
        raise ValueError(f"{src.name} has no distributedInfo header to set a rank in")
    info = json.loads(m.group(1))
    for r in range(ranks):
        info.update(rank=r, world_size=ranks)
        info["pg_config"] = [
            {**(info.get("pg_config") or [{}])[0], "pg_size": ranks, "ranks": list(range(ranks))}
        ]
        new = head[: m.start(1)] + json.dumps(info).encode() + head[m.end(1) :]
        with open(src, "rb") as f, open(folder / f"rank-{r}.json", "wb") as out:
            f.seek(len(head))
            out.write(new)
            shutil.copyfileobj(f, out, 1 << 22)
    (folder / ".done").write_text("")
    return folder


if __name__ == "__main__":
    print(ensure_job(sys.argv[1], float(sys.argv[2]), int(sys.argv[3])))
