"""Which S3 operations Ferry serves, derived from the router itself so the table cannot drift.

Each operation of botocore's S3 model is turned into the request a client would send (method,
target, the query flags and required query/header members of its HTTP binding) and resolved
through ``router.resolve``. ``python -m app.s3.coverage`` prints docs/s3-operations.md;
tests/unit/test_router.py checks the committed file against it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from app.domain.errors import ERROR_TABLE
from app.s3.headers import FAMILIES, HeaderFamily
from app.s3.request import S3Request
from app.s3.router import NOT_IMPLEMENTED, resolve

ERROR_STATUS = {code: status for code, (status, _) in ERROR_TABLE.items()}

# Operations that share a wire form with one Ferry serves (S3 Express endpoints) or that Ferry
# serves in part: what the table says beside "supported".
NOTES = {
    "PutBucketAcl": "the canned `private` ACL only (nothing changes); others `400 AccessControlListNotSupported`",
    "PutObjectAcl": "the canned `private` ACL only (nothing changes); others `400 AccessControlListNotSupported`",
    "GetBucketAcl": "always the owner's `FULL_CONTROL`",
    "GetObjectAcl": "always the owner's `FULL_CONTROL`",
    "GetBucketVersioning": "always unversioned",
    "ListObjectVersions": "every object is its `null` version",
    "ListDirectoryBuckets": "S3 Express; on the wire it is ListBuckets, which answers",
    "GetObject": "`partNumber`: a single-part object's part 1 (`206`), others `416 InvalidPartNumber`; "
                 "a multipart object's parts `501 NotImplemented`",
    "HeadObject": "`partNumber`: as GetObject",
    "RenameObject": "S3 Express's wire form, on any bucket; within one bucket, one journal commit (atomic for every "
                    "reader); write-back keys only, write-through `501 NotImplemented`; `x-amz-client-token` is "
                    "not kept (a retry whose answer was lost is recognised from the journal)",
}



async def _no_body() -> dict[str, Any]:
    """The receive of a request made up to be routed, never read."""
    raise RuntimeError("a coverage probe has no body")


def operation_request(op: Any) -> S3Request:
    """The request a client sends for botocore operation model ``op`` (values are placeholders)."""
    path, _, flags = op.http["requestUri"].partition("?")
    target = "object" if "{Key+}" in path else ("bucket" if "{Bucket}" in path else "service")
    query = {name: value for name, _, value in (flag.partition("=") for flag in flags.split("&") if flag)}
    headers: dict[str, str] = {}
    shape = op.input_shape
    for name in (shape.required_members if shape is not None else []):
        member = shape.members[name]
        where, wire = member.serialization.get("location"), member.serialization.get("name", name)
        if where == "querystring":
            query[wire] = "1"
        elif where == "header":
            headers[wire.lower()] = "x"
    return S3Request(op.http["method"], "bucket" if target != "service" else None,
                     "key" if target == "object" else None, query, headers, b"/", _no_body)


def statuses() -> Iterator[tuple[str, str, str]]:
    """(operation, route it resolves to, note) for every operation of botocore's S3 model."""
    import botocore.session

    model = botocore.session.get_session().get_service_model("s3")
    for name in sorted(model.operation_names):
        route = resolve(operation_request(model.operation_model(name)))
        yield name, route.name, NOTES.get(name, "")


def family_status(family: HeaderFamily) -> str:
    """What the table says of a header family, from the same record the request layer enforces."""
    error = f"`{ERROR_STATUS.get(family.error or '', '')} {family.error}`".replace("` ", "`") if family.error else ""
    if family.status == "supported":
        return "supported"
    if family.status == "refused":
        return f"refused: {error}"
    if family.values:
        taken = ", ".join(f"`{v}`" if v else "empty" for v in family.values)
        return f"accepted as a no-op: {taken}; other values refused: {error}"
    return "accepted as a no-op"


def _where(family: HeaderFamily) -> str:
    return f" (at {', '.join(family.operations)})" if family.operations else ""


def render_families() -> str:
    rows = [f"| {f.name} | {', '.join(f'`{h}`' for h in f.headers)} | {family_status(f)}{_where(f)} | {f.note} |"
            for f in FAMILIES]
    return ("## Header families\n\n"
            "Generated from `app/s3/headers.py`, the table the request layer enforces before any "
            "handler runs; a family limited to some operations says so, and a header is judged by the "
            "first row naming it for the operation. `tests/integration/test_header_families.py` sends "
            "one request per family through a gateway and checks the answer stated here.\n\n"
            "| family | headers | status | notes |\n|---|---|---|---|\n" + "\n".join(rows) + "\n")


def render() -> str:
    rows = []
    for name, route, note in statuses():
        if route == NOT_IMPLEMENTED.name:
            status = "refused: `501 NotImplemented`"
        elif route == name:
            status = "supported"
        else:
            status = f"answered as {route}"
        rows.append(f"| {name} | {status} | {note} |")
    served = sum(1 for row in rows if "| supported |" in row)
    return (
        "# S3 operations\n\n"
        "Generated by `python -m app.s3.coverage` from the router and botocore's S3 model; "
        "`tests/unit/test_router.py` fails when it is out of date. Headers, payloads and errors: "
        "[s3-compatibility.md](s3-compatibility.md).\n\n"
        f"{served} of {len(rows)} operations are served.\n\n"
        "| operation | status | notes |\n|---|---|---|\n" + "\n".join(rows) + "\n\n" + render_families()
    )


if __name__ == "__main__":
    print(render(), end="")
