"""Per-key fair share of the group writer: one key's large or late recordings do not hold the
other keys' recordings.

The writer is one line of work (decide and spool, commit, index), so whatever one key sends
delays what the others send after it. Three rules bound that delay (:meth:`FairShare.held`):

* **A large request goes alone.** A request of more than ``record_fair_share_bytes`` forms a
  group of its own, and a group takes at most that many bytes of one key's requests (the key's
  first request always fits): the turns of other keys are never decided, committed and
  indexed in the same step as a key's maximum-size request.
* **A key late to be searchable waits alone.** A key whose own answered group has waited more
  than ``record_max_lag_s`` to become searchable, or whose large request is not searchable
  yet, has its next requests held until it is (at most ``most_hold_s``, and never while the
  index step is failing) — the lag bound of pipeline/service/writer.py, kept per key: other
  keys' requests are decided meanwhile, and a key has one large request in flight at most.
  A group late only because it waits behind another key's large request holds nobody: the
  large request's key pays for it (below).
* **A key that used the writer waits as long.** The seconds the writer's steps spent on a
  group (deciding it, and its share by bytes of each commit and index step it was in) are
  charged to its keys by their share of its bytes once it is searchable; a key charged more
  than ``record_max_lag_s`` waits that long before its next requests are decided, while
  another key has a request waiting or was answered within the last ``active_s`` seconds.
  Time a group spent waiting behind others is charged to nobody. A key sending
  maximum-size requests back to back then gets about half of the writer while another key
  records, and all of it alone.

Within one key requests stay in the order they arrived: a held request holds the key's later
ones too.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class _Answered:
    acked: float  # time.monotonic() of its answer
    large: bool  # it held a request past the share


@dataclass
class _Key:
    seen: float = 0.0  # time.monotonic() of its last request
    waiting: int = 0  # its requests not decided yet
    busy_until: float = 0.0  # paused until then (while others record)
    late: dict[int, _Answered] = field(default_factory=dict)  # its unsearchable groups


class FairShare:
    """The writer's per-key state; not thread-safe (the writer keeps it under its lock)."""

    def __init__(self, *, share_bytes: int, lag_s: float, most_hold_s: float,
                 active_s: float = 5.0) -> None:
        self.share_bytes = share_bytes
        self._lag_s = lag_s
        self._most_hold_s = most_hold_s
        self._active_s = active_s
        self._keys: dict[str, _Key] = {}
        self._large: dict[int, str] = {}  # unsearchable groups holding a large request: key

    def seen(self, sharer: str, now: float) -> None:
        """A request of ``sharer`` arrived."""
        key = self._key(sharer)
        key.seen = now
        key.waiting += 1

    def decided(self, sharer: str) -> None:
        """A request of ``sharer`` went into a group (or was refused)."""
        key = self._key(sharer)
        key.waiting = max(0, key.waiting - 1)
        key.seen = time.monotonic()  # it records still: its host sends the next one soon

    def answered(self, number: int, sharers: Iterable[str], *, acked: float,
                 large: bool) -> None:
        """Group ``number`` holding requests of ``sharers`` (``large``: one past the share)
        was answered at ``acked``."""
        for sharer in set(sharers):
            self._key(sharer).late[number] = _Answered(acked, large)
            if large:
                self._large[number] = sharer

    def searchable(self, number: int, shares: dict[str, int], cost: float, now: float
                   ) -> None:
        """Group ``number`` is searchable; ``shares`` are its bytes per key, ``cost`` the
        seconds the writer's steps spent on it (deciding, its share of the commits and index
        steps it was in). Charges each key its share of that time, when more than the lag
        bound."""
        self._large.pop(number, None)
        total = sum(shares.values()) or 1
        for sharer, size in shares.items():
            key = self._key(sharer)
            if key.late.pop(number, None) is None:
                continue
            took = cost * size / total
            if self._lag_s > 0 and took > self._lag_s:
                key.busy_until = max(key.busy_until, now + took)

    def forget(self, number: int) -> None:
        """Group ``number`` will never be reported searchable (nothing to index)."""
        self._large.pop(number, None)
        for key in self._keys.values():
            key.late.pop(number, None)

    def held(self, sharer: str, now: float, *, index_failing: bool) -> str | None:
        """Why ``sharer``'s next request must wait now (``late`` or ``paused``), or None."""
        key = self._keys.get(sharer)
        if key is None:
            return None
        if self._lag_s > 0 and not index_failing and any(
                (a.large or (self._lag_s < now - a.acked
                             and not self._behind_large(number, sharer)))
                and now - a.acked < self._lag_s + self._most_hold_s
                for number, a in key.late.items()):
            return "late"
        if key.busy_until > now and self._others_active(sharer, now):
            return "paused"
        return None

    def _behind_large(self, number: int, sharer: str) -> bool:
        """Whether group ``number`` waits behind another key's large request (answered
        before it, not searchable yet): then that key's, not this one's, is the delay."""
        return any(m < number and owner != sharer for m, owner in self._large.items())

    def next_change(self, now: float) -> float:
        """Seconds until a pause ends or a late group's hold gives up (at most 0.05: holds
        also end when a group becomes searchable, which the caller is told of)."""
        ends = [k.busy_until - now for k in self._keys.values() if k.busy_until > now]
        return max(0.001, min([0.05, *ends]))

    def paused_keys(self, now: float) -> int:
        """Keys paused now for their share."""
        return sum(1 for sharer, k in self._keys.items()
                   if k.busy_until > now and self._others_active(sharer, now))

    def _others_active(self, sharer: str, now: float) -> bool:
        return any(k.waiting or now - k.seen <= self._active_s
                   for s, k in self._keys.items() if s != sharer)

    def _key(self, sharer: str) -> _Key:
        key = self._keys.get(sharer)
        if key is None:
            key = self._keys[sharer] = _Key()
            if len(self._keys) > 10_000:  # forget keys long idle, not the memory
                cutoff = time.monotonic() - 3600
                for name in [s for s, k in self._keys.items()
                             if k.seen < cutoff and not k.late and not k.waiting
                             and s != sharer]:
                    del self._keys[name]
        return key
