"""Eager part copies wait while a part's body is arriving, then every acknowledged part is copied
(app/services/multipart/copy_admission.py; FERRY_EAGER_COPY_BUSY_LIMIT=0: none while one is arriving)."""

from __future__ import annotations

import http.client
import os
import time
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.integration.test_eager_parts import part_puts, wait_for
from tests.support.counting_proxy import CountingProxy
from tests.support.gateway import GatewayProcess

MiB = 1024 * 1024


@pytest.fixture(scope="module")
def ggw(proxy: CountingProxy, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    env = {"FERRY_EAGER_COPY_BUSY_LIMIT": "0"}
    with GatewayProcess(proxy, tmp_path_factory.mktemp("gate-gw"), env=env) as gw:
        yield gw


@pytest.mark.slow
def test_copies_wait_for_a_body_in_flight_then_every_part_is_copied(ggw: GatewayProcess, proxy: CountingProxy,
                                                                    seaweed: Any) -> None:
    proxy.reset()
    client = ggw.client()
    bucket = f"gate-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=bucket)
    fast, slow = os.urandom(5 * MiB), os.urandom(5 * MiB)
    up_a = client.create_multipart_upload(Bucket=bucket, Key="gate/a")["UploadId"]
    up_b = client.create_multipart_upload(Bucket=bucket, Key="gate/b")["UploadId"]
    url = urlsplit(client.generate_presigned_url("upload_part", Params={
        "Bucket": bucket, "Key": "gate/b", "UploadId": up_b, "PartNumber": 1}))
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    conn.putrequest("PUT", f"{url.path}?{url.query}")
    conn.putheader("Content-Length", str(len(slow)))
    conn.endheaders()
    conn.send(slow[:MiB])  # part 1 of gate/b is arriving (its acknowledgement is in flight)
    time.sleep(0.2)
    etag_a = client.upload_part(Bucket=bucket, Key="gate/a", UploadId=up_a, PartNumber=1, Body=fast)["ETag"]
    time.sleep(1.0)
    assert part_puts(proxy, "gate/a") == [], "a copy started while a body was arriving"
    conn.send(slow[MiB:])
    response = conn.getresponse()
    assert response.status == 200, response.read()
    etag_b = response.getheader("ETag")
    conn.close()
    # Ingest paused: both acknowledged parts are copied ahead, before any Complete.
    wait_for(lambda: len(part_puts(proxy, "gate/a")) == 1 and len(part_puts(proxy, "gate/b")) == 1)
    for key, upload, etag in (("gate/a", up_a, etag_a), ("gate/b", up_b, etag_b)):
        client.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload, MultipartUpload={
            "Parts": [{"PartNumber": 1, "ETag": etag}]})
    assert ggw.flush()["durable"]
    assert len(part_puts(proxy, "gate/a")) == 1 and len(part_puts(proxy, "gate/b")) == 1
    remote = seaweed.client()
    assert remote.get_object(Bucket=bucket, Key="gate/a")["Body"].read() == fast
    assert remote.get_object(Bucket=bucket, Key="gate/b")["Body"].read() == slow
    client.close()
