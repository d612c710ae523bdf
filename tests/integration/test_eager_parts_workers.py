"""Eager part copies with several worker processes (``--workers 2``) on one data directory.

A part is received (and copied ahead) by whichever worker accepted its connection; the
Complete, and so the destage, may run in the other. The part copies are claimed in the catalog,
so the destage waits for a copy still in flight in another process instead of sending the part
a second time. Counted through tests/support/counting_proxy.py against a real SeaweedFS, with
every UploadPart held a while at the proxy (a slow link) so that the copies are in flight.
"""

from __future__ import annotations

import os
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.support.counting_proxy import CountingProxy
from tests.support.gateway import GatewayProcess

MiB = 1024 * 1024

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def w2gw(proxy: CountingProxy, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with GatewayProcess(proxy, tmp_path_factory.mktemp("eager-w2"), workers=2) as gw:
        yield gw


def _parts_sent(proxy: CountingProxy, key: str) -> Counter[int]:
    """UploadPart requests per part number of this key."""
    sent: Counter[int] = Counter()
    for r in proxy.requests("PUT", key):
        query = dict(p.split("=", 1) for p in r.query.split("&") if "=" in p)
        if "partNumber" in query:
            sent[int(query["partNumber"])] += 1
    return sent


def test_a_part_in_flight_in_one_worker_is_not_sent_again_by_the_other(
        w2gw: GatewayProcess, proxy: CountingProxy, seaweed: Any) -> None:
    proxy.reset()
    proxy.part_delay = 1.5
    bucket = f"ew-{uuid.uuid4().hex[:12]}"
    w2gw.client().create_bucket(Bucket=bucket)
    uploads: dict[str, bytes] = {}
    try:
        for round_ in range(4):
            key = f"ckpt/w2-{round_}.bin"
            parts = [os.urandom(5 * MiB) for _ in range(3)] + [os.urandom(MiB)]
            upload = w2gw.client().create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]

            def put(numbered: tuple[int, bytes], key: str = key, upload: str = upload) -> str:
                # One client (one connection) per part: the parts reach both workers.
                client = w2gw.client()
                try:
                    return str(client.upload_part(Bucket=bucket, Key=key, UploadId=upload, PartNumber=numbered[0],
                                                  Body=numbered[1])["ETag"])
                finally:
                    client.close()

            with ThreadPoolExecutor(len(parts)) as pool:
                etags = list(pool.map(put, enumerate(parts, start=1)))
            w2gw.client().complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload, MultipartUpload={
                "Parts": [{"PartNumber": n, "ETag": e} for n, e in enumerate(etags, start=1)]})
            uploads[key] = b"".join(parts)
        assert w2gw.flush(bucket)["durable"]
        proxy.idle()
    finally:
        proxy.part_delay = 0.0
    remote = seaweed.client()
    for key, body in uploads.items():
        sent = _parts_sent(proxy, key)
        assert sent == Counter({1: 1, 2: 1, 3: 1, 4: 1}), f"{key}: UploadPart requests per part {dict(sent)}"
        assert remote.get_object(Bucket=bucket, Key=key)["Body"].read() == body
