"""Secrets never leak: a gateway (debug logging) is given remote credentials, tenant keys and
admin tokens, and made to fail in every way that names them (bad signatures, a remote with wrong
credentials and an unreachable one, bad and disabled tokens, invalid admin input); then
everything the run produced is scanned for the secret values: the gateway's log, /metrics,
admin answers after creation, error bodies, the status page and its data, /readyz.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from botocore.exceptions import ClientError

from tests.support.gateway import ADMIN_TOKEN, SECRET_KEY, GatewayProcess
from tests.support.reliability import Tally

pytestmark = pytest.mark.reliability


@pytest.fixture(scope="module")
def gw(seaweed: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    g = GatewayProcess(seaweed, tmp_path_factory.mktemp("secrets"), env={"FERRY_LOG_LEVEL": "debug"})
    try:
        yield g.start(timeout=120)  # debug logging starts slower on a loaded machine
    finally:
        g.stop()


def test_no_secret_appears_in_anything_the_run_produced(gw: GatewayProcess, seaweed: Any) -> None:
    tally = Tally("security", "secrets-scan")
    produced: list[tuple[str, bytes]] = []  # (where, what)
    secrets = {"remote secret": seaweed.secret_key, "bootstrap secret": SECRET_KEY, "admin token": ADMIN_TOKEN}

    def keep(where: str, resp: httpx.Response) -> httpx.Response:
        produced.append((f"{resp.request.method} {where} -> {resp.status_code}", resp.content))
        return resp

    with httpx.Client(base_url=gw.endpoint, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=30) as api:
        tenant = f"t-{uuid.uuid4().hex[:8]}"
        keep("create tenant", api.post("/admin/tenants", json={"name": tenant}))
        created = api.post(f"/admin/tenants/{tenant}/keys").json()  # the one answer that shows the secret
        secrets["tenant secret"] = created["secret_key"]
        rotated = api.post(f"/admin/keys/{created['access_key']}/rotate").json()
        secrets["rotated secret"] = rotated["secret_key"]
        token = api.post("/admin/tokens", json={"name": f"tok-{uuid.uuid4().hex[:6]}", "scopes": ["read"]}).json()
        secrets["read token"] = token["token"]
        remote_secret = f"remote-secret-{uuid.uuid4().hex}"
        secrets["registered remote secret"] = remote_secret
        for name, endpoint in (("wrong-creds", seaweed.endpoint), ("unreachable", "http://127.0.0.1:9")):
            made = keep("create remote", api.post("/admin/remotes", json={
                "name": f"{name}-{uuid.uuid4().hex[:6]}", "endpoint": endpoint, "access_key": "AKIDWRONG",
                "secret_key": remote_secret}))
            keep("check remote", api.post(f"/admin/remotes/{made.json()['id']}/check"))
            keep("update remote", api.patch(f"/admin/remotes/{made.json()['id']}",
                                            json={"secret_key": remote_secret + "-2"}))
        secrets["updated remote secret"] = remote_secret + "-2"
        keep("disable token", api.post(f"/admin/tokens/{token['id']}/disable"))
        # Errors: a disabled token, a token with a typo, invalid input that echoes what was sent.
        for bad in (token["token"], ADMIN_TOKEN + "x", secrets["tenant secret"]):
            keep("bad token", httpx.get(f"{gw.endpoint}/admin/tenants", headers={"Authorization": f"Bearer {bad}"}))
        keep("invalid remote", api.post("/admin/remotes", json={"name": "x" * 500, "endpoint": "nope",
                                                                 "secret_key": remote_secret}))
        keep("invalid secret", api.post("/admin/remotes", json={"name": "ok", "endpoint": seaweed.endpoint,
                                                                 "secret_key": remote_secret + "\x00" * 5000}))
        for where in ("/admin/tenants", f"/admin/tenants/{tenant}/keys", "/admin/keys", "/admin/tokens",
                      "/admin/remotes", "/admin/remote", "/admin/stats", "/admin/status", "/readyz", "/metrics",
                      "/admin/requests/slowest", "/admin/journal", "/openapi.json"):
            keep(where, api.get(where))
    # S3 errors: wrong secrets (the answer carries the string to sign, never the key).
    for secret in (secrets["tenant secret"], "not-the-secret"):
        try:
            gw.client(created["access_key"], secret).list_buckets()
        except ClientError as exc:
            produced.append(("S3 error", str(exc.response).encode()))
    try:
        gw.client(secret_key=SECRET_KEY + "x").put_object(Bucket="b", Key="k", Body=b"x")
    except ClientError as exc:
        produced.append(("S3 error", str(exc.response).encode()))
    produced.append(("gateway log", gw.log_path.read_bytes()))
    for path in gw.data_dir.rglob("*.log"):
        produced.append((str(path), path.read_bytes()))

    leaks = [f"{name} in {where}" for name, value in secrets.items() for where, text in produced
             if value and value.encode() in text]
    for where, _ in produced:
        tally.op(expected=not any(where in leak for leak in leaks), what=f"scanned {where}", hostile=False)
    tally.unexpected.extend(leaks[:50])
    tally.write()
    print(f"scanned {len(produced)} outputs ({sum(len(t) for _, t in produced)} bytes) for {len(secrets)} secrets")
    assert not leaks, leaks
