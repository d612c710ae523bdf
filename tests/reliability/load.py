"""A mixed S3 load (overwrites, deletes, multipart checkpoints, cold and warm reads) that keeps
going while processes die under it, and tells the ledger what each request did.

    load = MixedLoad(endpoint_of, bucket, ledger, threads=4).start()
    ...kill things...
    load.stop()

``endpoint_of`` is called for every request, so a gateway restarted on the same port (or a new
client after a restart) is picked up at once.
"""

from __future__ import annotations

import hashlib
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from tests.reliability.ledger import ABSENT, Ledger, sha

MiB = 1024 * 1024
RETRYABLE = {"SlowDown", "ServiceUnavailable", "RequestTimeout", "OperationAborted", "InternalError"}


def classify(exc: Exception) -> tuple[str, str | None]:
    """(outcome, what is unexpected about it or None) of a request that raised."""
    if isinstance(exc, ClientError):
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        code = exc.response.get("Error", {}).get("Code", "")
        if status >= 500 and code != "InternalError":
            return "refused", None  # 503 SlowDown / ServiceUnavailable: it did not happen
        if status == 500 or code == "InternalError":
            return "unknown", f"500 {code}: {exc}"
        if code in ("NoSuchUpload", "OperationAborted"):
            return "refused", None  # an upload cut short by a kill, then reopened or expired
        return "refused", f"{status} {code}: {exc}"
    return "unknown", None  # connection refused or reset: a dead gateway


class MixedLoad:
    def __init__(self, client_of: Callable[[], Any], bucket: str, ledger: Ledger, *, prefix: str,
                 cold_keys: list[str], threads: int = 4, keys_per_thread: int = 6,
                 multipart_share: float = 0.08, max_small: int = 192 * 1024, seed: int | None = None) -> None:
        self.client_of = client_of
        self.bucket = bucket
        self.ledger = ledger
        self.prefix = prefix
        self.cold_keys = cold_keys
        self.threads = threads
        self.keys_per_thread = keys_per_thread
        self.multipart_share = multipart_share
        self.max_small = max_small
        self.rnd = random.Random(seed)
        self.shared_part = self.rnd.randbytes(5 * MiB)
        self.stop_event = threading.Event()
        self.paused = threading.Event()
        self.errors = 0
        self._workers: list[threading.Thread] = []

    def own_keys(self, t: int) -> list[str]:
        return [f"{self.prefix}t{t}/k{j}" for j in range(self.keys_per_thread)]

    def all_keys(self) -> list[str]:
        return [k for t in range(self.threads) for k in self.own_keys(t)]

    def start(self) -> MixedLoad:
        for t in range(self.threads):
            worker = threading.Thread(target=self._run, args=(t, random.Random(self.rnd.random())),
                                      name=f"load-{t}", daemon=True)
            worker.start()
            self._workers.append(worker)
        return self

    def stop(self, timeout: float = 120.0) -> None:
        self.stop_event.set()
        for worker in self._workers:
            worker.join(timeout)
        alive = [w.name for w in self._workers if w.is_alive()]
        if alive:
            self.ledger.record.odd(f"load threads still running {timeout}s after stop: {alive} (a hang)")

    def _run(self, t: int, rnd: random.Random) -> None:
        keys = self.own_keys(t)
        while not self.stop_event.is_set():
            if self.paused.is_set():
                time.sleep(0.05)
                continue
            client = self.client_of()
            roll = rnd.random()
            key = rnd.choice(keys)
            try:
                if roll < self.multipart_share:
                    self._multipart(client, key, rnd)
                elif roll < 0.45:
                    self._put(client, key, rnd)
                elif roll < 0.55:
                    self._delete(client, key)
                elif roll < 0.8 or not self.cold_keys:
                    self._get(client, key)
                else:
                    self._get(client, rnd.choice(self.cold_keys))
            except Exception as exc:  # a request the test code itself could not handle
                self.ledger.record.odd(f"load thread {t}: {type(exc).__name__}: {exc}")
                time.sleep(0.2)

    def _finish(self, op: Any, call: Callable[[], Any]) -> Any:
        try:
            result = call()
        except (ClientError, BotoCoreError, OSError) as exc:
            op.outcome, odd = classify(exc)
            if odd:
                self.ledger.record.odd(odd)
            self.errors += 1
            time.sleep(0.1)
            return None
        op.outcome = "acked"
        return result

    def _put(self, client: Any, key: str, rnd: random.Random) -> None:
        body = rnd.randbytes(rnd.randint(0, self.max_small))
        op = self.ledger.begin(key, sha(body), len(body))
        self._finish(op, lambda: client.put_object(Bucket=self.bucket, Key=key, Body=body))

    def _delete(self, client: Any, key: str) -> None:
        op = self.ledger.begin(key, ABSENT, 0)
        self._finish(op, lambda: client.delete_object(Bucket=self.bucket, Key=key))

    def _multipart(self, client: Any, key: str, rnd: random.Random) -> None:
        """A checkpoint: one 5 MiB part (unique head over shared bytes) and a small tail."""
        head = hashlib.sha256(rnd.randbytes(16)).digest()
        parts = [head + self.shared_part[len(head):], rnd.randbytes(rnd.randint(1, 128 * 1024))]
        op = self.ledger.begin(key, sha(b"".join(parts)), sum(map(len, parts)))

        def upload() -> Any:
            upload_id = client.create_multipart_upload(Bucket=self.bucket, Key=key)["UploadId"]
            done = []
            for number, body in enumerate(parts, start=1):
                etag = client.upload_part(Bucket=self.bucket, Key=key, UploadId=upload_id,
                                          PartNumber=number, Body=body)["ETag"]
                done.append({"PartNumber": number, "ETag": etag})
            return client.complete_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id,
                                                    MultipartUpload={"Parts": done})

        self._finish(op, upload)

    def _get(self, client: Any, key: str) -> None:
        try:
            resp = client.get_object(Bucket=self.bucket, Key=key)
            data = resp["Body"].read()  # botocore checks Content-Length: a cut body raises
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "NoSuchKey":
                self.ledger.read(key, ABSENT, 0, where="GET")
                return
            _, odd = classify(exc)
            if odd:
                self.ledger.record.odd(f"GET {key}: {odd}")
            self.errors += 1
            time.sleep(0.1)
            return
        except (BotoCoreError, OSError):
            self.errors += 1  # the gateway died mid-answer: the client saw an error, not bytes
            time.sleep(0.1)
            return
        self.ledger.read(key, sha(data), len(data), where="GET")
