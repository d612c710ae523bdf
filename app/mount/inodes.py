"""Inode numbers for the mount's paths. A path is (bucket, key): the root is ('', ''), a
bucket ('b', ''), a directory ('b', 'a/b/') and a file ('b', 'a/b/c'). Keys are never file paths
of this machine: the mount turns them into names the kernel shows, nothing else."""

from __future__ import annotations

from app.mount import protocol as fuse

Where = tuple[str, str]
ROOT: Where = ("", "")


def child(parent: Where, name: str, *, directory: bool) -> Where:
    bucket, prefix = parent
    if not bucket:
        return (name, "")
    return (bucket, f"{prefix}{name}/" if directory else f"{prefix}{name}")


def parent_of(where: Where) -> Where:
    bucket, key = where
    if not key:
        return ROOT
    trimmed = key[:-1] if key.endswith("/") else key
    cut = trimmed.rfind("/")
    return (bucket, trimmed[:cut + 1] if cut >= 0 else "")


def is_dir(where: Where) -> bool:
    return not where[1] or where[1].endswith("/")


class Inodes:
    """Two maps kept in step. Numbers are never reused while mounted (the kernel may still
    hold an old one); a renamed file keeps its number under its new path."""

    def __init__(self) -> None:
        self._paths: dict[int, Where] = {fuse.ROOT_INODE: ROOT}
        self._numbers: dict[Where, int] = {ROOT: fuse.ROOT_INODE}
        self._next = fuse.ROOT_INODE + 1

    def number(self, where: Where) -> int:
        found = self._numbers.get(where)
        if found is None:
            found = self._next
            self._next += 1
            self._numbers[where] = found
            self._paths[found] = where
        return found

    def where(self, inode: int) -> Where | None:
        return self._paths.get(inode)

    def move(self, old: Where, new: Where) -> None:
        inode = self._numbers.pop(old, None)
        if inode is None:
            return
        stale = self._numbers.pop(new, None)
        if stale is not None:
            self._paths.pop(stale, None)
        self._numbers[new] = inode
        self._paths[inode] = new

    def drop(self, where: Where) -> None:
        inode = self._numbers.pop(where, None)
        if inode is not None:
            self._paths.pop(inode, None)
