"""The read cache's index (``cache_entries``): entries, usage, the hot path's point lookups."""
