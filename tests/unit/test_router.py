"""The S3 dispatch table against botocore's S3 model: every operation a client can send either
reaches its own handler or answers NotImplemented, never another operation's handler."""

from __future__ import annotations

from pathlib import Path

import botocore.session
import pytest

from app.s3 import coverage
from app.s3.request import S3Request
from app.s3.router import NOT_IMPLEMENTED, SUBRESOURCES, resolve

DOC = Path(__file__).resolve().parents[2] / "docs" / "s3-operations.md"
# Same wire form as an operation Ferry serves (S3 Express's ListDirectoryBuckets is GET /).
ALIASES = {"ListDirectoryBuckets": "ListBuckets"}


def test_no_operation_reaches_another_operations_handler() -> None:
    wrong = [(name, route) for name, route, _ in coverage.statuses()
             if route not in (name, NOT_IMPLEMENTED.name) and ALIASES.get(name) != route]
    assert wrong == []


def test_every_subresource_of_the_model_is_known() -> None:
    model = botocore.session.get_session().get_service_model("s3")
    flags = {part.partition("=")[0] for name in model.operation_names
             for part in model.operation_model(name).http["requestUri"].partition("?")[2].split("&") if part}
    assert flags - SUBRESOURCES == set()


@pytest.mark.parametrize(("method", "key", "query", "expected"), [
    ("PUT", None, {"versioning": ""}, "NotImplemented"),  # was CreateBucket
    ("PUT", "k", {"renameObject": ""}, "RenameObject"),  # was PutObject of an empty body
    ("PUT", "k", {"renameObject": "", "acl": ""}, "NotImplemented"),
    ("DELETE", "k", {"annotation": ""}, "NotImplemented"),  # was DeleteObject
    ("GET", None, {"session": ""}, "NotImplemented"),  # was ListObjects
    ("GET", "k", {"partNumber": "1"}, "GetObject"),  # the handler answers NotImplemented itself
    ("PUT", "k", {"partNumber": "1", "uploadId": "u"}, "UploadPart"),
    # Operations newer botocore models send: never CreateBucket, ListObjects, ListParts or GetObject.
    ("PUT", None, {"default-storage-class": ""}, "NotImplemented"),
    ("GET", None, {"default-storage-class": ""}, "NotImplemented"),
    ("GET", "k", {"part": "", "uploadId": "u", "partNumber": "1"}, "NotImplemented"),
    ("GET", "k", {"versionId": "null", "response-content-type": "a/b"}, "GetObject"),
])
def test_subresources_select_or_refuse(method: str, key: str | None, query: dict[str, str], expected: str) -> None:
    req = S3Request(method, "b", key, query, {}, b"/", None)  # type: ignore[arg-type]
    assert resolve(req).name == expected


def test_the_operations_doc_is_up_to_date() -> None:
    assert DOC.read_text() == coverage.render(), "regenerate: python -m app.s3.coverage > docs/s3-operations.md"
