"""The data directory: its owner lock, the blob store and the read cache's block files."""
