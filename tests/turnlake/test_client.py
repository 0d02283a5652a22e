"""The Python client against a real server: every operation, typed answers, typed errors,
retries, and the recorder's outbox."""

from __future__ import annotations

import asyncio
import io
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from tests.pipeline.service.server import free_port, wait_until
from tests.reliability.lake_audit import file_bytes, turn_record
from tests.turnlake.conftest import Served
from turnlake import (
    AsyncClient,
    BadRequest,
    Client,
    Forbidden,
    Hit,
    NotFound,
    PayloadTooLarge,
    RecordAnswer,
    Recorder,
    Retry,
    SearchAnswer,
    ServerUnreachable,
    ServiceUnavailable,
    TurnRejected,
    Unauthorized,
)
from turnlake.outbox import Outbox

FAST = Retry(attempts=3, backoff_s=0.01, max_backoff_s=0.05)


def found(client: Client, query: str, turn_id: str, **options: object) -> bool:
    """True once a search finds the turn (recorded turns become searchable shortly)."""
    return any(h.turn_id == turn_id for h in client.search(query, **options).hits)


def test_record_search_and_read_a_turn(served: Served, tmp_path: Path) -> None:
    record = turn_record(1, conversation="c-cl", rich=True, marker="kestrel")
    with Client(served.server.url, key=served.keys["recorder"]) as recorder:
        first = recorder.record(record)
        again = recorder.record(record)
    assert isinstance(first, RecordAnswer)
    assert (first.accepted, again.duplicates) == (1, 1)
    with Client(served.server.url, key=served.keys["user"]) as client:
        assert wait_until(lambda: found(client, "kestrel", "t-0001"), timeout_s=60)
        answer = client.search("kestrel", k=3, roles=["user", "assistant"])
        assert isinstance(answer, SearchAnswer) and isinstance(answer.hits[0], Hit)
        mine = next(h for h in answer.hits if h.conversation_id == "c-cl")
        assert 0 <= mine.relevance <= 1
        turns = client.catalog(conversation="c-cl").turns
        assert [t.turn_id for t in turns] == ["t-0001"]
        listed = client.conversations().conversations
        assert "c-cl" in {c.conversation_id for c in listed}
        shown = client.turn("c-cl", "t-0001")
        ref = shown["files"][0]["ref"]
        assert client.file(ref, tmp_path / "k.csv") == len(file_bytes("kestrel"))
        assert (tmp_path / "k.csv").read_bytes() == file_bytes("kestrel")
        sink = io.BytesIO()
        client.file(ref, sink)
        assert sink.getvalue() == file_bytes("kestrel")
        # Addresses lead back to their objects: the hit's row and turn, a step of the turn.
        row = client.resolve(mine.address or "")
        assert row["value"]["row_id"] == mine.row_id
        record = client.resolve(mine.turn_address or "")
        assert record["value"]["turn_id"] == "t-0001"
        step = client.resolve(record["value"]["addresses"]["steps"][0])
        assert step["namespace"] == "tc"
        # every address the turn lists leads to its object: each namespace but files
        listed = record["value"]["addresses"]
        addresses = [a for v in listed.values() for a in (v if isinstance(v, list) else [v])
                     if isinstance(a, str)]
        namespaces = {client.resolve(a)["namespace"] for a in addresses}
        assert {"ar", "tc", "so", "ws", "su", "ev"} <= namespaces, namespaces
        with pytest.raises(Forbidden):  # a user: one refusal for missing and not-yours
            client.resolve("conv:ar:conv_c-nobody.turn_t-0001.record")
        with pytest.raises(ValueError, match="file"):
            client.resolve(ref)


def test_several_turns_go_as_one_ndjson_request(served: Served) -> None:
    records = [turn_record(n, conversation="c-batch", marker="osprey") for n in (10, 11, 12)]
    records[2]["tenant"] = "zeta"  # refused per turn, the others still recorded
    with Client(served.server.url, key=served.keys["recorder"]) as client:
        answer = client.record(records)
    assert [t.status for t in answer.turns] == ["accepted", "accepted", "rejected"]
    assert answer.turns[2].field == "tenant"


def test_the_server_s_errors_arrive_typed(served: Served) -> None:
    url = served.server.url
    with Client(url, key="tlk_nope", retry=FAST) as stranger, pytest.raises(Unauthorized) as e:
        stranger.search("anything")
    assert e.value.status == 401 and e.value.code == "unauthenticated"
    with Client(url, key=served.keys["user"], retry=FAST) as user:
        with pytest.raises(Forbidden) as denied:
            user.record(turn_record(20, conversation="c-denied"))
        assert denied.value.status == 403 and denied.value.message
        with pytest.raises(Forbidden):
            user.erase_user("u-ben")
    with Client(url, key=served.keys["analyst"], retry=FAST) as analyst:
        with pytest.raises(BadRequest) as bad:
            analyst.search("x", since="not a time")
        assert bad.value.field == "since"
        with pytest.raises(NotFound):
            analyst.file("conv:fi:conv_c-none.turn_t-none.files/x.csv", io.BytesIO())
    huge = turn_record(21, conversation="c-huge")
    huge["submissions"][0]["text"] = "x" * (11 * 1024 * 1024)
    with Client(url, key=served.keys["recorder"], retry=FAST) as recorder, \
            pytest.raises(PayloadTooLarge):
        recorder.record(huge)


def test_an_absent_server_is_server_unreachable() -> None:
    with Client(f"http://127.0.0.1:{free_port()}", retry=FAST) as client, \
            pytest.raises(ServerUnreachable):
        client.health()


class _Flaky:
    """A proxy on 127.0.0.1 before the real server: answers 503 (Retry-After: 0) to the
    next ``failures`` requests, then forwards."""

    def __init__(self, target: str) -> None:
        self.failures = 0
        self.seen = 0
        flaky = self

        class Handler(BaseHTTPRequestHandler):
            def _handle(self) -> None:
                flaky.seen += 1
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if flaky.failures > 0:
                    flaky.failures -= 1
                    payload = b'{"error": {"code": "lake_unavailable", "message": "busy"}}'
                    self.send_response(503)
                    self.send_header("Retry-After", "0")
                else:
                    answer = httpx.request(self.command, target + self.path, content=body,
                                           headers={k: v for k, v in self.headers.items()
                                                    if k.lower() != "host"}, timeout=120)
                    payload = answer.content
                    self.send_response(answer.status_code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = _handle

            def log_message(self, *args: object) -> None:
                return None

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def flaky(served: Served) -> Iterator[_Flaky]:
    proxy = _Flaky(served.server.url)
    yield proxy
    proxy.close()


def test_503_is_retried_then_raised_typed(served: Served, flaky: _Flaky) -> None:
    with Client(flaky.url, key=served.keys["recorder"], retry=FAST) as client:
        flaky.failures = 2
        answer = client.record(turn_record(30, conversation="c-retry"))
        assert answer.accepted == 1 and flaky.seen == 3
        flaky.failures = 5
        with pytest.raises(ServiceUnavailable) as exc:
            client.record(turn_record(31, conversation="c-retry"))
        assert exc.value.message == "busy"


def test_a_recorder_keeps_turns_while_the_server_is_away(served: Served, flaky: _Flaky,
                                                         tmp_path: Path) -> None:
    # The fixture's recorder ran before the server started: its turn waits in the outbox.
    assert len(Outbox(served.outbox).waiting()) == 1
    with Recorder(url=flaky.url, key=served.keys["recorder"], outbox=served.outbox) as rec:
        assert rec._server is not None
        rec._server.client.retry = FAST
        flaky.failures = 100  # down: this turn waits too, behind the first
        with rec.begin("acme", "support-desk", "react-agent", "u-ana", "c-out", "t-2") as t:
            t.submit("where did the heron notes go")
            t.complete("The archive folder, again.")
        assert len(Outbox(served.outbox).waiting()) == 2
        flaky.failures = 0
        flushed = rec.flush()
        assert (flushed.sent, flushed.waiting) == (2, 0)
        with rec.begin("acme", "support-desk", "react-agent", "u-ben", "c-out", "t-3") as t:
            t.submit("the conversation is u-ana's")
            with pytest.raises(TurnRejected):
                t.complete("refused: another user's conversation")
    with Client(served.server.url, key=served.keys["user"]) as client:
        assert wait_until(lambda: found(client, "heron", "t-2"), timeout_s=60)
        assert found(client, "heron migration", "t-1")


def test_the_async_client(served: Served) -> None:
    async def scenario() -> list[str]:
        async with AsyncClient(served.server.url, key=served.keys["recorder"]) as recorder:
            assert (await recorder.record(
                turn_record(40, conversation="c-async", marker="plover"))).accepted == 1
        async with AsyncClient(served.server.url, key=served.keys["user"]) as client:
            for _ in range(300):
                found = [h.turn_id for h in (await client.search("plover")).hits]
                if "t-0040" in found:
                    return found
                await asyncio.sleep(0.2)
        return []

    assert "t-0040" in asyncio.run(scenario())
