"""The partition indexes a search process keeps open, within a memory budget.

An opened partition costs what its searches page in from its index files (codes, trigram
arrays, the row file) plus the row columns it decodes; the float vectors and the trigram
postings are read with ``pread`` a few rows or one list at a time (a scope's rows, the
candidates being re-scored, a query trigram's docs), so they are not counted. A
partition is charged those file bytes, whatever was touched so far: the most it can hold. When
opening one puts the total over the budget, the partitions used least recently are closed
(dropped: the next search that needs one opens it again) until the total fits. A search keeps
the views it is using; a budget smaller than one search's partitions is exceeded by that
search, never by the views kept between searches.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lake.errors import IndexUnavailable
from lake.index.manifest import PartitionManifest
from lake.index.partition import PartitionIndex

# What a partition's row columns take on the heap per row (codes, times, turn numbers: 11 MB
# for a partition of 160,000 rows of the 1M bench lake, traced), on top of its files.
COLUMN_BYTES_PER_ROW = 72
# read with pread a few rows or one list at a time: page cache, not the process's memory
_READ_NOT_MAPPED = ("vectors.npy", "postings.npy")
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
          "g": 1 << 30, "gb": 1 << 30, "t": 1 << 40, "tb": 1 << 40}


def parse_budget(text: str) -> int:
    """Bytes of a budget written as a number with an optional unit: ``"800MB"``, ``"2G"``,
    ``"1.5gb"``, ``"500000000"`` (units are binary: 1 MB = 2**20 bytes)."""
    raw = text.strip().lower().replace(" ", "")
    number = raw.rstrip("kmgtb")
    unit = raw[len(number):]
    try:
        value = float(number)
    except ValueError:
        value = -1.0
    if unit not in _UNITS or not 0 < value < 2**62:
        raise IndexUnavailable(f"memory budget {text!r} is not a size such as 800MB or 2GB")
    return int(value * _UNITS[unit])


def partition_cost(folders: list[Path], rows: int) -> int:
    """The bytes an opened partition over segment ``folders`` of ``rows`` rows is charged:
    its index files but the float vectors and trigram postings, plus its row columns."""
    total = rows * COLUMN_BYTES_PER_ROW
    for folder in folders:
        for path in folder.rglob("*"):
            if path.name not in _READ_NOT_MAPPED and path.is_file():
                try:
                    total += path.stat().st_size
                except FileNotFoundError:  # a concurrent publication removed it
                    continue
    return total


@dataclass(frozen=True)
class OpenedStats:
    """Counters of an :class:`OpenedPartitions`: partitions opened and closed (by the budget)
    since it was made, and those open now with their charged bytes."""

    opened: int
    closed: int
    open_partitions: int
    open_bytes: int
    budget: int | None


class OpenedPartitions:
    """Open partition views by ``tenant/month``, least recently used first, within
    ``budget`` bytes (None: no limit). Thread-safe."""

    def __init__(self, budget: int | None = None) -> None:
        if budget is not None and budget <= 0:
            raise IndexUnavailable(
                f"memory budget must be a positive number of bytes, not {budget}")
        self.budget = budget
        self._views: OrderedDict[str, tuple[PartitionIndex, int]] = OrderedDict()
        self._lock = threading.Lock()
        self._opened = 0
        self._closed = 0
        self._bytes = 0

    def get(self, manifest: PartitionManifest,
            open_view: Callable[[PartitionIndex | None], PartitionIndex],
            cost: Callable[[], int], *, reopen: bool = False) -> PartitionIndex:
        """The view of ``manifest``'s build: the kept one when it is of that build (and not
        ``reopen``), else ``open_view(previous view or None)``, charged ``cost()`` bytes,
        after which the least recently used others are closed until the total fits."""
        key = f"{manifest.tenant}/{manifest.month}"
        with self._lock:
            kept = self._views.get(key)
            if kept is not None and not reopen and \
                    kept[0].manifest.build_id == manifest.build_id:
                self._views.move_to_end(key)
                return kept[0]
        view = open_view(None if reopen or kept is None else kept[0])
        charged = cost() if self.budget is not None else 0
        with self._lock:
            old = self._views.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            self._views[key] = (view, charged)
            self._bytes += charged
            self._opened += 1
            while self.budget is not None and self._bytes > self.budget and len(self._views) > 1:
                _, (_, freed) = self._views.popitem(last=False)
                self._bytes -= freed
                self._closed += 1
        return view

    def stats(self) -> OpenedStats:
        """The counters now."""
        with self._lock:
            return OpenedStats(self._opened, self._closed, len(self._views), self._bytes,
                               self.budget)

    def views(self) -> list[PartitionIndex]:
        """The open views, least recently used first."""
        with self._lock:
            return [view for view, _ in self._views.values()]

    def __len__(self) -> int:
        with self._lock:
            return len(self._views)
