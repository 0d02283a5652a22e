from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from pipeline.cli import app
from tests.factories import BASE_TIME, make_record, rich_record, write_jsonl

AS_OF = "2026-03-11T00:00:00+00:00"
FIXTURES = Path(__file__).parent / "importers" / "fixtures"


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> CliRunner:
    monkeypatch.setenv("TURNLAKE_EMBEDDING_MODEL", "hashing-64")
    monkeypatch.setenv("TURNLAKE_LAKE", str(tmp_path / "lake"))
    return CliRunner()


@pytest.fixture
def ingested(runner: CliRunner, tmp_path: Path) -> Path:
    records = [rich_record(0), make_record(1, prompt="ERR_CONNECTION_RESET during deploy"),
               make_record(2, user="u-ben", conversation="c-ben", prompt="ben's private deploy")]
    path = write_jsonl(tmp_path / "in.jsonl", [*records, "{oops"])
    result = runner.invoke(app, ["ingest", str(path)])
    assert result.exit_code == 0, result.output
    assert "accepted 3, duplicate 0, quarantined 1" in result.output
    return path


def test_ingest_strict_and_rerun(runner: CliRunner, ingested: Path) -> None:
    again = runner.invoke(app, ["ingest", str(ingested), "--strict"])
    assert again.exit_code == 1
    assert "accepted 0, duplicate 3, quarantined 1" in again.output


def test_search_json_contract(runner: CliRunner, ingested: Path) -> None:
    result = runner.invoke(app, ["search", "ERR_CONNECTION_RESET", "--tenant", "acme",
                                 "--user", "u-ana", "--as-of", AS_OF, "--json"])
    assert result.exit_code == 0, result.output
    hits = json.loads(result.stdout)["hits"]
    assert hits[0]["conversation_id"] == "c-1" and hits[0]["turn_id"] == "t-0001"
    for field in ("tenant", "user_id", "turn_at", "role", "text", "ranks", "fused", "lift",
                  "score", "relevance", "snippets"):
        assert field in hits[0]
    assert 0.5 <= hits[0]["relevance"] <= 1.0
    assert set(hits[0]["ranks"]) == {"semantic", "lexical", "trigram"}
    assert all(h["user_id"] == "u-ana" for h in hits)


def test_search_queries_file(runner: CliRunner, ingested: Path, tmp_path: Path) -> None:
    queries = tmp_path / "q.jsonl"
    queries.write_text("\n".join(json.dumps(q) for q in [
        {"id": "a", "query": "openpyxl", "tenant": "acme", "user": "u-ana", "as_of": AS_OF,
         "roles": ["anchor"], "k": 3},
        {"id": "b", "query": "deploy", "tenant": "acme", "user": "u-ana", "scope": "tenant"},
        {"id": "c", "query": "deploy", "tenant": "acme", "analyst": True, "scope": "tenant",
         "as_of": AS_OF, "max_per_conversation": 0},
    ]))
    result = runner.invoke(app, ["search", "--queries", str(queries), "--json"])
    assert result.exit_code == 0, result.output
    answers = [json.loads(line) for line in result.stdout.splitlines()]
    assert [a["id"] for a in answers] == ["a", "b", "c"]
    assert answers[0]["hits"][0]["role"] == "anchor"
    assert "may not search the whole tenant" in answers[1]["error"]
    assert {h["user_id"] for h in answers[2]["hits"]} == {"u-ana", "u-ben"}


def test_search_relevance_floor(runner: CliRunner, ingested: Path) -> None:
    base = ["search", "zqxv wpfk", "--tenant", "acme", "--user", "u-ana", "--as-of", AS_OF,
            "--json"]
    nothing = runner.invoke(app, base)
    assert nothing.exit_code == 0, nothing.output
    assert json.loads(nothing.stdout)["hits"] == []
    assert "relevance floor 0.5" in nothing.output
    nearest = runner.invoke(app, [*base, "--min-relevance", "0"])
    hits = json.loads(nearest.stdout)["hits"]
    assert hits and all(h["relevance"] < 0.5 for h in hits)
    bad = runner.invoke(app, [*base, "--min-relevance", "2"])
    assert bad.exit_code == 2 and "min_relevance" in bad.output


def test_search_without_hits_says_why(runner: CliRunner, ingested: Path) -> None:
    # an empty table alone would not tell an unknown tenant from a query that matched nothing
    nothing = runner.invoke(app, ["search", "!!!", "--tenant", "acme", "--user", "u-ana",
                                  "--as-of", AS_OF])
    assert nothing.exit_code == 0, nothing.output
    assert "no hit: no turn of tenant 'acme' matched the query" in nothing.output
    elsewhere = runner.invoke(app, ["search", "deploy", "--tenant", "nosuch", "--user", "u-ana",
                                    "--as-of", AS_OF])
    assert elsewhere.exit_code == 0, elsewhere.output
    assert "no hit: tenant 'nosuch' has no indexed turns in this lake" in elsewhere.output
    floored = runner.invoke(app, ["search", "zqxv wpfk", "--tenant", "acme", "--user", "u-ana",
                                  "--as-of", AS_OF])
    assert "relevance floor" in floored.output and "no hit:" not in floored.output


def test_search_neighbour_weight(runner: CliRunner, ingested: Path) -> None:
    base = ["search", "forecast", "--tenant", "acme", "--user", "u-ana", "--as-of", AS_OF,
            "--json", "--min-relevance", "0", "--recency-weight", "0"]
    off = json.loads(runner.invoke(app, [*base, "--neighbour-weight", "0"]).stdout)["hits"]
    on = json.loads(runner.invoke(app, base).stdout)["hits"]
    assert off and {(h["conversation_id"], h["turn_id"]) for h in on} == \
        {(h["conversation_id"], h["turn_id"]) for h in off}
    # a turn never loses from its neighbours, and in this lake some gain
    before = {(h["conversation_id"], h["turn_id"]): h["fused"] for h in off}
    assert all(h["fused"] >= before[(h["conversation_id"], h["turn_id"])] for h in on)
    assert any(h["fused"] > before[(h["conversation_id"], h["turn_id"])] for h in on)
    bad = runner.invoke(app, [*base, "--neighbour-weight", "-1"])
    assert bad.exit_code == 2 and "neighbour_weight" in bad.output


def test_search_coverage_gain(runner: CliRunner, ingested: Path) -> None:
    base = ["search", "forecast timezone", "--tenant", "acme", "--user", "u-ana", "--as-of",
            AS_OF, "--json", "--min-relevance", "0", "--recency-weight", "0",
            "--neighbour-weight", "0", "--no-trigram"]
    fixed = json.loads(runner.invoke(app, [*base, "--coverage-gain", "0"]).stdout)["hits"]
    adapted = json.loads(runner.invoke(app, base).stdout)["hits"]
    assert fixed and adapted
    # the best lexical turn holds every query word here: its arm votes twice as much
    assert {h["fused"] for h in adapted} != {h["fused"] for h in fixed}
    bad = runner.invoke(app, [*base, "--coverage-gain", "-1"])
    assert bad.exit_code == 2 and "coverage_gain" in bad.output


def test_search_reads_a_named_time(runner: CliRunner, ingested: Path, tmp_path: Path) -> None:
    base = ["search", "forecast on 10 March 2026", "--tenant", "acme", "--user", "u-ana",
            "--as-of", AS_OF, "--min-relevance", "0"]
    answer = json.loads(runner.invoke(app, [*base, "--json"]).stdout)
    assert answer["hits"] and answer["named_times"] == [{
        "phrase": "on 10 March 2026", "start": "2026-03-10T00:00:00+00:00",
        "end": "2026-03-11T00:00:00+00:00"}]
    # every hit is of that day: each gains the whole lift on top of its recency lift
    assert all(h["lift"] > 5.0 for h in answer["hits"])
    table = runner.invoke(app, base)
    assert "read 'on 10 March 2026' as 2026-03-10" in table.output
    off = json.loads(runner.invoke(app, [*base, "--json", "--time-weight", "0"]).stdout)
    assert off["named_times"] == [] and all(h["lift"] <= 2.0 for h in off["hits"])
    bad = runner.invoke(app, [*base, "--time-weight", "-1"])
    assert bad.exit_code == 2 and "time_weight" in bad.output
    queries = tmp_path / "q.jsonl"
    queries.write_text("\n".join(json.dumps(q) for q in [
        {"id": "dated", "query": "forecast in March 2026", "tenant": "acme", "user": "u-ana",
         "as_of": AS_OF},
        {"id": "plain", "query": "forecast", "tenant": "acme", "user": "u-ana", "as_of": AS_OF},
        {"id": "bad", "query": "forecast", "tenant": "acme", "user": "u-ana",
         "time_weight": "lots"}]))
    lines = [json.loads(line) for line in runner.invoke(
        app, ["search", "--queries", str(queries)]).stdout.splitlines()]
    assert lines[0]["named_times"][0]["phrase"] == "in March 2026"
    assert "named_times" not in lines[1]
    assert "q.jsonl:3" in lines[2]["error"] and "time_weight" in lines[2]["error"]


def test_search_errors_are_plain(runner: CliRunner, ingested: Path) -> None:
    result = runner.invoke(app, ["search", "x", "--tenant", "acme"])
    assert result.exit_code == 2 and "--user is required" in result.output
    result = runner.invoke(app, ["search", "x", "--tenant", "acme", "--user", "u-ana",
                                 "--since", "yesterday-ish"])
    assert result.exit_code == 2 and "not an ISO 8601 time" in result.output


def test_catalog_turn_show_and_ref_resolve(runner: CliRunner, ingested: Path,
                                           tmp_path: Path) -> None:
    cat = runner.invoke(app, ["catalog", "--tenant", "acme", "--user", "u-ana",
                              "--conversation", "c-1", "--json"])
    assert [t["turn_id"] for t in json.loads(cat.stdout)["turns"]] == ["t-0000", "t-0001"]
    last = runner.invoke(app, ["catalog", "--tenant", "acme", "--user", "u-ana",
                               "--conversation", "c-1", "--when", "the last turn", "--json"])
    assert json.loads(last.stdout)["turns"][0]["turn_id"] == "t-0001"
    shown = runner.invoke(app, ["turn", "show", "c-1", "t-0000", "--tenant", "acme",
                                "--user", "u-ana", "--json"])
    assert json.loads(shown.stdout)["files"][0]["name"] == "forecast.csv"
    target = tmp_path / "got.csv"
    ref = "conv:fi:conv_c-1.turn_t-0000.files/forecast.csv"
    ok = runner.invoke(app, ["ref", "resolve", ref, "--tenant", "acme", "--user", "u-ana",
                             "--out", str(target)])
    assert ok.exit_code == 0 and target.read_bytes() == b"month,hours\n3,12\n"
    denied = runner.invoke(app, ["ref", "resolve", ref, "--tenant", "acme", "--user", "u-ben",
                                 "--out", str(target)])
    assert denied.exit_code == 2 and "may not read" in denied.output


def test_index_status_build_and_embed(runner: CliRunner, ingested: Path,
                                      tmp_path: Path) -> None:
    more = write_jsonl(tmp_path / "more.jsonl", [make_record(7, at=BASE_TIME)])
    assert runner.invoke(app, ["ingest", str(more), "--no-index", "--no-embed"]).exit_code == 0
    status = json.loads(runner.invoke(app, ["index", "status", "--json"]).stdout)
    assert status[0]["freshness"] == "stale"
    assert status[0]["rebuild"] == "turnlake index build --tenant acme --month 2026-03"
    embedded = runner.invoke(app, ["embed", "--backfill"])
    assert "embedded 2 rows" in embedded.output
    status = json.loads(runner.invoke(app, ["index", "status", "--json"]).stdout)
    assert status[0]["freshness"] == "fresh"
    full = runner.invoke(app, ["index", "build", "--full"])
    assert "1 built" in full.output


def test_schema_and_quarantine(runner: CliRunner, ingested: Path) -> None:
    schema = json.loads(runner.invoke(app, ["schema"]).stdout)
    assert schema["title"] == "turnlake.turn.v1"
    listed = runner.invoke(app, ["quarantine"])
    assert "1 quarantined lines in all" in listed.output


def test_import_commands(runner: CliRunner) -> None:
    chatgpt = sorted((FIXTURES / "chatgpt").glob("*.json"))[0]
    result = runner.invoke(app, ["import", "chatgpt", str(chatgpt), "--tenant", "acme",
                                 "--user", "u-ana"])
    assert result.exit_code == 0, result.output
    assert re.search(r"imported \d+ turns", result.output)
    again = runner.invoke(app, ["import", "chatgpt", str(chatgpt), "--tenant", "acme",
                                "--user", "u-ana"])
    assert "imported 0 turns" in again.output
    cc = runner.invoke(app, ["import", "claude-code", str(FIXTURES / "claude_code"),
                             "--tenant", "acme", "--user", "u-ana"])
    assert cc.exit_code == 0, cc.output
    assert re.search(r"imported [1-9]\d* turns", cc.output)


def _commands() -> dict[str, Any]:
    group = get_command(app)
    commands: dict[str, Any] = {}
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        sub = getattr(command, "commands", None)
        commands.update({f"{name} {s}": c for s, c in sub.items()} if sub else {name: command})
    return dict(sorted(commands.items()))


CLI_DOC = Path(__file__).parents[2] / "docs" / "cli.md"


def _cli_sections() -> dict[str, str]:
    """docs/cli.md cut at its `### `turnlake COMMAND`` headings; "" holds the shared options."""
    text = CLI_DOC.read_text()
    parts = re.split(r"^### `turnlake ([a-z -]+)`$", text, flags=re.M)
    sections = {"": parts[0]}
    sections.update(zip(parts[1::2], parts[2::2], strict=True))
    return sections


def _long_options(command: Any) -> list[str]:
    return [name for param in command.params if type(param).__name__.endswith("Option")
            for name in param.opts if name.startswith("--")]


def _undocumented(command: str, sections: dict[str, str]) -> list[str]:
    """The command's long options that neither its section nor the shared table names."""
    return [option for option in _long_options(_commands()[command])
            if not any(re.search(rf"`{option}[` ]", sections.get(where, ""))
                       for where in (command, ""))]


@pytest.mark.parametrize("command", list(_commands()))
def test_every_command_and_option_is_in_the_cli_docs(command: str) -> None:
    sections = _cli_sections()
    assert command in sections, f"docs/cli.md has no section `turnlake {command}`"
    example = f"turnlake {command} "
    assert example in sections[command], f"docs/cli.md lacks an example of `turnlake {command}`"
    missing = _undocumented(command, sections)
    assert not missing, f"docs/cli.md's `turnlake {command}` section does not name {missing}"


def test_the_cli_docs_check_catches_a_missing_option() -> None:
    sections = _cli_sections()
    assert _undocumented("maintain", sections) == []
    sections["maintain"] = sections["maintain"].replace("`--grace`", "`--pause`")
    assert _undocumented("maintain", sections) == ["--grace"]
