"""Multipart bookkeeping beside ``repo.Catalog``: part claims, remote upload openings and ownership."""
