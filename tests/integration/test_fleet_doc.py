"""docs/fleet.md's "Without Docker, per node:" block run as written, for three nodes on this machine
(issue 26: "a test runs the fleet.md commands as written, as the compose test runs compose's").

The block is parsed (backslash continuations joined, ``# comments`` stripped) and each line run by
bash with the node's exported variables, ``&`` lines in the background, each in a process group of
its own. Only what the doc leaves to the operator is substituted: the ``…`` values (the session's
SeaweedFS as the remote, the test keys, a fleet secret), the hosts ``db``/``redis`` (a throwaway
PostgreSQL database, Redis db 10), the data dirs, the ports (free ones) and the advertised address
(``10.0.0.1`` -> ``127.0.0.1``). Beside the doc's variables the environment carries only PATH/HOME/
LANG and short FERRY_NODE_HEARTBEAT_SECONDS/FERRY_NODE_STALE_SECONDS (the doc's commands unchanged).

``pip install .`` is run as written, into a fresh venv (on PATH first, as if activated) from a copy
of the Dockerfile's build context (tests/support/run_profile.py, shared with
test_run_profile_install): the package the doc installs is the one the nodes run, not the
checkout's editable dev install (which has the test extras, and would hide a missing run
dependency). It runs once: the three nodes share this machine and so its venv (~40 s of the test).

Then what the doc promises: ``ferry doctor --serving`` passes on every node (it is retried until
the worker and beat heartbeats have arrived), a PUT through node 1 reads back on nodes 2 and 3,
and a worker destages it to the remote.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.integration.test_compose_fleet import _healthy
from tests.support.databases import throwaway_database
from tests.support.gateway import ACCESS_KEY, ADMIN_TOKEN, SECRET_KEY, GatewayProcess, free_port
from tests.support.procs import run_bounded
from tests.support.run_profile import ROOT, copy_build_context, empty_venv

pytestmark = [pytest.mark.fleet, pytest.mark.timeout(900)]  # pip install alone is bounded at 600 s

REDIS_DB = 10  # a Redis db of its own; node ids (so queue names) carry a uuid as well
FLEET_SECRET = "fleet-doc-secret-0123456789abcdef"
NODES = 3


def doc_block() -> list[str]:
    """The commands of the "Without Docker, per node:" block of "## Start a fleet"."""
    text = (ROOT / "docs" / "fleet.md").read_text()
    section = text.split("## Start a fleet", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"Without Docker, per node:\s*```sh\n(.*?)\n```", section, re.S)
    assert match, "docs/fleet.md: no ```sh block after 'Without Docker, per node:'"
    commands: list[str] = []
    pending = ""
    for raw in match.group(1).splitlines():
        line = re.sub(r"\s+#.*$", "", raw).rstrip()  # a comment: space, '#' (no '#' in the commands)
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = (pending + line).strip()
        pending = ""
        if line:
            commands.append(" ".join(line.split()))
    return commands


def substitute_exports(line: str, values: dict[str, str]) -> str:
    """The ``export`` line with the operator's values: every ``…`` must be given one."""
    words = shlex.split(line)
    assert words[0] == "export", line
    out = ["export"]
    for word in words[1:]:
        name, _, value = word.partition("=")
        if name in values:
            value = values[name]
        assert "…" not in value, f"{name}: the doc leaves it to the operator and the test has no value"
        out.append(f"{name}={shlex.quote(value)}")
    return " ".join(out)


class DocNode:
    """One node: the doc's export line, then its commands via bash."""

    def __init__(self, index: int, exports: str, env: dict[str, str], cwd: Path, logs: Path) -> None:
        self.index = index
        self.exports = exports
        self.env = env
        self.cwd = cwd
        self.logs = logs
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []

    def script(self, command: str) -> list[str]:
        return ["bash", "-c", f"set -e\n{self.exports}\n{command}"]

    def run(self, command: str, timeout: float = 120) -> tuple[int, str, float]:
        return run_bounded(self.script(command), self.env, timeout=timeout, cwd=self.cwd)

    def start(self, command: str) -> None:
        name = command.split()[0] if "=" not in command.split()[0] else command.split()[1]
        name = f"{name}-{len(self.procs)}"
        with open(self.logs / f"node{self.index}-{name}.log", "ab") as log:
            proc = subprocess.Popen(self.script(command), env=self.env, cwd=self.cwd, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append((name, proc))

    def log(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-2500:]}"
                         for p in sorted(self.logs.glob(f"node{self.index}-*.log")))

    def check_alive(self) -> None:
        for name, proc in self.procs:
            assert proc.poll() is None, f"node {self.index}: {name} exited {proc.returncode}\n{self.log()}"

    def stop(self) -> None:
        for _, proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        for _, proc in self.procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            with contextlib.suppress(ProcessLookupError, PermissionError):  # the group's leftovers
                os.killpg(proc.pid, signal.SIGKILL)


@pytest.fixture
def workdir() -> Iterator[Path]:
    """Not tmp_path: pytest keeps those (a venv each); this one goes when the test ends."""
    path = Path(tempfile.mkdtemp(prefix="ferry-fleetdoc-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _wait(what: str, ok: Any, nodes: list[DocNode], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        for node in nodes:
            node.check_alive()
        assert time.monotonic() < deadline, f"{what} not within {timeout}s\n" + "\n".join(n.log() for n in nodes)
        time.sleep(0.3)


def test_fleet_md_commands_start_a_fleet_that_serves_and_destages(seaweed: Any, postgres_url: str, redis_url: str,
                                                                   workdir: Path) -> None:
    commands = doc_block()
    assert commands[0] == "pip install .", commands
    assert commands[1].startswith("export "), commands
    exports_line, rest = commands[1], commands[2:]

    src = copy_build_context(workdir / "src")
    venv = empty_venv(workdir / "venv")
    base_env = {"PATH": f"{venv / 'bin'}:/usr/local/bin:/usr/bin:/bin", "HOME": str(workdir), "LANG": "C.UTF-8",
                "VIRTUAL_ENV": str(venv), "FERRY_NODE_HEARTBEAT_SECONDS": "1", "FERRY_NODE_STALE_SECONDS": "5"}
    started = time.monotonic()
    code, out, _ = run_bounded(["bash", "-c", commands[0]], base_env, timeout=600, cwd=src)
    assert code == 0, f"{commands[0]} failed:\n{out[-3000:]}"
    install_seconds = time.monotonic() - started

    tag = uuid.uuid4().hex[:8]
    redis_base = redis_url.rsplit("/", 1)[0]
    nodes: list[DocNode] = []
    with throwaway_database(postgres_url, "ferry_doc") as db_url:
        try:
            for i in range(1, NODES + 1):
                fleet_port = free_port()
                values = {
                    "FERRY_NODE_ID": f"node-{i}-{tag}", "FERRY_DATA_DIR": str(workdir / f"node-{i}"),
                    "FERRY_PORT": str(free_port()), "FERRY_DATABASE_URL": db_url,
                    "FERRY_BROKER_URL": f"{redis_base}/{REDIS_DB}",
                    "FERRY_REMOTE_ENDPOINT": seaweed.endpoint, "FERRY_REMOTE_REGION": "us-east-1",
                    "FERRY_REMOTE_ACCESS_KEY": seaweed.access_key, "FERRY_REMOTE_SECRET_KEY": seaweed.secret_key,
                    "FERRY_ACCESS_KEY": ACCESS_KEY, "FERRY_SECRET_KEY": SECRET_KEY, "FERRY_ADMIN_TOKEN": ADMIN_TOKEN,
                    "FERRY_FLEET_PORT": str(fleet_port), "FERRY_FLEET_SECRET": FLEET_SECRET,
                    "FERRY_FLEET_ADVERTISE": f"127.0.0.1:{fleet_port}",
                }
                node = DocNode(i, substitute_exports(exports_line, values), base_env, src, workdir)
                nodes.append(node)
                for command in rest:
                    command = command.replace("FERRY_WORKER_METRICS_PORT=9100",
                                              f"FERRY_WORKER_METRICS_PORT={free_port()}")
                    if command.endswith("&"):
                        node.start(command[:-1].strip())
                    elif command.startswith("ferry doctor"):
                        continue  # below, once every node's processes are up
                    else:
                        code, out, _ = node.run(command)
                        assert code == 0, f"node {i}: {command} failed:\n{out[-3000:]}"
                port = int(values["FERRY_PORT"])
                _wait(f"node {i}'s gateway", lambda port=port: _healthy(port), nodes, 90)

            [doctor] = [c for c in rest if c.startswith("ferry doctor")]
            attempts: list[int] = []
            for node in nodes:
                outs: list[str] = []

                def passes(node: DocNode = node, outs: list[str] = outs) -> bool:
                    code, out, _ = node.run(doctor, timeout=60)
                    outs[:] = [out]
                    attempts.append(node.index)
                    return code == 0
                _wait(f"node {node.index}: {doctor} passing", passes, nodes, 90)
                assert re.search(r"(?m)^.*\bworker\b.*$", outs[0]) and re.search(r"(?m)^.*\bbeat\b.*$", outs[0]), outs[0]

            ports = [int(n.exports.split("FERRY_PORT=", 1)[1].split()[0]) for n in nodes]
            clients = [GatewayProcess(seaweed, workdir / "clients", port=p).client() for p in ports]
            bucket = f"fleetdoc-{tag}"
            body = b"written through node 1 as fleet.md starts it"
            clients[0].create_bucket(Bucket=bucket)
            clients[0].put_object(Bucket=bucket, Key="doc/key", Body=body)
            for i, client in enumerate(clients[1:], start=2):
                got = client.get_object(Bucket=bucket, Key="doc/key")["Body"].read()
                assert got == body, f"node {i} read {got!r}"

            remote = seaweed.client()

            def destaged() -> bool:
                try:
                    return bool(remote.get_object(Bucket=bucket, Key="doc/key")["Body"].read() == body)
                except ClientError:
                    return False
            _wait("the destage to the remote", destaged, nodes, 60)
            for client in clients:
                client.close()
            with contextlib.suppress(ClientError):
                remote.delete_object(Bucket=bucket, Key="doc/key")
                remote.delete_bucket(Bucket=bucket)
            print(f"fleet.md: pip install . {install_seconds:.0f}s, whole test {time.monotonic() - started:.0f}s, "
                  f"doctor runs per node {[attempts.count(n.index) for n in nodes]}")
        finally:
            for node in nodes:
                node.stop()
            _forget_queues(f"{redis_base}/{REDIS_DB}", tag)


def _forget_queues(broker_url: str, tag: str) -> None:
    """The nodes' queues and kombu bindings in the broker (their names carry the test's tag)."""
    import redis

    client = redis.Redis.from_url(broker_url)
    try:
        keys = list(client.scan_iter(match=f"*{tag}*"))
        if keys:
            client.delete(*keys)
    finally:
        client.close()
