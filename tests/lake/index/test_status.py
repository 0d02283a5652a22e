"""The status cache: one tenant's view looks only at that tenant's partitions, reads its
manifests again only when the lake changed, and agrees with the whole-lake statuses."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest

import lake.index.status as status_module
from lake.errors import RefError
from lake.index.manifest import list_partitions, read_current
from lake.index.status import StatusCache, partition_statuses
from lake.location import LakeLocation
from lake.settings import Settings
from lake.store import LakeStore, Partition
from lake.tables import Table
from pipeline.index_build import build_indexes
from pipeline.jobs import run_ingest
from tests.factories import BASE_TIME, make_record, write_jsonl

NEXT_MONTH = BASE_TIME + timedelta(days=40)


def _ingest(settings: Settings, path: Path, records: list[dict[str, object]], *,
            index: bool = True) -> None:
    run_ingest(settings, [write_jsonl(path, records)], index=index)


@pytest.fixture
def lake(hashing_settings: Settings, tmp_path: Path) -> Settings:
    """Three tenants; acme and globex over two months each."""
    _ingest(hashing_settings, tmp_path / "in.jsonl", [
        make_record(0, tenant="acme", conversation="c-a1"),
        make_record(1, tenant="acme", conversation="c-a2", at=NEXT_MONTH),
        make_record(2, tenant="globex", conversation="c-g1"),
        make_record(3, tenant="globex", conversation="c-g2", at=NEXT_MONTH),
        make_record(4, tenant="initech", conversation="c-i1"),
    ])
    return hashing_settings


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[Partition]:
    """The partitions whose manifest the status module reads, in order."""
    seen: list[Partition] = []

    def counted(root: Path | str | LakeLocation, tenant: str, month: str) -> object:
        seen.append((tenant, month))
        return read_current(root, tenant, month)

    monkeypatch.setattr(status_module, "read_current", counted)
    return seen


def test_a_tenant_view_holds_what_the_whole_lake_says_of_that_tenant(lake: Settings) -> None:
    store = LakeStore(lake.lake)
    cache = StatusCache(store)
    everything = partition_statuses(store)
    assert {tenant for tenant, _ in everything} == {"acme", "globex", "initech"}
    for tenant in ("acme", "globex", "initech"):
        expected = [s for part, s in sorted(everything.items()) if part[0] == tenant]
        assert cache.of_tenant(tenant) == expected
    assert [s.month for s in cache.of_tenant("acme")] == sorted(
        m for t, m in everything if t == "acme")
    assert cache.get() == everything
    assert cache.of_tenant("nobody") == []


def test_a_tenant_view_reads_only_its_own_manifests_and_only_once(
        lake: Settings, reads: list[Partition]) -> None:
    cache = StatusCache(LakeStore(lake.lake))
    cache.of_tenant("acme")
    assert reads and {tenant for tenant, _ in reads} == {"acme"}
    reads.clear()
    cache.of_tenant("acme")
    assert reads == []  # nothing changed: nothing read


def test_another_tenants_write_rereads_only_the_searched_tenants_manifests(
        lake: Settings, reads: list[Partition], tmp_path: Path) -> None:
    store = LakeStore(lake.lake)
    cache = StatusCache(store)
    before = cache.of_tenant("acme")
    reads.clear()
    # globex records a turn; its index is not rebuilt (a writer ahead of its indexer)
    _ingest(lake, tmp_path / "globex.jsonl",
            [make_record(9, tenant="globex", conversation="c-g1", prompt="a later question")],
            index=False)
    after = cache.of_tenant("acme")
    assert reads and {tenant for tenant, _ in reads} == {"acme"}
    assert [(s.month, s.freshness, s.manifest) for s in after] == \
        [(s.month, s.freshness, s.manifest) for s in before]
    assert after[0].content_version is not None and before[0].content_version is not None
    assert after[0].content_version > before[0].content_version
    stale = {part for part, s in cache.get().items() if s.freshness == "stale"}
    assert stale == {("globex", BASE_TIME.strftime("%Y-%m"))}


def test_fresh_reads_the_statuses_again_whatever_the_check_says(
        lake: Settings, reads: list[Partition]) -> None:
    cache = StatusCache(LakeStore(lake.lake))
    cache.of_tenant("acme")
    reads.clear()
    cache.of_tenant("acme", fresh=True)
    assert sorted(reads) == sorted(
        (s.tenant, s.month) for s in cache.of_tenant("acme"))


def test_a_rebuild_is_seen_and_no_other_tenants_manifest_is_read(
        lake: Settings, reads: list[Partition], tmp_path: Path) -> None:
    store = LakeStore(lake.lake)
    cache = StatusCache(store)
    month = BASE_TIME.strftime("%Y-%m")
    _ingest(lake, tmp_path / "more.jsonl",
            [make_record(8, tenant="acme", conversation="c-a1", prompt="one more")],
            index=False)
    stale = cache.of_tenant("acme")
    assert (stale[0].month, stale[0].freshness) == (month, "stale")
    build_indexes(store, model="hashing-64", tenant="acme", month=month)
    reads.clear()  # the build read statuses of its own
    fresh = cache.of_tenant("acme")
    assert {s.freshness for s in fresh} == {"fresh"}
    assert fresh[0].manifest is not None and stale[0].manifest is not None
    assert fresh[0].manifest.build_id != stale[0].manifest.build_id
    assert ("acme", month) in reads and {tenant for tenant, _ in reads} == {"acme"}


def test_a_removed_index_leaves_the_tenant_view(lake: Settings) -> None:
    store = LakeStore(lake.lake)
    cache = StatusCache(store)
    assert [s.freshness for s in cache.of_tenant("initech")] == ["fresh"]
    month = BASE_TIME.strftime("%Y-%m")
    current = read_current(store.root, "initech", month)
    assert current is not None
    (current[0].parent / "current.json").unlink()
    assert [(s.freshness, s.manifest) for s in cache.of_tenant("initech")] == \
        [("missing", None)]


def test_an_unreadable_pointer_reads_as_missing_in_both_views(lake: Settings) -> None:
    store = LakeStore(lake.lake)
    cache = StatusCache(store)
    month = BASE_TIME.strftime("%Y-%m")
    current = read_current(store.root, "globex", month)
    assert current is not None
    (current[0].parent / "current.json").write_text("{not json")
    assert cache.of_tenant("globex")[0].freshness == "missing"
    assert cache.get()[("globex", month)].freshness == "missing"
    assert partition_statuses(store)[("globex", month)].freshness == "missing"


def test_a_tenant_view_looks_at_no_other_tenants_index(
        lake: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    store = LakeStore(lake.lake)
    cache = StatusCache(store)
    blobs = type(store.root.blobs)
    looked: list[str] = []

    def recording(real: Callable[..., object]) -> Callable[..., object]:
        def look(self: object, key: str, *args: object) -> object:
            looked.append(key)
            return real(self, key, *args)
        return look

    for name in ("stamp", "children", "exists", "read_bytes"):
        monkeypatch.setattr(blobs, name, recording(getattr(blobs, name)))
    cache.of_tenant("acme")
    cache.of_tenant("acme")
    on_indexes = [key for key in looked if key.startswith("indexes")]
    assert on_indexes and all(key.startswith("indexes/acme") for key in on_indexes)


@pytest.mark.parametrize("tenant", ["", "../acme", "acme/2026-03"])
def test_a_tenant_that_is_not_an_id_is_refused_by_name(lake: Settings, tenant: str) -> None:
    with pytest.raises(RefError, match="tenant"):
        StatusCache(LakeStore(lake.lake)).of_tenant(tenant)


def test_statuses_of_some_partitions_read_only_theirs_and_the_orphans(
        lake: Settings, reads: list[Partition]) -> None:
    store = LakeStore(lake.lake)
    everything = partition_statuses(store)
    month = BASE_TIME.strftime("%Y-%m")
    # initech's rows all go; its index stays behind (an orphan any build drops)
    store.delete(Table.CONTENT_ROWS, "tenant = 'initech'")
    reads.clear()
    some = partition_statuses(store, partitions={("acme", month)})
    assert set(some) == {("acme", month), ("initech", month)}
    acme = some[("acme", month)]
    assert (acme.freshness, acme.manifest) == (everything[("acme", month)].freshness,
                                               everything[("acme", month)].manifest)
    assert some[("initech", month)].freshness == "orphan"
    assert sorted(reads) == [("acme", month), ("initech", month)]
    assert partition_statuses(store, partitions=set()) == {
        ("initech", month): some[("initech", month)]}


def test_listing_some_partitions_looks_for_no_other_pointer(
        lake: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    store = LakeStore(lake.lake)
    everything = list_partitions(store.root)
    assert len(everything) == 5
    blobs = type(store.root.blobs)
    looked: list[str] = []
    real = blobs.exists

    def exists(self: object, key: str) -> bool:
        looked.append(key)
        return real(self, key)  # type: ignore[arg-type]

    monkeypatch.setattr(blobs, "exists", exists)
    wanted = {part for part in everything if part[0] == "globex"}
    assert list_partitions(store.root, among=wanted.__contains__) == sorted(wanted)
    assert len(looked) == 2 and all(key.startswith("indexes/globex/") for key in looked)
