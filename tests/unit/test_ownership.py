"""Rendezvous hashing (app/domain/ownership.py): balanced, stable, minimal movement."""

from __future__ import annotations

from collections import Counter

from app.domain.ownership import block_key, owner

NODES = ["node-a", "node-b", "node-c"]
BLOCKS = [block_key("bucket", f"data/shard-{i // 8:05d}.tar", i % 8) for i in range(30_000)]


def test_every_node_gets_about_its_share() -> None:
    counts = Counter(owner(b, NODES) for b in BLOCKS)
    assert set(counts) == set(NODES)
    for n in NODES:
        assert abs(counts[n] - len(BLOCKS) / 3) < 0.03 * len(BLOCKS), counts


def test_the_answer_does_not_depend_on_the_order_of_nodes() -> None:
    assert all(owner(b, NODES) == owner(b, list(reversed(NODES))) for b in BLOCKS[:2000])


def test_only_the_lost_nodes_blocks_move_when_a_node_leaves() -> None:
    before = {b: owner(b, NODES) for b in BLOCKS}
    after = {b: owner(b, ["node-a", "node-b"]) for b in BLOCKS}
    moved = [b for b in BLOCKS if before[b] != after[b]]
    assert moved and all(before[b] == "node-c" for b in moved)
    assert len(moved) == sum(1 for b in BLOCKS if before[b] == "node-c")
    # ... and they spread over the survivors.
    spread = Counter(after[b] for b in moved)
    assert min(spread.values()) > 0.4 * len(moved)


def test_a_joining_node_takes_blocks_only_for_itself() -> None:
    before = {b: owner(b, NODES) for b in BLOCKS}
    grown = [*NODES, "node-d"]
    moved = [b for b in BLOCKS if owner(b, grown) != before[b]]
    assert all(owner(b, grown) == "node-d" for b in moved)
    assert abs(len(moved) - len(BLOCKS) / 4) < 0.03 * len(BLOCKS)


def test_no_nodes_no_owner_and_one_node_owns_everything() -> None:
    assert owner(BLOCKS[0], []) is None
    assert {owner(b, ["solo"]) for b in BLOCKS[:100]} == {"solo"}


def test_blocks_of_one_object_spread_over_the_nodes() -> None:
    owners = {owner(block_key("b", "one-big-object", i), NODES) for i in range(64)}
    assert owners == set(NODES)
