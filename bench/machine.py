"""The machine a figure was measured on: figures of a shared machine mean little without it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def machine() -> dict[str, Any]:
    """The CPU model, its count and the 1/5/15-minute load averages."""
    model = "unknown"
    info = Path("/proc/cpuinfo")
    if info.exists():
        for line in info.read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {"cpu": model, "cpus": os.cpu_count(),
            "load": [round(x, 2) for x in os.getloadavg()]}
