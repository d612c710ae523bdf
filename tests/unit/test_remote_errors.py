"""How the remote's failures reach a client: a remote 5xx (InternalError, a code of its own) is
the remote being unavailable for now, answered ``503 ServiceUnavailable`` (which carries
Retry-After), never relayed as a 500 of the gateway's own; 4xx answers keep their code."""

from __future__ import annotations

import botocore.exceptions
import pytest

from app.adapters.remote import translate_errors
from app.domain.errors import S3Error


def remote_error(status: int, code: str) -> botocore.exceptions.ClientError:
    return botocore.exceptions.ClientError(
        {"Error": {"Code": code, "Message": "from the remote"}, "ResponseMetadata": {"HTTPStatusCode": status}},
        "GetObject")


def translated(exc: Exception, key: str | None = "k") -> S3Error:
    with pytest.raises(S3Error) as info, translate_errors("b", key):
        raise exc
    return info.value


@pytest.mark.parametrize(("status", "code"), [(500, "InternalError"), (500, "500"), (502, "BadGateway"),
                                              (500, "SomethingOfItsOwn"), (503, "ServiceUnavailable"),
                                              (504, "GatewayTimeout")])
def test_remote_server_errors_are_service_unavailable(status: int, code: str) -> None:
    err = translated(remote_error(status, code))
    assert (err.code, err.status) == ("ServiceUnavailable", 503), err
    assert "remote" in err.message.lower()


def test_remote_slowdown_and_client_errors_keep_their_code() -> None:
    assert translated(remote_error(503, "SlowDown")).code == "SlowDown"
    assert translated(remote_error(404, "NoSuchKey")).code == "NoSuchKey"
    assert translated(remote_error(403, "AccessDenied")).status == 403
    assert translated(remote_error(501, "NotImplemented")).status == 501
