"""Record the bundled CPU sample trace: a tiny transformer LM training loop.

How the bundled ``cpu_transformer_train.pt.trace.json.gz`` was made (torch
2.13.0 CPU wheel, Python 3.11, a 2-core Linux VM)::

    python3 -m venv /tmp/torchvenv
    /tmp/torchvenv/bin/pip install torch==2.13.0
    /tmp/torchvenv/bin/python sample_traces/record_cpu_transformer.py \\
        --output sample_traces/cpu_transformer_train.pt.trace.json.gz --steps 6

What it records: an ``nn.Embedding`` + 2-layer ``nn.TransformerEncoder``
(d_model 64, 4 heads, ffn 128) + linear head, trained with AdamW and
cross-entropy on random tokens from a small ``DataLoader``, seeded with
``torch.manual_seed``, on one intra-op thread (``torch.set_num_threads(1)``)
so step times stay steady on a small shared machine. Each iteration carries
``record_function`` annotations ``forward``, ``backward`` and ``optimizer``
inside torch's own ``ProfilerStep#N``. The profiler schedule is wait=1, warmup=1,
active=``--steps``, so the trace holds ``ProfilerStep#2`` .. ``ProfilerStep#(steps+1)``.

Recorded through :func:`traceinsight.capture.profile` with every diagnosis
flag on (shapes, memory, stacks, FLOPs, modules). Afterwards the JSON is
sanitized (``traceName`` -> base name, host name -> ``localhost``, absolute
paths in Python frame names -> ``<site-packages>/...``, ``<script>/...``, ...),
re-gzipped deterministically, and the event counts by (ph, cat) are printed.
The file must stay under 2 MB; ``--steps`` and the model size set its size.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(REPO) not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(REPO))

from traceinsight.capture import profile, sanitize_trace, write_trace

DEFAULT_OUTPUT = HERE / "cpu_transformer_train.pt.trace.json.gz"
MAX_BYTES = 2 * 1024 * 1024

VOCAB = 256
D_MODEL = 64
N_HEAD = 4
D_FF = 128
N_LAYERS = 2
SEQ_LEN = 32
BATCH = 8
WAIT, WARMUP = 1, 1
THREADS = 1


def build(torch):
    from torch import nn

    class TinyLM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(VOCAB, D_MODEL)
            layer = nn.TransformerEncoderLayer(
                D_MODEL, N_HEAD, dim_feedforward=D_FF, dropout=0.1, batch_first=True
            )
            self.encoder = nn.TransformerEncoder(layer, N_LAYERS, enable_nested_tensor=False)
            self.head = nn.Linear(D_MODEL, VOCAB)

        def forward(self, tokens):
            return self.head(self.encoder(self.embed(tokens)))

    return TinyLM()


def train_step(model, loss_fn, opt, inputs, targets) -> None:
    """One training step, its phases named by record_function (forward, backward, optimizer)."""
    from torch.profiler import record_function

    with record_function("forward"):
        logits = model(inputs)
        loss = loss_fn(logits.reshape(-1, VOCAB), targets.reshape(-1))
    with record_function("backward"):
        loss.backward()
    with record_function("optimizer"):
        opt.step()
        opt.zero_grad(set_to_none=True)


def record(output: Path, steps: int, plain: bool = False) -> Path | None:
    """Train ``steps`` recorded steps (after the schedule's wait and warmup) and write the
    trace; with ``plain``, train the same loop without any profiler of its own and print each
    step's wall and CPU time as JSON (the loop ``traceinsight profile`` overhead is measured
    on: ``bench/profile_overhead.py``)."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    torch.set_num_threads(THREADS)  # 1 intra-op thread: steadier step times on a shared 2-core box
    model = build(torch)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()

    total = WAIT + WARMUP + steps
    tokens = torch.randint(0, VOCAB, (total * BATCH, SEQ_LEN + 1))
    loader = DataLoader(
        TensorDataset(tokens[:, :-1], tokens[:, 1:]),
        batch_size=BATCH,
        shuffle=True,
        generator=torch.Generator().manual_seed(0),
        num_workers=0,
    )

    if plain:
        times, cpu = [], []
        for inputs, targets in loader:
            t0, c0 = time.perf_counter(), time.process_time()
            train_step(model, loss_fn, opt, inputs, targets)
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        print(json.dumps({"step_s": times, "step_cpu_s": cpu}))
        return None
    session = profile(output, wait=WAIT, warmup=WARMUP, active=steps, repeat=1)
    with session as prof:
        for inputs, targets in loader:
            train_step(model, loss_fn, opt, inputs, targets)
            prof.step()
    if not session.outputs:
        raise SystemExit("no trace was written")
    return session.outputs[0]


def load(path: Path) -> dict:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)


def summarize(trace: dict) -> None:
    events = trace["traceEvents"]
    counts = collections.Counter((e.get("ph"), e.get("cat")) for e in events)
    print(f"{len(events)} events; by (ph, cat):")
    for (ph, cat), n in sorted(counts.items(), key=lambda kv: (-kv[1], str(kv[0]))):
        print(f"  {ph!s:2} {cat!s:20} {n}")

    def count(pred) -> int:
        return sum(1 for e in events if pred(e))

    steps = sorted(
        e["name"]
        for e in events
        if e.get("cat") == "user_annotation" and e.get("name", "").startswith("ProfilerStep#")
    )
    print("ProfilerStep annotations:", steps)
    print(
        "user annotations:",
        dict(
            collections.Counter(
                e["name"]
                for e in events
                if e.get("cat") == "user_annotation" and not e["name"].startswith("ProfilerStep#")
            )
        ),
    )
    print(
        "cpu_op with Input Dims:",
        count(lambda e: e.get("cat") == "cpu_op" and "Input Dims" in e.get("args", {})),
    )
    print(
        "[memory] instant events:",
        count(lambda e: e.get("ph") == "i" and e.get("name") == "[memory]"),
    )
    print(
        "nn.Module python_function frames:",
        count(
            lambda e: (
                e.get("cat") == "python_function" and e.get("name", "").startswith("nn.Module: ")
            )
        ),
    )
    print(
        "backward ops with Sequence number:",
        count(
            lambda e: (
                e.get("name", "").startswith("autograd::engine::evaluate_function: ")
                and "Sequence number" in e.get("args", {})
            )
        ),
    )
    print(
        "fwdbwd flows (s/f):",
        count(lambda e: e.get("cat") == "fwdbwd" and e.get("ph") == "s"),
        "/",
        count(lambda e: e.get("cat") == "fwdbwd" and e.get("ph") == "f"),
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--output",
        type=Path,
        default=DEFAULT_OUTPUT,
        help="trace file to write (.pt.trace.json.gz)",
    )
    ap.add_argument(
        "--steps",
        type=int,
        default=6,
        help="number of recorded (active) training steps (default 6)",
    )
    ap.add_argument(
        "--plain",
        action="store_true",
        help="train without recording and print each step's time as JSON (the "
        "loop `traceinsight profile` overhead is measured on)",
    )
    args = ap.parse_args(argv)
    if args.steps < 1:
        ap.error("--steps must be at least 1")

    written = record(args.output, args.steps, plain=args.plain)
    if written is None:
        return 0
    trace = sanitize_trace(load(written), script=__file__, trace_name=written.name)
    write_trace(trace, written)

    size = os.path.getsize(written)
    print(f"wrote {written} ({size} bytes gzipped)")
    summarize(trace)
    if size >= MAX_BYTES:
        print(f"warning: {size} bytes is over the 2 MB budget; use fewer --steps", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
