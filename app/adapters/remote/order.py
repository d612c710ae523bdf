"""S3's byte order over a remote that lists in its own order (a profile without ``ordered_listing``).

SeaweedFS (measured: tests/integration/test_listing_order.py) lists its filer tree depth first:
each directory's entries by name, a directory's keys in place of its name. That is byte order
with '/' sorting below every other character, so ``r/a/b`` comes before ``r/a!``, ``r/a-c`` and
``r/a.d``, which S3 lists first. Sorting a window of that listing is not enough: a directory of a
million keys can stand between two keys S3 lists next to each other.

So the walk goes directory by directory (one delimiter listing per level, paged), where the two
orders differ in one way only: a directory ``s/`` must follow the entries named ``s`` + a
character below '/' (``s!x``, ``s-1``, ``s.txt``), which the remote lists after it. Those
directories are held on a stack until the first entry that does not start so; each held one is a
prefix of the next, so the stack is bounded by the key length. Resuming after a marker ``m``
probes the directories that byte order puts after ``m`` but the remote before it (``m[:j]/`` for
each character of ``m`` below '/', and ``m/``: SeaweedFS skips a directory named like the
marker). Every key is listed exactly once; memory is one page per level; requests are one per
directory the page passes through, plus the probes. SeaweedFS keeps a directory whose keys were
all deleted and lists it (as a prefix, and as an entry of itself without an ETag): S3 has no such
thing, so each prefix is checked to hold a key (one more request per directory) and entries
without an ETag are dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from app.domain.objects import ListPage, ObjectSummary

Entry = ObjectSummary | str  # a key, or a common prefix (it ends with the delimiter)
ListCall = Callable[[str, str | None, str | None, int], ListPage]  # prefix, delimiter, start_after, max_keys

SLASH = "/"
PAST = "\U0010ffff"  # sorts after every character a key holds: "s" + PAST is past every "s..." name
LEVEL_PAGE = 1000


def entry_name(entry: Entry) -> str:
    return entry if isinstance(entry, str) else entry.key


def remote_order(name: str) -> list[str]:
    """The remote's sort key: component by component (so '/' below every character)."""
    return name.split(SLASH)


def in_low_group(name: str, held: str) -> bool:
    """Whether ``name`` sorts before the held directory ``held`` in byte order (it starts with the
    directory's name followed by a character below '/') though the remote lists it after."""
    stem = held[:-1]
    return len(name) > len(stem) and name.startswith(stem) and name[len(stem)] < SLASH


class ByteOrderWalk:
    """The remote's keys under a prefix, in S3's byte order, from a remote that lists otherwise."""

    def __init__(self, list_call: ListCall) -> None:
        self.list_call = list_call
        self._need: Callable[[], int] = lambda: LEVEL_PAGE  # entries the reader still wants

    def _size(self) -> int:
        """How many entries to ask the remote for: what the reader still wants and one more (the
        entry that shows a held directory may follow), at least 2 and at most a page. A page of
        1,000 keys read one past is then two requests of 1,000 and 3 entries, not 2 x 1,000."""
        return max(2, min(LEVEL_PAGE, self._need() + 1))

    def page(self, prefix: str, delimiter: str | None, start_after: str | None, max_keys: int) -> ListPage:
        """One ListObjects page in byte order: up to ``max_keys`` entries after ``start_after``."""
        entries: list[Entry] = []
        self._need = lambda: max_keys + 1 - len(entries)
        for entry in self.entries(prefix, delimiter, start_after):
            entries.append(entry)
            if len(entries) > max_keys:
                break
        truncated = len(entries) > max_keys
        chosen = entries[:max_keys]
        contents = [e for e in chosen if not isinstance(e, str)]
        prefixes = [e for e in chosen if isinstance(e, str)]
        return ListPage(contents, prefixes, truncated, entry_name(chosen[-1]) if truncated and chosen else None)

    def entries(self, prefix: str, delimiter: str | None, after: str | None) -> Iterator[Entry]:
        """Keys and common prefixes after ``after`` in byte order (lazily: stop reading any time)."""
        if delimiter == SLASH:
            yield from self._level(prefix, after, False)
            return
        while True:  # no delimiter, or another one: every key, rolled up here
            for entry in self._level(prefix, after, True):
                rest = entry_name(entry)[len(prefix):]
                if delimiter and delimiter in rest:
                    common = prefix + rest[: rest.index(delimiter) + len(delimiter)]
                    if after is None or common > after:  # a prefix the marker lies in is no entry after it
                        yield common
                    after = common + PAST  # past everything the common prefix rolls up
                    break
                yield entry
            else:
                return

    def _level(self, level: str, after: str | None, descend: bool) -> Iterator[Entry]:
        """The entries of one level (the delimiter listing of ``level``) after ``after``, in byte
        order; with ``descend``, each directory's keys in its place."""
        if after is not None and not after.startswith(level):
            if after >= level:
                return  # every name of the level sorts before the marker
            after = None
        held: list[str] = []
        start = after
        if after is not None:
            rest = after[len(level):]
            if SLASH in rest:  # the marker lies in a directory of this level
                directory = level + rest[: rest.index(SLASH) + 1]
                if descend:
                    yield from self._level(directory, after, descend)
                held = self._directories_after(level, directory[:-1], include_self=False)
                start = directory[:-1] + "." + PAST  # past the names the directory follows
            else:
                held = self._directories_after(level, after, include_self=True)
        for entry in self._converted(self._remote_level(level, start), held):
            if isinstance(entry, str) and descend:
                yield from self._level(entry, None, descend)
            else:
                yield entry

    def _converted(self, listed: Iterator[Entry], held: list[str]) -> Iterator[Entry]:
        """The remote's order of one level turned into byte order (``held``: the stack of
        directories waiting for the names they follow; the innermost last)."""
        for entry in listed:
            name = entry_name(entry)
            while held and not in_low_group(name, held[-1]):
                yield held.pop()
            if isinstance(entry, str):
                held.append(entry)
            else:
                yield entry
        while held:
            yield held.pop()

    def _directories_after(self, level: str, marker: str, *, include_self: bool) -> list[str]:
        """The directories of this level that byte order puts after ``marker`` but the remote
        before it, outermost first: ``marker[:j] + '/'`` for each character below '/'."""
        candidates = [marker[:j] + SLASH for j in range(len(level), len(marker)) if marker[j] < SLASH]
        if include_self:
            candidates.append(marker + SLASH)
        return [c for c in candidates if self._holds(c)]

    def _holds(self, directory: str) -> bool:
        """Whether a key starts with ``directory`` (checked: SeaweedFS reads ``a//`` as ``a/``)."""
        return any(c.key.startswith(directory) for c in self.list_call(directory, None, None, 1).contents)

    def _remote_level(self, level: str, start: str | None) -> Iterator[Entry]:
        """The remote's delimiter listing of ``level`` after ``start``, in the remote's order."""
        while True:
            page = self.list_call(level, SLASH, start, self._size())
            # Not objects: a directory listed as its own entry, with no ETag (SeaweedFS answers so
            # for an empty directory its deleted keys left); a prefix no key is under any more.
            contents = [c for c in page.contents if c.etag.strip('"')]
            listed: list[Entry] = [*contents, *(p for p in page.common_prefixes if self._holds(p))]
            listed.sort(key=lambda e: remote_order(entry_name(e)))
            yield from listed
            if not page.is_truncated or not listed:
                return
            last = entry_name(listed[-1])
            if not last.endswith(SLASH) and self._holds(last + SLASH):
                yield last + SLASH  # SeaweedFS resumes after a name past its directory too
            start = last
