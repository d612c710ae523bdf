"""Reads: the read path (journal, cache, remote), listings and partNumber spans."""
