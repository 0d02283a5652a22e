"""Every process and allocator setting of an ingest, in one place.

Nothing in ``lake`` imports this module, and importing it changes nothing: each function acts
when called. The ingest (pipeline.ingest) enters it for its worker pool and its commits; the
command line's entry points call :func:`keep_freed_pages` before deltalake loads. Each trick
was measured on the 100k-turn ingest bench (``python -m bench.ingest_run``, 2 workers, 2-core
VM); what it bought is written at each function:

- :func:`keep_freed_pages` (main process): jemalloc keeps freed pages 30 s: ~5 % of ingest
  time, a third of the main process's page faults.
- :func:`worker_context` / :func:`start_worker_server`: workers fork from a fork server that
  preloaded the main module and pipeline.prepare: milliseconds per worker instead of the
  main module's imports in each (about a second for ``python -m pipeline.cli``).
- :func:`die_with_parent` (prctl PDEATHSIG): a killed ingest leaves no worker behind
  (correctness, not speed).
- :func:`keep_freed_memory` (glibc mallopt in workers): 3.3 page faults per turn down to 0.8.
- :func:`block_pandas_import` (workers): 0.2 CPU-seconds per worker that pyarrow spends
  importing pandas on its first array.
- :func:`cyclic_gc_paused`: about a tenth of a worker's time, more in the main process.
"""

from __future__ import annotations

import ctypes
import gc
import importlib.abc
import multiprocessing
import multiprocessing.context
import multiprocessing.forkserver
import os
import signal
import sys
import types
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

# The module whose functions the workers run; the fork server imports it once for all.
WORKER_MODULE = "pipeline.prepare"
# Worker malloc settings (see keep_freed_memory): blocks up to 32 MiB (the most glibc
# accepts) come from the heap, and the heap is only trimmed past 1 GiB free.
_MMAP_THRESHOLD = 32 * 2**20
_TRIM_THRESHOLD = 1 << 30
_KEEP_FREED_PAGES = "dirty_decay_ms:30000,muzzy_decay_ms:30000"
_POLARS_OWN_DECAY = "dirty_decay_ms:500,muzzy_decay_ms:1000"
_server_started = False  # see start_worker_server


def keep_freed_pages() -> None:
    """Have the jemalloc bundled in deltalake keep freed pages for 30 s (call before
    deltalake is imported; a program's entry point does).

    deltalake and polars each bundle a jemalloc that reads ``_RJEM_MALLOC_CONF`` when it
    loads; polars, on import, sets it to hand freed pages back after 0.5-1 s. A batch commit
    allocates and frees the same hundreds of megabytes for every table it writes, so each
    commit faulted those pages in again, 4 kB at a time: a third of the main process's page
    faults on the 100k-turn ingest bench, about 5 % of its time. A value the user set is left
    alone; polars' own default is extended (later options win in jemalloc's parsing).
    """
    current = os.environ.get("_RJEM_MALLOC_CONF")
    if current is None or current == _POLARS_OWN_DECAY:
        os.environ["_RJEM_MALLOC_CONF"] = ",".join(filter(None, (current, _KEEP_FREED_PAGES)))


def worker_context() -> multiprocessing.context.BaseContext:
    """How ingest starts its worker processes: forked from a fork server that has imported
    the worker module and the program's main module.

    Not forked from the ingesting process itself, which may hold torch, tantivy or deltalake
    threads. Spawned afresh, every worker paid its own imports, including the main module's
    (the whole CLI, about a second, for ``python -m pipeline.cli``); the fork server pays
    them once per process and forks each worker from there in milliseconds.
    """
    context = multiprocessing.get_context("forkserver")
    # Read only when the server starts, the first time this process asks for a worker.
    context.set_forkserver_preload(worker_preload())
    return context


def start_worker_server() -> bool:
    """Start the fork server of :func:`worker_context` in the background unless this process
    already has; True when it was started now.

    Until the server has imported what workers need (about 0.4 s), no worker can start: a
    caller may use that time for work of its own.
    """
    global _server_started
    if _server_started:
        return False
    worker_context()  # names what the server preloads
    multiprocessing.forkserver.ensure_running()
    _server_started = True
    return True


def worker_preload() -> list[str]:
    """The modules the workers' fork server imports: the worker module, and first the
    program's main module, which multiprocessing would otherwise import into every worker: the
    module a ``python -m`` run names, or ``__main__`` (a script, by path). A package's
    ``__main__`` module is not imported again anywhere, so it is left out. (Not pandas: see
    block_pandas_import.)"""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    name = getattr(spec, "name", None)
    if name is None:
        return ["__main__", WORKER_MODULE]
    if name == "__main__" or name.endswith(".__main__"):
        return [WORKER_MODULE]
    return [name, WORKER_MODULE]


def init_worker(ingest: int) -> None:
    """Worker initializer: the worker dies with the ingesting process (pid ``ingest``),
    keeps the memory it frees for the next chunk, and spares pyarrow its pandas import."""
    die_with_parent(ingest)
    keep_freed_memory()
    block_pandas_import()


def block_pandas_import() -> None:
    """Make pandas unimportable in this process (a worker's), so that pyarrow does not
    import it.

    pyarrow imports pandas (when installed), the first time a process makes an array, to
    recognise pandas' missing-value markers among the values: 0.2 CPU-seconds a process,
    and the values of an ingest worker never hold any, nor does anything a worker runs use
    pandas. A process that has imported pandas already keeps it.
    """
    if "pandas" not in sys.modules and _NO_PANDAS not in sys.meta_path:
        sys.meta_path.insert(0, _NO_PANDAS)


class _NoPandasFinder(importlib.abc.MetaPathFinder):
    """An import finder under which pandas cannot be imported."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: types.ModuleType | None = None) -> None:
        if fullname.partition(".")[0] == "pandas":
            raise ImportError(f"{fullname} is not imported in ingest worker processes")
        return None


_NO_PANDAS = _NoPandasFinder()


def die_with_parent(ingest: int) -> None:
    """On Linux, ask the kernel to SIGKILL this worker when its parent dies, so a killed
    ingest (pid ``ingest``) leaves no orphan workers behind.

    The parent is the fork server, which exits as soon as the ingesting process is gone.
    """
    if sys.platform.startswith("linux"):
        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    try:
        os.kill(ingest, 0)
    except ProcessLookupError:  # the ingest died while this worker was starting
        os._exit(1)


def keep_freed_memory() -> None:
    """Have glibc's malloc keep freed memory in the process rather than hand it back.

    A worker allocates and frees the same tens of megabytes for every chunk (records, rows,
    the pickled result). By default glibc maps large blocks afresh and trims the heap on
    free, so every chunk touches new pages again: measured on the 100k-turn ingest bench,
    3.3 page faults per turn, 0.8 with these settings, each fault ~3 us of kernel time on
    a virtual machine. Workers live only as long as their ingest, so holding their peak
    memory costs nothing lasting. A no-op outside glibc.
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except AttributeError:  # not glibc (musl has no mallopt)
        return
    m_trim_threshold, m_mmap_threshold = -1, -3
    mallopt(m_mmap_threshold, _MMAP_THRESHOLD)
    mallopt(m_trim_threshold, _TRIM_THRESHOLD)


@contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for a stretch that allocates many long-lived objects.

    Nearly every object made while a chunk is prepared or a batch is committed lives until the
    end of that work, so the collector would only rescan them again and again (about a tenth
    of a worker's time, and more in the main process, which holds whole batches); the few
    cycles (tracebacks of refused lines) wait for its next run.
    """
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()
