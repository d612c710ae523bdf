"""Ferry: a cross-region, write-accelerating S3 gateway."""

__version__ = "0.1.0"
