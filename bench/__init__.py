"""Benchmarks for hermes-state (not tests: nothing here asserts on time).

Every benchmark measures its candidates against a baseline in the same run, alternating
them in many short rounds, and reports per-operation medians and ratios. Run them all with
``python -m bench`` (``--quick`` for a smoke run); results are recorded in ``bench/RESULTS.md``.
"""
