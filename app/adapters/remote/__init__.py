"""The remote durable bucket, over boto3. Blocking calls: the services run them in threads.

The package: ``client`` (configuration and client construction), ``wire`` (errors, parameters,
header strings, bodies), ``buckets``, ``objects`` and ``multipart`` (the operations, three parts
``store.RemoteStore`` is composed of and names for each call), ``get`` and ``put`` (GetObject,
and UploadPart/PutObject of a staged body, as raw signed requests where they apply).

Remote failures become ``S3Error`` values: the remote's own S3 error passes through with its
code and status (a missing key is ``NoSuchKey`` whoever says it); an unreachable remote, or one
that answers a 5xx other than SlowDown, is a ``503 ServiceUnavailable`` that says so. Header
values are kept as latin-1 strings end to end so that arbitrary bytes (UTF-8 metadata included) cross the gateway unchanged.
"""

from __future__ import annotations

from app.adapters.remote.client import RemoteConfig
from app.adapters.remote.store import RemoteStore
from app.adapters.remote.wire import body_failure, object_params, read_available, translate_errors

__all__ = ["RemoteConfig", "RemoteStore", "body_failure", "object_params", "read_available", "translate_errors"]
