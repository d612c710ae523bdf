"""Conditional request evaluation (RFC 7232 as S3 applies it to GET/HEAD and copy sources)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from email.utils import parsedate_to_datetime

from app.domain.errors import S3Error


def _etags(value: str) -> list[str]:
    return [v.strip().strip('"') for v in value.split(",") if v.strip()]


def _parse_http_date(value: str) -> datetime | None:
    try:
        parsed = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return parsed


def check_conditions(
    etag: str,
    last_modified: datetime,
    if_match: str | None = None,
    if_none_match: str | None = None,
    if_modified_since: str | None = None,
    if_unmodified_since: str | None = None,
    *,
    copy_source: bool = False,
) -> None:
    """Raise PreconditionFailed (412) or NotModified (304) the way S3 does.

    S3's precedence: If-Match true makes If-Unmodified-Since irrelevant; If-None-Match false
    gives 304 even when If-Modified-Since would be true. For copy sources every failure is 412.
    """
    bare = etag.strip('"')
    lm = last_modified.replace(microsecond=0)
    if if_match is not None:
        tags = _etags(if_match)
        if "*" not in tags and bare not in tags:
            raise S3Error("PreconditionFailed", Condition="If-Match")
    elif if_unmodified_since is not None:
        when = _parse_http_date(if_unmodified_since)
        if when is not None and lm > when:
            raise S3Error("PreconditionFailed", Condition="If-Unmodified-Since")
    if if_none_match is not None:
        tags = _etags(if_none_match)
        if "*" in tags or bare in tags:
            if copy_source:
                raise S3Error("PreconditionFailed", Condition="If-None-Match")
            raise S3Error("NotModified", headers={"ETag": f'"{bare}"'})
    elif if_modified_since is not None:
        when = _parse_http_date(if_modified_since)
        if when is not None and lm <= when:
            if copy_source:
                raise S3Error("PreconditionFailed", Condition="If-Modified-Since")
            raise S3Error("NotModified", headers={"ETag": f'"{bare}"'})


@dataclass(frozen=True, slots=True)
class Conditions:
    """A GET's conditional headers as a value, so a service can judge them as soon as it knows
    the version (e.g. from the journal) instead of after opening the object."""

    if_match: str | None = None
    if_none_match: str | None = None
    if_modified_since: str | None = None
    if_unmodified_since: str | None = None

    def check(self, etag: str, last_modified: datetime) -> None:
        if self is NO_CONDITIONS:
            return  # the usual GET: nothing to judge (this skips a datetime copy per check)
        check_conditions(etag, last_modified, self.if_match, self.if_none_match,
                         self.if_modified_since, self.if_unmodified_since)

    @property
    def any(self) -> bool:
        return any((self.if_match, self.if_none_match, self.if_modified_since, self.if_unmodified_since))


NO_CONDITIONS = Conditions()


@dataclass(frozen=True, slots=True)
class PreviousWrite:
    """What the last conditional write of a key left when its claim was released: its ETag and
    the client's SDK invocation id (``amz-sdk-invocation-id``, the same on every retry)."""

    invocation: str | None
    etag: str | None
    done_at: float


@dataclass(frozen=True, slots=True)
class WriteConditions:
    """A write's preconditions on the key's current version (PutObject, CopyObject's
    destination, CompleteMultipartUpload): ``If-Match: <etag>`` and ``If-None-Match: *``."""

    if_match: str | None = None
    if_none_match: str | None = None
    invocation: str | None = None  # the SDK's invocation id: recognises a retry of this request

    @classmethod
    def parse(cls, if_match: str | None, if_none_match: str | None,
              invocation: str | None = None) -> WriteConditions:
        """S3's rules: If-None-Match takes only ``*``; an empty header is no condition."""
        match = if_match.strip() if if_match and if_match.strip() else None
        none_match = if_none_match.strip() if if_none_match and if_none_match.strip() else None
        if none_match is not None and none_match != "*":
            raise S3Error("NotImplemented", "A header you provided implies functionality that is not "
                          "implemented", Header="If-None-Match")
        return cls(match, none_match, invocation.strip()[:128] if invocation else None)

    @property
    def any(self) -> bool:
        return self.if_match is not None or self.if_none_match is not None

    def check(self, current_etag: str | None) -> None:
        """Judge the conditions against the key's newest version (None: there is none)."""
        if self.if_none_match is not None and current_etag is not None:
            raise S3Error("PreconditionFailed", Condition="If-None-Match")
        if self.if_match is not None:
            if current_etag is None:
                raise S3Error("NoSuchKey")
            tags = _etags(self.if_match)
            if "*" not in tags and current_etag.strip('"') not in tags:
                raise S3Error("PreconditionFailed", Condition="If-Match")

    def retried(self, previous: PreviousWrite | None, current_etag: str | None, etag: str) -> bool:
        """Whether this request is the retry of the conditional write that produced the key's
        current version (its first answer was lost): same invocation id, same body, still newest."""
        return (self.invocation is not None and previous is not None and previous.invocation == self.invocation
                and previous.etag is not None and previous.etag == current_etag == etag)


NO_WRITE_CONDITIONS = WriteConditions()
