"""How ingest runs its worker processes, and the process and allocator settings that made it
fast: every such trick of the project lives here, with its measured reason.

Nothing in ``lake`` imports this module; the ingest (pipeline.ingest, pipeline.prepare) and
the command line's entry points (pipeline.entry, pipeline.cli, bench.ingest_run) do. Each
setting is an optimisation only: without any of them ingest gives the same rows, slower.

* :func:`keep_freed_pages` - jemalloc decay of deltalake's and polars' allocators (the
  ~5 % of the 100k ingest bench that page faults cost).
* :func:`worker_context`, :func:`start_worker_server` - a fork server that imports the
  worker code once.
* :func:`init_worker` - a worker dies with its ingest (``prctl``), keeps the memory it
  frees (``mallopt``) and never imports pandas.
* :func:`cyclic_gc_paused` - no cyclic GC passes over objects that all live to the end of
  a chunk or a batch.
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
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager

_PREPARE = "pipeline.prepare"  # what workers run
# Worker malloc settings (see keep_freed_memory): blocks up to 32 MiB (the most glibc
# accepts) come from the heap, and the heap is only trimmed past 1 GiB free.
_MMAP_THRESHOLD = 32 * 2**20
_TRIM_THRESHOLD = 1 << 30
_server_started = False  # see start_worker_server

# deltalake and polars each bundle a jemalloc that reads _RJEM_MALLOC_CONF when it loads, and
# polars, on import, sets it to hand freed pages back to the system after 0.5-1 s (followed by
# any value set before, whose options win). A batch commit allocates and frees the same
# hundreds of megabytes for every table it writes, so each commit took those pages again, one
# fault per 4 kB: a third of the main process's page faults on the 100k-turn ingest bench, and
# about 5% of its time.
_KEEP_FREED_PAGES = "dirty_decay_ms:30000,muzzy_decay_ms:30000"
_POLARS_OWN_DECAY = "dirty_decay_ms:500,muzzy_decay_ms:1000"


def keep_freed_pages() -> None:
    """Have the jemalloc of deltalake and polars keep freed pages for 30 s (see above).

    Only an entry point may call this, before anything imports deltalake or polars: the
    allocators read the setting once, when they load. If polars came first, its own value is
    extended (its allocator is loaded already, deltalake's is not). A value the user set is
    left alone."""
    current = os.environ.get("_RJEM_MALLOC_CONF")
    if current is None or current == _POLARS_OWN_DECAY:
        os.environ["_RJEM_MALLOC_CONF"] = ",".join(filter(None, (current, _KEEP_FREED_PAGES)))


def worker_context() -> multiprocessing.context.BaseContext:
    """How ingest starts its worker processes: forked from a fork server that has imported
    pipeline.prepare and the program's main module.

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
    """The modules the workers' fork server imports: pipeline.prepare, and first the program's main
    module, which multiprocessing would otherwise import into every worker: the module a
    ``python -m`` run names, or ``__main__`` (a script, by path). A package's ``__main__``
    module is not imported again anywhere, so it is left out. (Not pandas: see
    block_pandas_import.)"""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    name = getattr(spec, "name", None)
    if name is None:
        return ["__main__", _PREPARE]
    if name == "__main__" or name.endswith(".__main__"):
        return [_PREPARE]
    return [name, _PREPARE]


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
    ingest (pid ``ingest``) leaves no orphan workers behind; the service's index builder
    child uses it too, with the server's pid.

    An ingest worker's parent is the fork server, which exits as soon as the ingesting process
    is gone.
    """
    if sys.platform.startswith("linux"):
        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    try:
        os.kill(ingest, 0)
    except ProcessLookupError:  # the ingest died while this worker was starting
        os._exit(1)


def server_child(initializer: Callable[..., object] | None = None,
                 *args: object) -> ProcessPoolExecutor:
    """One long-lived child process of a serving process, to submit work to: spawned (the
    server runs threads, which a fork would copy mid-lock), dying with the server
    (:func:`die_with_parent`: after a kill -9 it would otherwise live on, holding a model's
    worth of memory), then set up by ``initializer(*args)``, a module-level function. The
    service's index builder, writer and acceptor each keep one."""
    return ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_start_server_child,
                               initargs=(os.getpid(), initializer, args))


def _start_server_child(server: int, initializer: Callable[..., object] | None,
                        args: tuple[object, ...]) -> None:
    die_with_parent(server)
    if initializer is not None:
        initializer(*args)


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
