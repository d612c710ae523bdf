"""``torch.save`` of a state dict through s3torchconnector's ``S3Checkpoint``, via Ferry vs straight to the remote.

    python -m bench.torch_checkpoint --runs 3                       # netsim regional link (root)
    python -m bench.torch_checkpoint --link loopback --size-mib 64 --runs 1   # smoke: local SeaweedFS
    python -m bench.torch_checkpoint --remote-endpoint https://... --remote-access-key ... --remote-secret-key ...

Issue 29's second figure. A state dict of ``--tensors`` float32 tensors totalling ``--size-mib`` is saved,
per run and interleaved (the order rotates every run), four ways:
  - ``s3checkpoint-ferry``: ``torch.save(state, S3Checkpoint(...).writer(uri))`` to the gateway (the CRT
    client of the AWS PyTorch connector, its defaults: 8 MiB parts);
  - ``s3checkpoint-direct``: the same straight to the remote;
  - ``file+upload-ferry``: ``torch.save`` to a local file, then boto3 ``upload_file`` (its defaults) to
    the gateway;
  - ``file+upload-direct``: the same straight to the remote.
Reported per row (medians of --runs, min-max): wall seconds from the start of ``torch.save`` until the
acknowledgement (the writer's ``close()`` / ``upload_file`` returning) and MB/s of the saved bytes over
that time; for the gateway rows also the time until the remote holds the object (the flush barrier,
waited for before the next row starts, so no destage overlaps another row) and the gateway's CPU
seconds per GiB (its process tree, /proc) until the ack and until the remote holds it.

Every object's size is checked on the remote every run; on the first run each object is read back
from the remote and its SHA-256 compared with that of the same ``torch.save`` into a hashing sink
(a stream: the S3Checkpoint rows) or of the local file (the upload rows; a file's zip records are
named after it, so its bytes differ from a stream's). Keys for the CRT client go by environment
(AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, set around each row), path-style addressing by
``S3ClientConfig(force_path_style=True)``. Needs torch and s3torchconnector:
``pip install torch==2.13.0 && pip install -e ".[ml]"``. Writes bench/results/torch-checkpoint-<time>.json
and docs/benchmarks-torch-checkpoint.md.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from boto3.s3.transfer import TransferConfig  # noqa: E402

from bench.checkpoint import add_remote_args, ensure_bucket, remote_region, summarize  # noqa: E402
from bench.proc_cpu import CpuMeter  # noqa: E402
from bench.remote import Remote  # noqa: E402
from tests.support.gateway import ACCESS_KEY, SECRET_KEY, GatewayProcess  # noqa: E402

MiB = 1024 * 1024
REGION = "us-east-1"
ROWS = ("s3checkpoint-ferry", "s3checkpoint-direct", "file+upload-ferry", "file+upload-direct")


def state_dict(size_mib: int, tensors: int) -> dict[str, Any]:
    """``tensors`` float32 tensors of random values (incompressible, like trained weights) totalling ``size_mib``."""
    import torch

    numel = size_mib * MiB // 4
    gen = torch.Generator().manual_seed(29)
    sizes = [numel // tensors + (1 if i < numel % tensors else 0) for i in range(tensors)]
    return {f"layer{i}.weight": torch.rand(n, generator=gen, dtype=torch.float32) for i, n in enumerate(sizes)}


class HashSink(io.RawIOBase):
    """A write-only stream that keeps only the SHA-256 and the length of what is written to it."""

    def __init__(self) -> None:
        super().__init__()
        self.sha = hashlib.sha256()
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = memoryview(data)
        self.sha.update(view)
        self.size += view.nbytes
        return view.nbytes


def stream_digest(state: dict[str, Any]) -> tuple[str, int]:
    """SHA-256 and size of ``torch.save`` into a stream: what an S3Writer is handed."""
    import torch

    sink = HashSink()
    torch.save(state, sink)
    return sink.sha.hexdigest(), sink.size


def file_digest(path: Path) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(8 * MiB):
            sha.update(block)
    return sha.hexdigest()


def remote_digest(remote: Remote, bucket: str, key: str) -> str:
    sha = hashlib.sha256()
    body = remote.client().get_object(Bucket=bucket, Key=key)["Body"]
    while block := body.read(8 * MiB):
        sha.update(block)
    return sha.hexdigest()


@contextlib.contextmanager
def aws_keys(access_key: str, secret_key: str) -> Iterator[None]:
    """The CRT client (s3torchconnector) takes its keys from the environment, as bench/au.py passes them."""
    names = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
    before = {n: os.environ.get(n) for n in names}
    os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"] = access_key, secret_key
    os.environ.pop("AWS_SESSION_TOKEN", None)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def s3checkpoint(endpoint: str) -> Any:
    """An ``S3Checkpoint`` for ``endpoint``: path-style (a bucket name is no DNS label of 127.0.0.1), region
    us-east-1, the connector's defaults otherwise. Make it with the keys in the environment (``aws_keys``)."""
    from s3torchconnector import S3Checkpoint, S3ClientConfig

    return S3Checkpoint(region=REGION, endpoint=endpoint, s3client_config=S3ClientConfig(force_path_style=True))


def s3checkpoint_save(checkpoint: Any, state: dict[str, Any], bucket: str, key: str) -> int:
    """``torch.save`` into ``checkpoint``'s writer; the bytes it took, once ``close()`` returned (the ack)."""
    import torch

    with checkpoint.writer(f"s3://{bucket}/{key}") as writer:
        torch.save(state, writer)
        written: int = writer.tell()
    return written


class Bench:
    """One gateway and one remote; ``row(name, run)`` saves once the way ``name`` says and measures it."""

    def __init__(self, gw: GatewayProcess, remote: Remote, bucket: str, state: dict[str, Any], work: Path,
                 expected: tuple[str, int]) -> None:
        self.gw, self.remote, self.bucket, self.state, self.work = gw, remote, bucket, state, work
        self.stream_sha, self.stream_size = expected

    def target(self, ferry: bool) -> tuple[str, str, str]:
        """Endpoint and keys of the gateway or of the remote."""
        if ferry:
            return self.gw.endpoint, ACCESS_KEY, SECRET_KEY
        return self.remote.endpoint, self.remote.access_key, self.remote.secret_key

    def row(self, name: str, run: int, verify: bool) -> dict[str, Any]:
        ferry = name.endswith("-ferry")
        endpoint, access, secret = self.target(ferry)
        key = f"torch-ckpt/{name}/run-{run}-{time.time_ns()}"
        meter = CpuMeter([self.gw.proc.pid if ferry and self.gw.proc else 0])
        out: dict[str, Any] = {}
        if name.startswith("s3checkpoint"):
            with aws_keys(access, secret):
                checkpoint = s3checkpoint(endpoint)
                t0 = time.perf_counter()
                size = s3checkpoint_save(checkpoint, self.state, self.bucket, key)
                ack = time.perf_counter() - t0
                cpu = meter.seconds()
            expected_sha = self.stream_sha
            if size != self.stream_size:
                raise RuntimeError(f"{name}: S3Writer took {size} bytes, torch.save into a stream makes {self.stream_size}")
        else:
            import torch

            path = self.work / "checkpoint.pt"  # one name: the zip records inside are named after the file
            s3 = self.gw.client(max_pool_connections=16, read_timeout=600) if ferry else self.remote.client()
            t0 = time.perf_counter()
            torch.save(self.state, path)
            out["save_s"] = time.perf_counter() - t0
            s3.upload_file(str(path), self.bucket, key, Config=TransferConfig())  # boto3 defaults
            ack = time.perf_counter() - t0
            cpu = meter.seconds()
            size = path.stat().st_size
            expected_sha = file_digest(path) if verify else ""
            path.unlink()
        gib = size / 2**30
        out |= {"ack_s": ack, "mbps": size / ack / 1e6, "bytes": size}
        if ferry:
            self.gw.flush(self.bucket, key, timeout=3600)
            out["durable_s"] = time.perf_counter() - t0
            cpu_durable = meter.seconds()
            if cpu is not None and cpu_durable is not None:
                out |= {"gateway_cpu_s_per_gib": cpu / gib, "gateway_cpu_s_per_gib_durable": cpu_durable / gib}
        head = self.remote.client().head_object(Bucket=self.bucket, Key=key)
        if head["ContentLength"] != size:
            raise RuntimeError(f"{name}: the remote holds {head['ContentLength']} bytes, not {size}")
        if verify:
            got = remote_digest(self.remote, self.bucket, key)
            if got != expected_sha:
                raise RuntimeError(f"{name}: the remote's object has SHA-256 {got}, not {expected_sha}")
            out["sha256_ok"] = True
        self.remote.client().delete_object(Bucket=self.bucket, Key=key)
        return out


def report(args: argparse.Namespace, runs: list[dict[str, dict[str, Any]]], link: str, size: int) -> str:
    def col(name: str, field: str, fmt: Callable[[list[float]], str] = summarize) -> str:
        values = [r[name][field] for r in runs if field in r[name]]
        return fmt(values) if values else "-"

    lines = ["| row | ack s | ack MB/s | remote holds it (s) | gateway CPU s/GiB until ack | until remote holds it |",
             "|---|---|---|---|---|---|"]
    for name in ROWS:
        lines.append(f"| {name} | {col(name, 'ack_s')} | {col(name, 'mbps')} | {col(name, 'durable_s')} "
                     f"| {col(name, 'gateway_cpu_s_per_gib')} | {col(name, 'gateway_cpu_s_per_gib_durable')} |")
    save = [r[n]["save_s"] for r in runs for n in ROWS if "save_s" in r[n]]
    command = "python -m bench.torch_checkpoint " + " ".join(sys.argv[1:])
    return (f"# torch.save checkpoint benchmark\n\nGenerated by `{command}` on "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, remote: {link}; "
            f"a state dict of {args.tensors} float32 tensors, {args.size_mib} MiB ({size / 1e6:.0f} MB saved), "
            f"{args.runs} runs, rows interleaved. Medians (min-max); MB/s = saved bytes / seconds to the ack. "
            f"SHA-256 read back from the remote on run 1.\n\n" + "\n".join(lines)
            + (f"\n\ntorch.save to the local file alone (upload rows): {summarize(save)} s\n" if save else "\n"))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--tensors", type=int, default=16)
    add_remote_args(parser)
    parser.add_argument("--bucket", default="ferry-bench")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks-torch-checkpoint.md")
    args = parser.parse_args(argv)
    try:
        import s3torchconnector  # noqa: F401
        import torch  # noqa: F401
    except ImportError as exc:
        raise SystemExit(f'{exc}: pip install torch==2.13.0 && pip install -e ".[ml]"') from exc
    region, link = remote_region(args)
    assert region.remote is not None
    remote = region.remote
    work = Path(tempfile.mkdtemp(prefix="ferry-bench-", dir=os.environ.get("FERRY_BENCH_DIR")))
    try:
        ensure_bucket(remote, args.bucket)
        state = state_dict(args.size_mib, args.tensors)
        expected = stream_digest(state)
        runs: list[dict[str, dict[str, Any]]] = []
        with GatewayProcess(remote, work / "gateway", env={"FERRY_LOG_LEVEL": "warning"}) as gw:
            bench = Bench(gw, remote, args.bucket, state, work, expected)
            for n in range(args.runs):
                order = ROWS[n % len(ROWS):] + ROWS[: n % len(ROWS)]
                runs.append({name: bench.row(name, n, verify=n == 0) for name in order})
                for name in ROWS:
                    print(f"run {n + 1} {name}: {runs[-1][name]}", flush=True)
        text = report(args, runs, link, expected[1])
        print(text)
        args.out.write_text(text)
        results = ROOT / "bench" / "results"
        results.mkdir(exist_ok=True)
        (results / f"torch-checkpoint-{int(time.time())}.json").write_text(json.dumps(
            {"runs": runs, "size": expected[1], "link": link, "command": sys.argv}, indent=2))
    finally:
        shutil.rmtree(work, ignore_errors=True)
        region.down()


if __name__ == "__main__":
    main()
