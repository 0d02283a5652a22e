"""The package's public API is exactly what lake/__init__.py lists."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys

import lake

EXPECTED = {
    "AccessDenied", "ConcurrentWriteError", "EmbeddingError", "FusionSettings", "Hit",
    "IndexUnavailable", "IndexStaleError", "LakeError", "LakeStore", "Principal", "QueryError",
    "RecordError", "Ref", "RefError", "RefExpired", "RefNotFound", "RetentionRule",
    "SearchRequest", "SearchResult", "SearchService", "Settings", "Table", "TurnCatalog",
    "TurnMaterializer", "TurnRecord", "TurnlakeError", "file_ref", "format_ref", "json_schema",
    "parse_record", "parse_ref",
}


# names the module needs for itself, not part of the API
NOT_API = {"annotations", "TYPE_CHECKING", "Any"}


def test_exported_names_are_exactly_the_public_api() -> None:
    assert sorted(lake.__all__) == sorted(EXPECTED) and len(set(lake.__all__)) == len(EXPECTED)
    assert set(dir(lake)) >= EXPECTED


def test_each_export_is_the_object_its_module_defines() -> None:
    for name in EXPECTED:
        value = getattr(lake, name)
        home = getattr(value, "__module__", "")
        assert home.startswith("lake."), f"lake.{name} comes from {home!r}"
        assert getattr(importlib.import_module(home), name) is value, name


def test_no_public_name_outside_the_api() -> None:
    for name in EXPECTED:
        getattr(lake, name)  # resolve every lazy name first
    public = {name for name, value in vars(lake).items()
              if not name.startswith("_") and not inspect.ismodule(value)}
    assert public - NOT_API == EXPECTED


def test_importing_the_library_changes_no_environment_variable() -> None:
    # polars sets its allocator's variable on import: the dependencies load first.
    code = ("import os, json, polars, deltalake, pyarrow.dataset, faiss, tantivy\n"
            "before = dict(os.environ)\n"
            "import lake, lake.store, lake.search.service, lake.projection\n"
            "print(json.dumps(dict(os.environ) == before))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "true"
