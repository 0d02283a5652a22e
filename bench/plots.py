"""Shared plot pieces for the benchmark reports."""

from __future__ import annotations

from typing import Any

import numpy as np


def latency_bars(ax: Any, labels: list[str], p50: list[float], p95: list[float], *,
                 title: str, ylabel: str = "ms", log: bool = False) -> None:
    """Paired p50 / p95 bars, one pair per label."""
    x = np.arange(len(labels))
    ax.bar(x - 0.2, p50, 0.4, label="p50")
    ax.bar(x + 0.2, p95, 0.4, label="p95")
    ax.set_xticks(x, labels, fontsize=7)
    if log:
        ax.set_yscale("log")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend()
