"""In-memory stand-ins for the remote port, for unit tests of the services (no SeaweedFS)."""
