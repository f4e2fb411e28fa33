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
    "format_bytes",
    "format_seconds",
    "format_table",
    "format_value",
    "interleaved",
    "interleaved_counts",
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
    ``ratio_paired`` is the median, over rounds, of the ratio within each round (NaN when the
    contender's samples are not in step with the baseline's).
    ``limit``, when set, is the ratio the contender is required to stay within; the verdict
    uses ``ratio_paired``, the statistic least moved by load that comes and goes between rounds.
    ``unit`` says what the three values are: seconds (``"s"``, the default) or bytes (``"B"``,
    e.g. a peak RSS). ``note`` carries what the columns cannot (a rate, a query plan, p99).
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
    unit: str = "s"
    note: str = ""

    @property
    def is_baseline(self) -> bool:
        return self.contender == self.baseline

    @property
    def verdict(self) -> str:
        if self.limit is None:
            return ""
        return "ok" if self.ratio_paired <= self.limit else "OVER"

    def as_dict(self) -> dict[str, Any]:
        """The fields for JSON (an undefined ratio as None) and the verdict."""
        fields = {
            key: None if isinstance(value, float) and math.isnan(value) else value
            for key, value in asdict(self).items()
        }
        return {**fields, "verdict": self.verdict}


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


def interleaved_counts(
    contenders: Mapping[str, tuple[Callable[[], None], int]],
    *,
    rounds: int,
    warmup: int,
) -> dict[str, Samples]:
    """Like :func:`interleaved` for one phase whose contenders do different numbers of
    operations per batch (a 60 ms full scan beside a 50 µs indexed read): ``{name: (batch,
    operations it does)}``. Returns per-operation seconds of each round per contender."""
    phases = {"only": {name: batch for name, (batch, _count) in contenders.items()}}
    samples = interleaved(phases, rounds=rounds, warmup=warmup, ops_per_round=1)["only"]
    return {
        name: [value / contenders[name][1] for value in values] for name, values in samples.items()
    }


def summarize(
    benchmark: str,
    case: str,
    samples: Mapping[str, Samples],
    *,
    baseline: str,
    ops_per_round: int,
    limits: Mapping[str, float] | None = None,
    unit: str = "s",
    notes: Mapping[str, str] | None = None,
) -> list[Result]:
    """One :class:`Result` per contender (the baseline first), ratios against ``baseline``.

    ``samples`` need not be timings: any per-round statistic in ``unit`` (a round's p99 lag,
    a process's peak RSS) is summarized the same way. ``notes`` go to the note column.
    """
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
                ratio_paired=_paired(values, base),
                rounds=len(values),
                ops_per_round=ops_per_round,
                limit=(limits or {}).get(name),
                unit=unit,
                note=(notes or {}).get(name, ""),
            )
        )
    return results


def _paired(values: Samples, base: Samples) -> float:
    """Median of per-round ratios; NaN when the samples are not rounds in step (e.g. the
    latencies of two differently sized sets of requests)."""
    if len(values) != len(base):
        return math.nan
    return statistics.median(own / theirs for own, theirs in zip(values, base, strict=True))


def format_seconds(seconds: float) -> str:
    """A duration in s, ms, µs or ns, with three significant digits or more."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)):
        if seconds >= scale or unit == "ns":
            value = seconds / scale
            break
    decimals = 2 if value < 10 else 1 if value < 100 else 0
    return f"{value:.{decimals}f} {unit}"


def format_bytes(size: float) -> str:
    """A size in MiB (or KiB below one MiB), with three significant digits or more."""
    value, unit = (size / 2**20, "MiB") if size >= 2**20 else (size / 2**10, "KiB")
    decimals = 2 if value < 10 else 1 if value < 100 else 0
    return f"{value:.{decimals}f} {unit}"


def format_value(value: float, unit: str) -> str:
    """A value of a :class:`Result`'s unit: seconds or bytes."""
    if unit == "B":
        return format_bytes(value)
    if unit == "s":
        return format_seconds(value)
    raise ValueError(f"unknown unit {unit!r}")


def _format_ratio(ratio: float) -> str:
    """Two decimals; two significant digits below 0.1 (``0.0021x``, not ``0.00x``)."""
    return f"{ratio:.2f}x" if ratio >= 0.1 else f"{ratio:.2g}x"


def format_table(results: Iterable[Result]) -> str:
    """A Markdown table of results, one row per contender, a case's baseline on its first row.

    A ``note`` column is added when any result has a note.
    """
    results = list(results)
    with_notes = any(result.note for result in results)
    header: tuple[str, ...] = (
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
    if with_notes:
        header = (*header, "note")
    rows: list[tuple[str, ...]] = [header]
    for result in results:
        limit = f"≤{result.limit:g}x {result.verdict}" if result.limit is not None else ""
        ratio = "baseline" if result.is_baseline else _format_ratio(result.ratio)
        unpaired = result.is_baseline or math.isnan(result.ratio_paired)
        paired = "" if unpaired else _format_ratio(result.ratio_paired)
        ratio_min = "" if result.is_baseline else _format_ratio(result.ratio_min)
        row = (
            result.benchmark,
            result.case,
            result.contender,
            format_value(result.median_s, result.unit),
            format_value(result.p90_s, result.unit),
            format_value(result.min_s, result.unit),
            ratio,
            paired,
            ratio_min,
            limit,
        )
        rows.append((*row, result.note) if with_notes else row)
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
