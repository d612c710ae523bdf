"""Writes: put, copy, rename, delete; the write modes, their admission and the key holds."""
