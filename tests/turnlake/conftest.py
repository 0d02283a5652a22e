"""A real ``turnlake serve`` for the client tests, and a turn recorded through the outbox
before it started."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.pipeline.service.server import Server, make_keys
from turnlake import Recorder, Retry


@dataclass(frozen=True)
class Served:
    """The server, its keys, and the outbox a recorder filled while it was down."""

    server: Server
    keys: dict[str, str]
    outbox: Path


@pytest.fixture(scope="package")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A server over a fresh lake; before it starts, a server-mode recorder completes turn
    c-out/t-1, which can only wait in its outbox."""
    root = tmp_path_factory.mktemp("client")
    keys = make_keys(root / "lake")
    server = Server(root / "lake")
    outbox = root / "outbox"
    with Recorder(url=server.url, key=keys["recorder"], outbox=outbox) as recorder:
        assert recorder._server is not None
        recorder._server.client.retry = Retry(attempts=2, backoff_s=0.01)
        with recorder.begin("acme", "support-desk", "react-agent", "u-ana", "c-out",
                            "t-1") as turn:
            turn.submit("the heron migration notes went missing")
            turn.complete("They were in the archive folder.")
    with server:
        yield Served(server, keys, outbox)
