"""``ferry flush`` that cannot finish says why: the oldest pending keys, attempts, last error.

Regression (issue 17): it ended with ``durable=False pending=1`` and no reason."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.support.gateway import ADMIN_TOKEN, GatewayProcess
from tests.support.seaweed import SeaweedServer

FERRY = str(Path(sys.executable).with_name("ferry"))


def test_flush_timeout_names_pending_keys_attempts_and_error(tmp_path: Path) -> None:
    with SeaweedServer() as sw, GatewayProcess(sw, tmp_path / "gw") as gw:
        bucket = sw.create_bucket("flush-why")
        client = gw.client()
        client.head_bucket(Bucket=bucket)
        sw.stop()
        try:
            client.put_object(Bucket=bucket, Key="stuck/one", Body=b"x" * 1000)
            env = {k: v for k, v in os.environ.items() if not k.startswith("FERRY_")}
            env.update(FERRY_URL=gw.endpoint, FERRY_ADMIN_TOKEN=ADMIN_TOKEN, COLUMNS="200")
            deadline = time.monotonic() + 30
            while True:  # until the destage has failed once, so there is an error to name
                out = subprocess.run([FERRY, "flush", f"s3://{bucket}/stuck/", "--timeout", "1"], env=env,
                                     capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
                assert out.returncode == 1, out.stdout + out.stderr
                line = next((x for x in out.stdout.splitlines() if "stuck/one" in x), "")
                if "attempts=0" not in line and "last_error=-" not in line and line:
                    break
                assert time.monotonic() < deadline, out.stdout
                time.sleep(1)
        finally:
            sw.start()
        assert "durable=False" in out.stdout
        assert f"oldest: s3://{bucket}/stuck/one" in line, out.stdout
        assert "attempts=" in line and "last_error=" in line, line
