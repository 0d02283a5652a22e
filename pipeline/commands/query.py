"""Commands that read the lake: search, catalog, turn show, ref resolve."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table as RichTable

from lake.errors import QueryError, TurnlakeError
from lake.search.catalog import TurnCatalog
from lake.search.coverage import DEFAULT_COVERAGE_GAIN
from lake.search.materialize import TurnMaterializer
from lake.search.named_time import DEFAULT_TIME_WEIGHT, named_span
from lake.search.neighbours import DEFAULT_NEIGHBOUR_WEIGHT
from lake.search.relevance import DEFAULT_MIN_RELEVANCE
from lake.search.request import SearchRequest
from lake.store import LakeStore
from pipeline.commands.common import (
    LakeOption,
    app,
    console,
    existing_lake,
    fail,
    literal,
    out,
    styled,
)
from pipeline.contract import (
    CatalogAnswer,
    QueryLine,
    SearchAnswer,
    parse_time,
    principal_from,
)

turn_app = typer.Typer(no_args_is_help=True, help="Show recorded turns.")
ref_app = typer.Typer(no_args_is_help=True, help="Resolve conv:* references.")
app.add_typer(turn_app, name="turn")
app.add_typer(ref_app, name="ref")

TenantOption = Annotated[str | None, typer.Option("--tenant", help="Tenant of the principal.")]
UserOption = Annotated[str | None, typer.Option("--user", help="User id (the principal, or the "
                                                "user an analyst looks at).")]
AnalystOption = Annotated[bool, typer.Option("--analyst", help="Act as an analyst of the tenant.")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON.")]


def request_from(options: dict[str, Any]) -> SearchRequest:
    """Build a SearchRequest from option names (the CLI's long options, underscored)."""
    line = QueryLine.parse(options)
    return line.to_request(line.principal())


@app.command()
def search(
    query: Annotated[str | None, typer.Argument(help="What to look for.")] = None,
    tenant: TenantOption = None,
    user: UserOption = None,
    analyst: AnalystOption = False,
    scope: Annotated[str, typer.Option(help="conversation, user or tenant.")] = "user",
    conversation: Annotated[str | None, typer.Option(help="Conversation id.")] = None,
    agent: Annotated[str | None, typer.Option(
        help="Only conversations this agent recorded (codex, claude-code, ...).")] = None,
    app_name: Annotated[str | None, typer.Option(
        "--app", help="Only conversations of this app.")] = None,
    role: Annotated[list[str] | None, typer.Option(
        "--role", help="Role to search (repeatable; default user, assistant, summary, anchor, "
        "attachment).")] = None,
    k: Annotated[int, typer.Option("--k", help="Number of turns to return.")] = 10,
    since: Annotated[str | None, typer.Option(help="Only turns at or after (ISO).")] = None,
    until: Annotated[str | None, typer.Option(help="Only turns before (ISO).")] = None,
    as_of: Annotated[str | None, typer.Option(help="Evaluate as of this time (ISO).")] = None,
    half_life_days: Annotated[float, typer.Option(help="Recency half-life in days.")] = 7.0,
    recency_weight: Annotated[float, typer.Option(help="Recency lift weight (0 = off).")] = 1.0,
    time_weight: Annotated[float, typer.Option(
        help="Lift for turns in a time the query names ('in May 2023', 'last week'): up to "
             "1 + this, less with each 3 days outside it (0 = read no time).")
    ] = DEFAULT_TIME_WEIGHT,
    no_semantic: Annotated[bool, typer.Option("--no-semantic")] = False,
    no_lexical: Annotated[bool, typer.Option("--no-lexical")] = False,
    no_trigram: Annotated[bool, typer.Option("--no-trigram")] = False,
    max_per_conversation: Annotated[int | None, typer.Option(
        help="Most hits per conversation (0 = no cap; default 2, off in conversation scope).")
    ] = None,
    snippets: Annotated[str, typer.Option(help="user, assistant, both or none.")] = "both",
    min_relevance: Annotated[float, typer.Option(
        help="Drop hits whose relevance (0-1) is below this; 0 keeps every hit. The default "
             "returns nothing for a query nothing in the history matches.")
    ] = DEFAULT_MIN_RELEVANCE,
    neighbour_weight: Annotated[float, typer.Option(
        help="How much a turn gains from a matching neighbour turn, as a share of that "
             "turn's fused score; a turn alone in its conversation gains that share of its "
             "own (0 = off).")] = DEFAULT_NEIGHBOUR_WEIGHT,
    coverage_gain: Annotated[float, typer.Option(
        help="Scale each lexical match's vote by the square of this many times the share "
             "of the query the turn holds (0 = fixed weights).")] = DEFAULT_COVERAGE_GAIN,
    queries: Annotated[Path | None, typer.Option(
        help="JSON Lines file of queries (id, query and any option).")] = None,
    memory_budget: Annotated[str | None, typer.Option(
        help="Bytes of partition indexes kept open (800MB, 2GB): past it the least recently "
             "used are closed and opened again when needed (default: the lake's "
             "search_memory_budget, TURNLAKE_MEMORY_BUDGET, else no limit).")] = None,
    as_json: JsonOption = False,
    lake: LakeOption = None,
) -> None:
    """Hybrid search (semantic + BM25 + trigram, fused with RRF and a recency lift)."""
    from lake.embedding.factory import embedder_from
    from lake.index.opened import parse_budget
    from lake.search.service import SearchService

    settings = existing_lake(lake)
    try:
        budget = parse_budget(memory_budget) if memory_budget is not None else \
            settings.search_memory_budget
    except TurnlakeError as exc:
        raise fail(exc) from None
    service = SearchService(LakeStore(settings.lake),
                            embedder=lambda: embedder_from(settings, "query"),
                            memory_budget=budget)
    if queries is not None:
        _batch_search(service, queries)
        return
    if query is None:
        raise fail(QueryError("give a QUERY or --queries FILE"))
    options: dict[str, Any] = {
        "query": query, "tenant": tenant, "user": user, "analyst": analyst, "scope": scope,
        "conversation": conversation, "roles": role, "k": k, "since": since, "until": until,
        "as_of": as_of, "half_life_days": half_life_days, "recency_weight": recency_weight,
        "time_weight": time_weight,
        "no_semantic": no_semantic, "no_lexical": no_lexical, "no_trigram": no_trigram,
        "max_per_conversation": max_per_conversation, "snippets": snippets,
        "min_relevance": min_relevance, "neighbour_weight": neighbour_weight,
        "coverage_gain": coverage_gain, "agent": agent, "app": app_name}
    try:
        request = request_from(options)
        result = service.search(request)
    except TurnlakeError as exc:
        raise fail(exc) from exc
    for warning in result.warnings:
        console.print(styled(("warning:", "yellow"), f" {warning}"))
    if as_json:
        out.print_json(json.dumps(SearchAnswer.of(result).to_json()))
        return
    agents = _agents(service.store, request.principal.tenant,
                     {h.conversation_id for h in result.hits})
    table = RichTable("#", "score", "relevance", "conversation / turn", "agent", "role", "when",
                      "text")
    for i, hit in enumerate(result.hits, start=1):
        table.add_row(str(i), f"{hit.score:.4f}", f"{hit.relevance:.2f}",
                      literal(f"{hit.conversation_id} / {hit.turn_id}"),
                      literal(agents.get(hit.conversation_id, "")),
                      literal(hit.role), f"{hit.turn_at:%Y-%m-%d %H:%M}",
                      literal(hit.text[:120]))
    out.print(table)
    for named in result.named_times:
        console.print(literal(f"read {named.phrase!r} as {named_span(named)}: turns then rank "
                              "higher (--time-weight 0 reads no time)"))
    if not result.hits and result.floor_note is None:
        # an empty table alone does not say whether there was anything to search
        tenant_id = request.principal.tenant
        known = bool(service.statuses(tenant_id))
        console.print(literal(f"no hit: no turn of tenant {tenant_id!r} matched the query"
                              if known else f"no hit: tenant {tenant_id!r} has no indexed "
                              "turns in this lake"))


def _agents(store: Any, tenant: str, conversations: set[str]) -> dict[str, str]:
    """The agent that recorded each of some conversations, from their timelines."""
    from lake.tables import Table
    from lake.timelines import conversation_filter

    if not conversations or not store.exists(Table.TIMELINES):
        return {}
    rows = store.read(Table.TIMELINES, columns=["conversation_id", "agent"],
                      filter=conversation_filter((tenant, c) for c in conversations))
    return dict(zip(rows["conversation_id"].to_pylist(), rows["agent"].to_pylist(),
                    strict=True))


def _batch_search(service: Any, path: Path) -> None:
    """Answer each line of a JSON Lines file of queries, one JSON line per query."""
    for number, line in enumerate(_query_lines(path), start=1):
        _answer_line(service, path, number, line)


def _query_lines(path: Path) -> list[str]:
    """The lines of a queries file; one that cannot be read or is not UTF-8 exits 2."""
    try:
        # JSON Lines is UTF-8 (RFC 8259); a byte-order mark is tolerated, as ingest does.
        return path.read_text(encoding="utf-8-sig").splitlines()
    except OSError as exc:
        raise fail(QueryError(f"cannot read queries file {path}: {exc}")) from exc
    except UnicodeDecodeError as exc:
        raise fail(QueryError(f"queries file {path} is not UTF-8 text: byte {exc.start} "
                              f"cannot be decoded ({exc.reason})")) from exc


def _answer_line(service: Any, path: Path, number: int, line: str) -> None:
    """Write the answer to one line of a queries file (blank lines are skipped)."""
    if not line.strip():
        return
    qid: Any = None
    try:
        options = json.loads(line)
        if not isinstance(options, dict):
            raise QueryError("each line must be a JSON object")
        qid = options.get("id", number)
        result = service.search(request_from(options))
        answer: dict[str, Any] = {"id": qid, **SearchAnswer.of(result).to_json()}
        for empty in ("warnings", "named_times"):
            if not answer[empty]:
                del answer[empty]
    except (TurnlakeError, ValueError, TypeError) as exc:
        answer = {"id": qid, "error": f"{path}:{number}: {exc}"}
    sys.stdout.write(json.dumps(answer) + "\n")


@app.command()
def catalog(
    tenant: TenantOption = None,
    user: UserOption = None,
    analyst: AnalystOption = False,
    conversation: Annotated[str | None, typer.Option(help="Conversation id.")] = None,
    ordinal: Annotated[int | None, typer.Option(help="Nth turn (1-based; -1 = last).")] = None,
    when: Annotated[str | None, typer.Option(
        help='A phrase: "yesterday", "last week", "in March 2026", "3rd turn", "the last turn".'
    )] = None,
    as_of: Annotated[str | None, typer.Option(help="Evaluate as of this time (ISO).")] = None,
    as_json: JsonOption = False,
    lake: LakeOption = None,
) -> None:
    """List a conversation's turns in order, or look turns up by position or time phrase."""
    try:
        principal = principal_from(tenant, user, analyst)
        now = parse_time(as_of, "as_of")
        cat = TurnCatalog(LakeStore(existing_lake(lake).lake))
        if when is not None:
            turns = cat.resolve(principal, when, conversation_id=conversation,
                                user_id=user, as_of=now)
        elif conversation is None:
            raise QueryError("give --conversation (optionally with --ordinal) or --when")
        elif ordinal is not None:
            turns = [cat.nth(principal, conversation, ordinal, as_of=now)]
        else:
            turns = cat.turns(principal, conversation, as_of=now)
    except TurnlakeError as exc:
        raise fail(exc) from exc
    if as_json:
        out.print_json(CatalogAnswer.model_validate(
            {"turns": [t.to_json() for t in turns]}).model_dump_json())
        return
    table = RichTable("#", "conversation / turn", "started", "user asked", "assistant answered")
    for t in turns:
        table.add_row(str(t.ordinal), literal(f"{t.conversation_id} / {t.turn_id}"),
                      f"{t.started_at:%Y-%m-%d %H:%M}", literal(t.first_user_message[:60]),
                      literal(t.last_completion[:60]))
    out.print(table)


@turn_app.command("show")
def turn_show(
    conversation: Annotated[str, typer.Argument(help="Conversation id.")],
    turn: Annotated[str, typer.Argument(help="Turn id.")],
    tenant: TenantOption = None,
    user: UserOption = None,
    analyst: AnalystOption = False,
    as_json: JsonOption = False,
    lake: LakeOption = None,
) -> None:
    """Materialize one turn from its TurnLog: messages, files, steps, citations, events."""
    try:
        principal = principal_from(tenant, user, analyst)
        shown = TurnMaterializer(LakeStore(existing_lake(lake).lake)).turn(
            principal, conversation, turn)
    except TurnlakeError as exc:
        raise fail(exc) from exc
    if as_json:
        out.print_json(json.dumps(shown.to_json(), default=str))
        return
    out.print(styled((shown.title or shown.conversation_id, "bold"),
                     f" · turn {shown.ordinal} ({shown.turn_id}) · "
                     f"{shown.started_at:%Y-%m-%d %H:%M} · {shown.writer} writer"))
    for s in shown.submissions:
        out.print(styled((f"user ({s['event_type']}):", "cyan"), f" {s['text']}"))
    out.print(styled(("assistant:", "green"), f" {shown.completion['text']}"))
    for f in shown.files:
        out.print(styled(("file", "magenta"), f" {f.ref} ({f.mime}, {f.size} bytes)"))
    for step in shown.steps:
        out.print(styled((f"step {step['name']}: {step['status']}", "dim")))
    for mention in shown.mentions:
        leads = mention.address if mention.status == "found" else mention.status
        out.print(styled(("ref", "blue" if mention.status == "found" else "yellow"),
                         f" {mention.ref} -> {leads}"), soft_wrap=True)
    if shown.addresses is not None:
        out.print(styled(("record", "dim"), f" {shown.addresses.record}"), soft_wrap=True)


@ref_app.command("resolve")
def ref_resolve(
    ref: Annotated[str, typer.Argument(help="A conv:* address (docs/record-addresses.md).")],
    out_file: Annotated[str | None, typer.Option(
        "--out", help="Where to write: a file, or an existing folder (a file keeps its name "
                      "there). Default: standard output.")] = None,
    tenant: TenantOption = None,
    user: UserOption = None,
    analyst: AnalystOption = False,
    as_of: Annotated[str | None, typer.Option(help="Evaluate as of this time (ISO).")] = None,
    lake: LakeOption = None,
) -> None:
    """Resolve an address: a record, step, search row or event as JSON, a hosted file's bytes
    (if the principal may read it and it is retained)."""
    from lake.resolver import RefResolver, ResolvedFile

    try:
        principal = principal_from(tenant, user, analyst)
        resolved = RefResolver(TurnMaterializer(LakeStore(existing_lake(lake).lake))).resolve(
            principal, ref, as_of=parse_time(as_of, "as_of"))
        if isinstance(resolved, ResolvedFile):
            data, name = resolved.data, resolved.card.name
            what = f"{resolved.card.ref} ({resolved.card.mime})"
        else:
            data = (resolved.model_dump_json(indent=2) + "\n").encode()
            name, what = "record.json", resolved.address
        if out_file is None:
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
            return
        # A str, not a Path: Path() drops the trailing '/' that says "a folder".
        place = Path(out_file)
        if out_file.endswith("/") and not place.is_dir():
            raise QueryError(f"--out {out_file}: no such folder")
        # The name comes from the validated ref path, so it has no separators or '..'.
        target = place / name if place.is_dir() else place
        try:
            target.write_bytes(data)
        except OSError as exc:
            raise QueryError(f"cannot write {target}: {exc.strerror or exc}") from exc
    except TurnlakeError as exc:
        raise fail(exc) from exc
    out.print(literal(f"wrote {len(data)} bytes of {what} to {target}"))
