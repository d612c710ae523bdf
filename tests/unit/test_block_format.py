"""The cached block's on-disk format, pinned, and what the store does with a block that does not
match it: a wrong header or an old headerless file is absent, bad bytes are dropped by the scrub."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from app.adapters.local.blockformat import DATA_OFFSET, VERSION, BlockHeader, crc32, parse
from app.adapters.local.cachestore import CacheStore
from app.services.cache.scrub import Scrub

# Format version 1. Changing the layout must change VERSION and this string; never one without the other.
GOLDEN = bytes.fromhex(
    "4652594201004000"  # magic FRYB, version 1, header length 64
    "0300000000000000"  # block index 3
    "0500000000000000"  # length 5
    "86a6103600000000"  # crc32("hello"), reserved 0
    + "ab" * 32)        # identity: the block's name


def test_header_layout_is_pinned() -> None:
    header = BlockHeader("ab" * 32, 3, 5, crc32(b"hello"))
    assert VERSION == 1 and DATA_OFFSET == 64
    assert header.pack() == GOLDEN
    assert parse(GOLDEN) == header


def test_other_versions_and_garbage_do_not_parse() -> None:
    assert parse(GOLDEN[:4] + b"\x02\x00" + GOLDEN[6:]) is None  # version 2
    assert parse(b"XXXX" + GOLDEN[4:]) is None
    assert parse(GOLDEN[:63]) is None
    assert parse(bytes(64)) is None


def fill(store: CacheStore, data: bytes, index: int = 0) -> str:
    name = hashlib.sha256(os.urandom(8)).hexdigest()
    f = store.open_fill(name, index)
    f.write(data)
    store.publish(f)
    return name


def test_a_published_block_is_header_then_bytes(tmp_path: Path) -> None:
    store = CacheStore(tmp_path)
    data = os.urandom(5000)
    name = fill(store, data, 7)
    raw = store.path(name).read_bytes()
    assert raw[DATA_OFFSET:] == data
    assert parse(raw) == BlockHeader(name, 7, 5000, crc32(data))
    assert store.has(name, 5000) and store.verify(name) is True
    assert store.delete(name) == 5000  # accounted bytes, not file bytes


def test_a_wrong_version_or_an_old_headerless_block_is_absent_and_dropped(tmp_path: Path) -> None:
    store = CacheStore(tmp_path)
    name = fill(store, b"x" * 100)
    path = store.path(name)
    raw = bytearray(path.read_bytes())
    raw[4] = 2  # format version 2
    path.write_bytes(bytes(raw))
    assert not store.has(name, 100)
    assert not path.exists()
    path.write_bytes(b"x" * 100)  # a block of an older data directory: bytes only
    assert store.size_of(name) is None and not path.exists()


def test_a_block_of_another_name_is_absent(tmp_path: Path) -> None:
    store = CacheStore(tmp_path)
    a, b = fill(store, b"a" * 10), fill(store, b"b" * 10)
    store.path(b).write_bytes(store.path(a).read_bytes())  # a's header and bytes under b's name
    assert store.has(a, 10) and not store.has(b, 10)


def test_the_scrub_drops_a_block_with_a_flipped_byte_and_keeps_the_rest(tmp_path: Path) -> None:
    store = CacheStore(tmp_path)
    good = [fill(store, os.urandom(3000)) for _ in range(5)]
    bad = fill(store, os.urandom(3000))
    path = store.path(bad)
    raw = bytearray(path.read_bytes())
    raw[DATA_OFFSET + 1234] ^= 0x01
    path.write_bytes(bytes(raw))
    assert store.has(bad, 3000)  # the header is fine: a hit would not notice; the scrub does
    scrub = Scrub(store)
    assert scrub.run(budget=1 << 40) == 1
    assert not path.exists()
    assert all(store.verify(name) for name in good)
    assert scrub.checked == 6
