"""The emulated cross-region link and the SeaweedFS behind it.

    root ns: ferrysim0 10.213.0.1 ── veth ── r-host 10.213.0.2 [ferrysim-router] r-remote 10.213.1.1
             ── veth ── s3-0 10.213.1.2 [ferrysim-remote]: weed mini, S3 on :8333

Delay and rate live in the middle namespace, on packets that no longer belong to a local socket:
shaping the sender's own interface would let TCP's small-queue accounting throttle the sender
instead of the link doing it. Rate: ``tc tbf`` on each router egress (r-host carries downloads,
r-remote uploads), with a bottleneck buffer of ``queue_ms``. Delay (the kernel has no sch_netem):
an iptables rule hands every forwarded packet to NFQUEUE 0, and delay_line.c accepts it RTT/2
later; both directions pass it once, so a round trip gains RTT. The rule has no queue-bypass: if
the delay line dies, the link goes dark instead of silently losing its delay.

Safety: 10.213.0.0/23 exists only on interfaces in namespaces made here. When the link is down
that range follows the host's default route, so ``guard()`` checks the kernel routes the endpoint
through ferrysim0 before anything is sent (``up()`` does it before its first request).
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import urlsplit

from bench.netsim.system import CACHE, NetsimError, alive, delay_line_binary, ensure_packages, find_weed, is_root, run, stop_pid

NS_ROUTER, NS_REMOTE, HOST_IF = "ferrysim-router", "ferrysim-remote", "ferrysim0"
SUBNET = ipaddress.ip_network("10.213.0.0/23")
HOST_IP, ROUTER_HOST_IP, ROUTER_REMOTE_IP, REMOTE_IP = "10.213.0.1", "10.213.0.2", "10.213.1.1", "10.213.1.2"
S3_PORT = 8333
# weed mini's other services; their gRPC twins are +10000. SeaweedFS names unix sockets
# /tmp/seaweedfs-*-<grpc port>.sock even inside a namespace, so these stay clear of the test
# servers' ports (12000-32767) and of a default SeaweedFS.
PORT_BASE = 38440
ACCESS_KEY, SECRET_KEY, REGION = "ferrynetsimaccesskey", "ferrynetsimsecretkey0123456789", "us-east-1"
STATE_DIR = Path(os.environ.get("FERRY_NETSIM_DIR", "/tmp/ferry-netsim"))
QUEUE_NUM = 0


@dataclass(frozen=True)
class Shape:
    """Added round-trip time and rate per direction (0 = none), bottleneck buffer in ms at that rate."""

    rtt_ms: float
    rate_mbit: float
    queue_ms: float = 50.0

    def describe(self) -> str:
        return f"{self.rtt_ms:g} ms RTT, {self.rate_mbit:g} Mbit/s per direction"


PROFILES = {"regional": Shape(80, 400), "long-fat": Shape(80, 2000)}


@dataclass
class State:
    """What ``up`` made, kept in STATE_DIR/state.json so ``down``/``status``/``env`` find it."""

    shape: Shape
    server_pid: int | None = None
    delay_pid: int | None = None

    @property
    def endpoint(self) -> str:
        return f"http://{REMOTE_IP}:{S3_PORT}"

    def env(self) -> dict[str, str]:
        return {"NETSIM_S3_ENDPOINT": self.endpoint, "AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": ACCESS_KEY,
                "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_DEFAULT_REGION": REGION}


def _state_path() -> Path:
    return STATE_DIR / "state.json"


def load_state() -> State | None:
    try:
        doc = json.loads(_state_path().read_text())
    except (OSError, ValueError):
        return None
    return State(Shape(**doc["shape"]), doc.get("server_pid"), doc.get("delay_pid"))


def _save_state(state: State) -> None:
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    tmp = _state_path().with_suffix(".tmp")
    tmp.write_text(json.dumps({"shape": asdict(state.shape), "server_pid": state.server_pid,
                               "delay_pid": state.delay_pid}))
    tmp.replace(_state_path())


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    """One up/down at a time on this machine (parallel bench workers may all call up)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / "lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


# ------------------------------------------------------------------------------------- topology

def namespaces() -> set[str]:
    return {line.split()[0] for line in run("ip", "netns", "list", check=False).splitlines() if line.strip()}


def _host_if_exists() -> bool:
    return Path(f"/sys/class/net/{HOST_IF}").exists()


def _check_range_free() -> None:
    """Refuse to build over someone else's use of 10.213.0.0/23 (an address or a route)."""
    for line in run("ip", "-o", "-4", "addr", "show").splitlines():
        dev, addr = line.split()[1].split("@")[0], line.split()[3]
        if dev != HOST_IF and ipaddress.ip_interface(addr).network.overlaps(SUBNET):
            raise NetsimError(f"{addr} on {dev} overlaps {SUBNET}: something else uses the range; refusing")
    for line in run("ip", "-4", "route", "show", "table", "all").splitlines():
        words = line.split()
        if HOST_IF in words:
            continue
        for word in words[:2]:  # "10.1.0.0/16 via ..." or "blackhole 10.1.0.0/16"
            with contextlib.suppress(ValueError):
                if ipaddress.ip_network(word, strict=False).overlaps(SUBNET):
                    raise NetsimError(f"route `{line}` overlaps {SUBNET}; refusing")


def _copy_tcp_buffers() -> None:
    """The remote namespace gets the host's TCP buffer limits (a new namespace starts at defaults)."""
    for name in ("tcp_rmem", "tcp_wmem"):
        value = Path(f"/proc/sys/net/ipv4/{name}").read_text().split()
        run("sysctl", "-qw", f"net.ipv4.{name}={' '.join(value)}", ns=NS_REMOTE)


def _build_topology() -> None:
    have = namespaces()
    for ns in (NS_ROUTER, NS_REMOTE):
        if ns not in have:
            run("ip", "netns", "add", ns)
        run("ip", "-n", ns, "link", "set", "lo", "up")
    if not _host_if_exists():
        run("ip", "link", "add", HOST_IF, "type", "veth", "peer", "name", "r-host", "netns", NS_ROUTER)
    if run("ip", "-n", NS_ROUTER, "link", "show", "r-remote", check=False) == "":
        run("ip", "-n", NS_ROUTER, "link", "add", "r-remote", "type", "veth", "peer", "name", "s3-0", "netns", NS_REMOTE)
    run("ip", "addr", "replace", f"{HOST_IP}/24", "dev", HOST_IF)
    run("ip", "-n", NS_ROUTER, "addr", "replace", f"{ROUTER_HOST_IP}/24", "dev", "r-host")
    run("ip", "-n", NS_ROUTER, "addr", "replace", f"{ROUTER_REMOTE_IP}/24", "dev", "r-remote")
    run("ip", "-n", NS_REMOTE, "addr", "replace", f"{REMOTE_IP}/24", "dev", "s3-0")
    run("ip", "link", "set", HOST_IF, "up")
    for ns, dev in ((NS_ROUTER, "r-host"), (NS_ROUTER, "r-remote"), (NS_REMOTE, "s3-0")):
        run("ip", "-n", ns, "link", "set", dev, "up")
    run("ip", "route", "replace", "10.213.1.0/24", "via", ROUTER_HOST_IP, "dev", HOST_IF)
    run("ip", "-n", NS_REMOTE, "route", "replace", "10.213.0.0/24", "via", ROUTER_REMOTE_IP, "dev", "s3-0")
    run("sysctl", "-qw", "net.ipv4.ip_forward=1", ns=NS_ROUTER)
    _copy_tcp_buffers()


def _iptables() -> str:
    """An iptables that works in the router namespace (legacy first: not every kernel has nft's queue)."""
    for cmd in ("iptables-legacy", "iptables"):
        if shutil.which(cmd) and subprocess.run(["ip", "netns", "exec", NS_ROUTER, cmd, "-w", "-S", "FORWARD"],
                                                capture_output=True).returncode == 0:
            return cmd
    raise NetsimError("no working iptables in the router namespace (needs xt_NFQUEUE and nfnetlink_queue)")


# ------------------------------------------------------------------------------------- shaping

def _shape_rate(shape: Shape) -> None:
    for dev in ("r-host", "r-remote"):
        if shape.rate_mbit <= 0:
            run("tc", "qdisc", "del", "dev", dev, "root", ns=NS_ROUTER, check=False)
            continue
        bytes_per_ms = int(shape.rate_mbit * 1e6 / 8 / 1000)
        burst = max(2 * bytes_per_ms, 2 * 65536)  # 2 ms, and at least two GSO packets
        run("tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", f"{shape.rate_mbit:g}mbit",
            "burst", str(burst), "latency", f"{shape.queue_ms:g}ms", ns=NS_ROUTER)


def _start_delay_line(one_way_us: int) -> int:
    exe = delay_line_binary()
    control = STATE_DIR / "delay_us"
    control.write_text(str(one_way_us))
    log = open(STATE_DIR / "delay_line.log", "ab")  # noqa: SIM115 - the child keeps it
    with log:
        proc = subprocess.Popen(["ip", "netns", "exec", NS_ROUTER, str(exe), str(QUEUE_NUM), str(one_way_us),
                                 str(control)], stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                start_new_session=True)
    time.sleep(0.2)
    if proc.poll() is not None:
        raise NetsimError(f"the delay line exited at once; see {STATE_DIR / 'delay_line.log'}")
    return proc.pid  # `ip netns exec` execs the program: this pid is the delay line itself


def _shape_delay(shape: Shape, state: State) -> None:
    """Start the delay line, or tell the running one its new delay (SIGHUP: no dark moment)."""
    ipt = _iptables()
    one_way_us = int(shape.rtt_ms * 1000 / 2)
    marker = "delay_line-"
    if shape.rtt_ms <= 0:
        run(ipt, "-w", "-F", "FORWARD", ns=NS_ROUTER)
        stop_pid(state.delay_pid, marker)
        state.delay_pid = None
        return
    if alive(state.delay_pid, marker):
        assert state.delay_pid is not None
        (STATE_DIR / "delay_us").write_text(str(one_way_us))
        os.kill(state.delay_pid, signal.SIGHUP)
    else:
        state.delay_pid = _start_delay_line(one_way_us)
    rule = ["FORWARD", "-j", "NFQUEUE", "--queue-num", str(QUEUE_NUM)]
    if subprocess.run(["ip", "netns", "exec", NS_ROUTER, ipt, "-w", "-C", *rule], capture_output=True).returncode:
        run(ipt, "-w", "-A", *rule, ns=NS_ROUTER)


# ------------------------------------------------------------------------------------- server

def _weed_args(data: Path) -> list[str]:
    ports = {name: PORT_BASE + i for i, name in enumerate(("master", "volume", "filer", "admin"), start=1)}
    args = [f"-logdir={data.parent / 'weed-logs'}", "mini", f"-dir={data}", f"-ip={REMOTE_IP}", "-ip.bind=0.0.0.0",
            f"-s3.port={S3_PORT}", f"-s3.port.grpc={PORT_BASE + 10000}", f"-s3.config={STATE_DIR / 's3.json'}",
            "-admin.ui=false", "-webdav=false", "-s3.port.iceberg=0", "-s3.port.lance=0",
            "-master.telemetry=false", "-volume.preStopSeconds=0", "-volume.max=200",
            f"-filer.localSocket={STATE_DIR / 'filer.sock'}", f"-s3.localSocket={STATE_DIR / 's3.sock'}"]
    for name, port in ports.items():
        args += [f"-{name}.port={port}", f"-{name}.port.grpc={port + 10000}"]
    return args


def _s3_answers(timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"http://{REMOTE_IP}:{S3_PORT}/", timeout=timeout):
            return True
    except urllib.error.HTTPError:
        return True  # anonymous ListBuckets: 403, the server is there
    except OSError:
        return False


def _start_server(state: State) -> None:
    if alive(state.server_pid, "weed"):
        return
    data = STATE_DIR / "data"
    (data.parent / "weed-logs").mkdir(parents=True, exist_ok=True)
    data.mkdir(parents=True, exist_ok=True)
    cfg = STATE_DIR / "s3.json"
    cfg.write_text(json.dumps({"identities": [{"name": "netsim", "credentials": [
        {"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}], "actions": ["Admin", "Read", "List", "Tagging", "Write"]}]}))
    cfg.chmod(0o600)
    with open(STATE_DIR / "weed.log", "ab") as log:
        proc = subprocess.Popen(["ip", "netns", "exec", NS_REMOTE, find_weed(), *_weed_args(data)],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    state.server_pid = proc.pid
    _save_state(state)
    guard(state.endpoint)
    deadline = time.monotonic() + 60
    while not _s3_answers():
        if proc.poll() is not None:
            raise NetsimError(f"weed exited ({proc.returncode}); see {STATE_DIR / 'weed.log'}")
        if time.monotonic() > deadline:
            raise NetsimError(f"S3 did not answer at {state.endpoint} within 60 s; see {STATE_DIR / 'weed.log'}")
        time.sleep(0.3)


# ------------------------------------------------------------------------------------- public

def vacuum(garbage_threshold: float = 0.01, timeout: float = 900.0) -> None:
    """Give the disk back: SeaweedFS only marks deleted needles, its master compacts volumes on demand.
    The benchmark deletes what it no longer reads and calls this between runs, or a full run of both
    links would fill the disk it measures (it did once: 66 GB)."""
    url = f"http://{REMOTE_IP}:{PORT_BASE + 1}/vol/vacuum?garbageThreshold={garbage_threshold}"
    with urllib.request.urlopen(url, timeout=timeout) as answer:
        answer.read()


def guard(endpoint: str) -> None:
    """Raise unless every address of ``endpoint`` is loopback or routed out through ferrysim0."""
    host = urlsplit(endpoint).hostname or ""
    for info in socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM):
        addr = str(info[4][0])
        if ipaddress.ip_address(addr).is_loopback:
            continue
        route = run("ip", "route", "get", addr, check=False).split()
        if "dev" not in route or route[route.index("dev") + 1] != HOST_IF:
            raise NetsimError(f"{addr} is not routed via {HOST_IF} (is the link up?); refusing to send to it")


def up(shape: Shape) -> State:
    """Build the link (or re-shape the running one in place: the server and its objects stay).

    A first ``up`` that fails half-way takes down what it built: the machine is left as it was.
    """
    if not is_root():
        raise NetsimError("the emulated link needs root (network namespaces, tc, iptables)")
    with _locked():
        ensure_packages()
        fresh = load_state() is None and not _host_if_exists()
        state = load_state() or State(shape)
        try:
            _bring_up(state, shape)
        except BaseException:
            if fresh:
                with contextlib.suppress(Exception):
                    _teardown()
            raise
        return state


def _bring_up(state: State, shape: Shape) -> None:
    if not _host_if_exists():
        _check_range_free()
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    _build_topology()
    guard(state.endpoint)
    _shape_rate(shape)
    _shape_delay(shape, state)
    state.shape = shape
    _save_state(state)
    _start_server(state)
    _save_state(state)


def _remove_stale_sockets() -> None:
    ports = [PORT_BASE + i + 10000 for i in range(5)]
    for path in Path("/tmp").glob("seaweedfs-*-grpc-*.sock"):
        if any(path.name.endswith(f"-{p}.sock") for p in ports):
            with contextlib.suppress(OSError):
                path.unlink()


def down() -> None:
    """Stop what up started, delete the namespaces (their veths, qdiscs, rules go with them), the data."""
    if not is_root():
        raise NetsimError("down needs root")
    with _locked():
        _teardown()


def _teardown() -> None:
    state = load_state()
    if state is not None:
        stop_pid(state.server_pid, "weed")
        stop_pid(state.delay_pid, "delay_line-")
    have = namespaces()
    for ns in (NS_REMOTE, NS_ROUTER):
        if ns not in have:
            continue
        for sig in (signal.SIGTERM, signal.SIGKILL):  # anything still inside was started through us
            for pid in run("ip", "netns", "pids", ns, check=False).split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), sig)
            time.sleep(0.3)
        run("ip", "netns", "del", ns)
    run("ip", "link", "del", HOST_IF, check=False)  # usually gone with its peer in the router namespace
    if _host_if_exists():
        raise NetsimError(f"{HOST_IF} could not be deleted")
    _remove_stale_sockets()
    shutil.rmtree(STATE_DIR, ignore_errors=True)


def status() -> dict[str, object]:
    """What runs, the link's shape, the delay line's and tbf's counters, a TCP connect probe."""
    state = load_state()
    report: dict[str, object] = {"up": state is not None, "namespaces": sorted(namespaces() & {NS_ROUTER, NS_REMOTE}),
                                 "host_if": _host_if_exists()}
    if state is None:
        return report
    report |= {"shape": asdict(state.shape), "endpoint": state.endpoint,
               "server_alive": alive(state.server_pid, "weed"), "delay_line_alive": alive(state.delay_pid, "delay_line-")}
    if report["delay_line_alive"] and state.delay_pid:
        os.kill(state.delay_pid, signal.SIGUSR1)
        time.sleep(0.2)
        lines = (STATE_DIR / "delay_line.log").read_text(errors="replace").splitlines()
        report["delay_line"] = next((ln for ln in reversed(lines) if "packets=" in ln), "")
    if NS_ROUTER in report["namespaces"]:  # type: ignore[operator]
        report["qdiscs"] = run("tc", "-s", "qdisc", "show", ns=NS_ROUTER, check=False).strip()
    try:
        guard(state.endpoint)
        t0 = time.perf_counter()
        with socket.create_connection((REMOTE_IP, S3_PORT), timeout=5):
            report["connect_ms"] = round((time.perf_counter() - t0) * 1000, 1)
    except (OSError, NetsimError) as exc:
        report["probe_error"] = str(exc)
    return report
