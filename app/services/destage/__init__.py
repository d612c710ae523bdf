"""Destage: journaled writes to the remote, who runs it, durability, replicas and leaked uploads."""
