"""``ferry mount``: a POSIX view of the gateway's buckets through FUSE (docs/posix.md)."""
