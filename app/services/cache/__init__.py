"""The read cache (see readcache.py for the map of its modules)."""

from app.services.cache.readcache import LOOKUP, CachedRead, ReadCache

__all__ = ["LOOKUP", "CachedRead", "ReadCache"]
