"""A property worked out at most once per object, under the object's own lock.

Opened index views are shared by every search thread of a process. ``functools.cached_property``
takes no lock from Python 3.12 on (and in 3.11 one lock for all objects of a class), so two
threads could both load a partition's columns, or one could see a half-built view; this one
locks per object, and a value once set is read without the lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar, overload

__all__ = ["Locked", "once"]

T = TypeVar("T")


class Locked:
    """A base for objects with :class:`once` properties: each holds its own reentrant lock
    (reentrant: one property may read another)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()


class once(Generic[T]):
    """Like ``functools.cached_property``, computed under the instance's ``_lock``
    (:class:`Locked`): every thread sees the one value, computed once."""

    def __init__(self, compute: Callable[[Any], T]) -> None:
        self._compute = compute
        self._name = compute.__name__
        self.__doc__ = compute.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, instance: None, owner: type | None = None) -> once[T]: ...

    @overload
    def __get__(self, instance: Locked, owner: type | None = None) -> T: ...

    def __get__(self, instance: Locked | None, owner: type | None = None) -> T | once[T]:
        if instance is None:
            return self
        values = instance.__dict__
        if self._name in values:  # set once, whole: read without the lock
            value: T = values[self._name]
            return value
        with instance._lock:
            if self._name not in values:
                values[self._name] = self._compute(instance)
            found: T = values[self._name]
            return found

    def computed(self, instance: Locked) -> T | None:
        """The value when ``instance`` has worked it out already, else None (nothing is
        computed)."""
        found: T | None = instance.__dict__.get(self._name)
        return found
