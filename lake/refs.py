"""Canonical ``conv:*`` references: addresses of durable conversation objects (spec section 06).

A ref names an object by owner and place instead of copying it::

    conv:<ns>:conv_<conversation_id>.turn_<turn_id>.<relative path>
    conv:fi:conv_c-123.turn_t_7.files/reports/q3.pdf

``<ns>`` is one of :data:`NAMESPACES`; file refs (``fi``) always live under ``files/``. The
path grammar of the other namespaces (which object of the turn, in which edition) is
lake.addresses'; lake.resolver resolves them all.
Ids never contain ``.``, so the first two dots of the body split it unambiguously and the
path may contain dots freely. :func:`normalize_relative_path` is the single gate every
relative path passes through, here and in the file store, so a ref can never point outside
its conversation's area.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from dataclasses import dataclass
from urllib.parse import unquote

from lake.errors import RefError

NAMESPACES: frozenset[str] = frozenset({"fi", "ar", "tc", "so", "ws", "su", "ev"})
"""fi file bytes/workspace objects, ar conversation records, tc tool records, so source rows,
ws working summaries, su summary/search records, ev accepted event occurrences."""

FILES_PREFIX = "files/"
MAX_ID_CHARS = 128
MAX_PATH_CHARS = 1024
# Bytes, not characters: file systems limit a name to 255 bytes, and a 255-character
# name of non-ASCII letters would pass a character limit yet fail to be written.
MAX_SEGMENT_BYTES = 255

_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,128}")
_DRIVE_RE = re.compile(r"[A-Za-z]:")
# Cc is exactly C0 + DEL + C1; surrogates cannot be encoded as a file name; line and
# paragraph separators split log lines and headers like a newline does.
_FORBIDDEN_CATEGORIES = frozenset({"Cc", "Cs", "Zl", "Zp"})
# Bidirectional overrides make a name display differently from what it is ("gpj.exe").
_BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _show(value: str, limit: int = 80) -> str:
    """Repr of ``value`` for an error message, shortened so hostile input stays readable."""
    if len(value) <= limit:
        return repr(value)
    return repr(value[:limit]) + f"... ({len(value)} chars)"


def is_valid_id(value: object) -> bool:
    """True when ``value`` is a str of 1-128 letters, digits, ``_`` or ``-``."""
    return isinstance(value, str) and _ID_RE.fullmatch(value) is not None


def validate_id(value: str, what: str) -> str:
    """Return ``value`` if it is a valid id, else raise RefError naming ``what``."""
    if not isinstance(value, str):
        raise RefError(f"{what} must be a str, got {type(value).__name__}")
    if not value:
        raise RefError(f"{what} is empty")
    if len(value) > MAX_ID_CHARS:
        raise RefError(f"{what} is {len(value)} characters long (max {MAX_ID_CHARS})")
    if _ID_RE.fullmatch(value) is None:
        bad = next(ch for ch in value if not _ID_RE.fullmatch(ch))
        raise RefError(
            f"{what} {_show(value)} contains {bad!r}; ids allow only ASCII letters, digits, "
            "'_' and '-'"
        )
    return value


def _check_path(path: str, where: str) -> None:
    """Refuse anything in ``path`` that could escape or disguise a relative location."""
    if len(path) > MAX_PATH_CHARS:
        raise RefError(f"{where} is {len(path)} characters long (max {MAX_PATH_CHARS})")
    for ch in path:
        if ch in _BIDI_CONTROLS or unicodedata.category(ch) in _FORBIDDEN_CATEGORIES:
            raise RefError(f"{where} {_show(path)} contains forbidden character U+{ord(ch):04X}")
    if path.startswith(("/", "\\")) or _DRIVE_RE.match(path):
        raise RefError(f"{where} {_show(path)} is absolute; a relative path is required")
    if "\\" in path:
        raise RefError(f"{where} {_show(path)} contains a backslash; use '/' between segments")
    for segment in path.split("/"):
        if segment == "":
            raise RefError(f"{where} {_show(path)} has an empty segment ('//' or a trailing '/')")
        if segment in (".", ".."):
            raise RefError(f"{where} {_show(path)} has a {segment!r} segment")
        if _DRIVE_RE.match(segment):
            # Any later join of the file-relative part would make this segment absolute
            # on Windows, so it is refused wherever it appears.
            raise RefError(f"{where} {_show(path)} has a drive-letter segment {_show(segment)}")
        size = len(segment.encode("utf-8"))
        if size > MAX_SEGMENT_BYTES:
            raise RefError(
                f"{where} segment {_show(segment)} is {size} bytes in UTF-8 "
                f"(max {MAX_SEGMENT_BYTES})"
            )


def normalize_relative_path(path: str) -> str:
    """Validate a '/'-separated relative path and return it in NFC form.

    Refuses (RefError): empty paths, absolute paths (``/x``, ``C:...``, ``\\\\server``),
    backslashes, empty, ``.`` and ``..`` segments, control characters (C0, DEL, C1),
    surrogates, line/paragraph separators, bidi overrides, paths over 1024 characters,
    segments over 255 UTF-8 bytes, and percent-escapes whose single decoding would be
    dangerous (``%2e%2e``, ``%2f``, ``%5c``, ``%00`` ...). NFC makes a composed and a
    decomposed spelling of the same name one address.
    """
    if not isinstance(path, str):
        raise RefError(f"path must be a str, got {type(path).__name__}")
    return _normalized(path)


# Hosted files reuse a few names across many turns, and every name is checked character by
# character (about 10 µs): each one is checked once. A refused path is not cached.
@functools.lru_cache(maxsize=4096)
def _normalized(path: str) -> str:
    if not path:
        raise RefError("path is empty")
    # Checked before NFC as well so that huge input is refused before any work is done on it.
    if len(path) > MAX_PATH_CHARS:
        raise RefError(f"path is {len(path)} characters long (max {MAX_PATH_CHARS})")
    path = unicodedata.normalize("NFC", path)
    _check_path(path, "path")
    # Readers downstream (URLs, S3 keys, browsers) may decode once; the decoded form must
    # be as harmless as the raw one and must not gain separators.
    decoded = unquote(path, errors="replace")
    if decoded != path:
        _check_path(decoded, "percent-decoded path")
        if decoded.count("/") != path.count("/"):
            raise RefError(f"path {_show(path)} contains a percent-encoded '/'")
    return path


@dataclass(frozen=True)
class Ref:
    """A parsed, validated ``conv:*`` reference; ``str(ref)`` is its canonical text.

    Construction validates every field, so any Ref that exists formats to a ref that
    :func:`parse_ref` accepts. ``path`` is stored NFC-normalized.
    """

    namespace: str
    conversation_id: str
    turn_id: str
    path: str

    def __post_init__(self) -> None:
        """Validate the fields and store the normalized path."""
        if self.namespace not in NAMESPACES:
            raise RefError(
                f"unknown namespace {_show(str(self.namespace))}; expected one of "
                f"{', '.join(sorted(NAMESPACES))}"
            )
        validate_id(self.conversation_id, "conversation_id")
        validate_id(self.turn_id, "turn_id")
        path = normalize_relative_path(self.path)
        if self.namespace == "fi" and not path.startswith(FILES_PREFIX):
            raise RefError(f"conv:fi: path {_show(path)} must start with {FILES_PREFIX!r}")
        # Frozen dataclass: the normalized path replaces the given one exactly once, here.
        object.__setattr__(self, "path", path)

    def __str__(self) -> str:
        """The canonical ref text."""
        return f"conv:{self.namespace}:conv_{self.conversation_id}.turn_{self.turn_id}.{self.path}"

    @property
    def is_file(self) -> bool:
        """True for conv:fi: refs (file bytes and workspace objects)."""
        return self.namespace == "fi"

    @property
    def file_path(self) -> str:
        """The path relative to ``files/``; raises RefError for non-file refs."""
        if not self.is_file:
            raise RefError(f"{self} is a conv:{self.namespace}: ref, not a conv:fi: file ref")
        return self.path[len(FILES_PREFIX) :]


def _take_segment(body: str, prefix: str, what: str, text: str) -> tuple[str, str]:
    """Split ``<prefix><id>.<rest>`` off ``body``; return (validated id, rest)."""
    head, dot, rest = body.partition(".")
    if not head.startswith(prefix):
        raise RefError(f"ref {_show(text)}: expected {prefix}<{what}>, got {_show(head)}")
    if not dot:
        raise RefError(f"ref {_show(text)}: missing '.' after {_show(head)}")
    return validate_id(head[len(prefix) :], what), rest


def parse_ref(text: str) -> Ref:
    """Parse canonical ref text into a :class:`Ref`; raise RefError naming what is wrong."""
    if not isinstance(text, str):
        raise RefError(f"ref must be a str, got {type(text).__name__}")
    if not text.startswith("conv:"):
        raise RefError(f"ref {_show(text)} does not start with 'conv:'")
    namespace, colon, body = text[len("conv:") :].partition(":")
    if not colon:
        raise RefError(f"ref {_show(text)}: missing ':' after the namespace")
    if namespace not in NAMESPACES:
        raise RefError(
            f"ref {_show(text)}: unknown namespace {_show(namespace)}; expected one of "
            f"{', '.join(sorted(NAMESPACES))}"
        )
    conversation_id, body = _take_segment(body, "conv_", "conversation_id", text)
    turn_id, path = _take_segment(body, "turn_", "turn_id", text)
    if not path:
        raise RefError(f"ref {_show(text)}: the path after the turn segment is empty")
    return Ref(namespace, conversation_id, turn_id, path)


def format_ref(namespace: str, conversation_id: str, turn_id: str, path: str) -> str:
    """Validate the parts and return the canonical ref text."""
    return str(Ref(namespace, conversation_id, turn_id, path))


def file_ref(conversation_id: str, turn_id: str, path: str) -> str:
    """Canonical conv:fi: ref; ``path`` may be given with or without the leading ``files/``.

    A path that already starts with ``files/`` is taken as prefixed, so a file inside a
    folder literally named ``files`` must be passed as ``files/files/...``.
    """
    if isinstance(path, str) and not path.startswith(FILES_PREFIX):
        # Validate before prefixing so '/etc/x' is reported as absolute, not as 'files//etc/x'.
        path = FILES_PREFIX + normalize_relative_path(path)
    return format_ref("fi", conversation_id, turn_id, path)
