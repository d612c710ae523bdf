"""The datasets of the AU benchmark (bench/au.py): their shapes, how each is generated and
ordered per epoch, and the readers of the ML data stack each shape is read with (the CRT client
of s3torchconnector for objects, pyarrow for Parquet, local files for the calibration)."""

from __future__ import annotations

import io
import os
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

KiB, MiB = 1024, 1024 * 1024
Reader = Callable[[str], Iterator[int]]  # key -> the byte counts of the batches it yields


@dataclass
class Shape:
    name: str
    count: int
    size: int
    shuffled: bool
    batch_bytes: int  # bytes per batch (samples: 16 samples; shards: 4 MiB; parquet: a row group)


SHAPES = {
    "samples": Shape("samples", 512, 256 * KiB, True, 16 * 256 * KiB),
    "shards": Shape("shards", 8, 32 * MiB, False, 4 * MiB),
    "parquet": Shape("parquet", 8, 16 * MiB, False, 2 * MiB),
    "torch": Shape("torch", 512, 256 * KiB, True, 16 * 256 * KiB),
}


# ---- the loaders ---------------------------------------------------------------------------------
def crt_reader(endpoint: str, access: str, secret: str, bucket: str, shape: Shape) -> Reader:
    """Batches of an object read with the CRT client (samples: one object is 1/16 of a batch)."""
    from s3torchconnectorclient._mountpoint_s3_client import MountpointS3Client

    os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"] = access, secret
    client = MountpointS3Client("us-east-1", endpoint=endpoint, force_path_style=True)

    def read(key: str) -> Iterator[int]:
        pending = 0
        for chunk in client.get_object(bucket, key):
            pending += len(chunk)
            while pending >= shape.batch_bytes:
                pending -= shape.batch_bytes
                yield shape.batch_bytes
        if pending:
            yield pending
    return read


def parquet_reader(endpoint: str, access: str, secret: str, bucket: str, shape: Shape) -> Reader:
    import pyarrow.fs
    import pyarrow.parquet as pq

    host = endpoint.split("://", 1)[1]
    fs = pyarrow.fs.S3FileSystem(access_key=access, secret_key=secret, endpoint_override=host, scheme="http",
                                 region="us-east-1", force_virtual_addressing=False)

    def read(key: str) -> Iterator[int]:
        with fs.open_input_file(f"{bucket}/{key}") as fh:
            pf = pq.ParquetFile(fh)
            for group in range(pf.num_row_groups):
                yield pf.read_row_group(group).nbytes
    return read


def local_reader(root: Path, shape: Shape) -> Reader:
    def read(key: str) -> Iterator[int]:
        if shape.name == "parquet":
            import pyarrow.parquet as pq

            pf = pq.ParquetFile(root / key)
            for group in range(pf.num_row_groups):
                yield pf.read_row_group(group).nbytes
            return
        with open(root / key, "rb") as fh:
            while data := fh.read(shape.batch_bytes):
                yield len(data)
    return read


# ---- datasets ------------------------------------------------------------------------------------
def make_dataset(shape: Shape, root: Path, prefix: str) -> dict[str, bytes]:
    """Keys (under ``prefix``) and bytes of a shape's dataset; also written under ``root``."""
    out: dict[str, bytes] = {}
    for i in range(shape.count):
        key = f"{prefix}{shape.name}/{'part' if shape.name == 'parquet' else 'obj'}-{i:05d}"
        out[key] = parquet_bytes(shape) if shape.name == "parquet" else os.urandom(shape.size)
        path = root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(out[key])
    return out


def parquet_bytes(shape: Shape) -> bytes:
    """A Parquet file of ``shape.size`` random bytes in row groups of ``shape.batch_bytes``."""

    import pyarrow as pa
    import pyarrow.parquet as pq

    row = 4 * KiB
    rows = shape.size // row
    table = pa.table({"id": pa.array(range(rows), pa.int64()),
                      "blob": pa.array([os.urandom(row) for _ in range(rows)], pa.binary())})
    buf = io.BytesIO()
    pq.write_table(table, buf, row_group_size=shape.batch_bytes // row, compression="none")
    return buf.getvalue()


def order(keys: list[str], shape: Shape, seed: int) -> list[str]:
    keys = sorted(keys)
    if shape.shuffled:
        random.Random(seed).shuffle(keys)
    return keys
