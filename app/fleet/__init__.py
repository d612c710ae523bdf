"""The fleet: membership, block ownership, the internal endpoint and peer reads (docs/fleet.md)."""
