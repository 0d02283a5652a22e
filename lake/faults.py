"""Fault injection at write boundaries, for crash tests only.

A job calls ``faults.hit("ingest.after_content_rows")`` between writes. In-process tests pass a
callable that raises; subprocess tests set ``TURNLAKE_FAULT_AT=<point>`` so the process SIGKILLs
itself there. Production runs set neither and every hit is a no-op.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from dataclasses import dataclass

FAULT_ENV = "TURNLAKE_FAULT_AT"


@dataclass(frozen=True)
class Faults:
    """The fault hook of one job run."""

    on_hit: Callable[[str], None] | None = None

    def hit(self, point: str) -> None:
        """Mark a write boundary; a test may crash the job here."""
        if self.on_hit is not None:
            self.on_hit(point)
        target = os.environ.get(FAULT_ENV)
        if target and target == point:
            os.kill(os.getpid(), signal.SIGKILL)


NO_FAULTS = Faults()
