"""Multipart uploads: parts, the claimed Complete, parts copied ahead, gathering and expiry."""
