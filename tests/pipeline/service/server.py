"""A real ``turnlake serve`` process on 127.0.0.1 for the service tests, and key helpers."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

import httpx

from lake.keys import KeyStore

ROOT = Path(__file__).resolve().parents[3]
START_TIMEOUT_S = 120.0


def free_port() -> int:
    """A port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def server_env() -> dict[str, str]:
    """A server's environment: the hashing embedder, offline."""
    env = {k: v for k, v in os.environ.items() if k not in ("TURNLAKE_LAKE",)}
    env.update(TURNLAKE_EMBEDDING_MODEL="hashing-64", HF_HUB_OFFLINE="1")
    return env


class Server:
    """``turnlake serve`` over a lake, started and stopped by a test (context manager)."""

    def __init__(self, lake: Path | str, *args: str, env: dict[str, str] | None = None
                 ) -> None:
        self.lake = lake
        self.args = args
        self.env = env or server_env()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        # The server's stderr goes to a file: a pipe nobody reads would stall the server once
        # 64 KB of log filled it, and the file can be read while it runs.
        self.log = Path(tempfile.mkstemp(prefix="turnlake-serve-", suffix=".log")[1])

    def start(self, *, ready: bool = True) -> Server:
        """Start the process and wait (bounded) until /readyz answers 200 (``ready``; else
        until /healthz answers: the process is alive, its start-up may still run)."""
        argv = [sys.executable, "-m", "pipeline.cli", "serve", "--lake", str(self.lake),
                "--port", str(self.port), *self.args]
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(argv, env=self.env, cwd=ROOT,
                                         stdout=subprocess.DEVNULL, stderr=log)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"turnlake serve exited {self.proc.returncode}: "
                                   f"{self.log_tail()}")
            try:
                probe = "/readyz" if ready else "/healthz"
                if httpx.get(f"{self.url}{probe}", timeout=2).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"turnlake serve did not answer within {START_TIMEOUT_S} s")

    def children(self) -> list[int]:
        """The pids of the server's child processes (Linux; empty elsewhere)."""
        assert self.proc is not None
        found: list[int] = []
        for task in Path(f"/proc/{self.proc.pid}/task").glob("*"):
            try:
                found += [int(p) for p in (task / "children").read_text().split()]
            except OSError:
                continue
        return found

    def log_tail(self, chars: int = 3000) -> str:
        """The end of what the server wrote to stderr so far."""
        return self.log.read_text(errors="replace")[-chars:]

    def kill(self) -> None:
        """SIGKILL the process (no shutdown of any kind)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        """Stop the process: SIGINT (graceful), then SIGKILL if it lingers."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()

    def client(self, key: str | None = None) -> httpx.Client:
        """An HTTP client of this server, with the key as bearer when given."""
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=300)

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
        if kind is None:
            self.log.unlink(missing_ok=True)  # kept after a failure, to read


def make_keys(lake: Path | str, store: KeyStore | None = None) -> dict[str, str]:
    """One key per role of tenant acme (user key: u-ana), plus u-ben's and tenant zeta's."""
    keys = store or KeyStore(lake)
    made = {
        "user": keys.create(tenant="acme", role="user", user_id="u-ana")[1],
        "other_user": keys.create(tenant="acme", role="user", user_id="u-ben")[1],
        "analyst": keys.create(tenant="acme", role="analyst")[1],
        "recorder": keys.create(tenant="acme", role="recorder")[1],
        "admin": keys.create(tenant="acme", role="admin")[1],
        "zeta_admin": keys.create(tenant="zeta", role="admin")[1],
        "zeta_recorder": keys.create(tenant="zeta", role="recorder")[1],
    }
    return made


def wait_until(check: object, timeout_s: float = 60.0, every_s: float = 0.1) -> bool:
    """Poll ``check()`` until it is true or the (bounded) time is up."""
    assert callable(check)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(every_s)
    return False
