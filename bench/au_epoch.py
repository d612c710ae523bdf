"""One epoch through simulated accelerators (bench/au.py's measure): loader threads feed batches
to accelerators that compute for a fixed time per batch; AU = computing time / wall time. Also a
real PyTorch DataLoader's epoch, and the calibration of the compute time on local disk."""

from __future__ import annotations

import os
import queue
import threading
import time
from pathlib import Path

from bench.au_data import Reader, Shape, local_reader, order

LOADERS = 8


# ---- an epoch: loaders feed the simulated accelerator ----------------------------------------------
def epoch(keys: list[str], reader: Reader | list[Reader], shape: Shape, compute_s: float) -> dict[str, float]:
    """One pass over ``keys``: AU, wall time, batches. Samples are grouped 16 to a batch.

    With a list of readers (one per fleet node), loader i reads through ``reader[i % len(reader)]``.
    """
    readers = reader if isinstance(reader, list) else [reader]
    work: queue.Queue[str | None] = queue.Queue()
    for key in keys:
        work.put(key)
    batches: queue.Queue[int | None] = queue.Queue(maxsize=2 * LOADERS)
    errors: list[BaseException] = []

    def loader(read: Reader) -> None:
        try:
            pending = 0
            while True:
                try:
                    key = work.get_nowait()
                except queue.Empty:
                    break
                if key is None:
                    break
                for n in read(key):
                    pending += n
                    if pending >= shape.batch_bytes:
                        batches.put(pending)
                        pending = 0
            if pending:
                batches.put(pending)
        except BaseException as exc:  # reported after the epoch
            errors.append(exc)
        finally:
            batches.put(None)

    started = time.perf_counter()
    threads = [threading.Thread(target=loader, args=(readers[i % len(readers)],), daemon=True)
               for i in range(LOADERS)]
    for t in threads:
        t.start()
    done = computed = 0
    finished = 0
    while finished < LOADERS:
        item = batches.get()
        if item is None:
            finished += 1
            continue
        time.sleep(compute_s)  # the accelerator computes the batch
        computed += 1
        done += item
    wall = time.perf_counter() - started
    if errors:
        raise errors[0]
    return {"au": computed * compute_s / wall, "wall": wall, "batches": computed, "bytes": done}


def torch_epoch(endpoint: str, access: str, secret: str, bucket: str, prefix: str, compute_s: float) -> dict[str, float]:
    """A real DataLoader over S3MapDataset (2 worker processes, shuffled, 16 samples a batch)."""
    from s3torchconnector import S3ClientConfig, S3MapDataset
    from torch.utils.data import DataLoader

    os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"] = access, secret
    dataset = S3MapDataset.from_prefix(f"s3://{bucket}/{prefix}", region="us-east-1", endpoint=endpoint,
                                       s3client_config=S3ClientConfig(force_path_style=True),
                                       transform=lambda obj: len(obj.read()))
    loader = DataLoader(dataset, batch_size=16, shuffle=True, num_workers=2, prefetch_factor=4)
    started = time.perf_counter()
    computed = 0
    for _ in loader:
        time.sleep(compute_s)
        computed += 1
    wall = time.perf_counter() - started
    return {"au": computed * compute_s / wall, "wall": wall, "batches": computed, "bytes": 0}




def calibrate(shape: Shape, keys: list[str], root: Path) -> float:
    """The smallest compute time per batch (x1.25 steps) at which local disk gives AU >= 99 %."""
    reader = local_reader(root, shape)
    bare = epoch(order(keys, shape, 0), reader, shape, 0.0)
    compute = bare["wall"] / max(1, bare["batches"])
    for _ in range(20):
        if epoch(order(keys, shape, 1), reader, shape, compute)["au"] >= 0.99:
            return compute
        compute *= 1.25
    return compute
