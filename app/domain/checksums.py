"""Temporary shim until the module moves here."""
from app.s3.checksums import *  # noqa: F403
from app.s3.checksums import ALGORITHMS, BodyDigests, verify_expected  # noqa: F401
