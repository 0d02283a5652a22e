"""A one-dimensional ``.npy`` array read a slice at a time with ``pread``, never mapped.

What a memory map's reader touches counts in its process's resident memory (and the kernel
maps ~64 KB around each page a read faults in); what ``pread`` reads into a fresh array is
page cache, which the kernel can drop, plus that array, freed when the caller is done. For
arrays read in narrow slices (a trigram's posting list) this keeps an opened index's cost in
the page cache.
"""

from __future__ import annotations

import os
import weakref
from pathlib import Path
from typing import Any

import numpy as np

from lake.errors import IndexUnavailable


class ArrayFile:
    """The 1-D array saved at ``path`` by ``np.save`` (C order), read by :meth:`read`."""

    def __init__(self, path: Path) -> None:
        try:
            with open(path, "rb") as handle:
                version = np.lib.format.read_magic(handle)
                if version == (1, 0):
                    shape, fortran, dtype = np.lib.format.read_array_header_1_0(handle)
                else:
                    shape, fortran, dtype = np.lib.format.read_array_header_2_0(handle)
                offset = handle.tell()
            length = os.path.getsize(path)
        except (OSError, ValueError) as exc:
            raise IndexUnavailable(f"unreadable array file {path}: {exc}") from exc
        if len(shape) != 1 or fortran or dtype.hasobject:
            raise IndexUnavailable(f"array file {path} is not a plain 1-D array: {shape}, "
                                   f"{dtype}")
        self.dtype: np.dtype[Any] = dtype
        self.size = int(shape[0])
        if offset + self.size * dtype.itemsize > length:
            raise IndexUnavailable(f"array file {path} is shorter than its header says")
        self._path, self._offset = path, offset
        self._fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        weakref.finalize(self, os.close, self._fd)  # also at exit, while os is still there

    def read(self, lo: int, hi: int) -> np.ndarray:
        """Elements ``lo`` to ``hi`` (exclusive; ``0 <= lo <= hi <= size``) as a fresh array."""
        if not 0 <= lo <= hi <= self.size:
            raise IndexUnavailable(f"slice {lo}:{hi} outside 0..{self.size} of {self._path}")
        out = np.empty(hi - lo, dtype=self.dtype)
        wanted = out.nbytes
        if wanted:
            at = self._offset + lo * self.dtype.itemsize
            got = os.preadv(self._fd, [out.view(np.uint8).data], at)
            if got != wanted:
                raise IndexUnavailable(f"{self._path} ended early: {got} of {wanted} bytes "
                                       f"at {at}")
        return out

    def whole(self) -> np.ndarray:
        """Every element, in memory."""
        return self.read(0, self.size)
