"""Hostile object keys: each one either round-trips byte-exactly (put, get, head, list, on the
gateway and on the remote) or is refused with an S3 XML error (4xx), never a 500 or a hang; and
no key ever touches the filesystem outside the gateway's data directory.

What SeaweedFS (the reference remote) does with such keys, measured, and what the gateway makes
of it (see ``app/domain/names.py``):

* ``a//b``, ``/leading`` and ``a\\b`` are silently stored as ``a/b``, ``leading`` and ``a/b``:
  a GET of one would return another object, so the gateway refuses them (InvalidArgument).
* ``.`` / ``..`` path segments are refused by SeaweedFS with a bare 400; the gateway refuses them
  first, with a message (InvalidArgument).
* A key ending in ``/`` is a folder: SeaweedFS keeps the key but drops the bytes, so only empty
  bodies are accepted for such keys (InvalidArgument otherwise).
* A path segment longer than 255 bytes is refused by SeaweedFS (KeyTooLongError, a clean 400)
  even though S3 allows 1024-byte keys: long keys round-trip when split into segments.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
from http.client import HTTPConnection
from pathlib import Path
from typing import Any

import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from tests.support.gateway import ACCESS_KEY, SECRET_KEY, GatewayProcess, remote_client

pytestmark = pytest.mark.timeout(120)

SEGMENTED_1024 = "/".join(["s" * 200] * 5) + "/" + "e" * 19  # 1024 bytes, segments of <= 255
assert len(SEGMENTED_1024.encode()) == 1024

# key -> None (round-trips) or the S3 error code the PUT gets.
HOSTILE: dict[str, str | None] = {
    "..": "InvalidArgument",
    ".": "InvalidArgument",
    "../../etc/passwd": "InvalidArgument",
    "a/../b": "InvalidArgument",
    "a/./b": "InvalidArgument",
    "x/..": "InvalidArgument",
    "..\\..\\windows": "InvalidArgument",
    "a\\b": "InvalidArgument",
    "a//b": "InvalidArgument",
    "/leading": "InvalidArgument",
    "//": "InvalidArgument",
    "a\x00b": "InvalidArgument",
    "\x00": "InvalidArgument",
    SEGMENTED_1024: None,
    SEGMENTED_1024 + "x": "KeyTooLongError",
    "é" * 513: "KeyTooLongError",  # 1026 bytes in 513 characters
    "k" * 256: "KeyTooLongError",  # SeaweedFS: one path segment is at most 255 bytes
    "k" * 255: None,
    "%2F": None,
    "a%2Fb": None,
    "%2e%2e/x": None,
    "%": None,
    "%zz": None,
    "...": None,
    "..a": None,
    ".hidden": None,
    "dir/": None,  # folder marker, empty body
    "emoji-😀🎉": None,
    "rtl-\u05e9\u05dc\u05d5\u05dd-\u0645\u0631\u062d\u0628\u0627": None,
    "rtl-override-\u202egnp.exe": None,
    "combining-e\u0301-vs-\u00e9": None,
    "zero\u200bwidth": None,
    "bom\ufeff": None,
    "with space": None,
    " ": None,
    "trailing space ": None,
    "a+b": None,
    "q?x=1&y=2": None,
    "h#frag": None,
    "amp&ersand": None,
    "semi;colon:colon": None,
    "new\nline": None,
    "tab\tx": None,
    "cr\rx": None,
    "ctl-\x01\x1f\x7f": None,
    "xml-<tag>&amp;\"'": None,
    "~tilde": None,
    "*star*": None,
    "back`tick": None,
    "nbsp\u00a0x": None,
    "line\u2028sep": None,
    "last-plane-\U0010fffd": None,
}

BAD_STATUS = {"InvalidArgument": 400, "KeyTooLongError": 400}


def body_for(key: str) -> bytes:
    return b"" if key.endswith("/") else key.encode("utf-8") + b"|body"


@pytest.fixture(scope="module")
def sandbox(gateway: GatewayProcess, gateway_tls: GatewayProcess) -> dict[str, Any]:
    """Snapshot of what lies around the gateways' data dirs before any hostile key is sent."""
    snapshot: dict[str, Any] = {}
    for gw in (gateway, gateway_tls):
        parent = gw.data_dir.resolve().parent
        snapshot[str(parent)] = set(os.listdir(parent))
        snapshot[str(parent.parent)] = set(os.listdir(parent.parent))
    snapshot["cwd"] = set(os.listdir(os.getcwd()))
    return snapshot


def ids(key: str) -> str:
    return f"{ascii(key)[1:-1][:32]}-{len(key.encode())}"


@pytest.mark.parametrize("key", list(HOSTILE), ids=[ids(k) for k in HOSTILE])
def test_hostile_key(s3: Any, bucket: str, seaweed: Any, sandbox: dict[str, Any], key: str) -> None:
    expected = HOSTILE[key]
    data = body_for(key)
    if expected is not None:
        with pytest.raises(ClientError) as info:
            s3.put_object(Bucket=bucket, Key=key, Body=data)
        resp = info.value.response
        assert resp["ResponseMetadata"]["HTTPStatusCode"] == BAD_STATUS[expected]
        assert resp["Error"]["Code"] == expected  # parsed from the XML body: a real S3 error
        # Refused by the gateway itself: every operation on the key is. (A key only the remote
        # refuses is merely absent: GET says so, DELETE of nothing succeeds.)
        by_gateway = expected == "InvalidArgument" or len(key.encode()) > 1024
        for call in (s3.get_object, s3.delete_object) if by_gateway else (s3.get_object,):
            with pytest.raises(ClientError) as info:
                call(Bucket=bucket, Key=key)
            status = info.value.response["ResponseMetadata"]["HTTPStatusCode"]
            code = info.value.response["Error"]["Code"]
            assert 400 <= status < 500 and code in (expected, "NoSuchKey"), (status, code)
        assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0
        assert remote_client(seaweed).list_objects_v2(Bucket=bucket)["KeyCount"] == 0
        return

    put = s3.put_object(Bucket=bucket, Key=key, Body=data, Metadata={"k": "v"})
    got = s3.get_object(Bucket=bucket, Key=key)
    assert got["Body"].read() == data
    assert got["ETag"] == put["ETag"]
    assert s3.head_object(Bucket=bucket, Key=key)["ContentLength"] == len(data)
    listed = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=key)["Contents"]]
    assert listed == [key]
    remote = [o["Key"] for o in remote_client(seaweed).list_objects_v2(Bucket=bucket).get("Contents", [])]
    assert remote == [key]  # stored under exactly this name on the remote
    if not key.endswith("/"):  # SeaweedFS cannot use a folder as a copy source (NoSuchKey)
        s3.copy_object(Bucket=bucket, Key="c/" + key[:900], CopySource={"Bucket": bucket, "Key": key})
        assert s3.get_object(Bucket=bucket, Key="c/" + key[:900])["Body"].read() == data
    if re.search("[\x00-\x08\x0b\x0c\x0e-\x1f]", key):
        # XML 1.0 cannot carry these characters: a DeleteObjects body naming the key is malformed.
        with pytest.raises(ClientError) as info:
            s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": key}]})
        assert info.value.response["Error"]["Code"] == "MalformedXML"
        s3.delete_object(Bucket=bucket, Key=key)
    else:
        deleted = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": key}]})
        assert [d["Key"] for d in deleted["Deleted"]] == [key]
    with pytest.raises(ClientError) as info:
        s3.head_object(Bucket=bucket, Key=key)
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404


def test_folder_marker_must_be_empty(s3: Any, bucket: str) -> None:
    with pytest.raises(ClientError) as info:
        s3.put_object(Bucket=bucket, Key="folder/", Body=b"bytes the remote would drop")
    assert info.value.response["Error"]["Code"] == "InvalidArgument"
    s3.put_object(Bucket=bucket, Key="src", Body=b"not empty")
    with pytest.raises(ClientError) as info:
        s3.copy_object(Bucket=bucket, Key="folder/", CopySource={"Bucket": bucket, "Key": "src"})
    assert info.value.response["Error"]["Code"] == "InvalidArgument"
    s3.put_object(Bucket=bucket, Key="folder/", Body=b"")
    assert s3.get_object(Bucket=bucket, Key="folder/")["ContentLength"] == 0


def test_hostile_keys_in_delete_objects(s3: Any, bucket: str) -> None:
    s3.put_object(Bucket=bucket, Key="fine", Body=b"x")
    objects = [{"Key": "../../etc/passwd"}, {"Key": "a//b"}, {"Key": "fine"}]
    result = s3.delete_objects(Bucket=bucket, Delete={"Objects": objects})
    assert [d["Key"] for d in result.get("Deleted", [])] == ["fine"]
    assert sorted((e["Key"], e["Code"]) for e in result["Errors"]) == [
        ("../../etc/passwd", "InvalidArgument"), ("a//b", "InvalidArgument")]


RAW_PATHS = [
    "/{bucket}/../../../../etc/passwd",
    "/{bucket}/%2e%2e/%2e%2e/etc/passwd",
    "/{bucket}/%2E%2E%2F%2E%2E%2Fetc%2Fpasswd",
    "/{bucket}/..%5c..%5cwindows",
    "/{bucket}//double",
    "/{bucket}/%00",
    "/{bucket}/%ff%fe",
    "/../{bucket}/k",
    "/%2e%2e/{bucket}/k",
    "/./{bucket}",
    "/..",
]


@pytest.mark.parametrize("template", RAW_PATHS)
@pytest.mark.parametrize("method", ["GET", "PUT", "HEAD", "DELETE"])
def test_raw_traversal_paths(gateway: GatewayProcess, bucket: str, sandbox: dict[str, Any], template: str,
                             method: str) -> None:
    """Paths no HTTP library would send unnormalised: a 4xx S3 error, never a 2xx or a 500."""
    target = template.format(bucket=bucket)
    body = b"payload" if method == "PUT" else b""
    headers = _sign(gateway, method, target, body)
    conn = HTTPConnection("127.0.0.1", gateway.port, timeout=10)
    try:
        conn.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
        for name, value in headers.items():
            conn.putheader(name, value)
        conn.endheaders()
        if body:
            conn.send(body)
        resp = conn.getresponse()
        content = resp.read()
    finally:
        conn.close()
    assert 400 <= resp.status < 500, (resp.status, content)
    if method != "HEAD":
        assert re.search(rb"<Error><Code>[A-Za-z]+</Code>", content), content


def test_nothing_escaped_the_data_dir(gateway: GatewayProcess, gateway_tls: GatewayProcess,
                                      sandbox: dict[str, Any]) -> None:
    """Runs last in this module: the hostile keys above left no trace outside the data dirs."""
    for gw in (gateway, gateway_tls):
        root = gw.data_dir.resolve()
        entries = set(os.listdir(root))
        assert entries <= {"tmp", "blobs", "gateway.log", "ferry.db", "ferry.db-wal", "ferry.db-shm",
                           "ferry.db-journal", "metrics", "cache", "ferry.lock", "ferry.dirid", "local"}, entries
        # metrics: prometheus multiprocess files; ferry.lock/ferry.dirid: the data dir's owner lock and id;
        # local: the local read socket (app/server/local_reads.py) and the lock of the process serving it
        if (root / "local").exists():
            assert set(os.listdir(root / "local")) <= {"ferry.sock", "ferry.lock"}
        assert {"tmp", "blobs"} <= entries
        cache = root / "cache"
        if cache.exists():  # the read cache: block files named by sha256, never by a key
            assert set(os.listdir(cache)) <= {"blocks", "tmp", "locks", "retired"}
            retired = cache / "retired"  # deleted blocks a reader may still reach: same names, flat
            if retired.exists():
                assert all(re.fullmatch(r"[0-9a-f]{64}", f) for f in os.listdir(retired))
            for dirpath, _dirnames, filenames in os.walk(cache / "blocks"):
                assert all(re.fullmatch(r"[0-9a-f]{64}", f) and f.startswith(Path(dirpath).name) for f in filenames)
            assert all(re.fullmatch(r"[0-9a-f]{64}\.[0-9a-f]{8}", f) for f in os.listdir(cache / "tmp"))
        assert os.listdir(root / "tmp") == []  # every staged body was committed or discarded
        for dirpath, dirnames, filenames in os.walk(root / "blobs"):
            rel = Path(dirpath).relative_to(root / "blobs")
            if rel == Path("."):
                assert all(re.fullmatch(r"[0-9a-f]{2}", d) for d in dirnames), dirnames
                assert filenames == []
            else:
                assert dirnames == []
                assert all(re.fullmatch(r"[0-9a-f]{32}", f) and f.startswith(rel.name) for f in filenames)
        for key in HOSTILE:
            if "\x00" in key or key in (".", "..", "//"):  # NUL: not a path; the others name existing dirs
                continue
            for base in (root, root / "tmp", root / "blobs", root / "cache", root / "cache" / "blocks"):
                assert not os.path.lexists(os.path.join(base, key)), key
    # Around the data dirs (others may be creating files there meanwhile): nothing new named
    # like any part of a hostile key.
    names = {part for key in HOSTILE for part in re.split(r"[/\\]", key) if part not in ("", ".", "..")}
    for directory, before in sandbox.items():
        path = os.getcwd() if directory == "cwd" else directory
        assert (set(os.listdir(path)) - before) & names == set(), path


def test_gateway_still_healthy(gateway: GatewayProcess) -> None:
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=5):
        pass
    assert gateway.client().list_buckets()["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert "Traceback" not in gateway.log_tail(200_000), gateway.log_tail()


def _sign(gw: GatewayProcess, method: str, target: str, body: bytes) -> dict[str, str]:
    headers = {"Host": f"127.0.0.1:{gw.port}", "Content-Length": str(len(body)),
               "x-amz-content-sha256": hashlib.sha256(body).hexdigest()}
    request = AWSRequest(method=method, url=gw.endpoint + target, headers=headers, data=body)
    S3SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), "s3", "us-east-1").add_auth(request)
    return dict(request.headers.items())
