"""What travels between nodes besides bytes: an object's metadata as one header (lossless JSON,
base64: user metadata may hold any character) and the paths of the internal endpoint."""

from __future__ import annotations

import base64
import json
from datetime import datetime

from app.domain.objects import ObjectMeta

BLOCK_PATH = "/_ferry/v1/block"
PING_PATH = "/_ferry/v1/ping"
OWNED_PATH = "/_ferry/v1/owned"  # a block file by its name: a peer read with no lookup here
META = "x-ferry-meta"


def encode_meta(meta: ObjectMeta) -> str:
    data = {"key": meta.key, "size": meta.size, "etag": meta.etag, "last_modified": meta.last_modified.isoformat(),
            "content_headers": meta.content_headers, "metadata": meta.metadata, "checksums": meta.checksums,
            "version_id": meta.version_id, "storage_class": meta.storage_class, "parts_count": meta.parts_count}
    return base64.b64encode(json.dumps(data, separators=(",", ":")).encode()).decode()


def decode_meta(value: str) -> ObjectMeta:
    data = json.loads(base64.b64decode(value))
    data["last_modified"] = datetime.fromisoformat(data["last_modified"])
    return ObjectMeta(**data)
