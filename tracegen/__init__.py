"""Trace builders for tests, benchmarks and the bundled samples (not part of the installed package).

- :mod:`tracegen.synth`: a low-level Kineto trace builder (events in Kineto's own layout).
- :mod:`tracegen.workloads`: a simulator of training/inference steps on a modelled device that
  writes realistic multi-rank traces through the builder.
"""
