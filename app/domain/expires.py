"""The ``Expires`` header a remote will store. AWS S3 keeps any string (its SDKs read an
unparseable value back as ``ExpiresString``); SeaweedFS (measured, 4.48) refuses anything but an
HTTP date (``Wed, 21 Oct 2015 07:28:00 GMT``: two-digit day, GMT; names in any case, the weekday
not checked) with 400 MalformedDate. A write-back write is acknowledged before the remote sees it,
so such a value is refused at the door with the remote's own answer."""

from __future__ import annotations

import re
from datetime import datetime

from app.domain.errors import S3Error
from app.domain.profiles import RemoteProfile

_HTTP_DATE = re.compile(r"[A-Za-z]{3}, \d{2} [A-Za-z]{3} \d{4} \d{2}:\d{2}:\d{2} GMT")


def validate_expires(content_headers: dict[str, str], profile: RemoteProfile) -> None:
    value = content_headers.get("expires")
    if value is None or not profile.http_date_expires or not value.strip():
        return
    if not _is_http_date(value.strip()):
        raise S3Error("MalformedDate")


def _is_http_date(value: str) -> bool:
    if not _HTTP_DATE.fullmatch(value) or int(value[-6:-4]) > 59:  # Go's parse refuses second 60
        return False
    try:
        datetime.strptime(value, "%a, %d %b %Y %H:%M:%S GMT")  # a format check only
    except ValueError:
        return False
    return True
