"""The write journal (``object_versions``): appends, destage moves, views, replicas, key claims."""
