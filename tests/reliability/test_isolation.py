"""Isolation over random small lakes and random principals: an end user never receives a hit,
catalog entry, turn, event or file of another user, and nobody ever receives another tenant's
data, through the service, the CLI and the workbench.

Every turn's texts, title, event data and file bytes carry a marker unique to that turn; a
principal's answers (whole, as text) may only contain markers of turns it may read.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from streamlit.testing.v1 import AppTest
from typer.testing import CliRunner

from app.models import SearchForm, Viewer
from app.service import Workbench
from lake.embedding.hashing import HashingEmbedder
from lake.errors import TurnlakeError
from lake.search.access import Principal, Scope
from lake.search.catalog import TurnCatalog
from lake.search.materialize import TurnMaterializer
from lake.search.request import SearchRequest
from lake.search.service import SearchService
from lake.settings import Settings
from lake.store import LakeStore
from pipeline.cli import app
from pipeline.jobs import run_ingest
from tests.reliability.lake_audit import file_bytes, turn_record

MARKER = re.compile(r"zq\d{4}x")
TENANTS = ("acme", "globex")
USERS = ("u-ana", "u-ben", "u-cy")
CONVERSATIONS = ("c-1", "c-2", "c-3", "c-4", "c-5", "c-6")
MAIN = Path(__file__).resolve().parents[2] / "app" / "main.py"

Key = tuple[str, str, str]


@dataclass(frozen=True)
class Turn:
    """Ground truth of one stored turn."""

    tenant: str
    user: str
    conversation: str
    turn_id: str
    marker: str
    rich: bool

    @property
    def ref(self) -> str:
        """The conv:fi: ref of its hosted file."""
        return f"conv:fi:conv_{self.conversation}.turn_{self.turn_id}.files/{self.marker}.csv"


@st.composite
def small_lakes(draw: st.DrawFn) -> list[Turn]:
    """1-2 tenants, 1-3 users each; conversation and turn ids repeat across tenants."""
    turns: list[Turn] = []
    for tenant in TENANTS[:draw(st.integers(1, 2))]:
        users = draw(st.lists(st.sampled_from(USERS), min_size=1, max_size=3, unique=True))
        conversations = iter(draw(st.permutations(CONVERSATIONS)))
        for user in users:
            for _ in range(draw(st.integers(1, 2))):
                conversation = next(conversations)
                for t in range(draw(st.integers(1, 2))):
                    turns.append(Turn(tenant, user, conversation, f"t-{t + 1:04d}",
                                      f"zq{len(turns):04d}x", draw(st.booleans())))
    return turns


PRINCIPALS = st.builds(Principal, st.sampled_from(TENANTS),
                       st.sampled_from((*USERS, "u-zed")), st.just(False)) | st.builds(
    Principal, st.sampled_from(TENANTS), st.sampled_from((None, *USERS)), st.just(True))


def _build(root: Path, turns: list[Turn]) -> None:
    records = []
    for n, turn in enumerate(turns):
        record = turn_record(n, tenant=turn.tenant, user=turn.user,
                             conversation=turn.conversation, rich=turn.rich, marker=turn.marker)
        record["turn_id"] = turn.turn_id
        records.append(json.dumps(record))
    run_ingest(Settings(lake=root, embedding_model="hashing-64"), records=records)


def _allowed(principal: Principal, turns: list[Turn]) -> set[str]:
    return {t.marker for t in turns if t.tenant == principal.tenant
            and (principal.analyst or t.user == principal.user_id)}


def _leaks(answer: object, allowed: set[str]) -> set[str]:
    """Markers in an answer (any object, read through its repr) it may not hold."""
    return set(MARKER.findall(repr(answer))) - allowed


def _attempt(call: Any, *args: Any, **kw: Any) -> object:
    try:
        return call(*args, **kw)
    except TurnlakeError as exc:  # a refusal is fine; its message must not leak either
        message = str(exc)
        for arg in args:  # ...beyond echoing what the caller asked for
            if isinstance(arg, str):
                message = message.replace(arg, "<asked>")
        return message


def _service_answers(root: Path, principal: Principal, turns: list[Turn]) -> list[object]:
    store = LakeStore(root)
    service = SearchService(store, embedder=HashingEmbedder(64))
    catalog, materializer = TurnCatalog(store), TurnMaterializer(store)
    scope: Scope = "tenant" if principal.analyst else "user"
    answers: list[object] = []
    for query in ["forecast", *(t.marker for t in turns)]:
        answers.append(_attempt(service.search, SearchRequest(
            query, principal, scope=scope, k=100, max_per_conversation=0)))
    for user in USERS:
        answers.append(_attempt(service.search, SearchRequest(
            "forecast question", principal, scope="user", user_id=user)))
    answers.append(catalog.conversations(principal))
    answers.append(_attempt(catalog.between, principal, datetime(2020, 1, 1, tzinfo=UTC),
                            datetime(2030, 1, 1, tzinfo=UTC)))
    for conversation in CONVERSATIONS:
        answers.append(_attempt(catalog.turns, principal, conversation))
        answers.append(_attempt(service.search, SearchRequest(
            "forecast", principal, scope="conversation", conversation_id=conversation)))
    for turn in turns:
        answers.append(_attempt(materializer.turn, principal, turn.conversation, turn.turn_id))
        if turn.rich:
            answers.append(_attempt(materializer.resolve, principal, turn.ref))
    return answers


def _cli_answers(root: Path, principal: Principal, turns: list[Turn]) -> list[object]:
    runner = CliRunner()
    who = ["--tenant", principal.tenant, "--lake", str(root), "--json"]
    if principal.user_id:
        who += ["--user", principal.user_id]
    if principal.analyst:
        who += ["--analyst"]
    calls = [["search", "forecast", "--k", "100", *(["--scope", "tenant"]
                                                     if principal.analyst else [])],
             ["catalog", "--when", "in March 2026"]]
    calls += [["catalog", "--conversation", c] for c in CONVERSATIONS[:3]]
    calls += [["turn", "show", t.conversation, t.turn_id] for t in turns[:4]]
    return [runner.invoke(app, [*call, *who]).output for call in calls]


def _workbench_answers(root: Path, principal: Principal, turns: list[Turn]) -> list[object]:
    bench = Workbench(Settings(lake=root, embedding_model="hashing-64"))
    viewer = Viewer(principal.tenant, None if principal.analyst else principal.user_id)
    answers: list[object] = [bench.users(viewer), bench.conversations(viewer),
                             bench.index_health(viewer),
                             bench.overview(viewer, since=None, by="app").totals]
    scope: Scope = "tenant" if viewer.is_analyst else "user"
    for query in ("forecast", turns[0].marker):
        outcome = _attempt(bench.search, viewer, SearchForm(query, scope=scope, k=100))
        # The outcome echoes the query (which may name another turn's marker); check the rest.
        answers.append(getattr(outcome, "hits", outcome))
        answers.append(getattr(outcome, "warnings", None))
    for turn in turns:
        answers.append(_attempt(bench.turns, viewer, turn.conversation))
        answers.append(_attempt(bench.replay, viewer, turn.conversation, turn.turn_id))
        if turn.rich:
            answers.append(_attempt(bench.file_bytes, viewer, turn.ref))
    return answers


@pytest.mark.slow
# No shrinking: each example builds a lake, and a shrink could run for minutes; the failing
# example is printed whole instead.
@settings(max_examples=15, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(turns=small_lakes(), principals=st.lists(PRINCIPALS, min_size=2, max_size=3))
def test_no_principal_reads_what_it_may_not(tmp_path_factory: pytest.TempPathFactory,
                                           monkeypatch: pytest.MonkeyPatch,
                                           turns: list[Turn],
                                           principals: list[Principal]) -> None:
    monkeypatch.setenv("TURNLAKE_EMBEDDING_MODEL", "hashing-64")
    root = tmp_path_factory.mktemp("iso") / "lake"
    _build(root, turns)
    for principal in principals:
        allowed = _allowed(principal, turns)
        for path, answers in (("service", _service_answers(root, principal, turns)),
                              ("cli", _cli_answers(root, principal, turns)),
                              ("workbench", _workbench_answers(root, principal, turns))):
            leaked = _leaks(answers, allowed)
            assert not leaked, f"{principal.describe()} got {sorted(leaked)} via {path}"
        # ...and it does get its own data: the isolation is not vacuous.
        own = [t for t in turns if t.marker in allowed]
        if own and not principal.analyst:
            found = SearchService(LakeStore(root), embedder=HashingEmbedder(64)).search(
                SearchRequest(own[0].marker, principal, k=5)).hits
            assert own[0].marker in repr(found)
            if own[0].rich:
                _card, data = TurnMaterializer(LakeStore(root)).resolve(principal, own[0].ref)
                assert data == file_bytes(own[0].marker)


def test_a_reused_conversation_id_leaks_nothing_across_users(tmp_path: Path) -> None:
    turns = [Turn("acme", "u-ana", "c-1", "t-0001", "zq0001x", False),
             Turn("acme", "u-ben", "c-1", "t-0002", "zq0002x", False)]
    _build(tmp_path / "lake", turns)
    for principal in (Principal("acme", "u-ana"), Principal("acme", "u-ben")):
        answers = _service_answers(tmp_path / "lake", principal, turns)
        assert not _leaks(answers, _allowed(principal, turns)), principal.describe()


@pytest.mark.slow
def test_workbench_pages_viewed_as_a_user_show_only_that_user(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    turns = [Turn(tenant, user, f"c-{i}", "t-0001", f"zq{i:04d}x", rich=True)
             for i, (tenant, user) in enumerate([("acme", "u-ana"), ("acme", "u-ben"),
                                                 ("globex", "u-ana"), ("acme", "u-ana")])]
    root = tmp_path / "lake"
    _build(root, turns)
    monkeypatch.setenv("TURNLAKE_LAKE", str(root))
    monkeypatch.setenv("TURNLAKE_EMBEDDING_MODEL", "hashing-64")
    monkeypatch.delenv("TURNLAKE_TENANTS", raising=False)
    # The local demo mode (an admin of every tenant) viewing as one user: the view must
    # still show nothing of anyone else (signed-in users are tests/app/test_signin.py's).
    monkeypatch.setenv("TURNLAKE_WORKBENCH_AUTH", "local")
    at = AppTest.from_file(MAIN, default_timeout=60)
    at.session_state["wb_tenant"] = "acme"
    at.session_state["wb_view_as_on"] = True
    at.session_state["wb_view_as_user"] = "u-ana"
    at.run()
    allowed = _allowed(Principal("acme", "u-ana"), turns)
    seen: set[str] = set()
    pages = ["screens/search.py", "screens/replay.py", "screens/overview.py",
             "screens/retention.py", "screens/index_health.py"]
    for page in pages:
        at.switch_page(page).run()
        if page == "screens/search.py":
            at.text_input[0].input("forecast")
            at.form_submit_button[0].click().run()
        assert not at.exception, page
        shown = repr([e.value for e in (*at.markdown, *at.caption, *at.info, *at.warning,
                                        *at.error, *at.dataframe, *at.code, *at.json)])
        assert not _leaks(shown, allowed), page
        seen |= set(MARKER.findall(shown))
    for conversation in ("c-1", "c-2"):  # u-ben's, then globex's: refused, nothing shown
        at.query_params = {"conversation": conversation, "turn": "t-0001"}
        at.switch_page("screens/replay.py").run()
        assert not _leaks(repr([e.value for e in (*at.markdown, *at.error)]), allowed)
    assert seen, "the pages showed the user's own turns"
