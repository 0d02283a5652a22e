"""A process killed while it writes a partition's codes leaves nothing half-built in use: the
previous build stays live and answers as before, and the next build removes the leftover."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path

from lake.embedding.hashing import HashingEmbedder
from lake.index.manifest import partition_dir
from lake.index.status import partition_statuses
from lake.search.access import Principal
from lake.search.request import SearchRequest
from lake.search.service import SearchService
from lake.settings import Settings
from lake.store import LakeStore
from pipeline.index_build import build_indexes
from pipeline.jobs import run_ingest
from tests.factories import BASE_TIME, make_record, write_jsonl

ROOT = Path(__file__).resolve().parents[3]
# A build that dies (os._exit: no clean-up runs) right after the float rows of its first
# semantic index are written, before the codes and the metadata that completes the index.
_KILLED_BUILD = textwrap.dedent("""
    import os, sys
    import lake.index.semantic as semantic
    from lake.store import LakeStore
    from pipeline.index_build import build_indexes

    def dying(path, write):
        write(path.with_name(path.stem + ".tmp" + path.suffix))
        if path.name == "codes.faiss" or path.name == "semantic.json":
            os._exit(9)
        os.replace(path.with_name(path.stem + ".tmp" + path.suffix), path)

    semantic._atomic_write = dying
    build_indexes(LakeStore(sys.argv[1]), model="hashing-64", full=True)
""")


def _hits(settings: Settings) -> list[tuple[str, str, float]]:
    service = SearchService(LakeStore(settings.lake), embedder=HashingEmbedder(64))
    result = service.search(SearchRequest("deploy ingress", Principal("acme", "u-ana"),
                                          as_of=BASE_TIME + timedelta(days=1)))
    return [(h.conversation_id, h.turn_id, h.score) for h in result.hits]


def test_a_build_killed_while_writing_codes_leaves_the_live_build(
    hashing_settings: Settings, tmp_path: Path
) -> None:
    records = [make_record(turn, conversation=f"c-{turn % 3}",
                           prompt=f"deploy {word} number {turn}", answer=f"fixed {word}")
               for turn, word in enumerate(["ingress", "database", "cache"] * 4)]
    run_ingest(hashing_settings, [write_jsonl(tmp_path / "in.jsonl", records)])
    store = LakeStore(hashing_settings.lake)
    (before,) = partition_statuses(store).values()
    assert before.manifest is not None
    want = _hits(hashing_settings)
    assert want

    killed = subprocess.run([sys.executable, "-c", _KILLED_BUILD, str(hashing_settings.lake)],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert killed.returncode == 9, killed.stderr
    folder = partition_dir(store.root, before.tenant, before.month)
    leftovers = [p for p in folder.iterdir() if p.is_dir()
                 and p.name != before.manifest.build_id]
    assert leftovers, "the killed build left no folder: the crash came too early to test"
    assert not any((p / "semantic" / "semantic.json").exists() for p in leftovers)

    (after,) = partition_statuses(LakeStore(hashing_settings.lake)).values()
    assert after.manifest is not None
    assert after.manifest.build_id == before.manifest.build_id  # still the complete build
    assert _hits(hashing_settings) == want

    build_indexes(LakeStore(hashing_settings.lake), model="hashing-64", full=True)
    (rebuilt,) = partition_statuses(LakeStore(hashing_settings.lake)).values()
    assert rebuilt.manifest is not None and rebuilt.manifest.build_id != before.manifest.build_id
    assert not any(p.exists() for p in leftovers)  # the next publication removed them
    assert _hits(hashing_settings) == want
