"""Trace builders for tests, benchmarks and the bundled samples (not part of the installed package).

- :mod:`tracegen.synth`: a low-level Kineto trace builder (events in Kineto's own layout).
- :mod:`tracegen.workloads`: the scenario simulator's entry points (``Workload``, ``PRESETS``,
  ``build``, ``build_ranks``): training steps on a modelled device, written as realistic
  multi-rank traces through the builder. Its parts: :mod:`tracegen.model` (the ``Workload`` and
  its constants), :mod:`tracegen.devices` (modelled GPUs; peaks from traceinsight's device
  table), :mod:`tracegen.kernels` (kernel names), :mod:`tracegen.rank` (one rank: host threads,
  launches, streams, memory, forward and the training loop), :mod:`tracegen.backward` (autograd
  replay and DDP all-reduce), :mod:`tracegen.output` (records into the builder, in one piece or
  step by step).
- :mod:`tracegen.bench`: the ingest benchmark's workload and its size-targeted streaming writer.
"""
