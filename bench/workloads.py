"""The workloads of issue 6. Each measures every contender that applies, run after run, in one process.

Within a run the contenders go one after the other (the order rotates between runs), so a noisy
neighbour on this shared 2-core machine hits them alike. Every number is kept per run; the report
takes medians and spreads, and judges only ratios measured in the same run.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import sqlite3
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from boto3.s3.transfer import TransferConfig

from bench.contenders import Contender, Ferry, Nginx, NginxProxy, Rclone, http_pool
from bench.probes import MiB, cpu_per, disk_write_fsync_mbps, log, md5_mbps, pct, read_http, reader, timed_loop
from bench.proc_cpu import CpuMeter
from bench.remote import CountingRelay, Remote, delete_prefixes

SMALL = 4096


@dataclass(frozen=True)
class Profile:
    """Sizes and counts; ``quick`` is ``full`` made small enough to run both links in ~half an hour."""

    name: str
    object_size: int
    dataset_count: int
    dataset_object: int
    herd_size: int
    runs: int
    small_n: int  # 4 KiB requests per contender and run (fewer when the budget runs out)
    latency_budget_s: float  # per contender and run, for the 4 KiB loops (a direct PUT costs 2 RTT)
    threads: int = 16
    herd_readers: int = 32
    ferry_workers: tuple[int, ...] = (1, 2)
    scale_entries: int = 1_000_000


# smoke's 200 4 KiB requests: a warm hit costs ~0.2 ms of gateway CPU and /proc counts in 10 ms ticks,
# so 30 hits could read as 0 µs per hit (stop 36's CI)
PROFILES = {
    "smoke": Profile("smoke", 8 * MiB, 20, 64 * 1024, 8 * MiB, 1, 200, 3.0, ferry_workers=(1,), scale_entries=20_000),
    "quick": Profile("quick", 256 * MiB, 200, MiB, 64 * MiB, 3, 400, 15.0),
    "full": Profile("full", 1024 * MiB, 500, MiB, 256 * MiB, 3, 1000, 30.0),
}
WORKLOADS = ("disk", "checkpoint", "small_put", "cold_read", "warm_read", "cold_epoch", "warm_epoch", "small_get",
             "herd", "scale")


# ---------------------------------------------------------------------------------------- the bench
class Bench:
    """Runs the workloads against the contenders of one link profile; results[workload][contender] = runs."""

    def __init__(self, profile: Profile, remote: Remote, bucket: str, work: Path, link: str,
                 contenders: dict[str, Contender], nginx_binary: str | None, runs: int) -> None:
        self.p, self.remote, self.bucket, self.work, self.link = profile, remote, bucket, work, link
        self.c, self.nginx_binary, self.runs = contenders, nginx_binary, runs
        self.rs3 = remote.client()
        self.pool = http_pool()
        self.results: dict[str, dict[str, list[dict[str, Any]]]] = {}
        self.skipped: dict[str, str] = {}
        self.errors: list[str] = []
        self.run = 0  # the run being measured: every row says which, so ratios pair rows of one run

    # -- helpers
    def pick(self, *names: str) -> list[Contender]:
        """The running contenders among ``names`` ("ferry-w*": every multi-worker Ferry), in that order."""
        out: list[Contender] = []
        for name in names:
            out += [c for n, c in self.c.items() if n.startswith("ferry-w")] if name == "ferry-w*" else (
                [self.c[name]] if name in self.c else [])
        return out

    def rotate(self, items: list[Contender], run: int) -> list[Contender]:
        k = run % len(items) if items else 0
        return items[k:] + items[:k]

    def record(self, workload: str, c: Contender, fn: Callable[[], dict[str, Any]]) -> None:
        try:
            row = fn()
        except Exception as exc:
            msg = f"{workload}/{c.name}: {type(exc).__name__}: {str(exc)[:300]}"
            log("ERROR " + msg)
            self.errors.append(msg)
            row = {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
        row.setdefault("run", self.run)
        self.results.setdefault(workload, {}).setdefault(c.name, []).append(row)
        log(f"{workload} {c.name}: {row}")

    def copy(self, src: str, dst: str) -> None:
        """A server-side copy: a fresh, never-read key with the same bytes (cold for every cache)."""
        self.rs3.copy_object(Bucket=self.bucket, Key=dst, CopySource={"Bucket": self.bucket, "Key": src})

    def copy_many(self, pairs: list[tuple[str, str]]) -> None:
        with cf.ThreadPoolExecutor(16) as ex:
            list(ex.map(lambda p: self.copy(*p), pairs))

    def stage(self, readers: list[str], herd: list[str], selected: list[str]) -> None:
        """Server-side copies for every cold key of the whole link, made before any contender starts:
        rclone's VFS lists a directory once (--dir-cache-time 5m), so keys made later would be invisible to it."""
        pairs: list[tuple[str, str]] = []
        cold = "cold_read" in selected or "warm_read" in selected
        epoch = "cold_epoch" in selected or "warm_epoch" in selected
        for name in readers:
            for run in range(self.runs if "cold_read" in selected else 1):
                pairs += [("base/big", f"cold/{self.link}/{name}/{run}")] if cold else []
            for run in range(self.runs if "cold_epoch" in selected else 1):
                pairs += [(f"base/ds/{i:05d}", f"epoch/{self.link}/{name}/{run}/{i:05d}")
                          for i in range(self.p.dataset_count)] if epoch else []
        if "herd" in selected:
            pairs += [("base/herd", f"herd/{self.link}/{name}/0") for name in herd]
        log(f"staging {len(pairs)} server-side copies")
        self.copy_many(pairs)

    def drop(self, prefixes: list[str]) -> None:
        """Delete remote keys no run reads again: a full run of both links would otherwise fill the disk."""
        log(f"deleted {delete_prefixes(self.rs3, self.bucket, prefixes)} objects under {len(prefixes)} prefixes")

    def cold_key(self, c: Contender, run: int) -> str:
        return f"cold/{self.link}/{c.name}/{run}"

    def epoch_prefix(self, c: Contender, run: int) -> str:
        return f"epoch/{self.link}/{c.name}/{run}/"

    # -- workloads
    def disk(self, run: int) -> None:
        size = min(self.p.object_size, 1024 * MiB)
        rows = {"write_fsync_mbps": disk_write_fsync_mbps(self.work, size), "md5_mbps_per_core": md5_mbps(), "run": run}
        self.results.setdefault("disk", {}).setdefault("disk", []).append(rows)
        log(f"disk: {rows}")

    def checkpoint(self, run: int, src: Path) -> None:
        size = src.stat().st_size
        for c in self.rotate(self.pick("direct", "ferry", "ferry-w*", "rclone"), run):
            key = f"ckpt/{self.link}/{c.name}/{run}"

            def one(c: Contender = c, key: str = key) -> dict[str, Any]:
                meter = CpuMeter(c.cpu_roots())
                t0 = time.perf_counter()
                c.s3().upload_file(str(src), self.bucket, key, Config=TransferConfig())  # boto3 defaults
                ack = time.perf_counter() - t0
                cpu = cpu_per(meter, size / 2**30, 1.0)
                c.durable(self.remote, self.bucket, key, 1)
                durable = time.perf_counter() - t0
                cpu_durable = cpu_per(meter, size / 2**30, 1.0)
                head = self.rs3.head_object(Bucket=self.bucket, Key=key)
                if head["ContentLength"] != size:
                    raise RuntimeError(f"the remote holds {head['ContentLength']} bytes, not {size}")
                return {"ack_s": ack, "durable_s": durable, "write_mbps": size / ack / 1e6,
                        **{f"{k}_s_per_gib": v for k, v in cpu.items()},
                        **{f"{k}_s_per_gib_durable": v for k, v in cpu_durable.items()}}

            self.record("checkpoint", c, one)
            self.rs3.delete_object(Bucket=self.bucket, Key=key)

    def small_put(self, run: int) -> None:
        body = os.urandom(SMALL)
        for c in self.rotate(self.pick("direct", "ferry", "ferry-w*", "rclone"), run):
            prefix = f"small/{self.link}/{c.name}/{run}/"

            def one(c: Contender = c, prefix: str = prefix) -> dict[str, Any]:
                s3 = c.s3()
                meter = CpuMeter(c.cpu_roots())
                lat = timed_loop(lambda i: s3.put_object(Bucket=self.bucket, Key=f"{prefix}{i:05d}", Body=body),
                                 self.p.small_n, self.p.latency_budget_s)
                cpu = cpu_per(meter, len(lat), 1e6)
                t0 = time.perf_counter()
                c.durable(self.remote, self.bucket, prefix, len(lat), timeout=600)  # keep destage out of what follows
                return {"p50_ms": pct(lat, 0.5) * 1e3, "p99_ms": pct(lat, 0.99) * 1e3, "n": len(lat),
                        "barrier_s": time.perf_counter() - t0, **{f"{k}_us": v for k, v in cpu.items()},
                        **{f"{k}_us_durable": v for k, v in cpu_per(meter, len(lat), 1e6).items()}}

            self.record("small_put", c, one)

    def cold_read(self, run: int) -> None:
        readers = self.rotate(self.pick("direct", "ferry", "ferry-w*", "rclone", "nginx-proxy"), run)
        for c in readers:
            def one(c: Contender = c) -> dict[str, Any]:
                ttfb, total, n = reader(c, self.pool, self.bucket)(self.cold_key(c, run))
                if n != self.p.object_size:
                    raise RuntimeError(f"read {n} bytes, expected {self.p.object_size}")
                return {"mbps": n / total / 1e6, "ttfb_ms": ttfb * 1e3, "seconds": total}

            self.record("cold_read", c, one)
        if run > 0:  # warm reads use run 1's keys; the others are never read again
            self.drop([self.cold_key(c, run) for c in readers])

    def warm_read(self, run: int) -> None:
        cs = self.rotate(self.pick("direct", "ferry", "ferry-w*", "rclone", "nginx-proxy", "nginx-static"), run)
        for c in cs:
            key = "big.bin" if c.name == "nginx-static" else self.cold_key(c, 0)
            read = reader(c, self.pool, self.bucket)
            if run == 0 and "cold_read" not in self.results and c.name != "nginx-static":
                read(key)  # prime: the cold read would have

            def one(read: Callable[[str], tuple[float, float, int]] = read, key: str = key,
                    c: Contender = c) -> dict[str, Any]:
                meter = CpuMeter(c.cpu_roots())
                ttfb, total, n = read(key)
                if n != self.p.object_size:
                    raise RuntimeError(f"read {n} bytes, expected {self.p.object_size}")
                return {"mbps": n / total / 1e6, "ttfb_ms": ttfb * 1e3,
                        **{f"{k}_s_per_gib": v for k, v in cpu_per(meter, n / 2**30, 1.0).items()}}

            self.record("warm_read", c, one)

    def _epoch(self, c: Contender, prefix: str) -> dict[str, Any]:
        read = reader(c, self.pool, self.bucket)
        keys = [f"{prefix}{i:05d}" for i in range(self.p.dataset_count)]
        meter = CpuMeter(c.cpu_roots())
        t0 = time.perf_counter()
        with cf.ThreadPoolExecutor(self.p.threads) as ex:
            sizes = [n for _, _, n in ex.map(read, keys)]
        seconds = time.perf_counter() - t0
        if sum(sizes) != self.p.dataset_count * self.p.dataset_object:
            raise RuntimeError(f"read {sum(sizes)} bytes, expected {self.p.dataset_count * self.p.dataset_object}")
        return {"seconds": seconds, "objects_per_s": len(keys) / seconds, "mbps": sum(sizes) / seconds / 1e6,
                **{f"{k}_ms_per_object": v for k, v in cpu_per(meter, len(keys), 1e3).items()}}

    def cold_epoch(self, run: int) -> None:
        readers = self.rotate(self.pick("direct", "ferry", "ferry-w*", "rclone", "nginx-proxy"), run)
        for c in readers:
            self.record("cold_epoch", c, lambda c=c: self._epoch(c, self.epoch_prefix(c, run)))
        if run > 0:  # warm epochs read run 1's prefix
            self.drop([self.epoch_prefix(c, run) for c in readers])

    def warm_epoch(self, run: int) -> None:
        cs = self.rotate(self.pick("direct", "ferry", "ferry-w*", "rclone", "nginx-proxy"), run)
        for c in cs:
            if run == 0 and "cold_epoch" not in self.results:
                self._epoch(c, self.epoch_prefix(c, 0))  # prime
            self.record("warm_epoch", c, lambda c=c: self._epoch(c, self.epoch_prefix(c, 0)))

    def small_get(self, run: int) -> None:
        """Warm 4 KiB GETs, one after the other: boto3 for S3 contenders, and urllib3 + URL for all."""
        cs = self.rotate(self.pick("direct", "ferry", "ferry-w*", "rclone", "nginx-proxy"), run)
        key = "base/small4k"
        for c in cs:
            def one(c: Contender = c) -> dict[str, Any]:
                row: dict[str, Any] = {}
                url = c.url(self.bucket, key)
                read_http(self.pool, url)  # warm it (and the connection)
                meter = CpuMeter(c.cpu_roots())
                lat = timed_loop(lambda i: read_http(self.pool, url), self.p.small_n, self.p.latency_budget_s)
                row.update(http_p50_ms=pct(lat, 0.5) * 1e3, http_p99_ms=pct(lat, 0.99) * 1e3, http_n=len(lat),
                           **{f"http_{k}_us": v for k, v in cpu_per(meter, len(lat), 1e6).items()})
                if c.kind == "s3":
                    s3 = c.s3()
                    meter = CpuMeter(c.cpu_roots())
                    lat = timed_loop(lambda i: s3.get_object(Bucket=self.bucket, Key=key)["Body"].read(),
                                     self.p.small_n, self.p.latency_budget_s)
                    row.update(boto3_p50_ms=pct(lat, 0.5) * 1e3, boto3_p99_ms=pct(lat, 0.99) * 1e3, boto3_n=len(lat),
                               **{f"boto3_{k}_us": v for k, v in cpu_per(meter, len(lat), 1e6).items()})
                return row

            self.record("small_get", c, one)

    def herd(self, run: int, make: dict[str, Callable[[Remote], tuple[Contender, Callable[[], None]]]]) -> None:
        """32 readers of one cold object at once; a counting relay measures what the remote sent."""
        for name, factory in make.items():
            relay = CountingRelay(self.remote.endpoint).start()
            try:
                c, stop = factory(self.remote.via(relay.endpoint))
            except Exception as exc:
                relay.stop()
                self.errors.append(f"herd/{name}: could not start: {exc}"[:400])
                log(f"ERROR {self.errors[-1]}")
                continue
            key = f"herd/{self.link}/{name}/0"

            def one(c: Contender = c, key: str = key, relay: CountingRelay = relay) -> dict[str, Any]:
                read = reader(c, http_pool(), self.bucket)
                gate = threading.Barrier(self.p.herd_readers)
                before = relay.down_bytes

                def go(_: int) -> int:
                    gate.wait()
                    return read(key)[2]

                t0 = time.perf_counter()
                with cf.ThreadPoolExecutor(self.p.herd_readers) as ex:
                    got = list(ex.map(go, range(self.p.herd_readers)))
                seconds = time.perf_counter() - t0
                if any(n != self.p.herd_size for n in got):
                    raise RuntimeError(f"short reads: {sorted(set(got))}")
                fetched = relay.down_bytes - before
                return {"remote_bytes": fetched, "ratio": fetched / self.p.herd_size, "seconds": seconds,
                        "readers": self.p.herd_readers}

            try:
                self.record("herd", c, one)
            finally:
                stop()
                relay.stop()

    def scale(self, ferry: Ferry, small_key: str = "base/small4k") -> None:
        """Hit p50 with 1k vs 1M catalog entries, and start-up time with 1M: needs the read-cache catalog."""
        try:
            self._scale(ferry, small_key)
        except Exception as exc:
            msg = f"scale/{ferry.name}: {type(exc).__name__}: {str(exc)[:300]}"
            log("ERROR " + msg)
            self.errors.append(msg)
            self.results.setdefault("scale", {}).setdefault(ferry.name, []).append({"error": msg[:200]})

    def _scale(self, ferry: Ferry, small_key: str) -> None:
        with sqlite3.connect(f"file:{ferry.db_path}?mode=ro", uri=True) as db:
            has = db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='cache_entries'").fetchone()
        if not has:
            self.skipped["scale"] = "needs the read cache catalog (no `cache_entries` table in Ferry's catalog yet)"
            log(f"scale: skipped: {self.skipped['scale']}")
            return
        s3 = ferry.s3()
        s3.get_object(Bucket=self.bucket, Key=small_key)["Body"].read()  # cache it (a real hit below)
        with sqlite3.connect(f"file:{ferry.db_path}?mode=ro", uri=True) as db:
            if not db.execute("SELECT count(*) FROM cache_entries").fetchone()[0]:
                self.skipped["scale"] = "Ferry does not cache yet (a read left no `cache_entries` row)"
                log(f"scale: skipped: {self.skipped['scale']}")
                return
        row: dict[str, Any] = {}
        for entries in (1000, self.p.scale_entries):
            ferry.stop()
            fill_cache_entries(ferry.db_path, entries)
            t0 = time.perf_counter()
            ferry.start()
            row[f"start_s_{'1M' if entries == 1_000_000 else entries}"] = time.perf_counter() - t0
            s3 = ferry.s3()
            s3.get_object(Bucket=self.bucket, Key=small_key)["Body"].read()
            lat = timed_loop(lambda i, s3=s3: s3.get_object(Bucket=self.bucket, Key=small_key)["Body"].read(),
                             self.p.small_n, self.p.latency_budget_s)
            row[f"hit_p50_ms_{'1M' if entries == 1_000_000 else entries}"] = statistics.median(lat) * 1e3
        self.results.setdefault("scale", {}).setdefault(ferry.name, []).append(row)
        log(f"scale: {row}")


def fill_cache_entries(db_path: Path, total: int) -> None:
    """Pad ``cache_entries`` up to ``total`` rows with clones of a real row under other keys (realistic values)."""
    with sqlite3.connect(db_path) as db:
        cols = [c[1] for c in db.execute("PRAGMA table_info(cache_entries)").fetchall() if c[1] not in ("id", "key")]
        have = db.execute("SELECT count(*) FROM cache_entries").fetchone()[0]
        listed = ", ".join(f'"{c}"' for c in cols)
        sql = (f'INSERT INTO cache_entries ("key", {listed}) SELECT ?, {listed} FROM cache_entries '
               'WHERE "key" NOT LIKE \'filler/%\' LIMIT 1')
        db.executemany(sql, ((f"filler/{i:09d}",) for i in range(have, total)))
        db.commit()


def herd_factories(work: Path, nginx_binary: str | None, profile: Profile
                   ) -> dict[str, Callable[[Remote], tuple[Contender, Callable[[], None]]]]:
    """Fresh contenders for the herd, each pointed at its own counting relay."""
    out: dict[str, Callable[[Remote], tuple[Contender, Callable[[], None]]]] = {}
    for w in profile.ferry_workers:
        def ferry(remote: Remote, w: int = w) -> tuple[Contender, Callable[[], None]]:
            f = Ferry(remote, work / "herd", workers=w).start()
            return f, f.stop
        out["ferry" if w == 1 else f"ferry-w{w}"] = ferry

    def rclone(remote: Remote) -> tuple[Contender, Callable[[], None]]:
        r = Rclone(remote, work / "herd").start()
        return r, r.stop
    out["rclone"] = rclone
    if nginx_binary:
        def nginx(remote: Remote) -> tuple[Contender, Callable[[], None]]:
            n = Nginx(nginx_binary, remote, work / "herd", work).start()
            return NginxProxy(n, remote), n.stop
        out["nginx-proxy"] = nginx
    return out
