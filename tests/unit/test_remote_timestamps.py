"""The gateway's remote client parses S3's timestamps with the standard library (issue 30: dateutil
was a third of the gateway's CPU while listing); every form must read as botocore's parser reads it."""

from __future__ import annotations

import pytest
from botocore.utils import parse_timestamp

from app.adapters.remote.client import RemoteConfig, fast_timestamp, make_client


@pytest.mark.parametrize("value", ["2026-12-06T01:44:00.000Z", "2026-12-06T01:44:00Z", "2026-12-06T01:44:00.123456+02:00",
                                   "Sun, 06 Dec 2026 01:44:00 GMT", "1700000000"])
def test_each_form_reads_as_botocore_reads_it(value: str) -> None:
    assert fast_timestamp(value) == parse_timestamp(value)
    assert fast_timestamp(value).utcoffset() is not None


def test_garbage_fails_as_in_botocore() -> None:
    with pytest.raises(ValueError):
        fast_timestamp("not a time")


def test_the_client_parses_with_it() -> None:
    client = make_client(RemoteConfig(endpoint="http://127.0.0.1:9", region="us-east-1", access_key="a", secret_key="b"))
    parser = client._endpoint._response_parser_factory._defaults  # the factory's parser defaults
    assert parser["timestamp_parser"] is fast_timestamp
