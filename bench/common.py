"""Timing helpers shared by the benchmarks: interleaved rounds, summaries, the results table.

The machines these run on are noisy, so no number is meaningful alone. A benchmark hands
:func:`interleaved` one *batch* per contender (a callable doing a fixed number of operations);
the batches run in many short rounds, each contender once per round, in an order that rotates
from round to round, so drift and background load hit every contender alike. :func:`summarize`
turns the per-round timings into :class:`Result` rows: per-operation median, p90 and minimum,
and the ratios to the baseline measured in the same rounds.
"""

from __future__ import annotations

import gc
import math
import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

__all__ = [
    "Batch",
    "BenchmarkError",
    "Result",
    "Samples",
    "format_seconds",
    "format_table",
    "interleaved",
    "percentile",
    "summarize",
]

#: Runs a fixed number of operations; raises :class:`BenchmarkError` if one does not succeed.
Batch = Callable[[], None]
#: Per-operation seconds, one value per measured round.
Samples = list[float]


class BenchmarkError(RuntimeError):
    """An operation under measurement did not do what it should (a broken op is not fast)."""


@dataclass(frozen=True, slots=True)
class Result:
    """One contender in one case, against the case's baseline.

    ``ratio`` is the contender's median per-operation time over the baseline's median;
    ``ratio_min`` compares the fastest rounds (the least disturbed by other load);
    ``ratio_paired`` is the median, over rounds, of the ratio within each round.
    ``limit``, when set, is the ratio the contender is required to stay within; the verdict
    uses ``ratio_paired``, the statistic least moved by load that comes and goes between rounds.
    """

    benchmark: str
    case: str
    contender: str
    baseline: str
    median_s: float
    p90_s: float
    min_s: float
    ratio: float
    ratio_min: float
    ratio_paired: float
    rounds: int
    ops_per_round: int
    limit: float | None = None

    @property
    def is_baseline(self) -> bool:
        return self.contender == self.baseline

    @property
    def verdict(self) -> str:
        if self.limit is None:
            return ""
        return "ok" if self.ratio_paired <= self.limit else "OVER"

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "verdict": self.verdict}


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) with linear interpolation between closest ranks."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def interleaved(
    phases: Mapping[str, Mapping[str, Batch]],
    *,
    rounds: int,
    warmup: int,
    ops_per_round: int,
) -> dict[str, dict[str, Samples]]:
    """Time every contender's batch in each phase, ``rounds`` times, alternating contenders.

    A round runs the phases in the order given (a later phase may rely on an earlier one, as
    ``claim`` relies on ``request``); within a phase every contender runs its batch once, the
    first contender rotating from round to round. The ``warmup`` rounds before are not kept.
    Returns ``{phase: {contender: per-operation seconds of each round}}``.
    """
    samples: dict[str, dict[str, Samples]] = {
        phase: {name: [] for name in batches} for phase, batches in phases.items()
    }
    gc.collect()
    for index in range(warmup + rounds):
        for phase, batches in phases.items():
            names = list(batches)
            shift = index % len(names)
            for name in names[shift:] + names[:shift]:
                batch = batches[name]
                start = time.perf_counter_ns()
                batch()
                elapsed = time.perf_counter_ns() - start
                if index >= warmup:
                    samples[phase][name].append(elapsed / ops_per_round / 1e9)
    return samples


def summarize(
    benchmark: str,
    case: str,
    samples: Mapping[str, Samples],
    *,
    baseline: str,
    ops_per_round: int,
    limits: Mapping[str, float] | None = None,
) -> list[Result]:
    """One :class:`Result` per contender (the baseline first), ratios against ``baseline``."""
    base = samples[baseline]
    base_median = statistics.median(base)
    base_min = min(base)
    order = [baseline, *(name for name in samples if name != baseline)]
    results = []
    for name in order:
        values = samples[name]
        median = statistics.median(values)
        fastest = min(values)
        results.append(
            Result(
                benchmark=benchmark,
                case=case,
                contender=name,
                baseline=baseline,
                median_s=median,
                p90_s=percentile(values, 90),
                min_s=fastest,
                ratio=median / base_median,
                ratio_min=fastest / base_min,
                ratio_paired=statistics.median(
                    own / theirs for own, theirs in zip(values, base, strict=True)
                ),
                rounds=len(values),
                ops_per_round=ops_per_round,
                limit=(limits or {}).get(name),
            )
        )
    return results


def format_seconds(seconds: float) -> str:
    """A duration in s, ms, µs or ns, with three significant digits or more."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)):
        if seconds >= scale or unit == "ns":
            value = seconds / scale
            break
    decimals = 2 if value < 10 else 1 if value < 100 else 0
    return f"{value:.{decimals}f} {unit}"


def format_table(results: Iterable[Result]) -> str:
    """A Markdown table of results, one row per contender, a case's baseline on its first row."""
    header = (
        "benchmark",
        "case",
        "contender",
        "median/op",
        "p90/op",
        "min/op",
        "ratio",
        "paired",
        "min ratio",
        "limit",
    )
    rows: list[tuple[str, ...]] = [header]
    for result in results:
        limit = f"≤{result.limit:g}x {result.verdict}" if result.limit is not None else ""
        ratio = "baseline" if result.is_baseline else f"{result.ratio:.2f}x"
        paired = "" if result.is_baseline else f"{result.ratio_paired:.2f}x"
        ratio_min = "" if result.is_baseline else f"{result.ratio_min:.2f}x"
        rows.append(
            (
                result.benchmark,
                result.case,
                result.contender,
                format_seconds(result.median_s),
                format_seconds(result.p90_s),
                format_seconds(result.min_s),
                ratio,
                paired,
                ratio_min,
                limit,
            )
        )
    widths = [max(len(row[column]) for row in rows) for column in range(len(header))]
    numeric = {3, 4, 5, 6, 7, 8}

    def line(cells: tuple[str, ...]) -> str:
        padded = (
            cell.rjust(width) if column in numeric else cell.ljust(width)
            for column, (cell, width) in enumerate(zip(cells, widths, strict=True))
        )
        return "| " + " | ".join(padded) + " |"

    rule = (
        "|"
        + "|".join(
            "-" * (width + 1) + ":" if column in numeric else "-" * (width + 2)
            for column, width in enumerate(widths)
        )
        + "|"
    )
    return "\n".join([line(rows[0]), rule, *(line(row) for row in rows[1:])])
