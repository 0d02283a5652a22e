"""Tests for lake.refs: canonical conv:* refs and the shared relative-path gate."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lake.errors import RefError
from lake.refs import (
    NAMESPACES,
    Ref,
    file_ref,
    format_ref,
    is_valid_id,
    normalize_relative_path,
    parse_ref,
    validate_id,
)

# ---------------------------------------------------------------- strategies

ids = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-",
    min_size=1,
    max_size=128,
)

_segment_chars = st.characters(
    exclude_categories=("Cc", "Cs", "Zl", "Zp"),
    exclude_characters="/\\%\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069",
)
segments = (
    st.text(_segment_chars, min_size=1, max_size=30)
    .map(lambda s: unicodedata.normalize("NFC", s))
    .filter(lambda s: s not in (".", "..") and not (len(s) >= 2 and s[1] == ":"))
)
paths = st.lists(segments, min_size=1, max_size=5).map("/".join)


# ---------------------------------------------------------------- round trips


@given(st.sampled_from(sorted(NAMESPACES)), ids, ids, paths)
@settings(max_examples=300, deadline=None)
def test_format_parse_format_is_identity(ns: str, cid: str, tid: str, path: str) -> None:
    if ns == "fi":
        path = "files/" + path
    text = format_ref(ns, cid, tid, path)
    ref = parse_ref(text)
    assert (ref.namespace, ref.conversation_id, ref.turn_id, ref.path) == (ns, cid, tid, path)
    assert str(ref) == text
    assert format_ref(ref.namespace, ref.conversation_id, ref.turn_id, ref.path) == text


@given(ids, ids, paths)
@settings(max_examples=200, deadline=None)
def test_file_ref_round_trip_with_and_without_prefix(cid: str, tid: str, path: str) -> None:
    text = file_ref(cid, tid, path)
    assert text == file_ref(cid, tid, "files/" + path)
    ref = parse_ref(text)
    assert ref.is_file
    assert ref.file_path == path


@given(paths)
@settings(max_examples=200, deadline=None)
def test_normalize_is_idempotent(path: str) -> None:
    once = normalize_relative_path(path)
    assert normalize_relative_path(once) == once == path


def test_canonical_example() -> None:
    text = "conv:fi:conv_c-123.turn_t_7.files/reports/q3.pdf"
    ref = parse_ref(text)
    assert ref == Ref("fi", "c-123", "t_7", "files/reports/q3.pdf")
    assert str(ref) == text
    assert ref.is_file
    assert ref.file_path == "reports/q3.pdf"
    assert file_ref("c-123", "t_7", "reports/q3.pdf") == text


@pytest.mark.parametrize(
    "text",
    [
        "conv:ev:conv_c1.turn_t1.events/3",
        "conv:ws:conv_c1.turn_t1.summary",
        "conv:ar:conv_c1.turn_t1.record.json",
        "conv:su:conv_c1.turn_t1.a.b.c",
    ],
)
def test_non_file_refs(text: str) -> None:
    ref = parse_ref(text)
    assert not ref.is_file
    assert str(ref) == text
    with pytest.raises(RefError, match="not a conv:fi: file ref"):
        _ = ref.file_path


def test_id_may_begin_with_its_own_prefix() -> None:
    ref = parse_ref("conv:tc:conv_conv_x.turn_turn_y.call/1")
    assert (ref.conversation_id, ref.turn_id) == ("conv_x", "turn_y")


@pytest.mark.parametrize(
    "path",
    ["café/résumé.pdf", "数据/报告.xlsx", "100%.txt", "a%zz", "a b/c d.txt", "...", "..a", "a.."],
)
def test_benign_paths_accepted(path: str) -> None:
    assert normalize_relative_path(path) == path


def test_nfc_normalization_unifies_spellings() -> None:
    decomposed = "cafe\u0301.txt"
    assert normalize_relative_path(decomposed) == "caf\u00e9.txt"
    assert file_ref("c", "t", decomposed) == file_ref("c", "t", "caf\u00e9.txt")


def test_limits_are_inclusive() -> None:
    assert normalize_relative_path("a" * 255)
    assert normalize_relative_path("/".join(["a" * 200] * 5) + "/" + "b" * 19)  # 1024 chars
    assert validate_id("x" * 128, "turn_id") == "x" * 128


# ---------------------------------------------------------------- refusals

HOSTILE_PATHS: list[tuple[str, str]] = [
    ("", "empty"),
    ("../etc/passwd", "'..' segment"),
    ("a/../../b", "'..' segment"),
    ("a/..", "'..' segment"),
    ("./a", "'.' segment"),
    ("a/./b", "'.' segment"),
    ("/etc/passwd", "absolute"),
    ("C:\\Windows\\x", "absolute"),
    ("c:/x", "absolute"),
    ("C:x", "absolute"),
    ("\\\\server\\share", "absolute"),
    ("\\x", "absolute"),
    ("a\\b", "backslash"),
    ("a//b", "empty segment"),
    ("a/", "empty segment"),
    ("a\x00b", "U+0000"),
    ("a\nb", "U+000A"),
    ("a\rb", "U+000D"),
    ("a\tb", "U+0009"),
    ("a\x1fb", "U+001F"),
    ("a\x7fb", "U+007F"),
    ("a\x85b", "U+0085"),
    ("a\x9fb", "U+009F"),
    ("a\u2028b", "U+2028"),
    ("a\ud800b", "U+D800"),
    ("invoice\u202efdp.exe", "U+202E"),
    ("%2e%2e/etc", "percent-decoded"),
    ("%2E%2E/etc", "percent-decoded"),
    ("a/%2e%2E", "percent-decoded"),
    ("%2e/a", "percent-decoded"),
    ("a%2fb", "percent-encoded '/'"),
    ("a%2Fb", "percent-encoded '/'"),
    ("%2fetc", "percent-decoded"),
    ("a%5cb", "percent-decoded"),
    ("a%5Cb", "percent-decoded"),
    ("a%00b", "percent-decoded"),
    ("a%0ab", "percent-decoded"),
    ("%43:/x", "percent-decoded"),
    ("a" * 256, "256 bytes"),
    ("é" * 128, "256 bytes"),
    ("a/" * 512 + "b", "1025 characters"),
]


@pytest.mark.parametrize(("path", "problem"), HOSTILE_PATHS)
def test_hostile_paths_refused(path: str, problem: str) -> None:
    with pytest.raises(RefError) as info:
        normalize_relative_path(path)
    assert problem in str(info.value)


@pytest.mark.parametrize(("path", "problem"), HOSTILE_PATHS[1:])
def test_hostile_paths_refused_inside_refs(path: str, problem: str) -> None:
    with pytest.raises(RefError):
        parse_ref(f"conv:fi:conv_c.turn_t.files/{path}")
    with pytest.raises(RefError):
        format_ref("ev", "c", "t", path)
    with pytest.raises(RefError, match="path"):
        file_ref("c", "t", path)


def test_file_ref_reports_absolute_not_empty_segment() -> None:
    with pytest.raises(RefError, match="absolute"):
        file_ref("c", "t", "/etc/passwd")


def test_long_hostile_input_is_shortened_in_message() -> None:
    with pytest.raises(RefError) as info:
        normalize_relative_path("a" * 300)
    assert len(str(info.value)) < 200


HOSTILE_REFS: list[tuple[str, str]] = [
    ("", "does not start with 'conv:'"),
    ("fi:conv_c.turn_t.files/a", "does not start with 'conv:'"),
    ("CONV:fi:conv_c.turn_t.files/a", "does not start with 'conv:'"),
    ("conv:fi", "missing ':' after the namespace"),
    ("conv:xx:conv_c.turn_t.files/a", "unknown namespace 'xx'"),
    ("conv:FI:conv_c.turn_t.files/a", "unknown namespace 'FI'"),
    ("conv::conv_c.turn_t.files/a", "unknown namespace ''"),
    ("conv:fi:c.turn_t.files/a", "expected conv_<conversation_id>, got 'c'"),
    ("conv:fi:conv_c", "missing '.' after 'conv_c'"),
    ("conv:fi:conv_.turn_t.files/a", "conversation_id is empty"),
    ("conv:fi:conv_c!d.turn_t.files/a", "conversation_id 'c!d' contains '!'"),
    ("conv:fi:conv_" + "c" * 129 + ".turn_t.files/a", "129 characters long"),
    ("conv:fi:conv_c.t.files/a", "expected turn_<turn_id>, got 't'"),
    ("conv:fi:conv_c.turn_t", "missing '.' after 'turn_t'"),
    ("conv:fi:conv_c.turn_.files/a", "turn_id is empty"),
    ("conv:fi:conv_c.turn_é.files/a", "turn_id 'é' contains 'é'"),
    ("conv:fi:conv_c.turn_t.", "path after the turn segment is empty"),
    ("conv:fi:conv_c.turn_t.report.pdf", "must start with 'files/'"),
    ("conv:fi:conv_c.turn_t.files", "must start with 'files/'"),
    ("conv:fi:conv_c.turn_t.files/", "empty segment"),
    ("conv:fi:conv_c.turn_t.files/../../x", "'..' segment"),
    ("conv:ev:conv_c.turn_t./events/3", "absolute"),
    ("conv:fi:conv_c.turn_t.files/a\n", "U+000A"),
    (" conv:fi:conv_c.turn_t.files/a", "does not start with 'conv:'"),
]


@pytest.mark.parametrize(("text", "problem"), HOSTILE_REFS)
def test_hostile_refs_refused(text: str, problem: str) -> None:
    with pytest.raises(RefError) as info:
        parse_ref(text)
    assert problem in str(info.value)


def test_non_str_inputs_refused() -> None:
    with pytest.raises(RefError, match="must be a str"):
        parse_ref(b"conv:fi:conv_c.turn_t.files/a")  # type: ignore[arg-type]
    with pytest.raises(RefError, match="must be a str"):
        normalize_relative_path(None)  # type: ignore[arg-type]
    with pytest.raises(RefError, match="turn_id must be a str"):
        validate_id(7, "turn_id")  # type: ignore[arg-type]


def test_direct_construction_is_validated() -> None:
    with pytest.raises(RefError, match="unknown namespace 'zz'"):
        Ref("zz", "c", "t", "a")
    with pytest.raises(RefError, match="conversation_id"):
        Ref("ar", "c.d", "t", "a")
    with pytest.raises(RefError, match="must start with 'files/'"):
        Ref("fi", "c", "t", "a")


@pytest.mark.parametrize("value", ["", "a.b", "a b", "a/b", "é", "x" * 129, "a\n"])
def test_invalid_ids(value: str) -> None:
    assert not is_valid_id(value)
    with pytest.raises(RefError, match="session_id"):
        validate_id(value, "session_id")


@given(ids)
def test_valid_ids(value: str) -> None:
    assert is_valid_id(value)
    assert validate_id(value, "id") == value


def test_is_valid_id_rejects_non_str() -> None:
    assert not is_valid_id(None)
    assert not is_valid_id(12)


def test_namespaces() -> None:
    assert frozenset({"fi", "ar", "tc", "so", "ws", "su", "ev"}) == NAMESPACES


@pytest.mark.parametrize("path", ["a/C:/x", "a/c:x", "files/D:"])
def test_drive_letter_segments_refused_anywhere(path: str) -> None:
    with pytest.raises(RefError, match="drive-letter segment"):
        normalize_relative_path(path)


def test_colon_elsewhere_is_fine() -> None:
    assert normalize_relative_path("notes/ab:c.txt") == "notes/ab:c.txt"
