"""Test support: real servers and certificates that the test suite runs against.

- ``seaweed.SeaweedServer``: a real SeaweedFS S3 server (``weed mini``) on loopback, the stand-in
  for a remote region.
- ``tls.make_tls_files``: a throw-away CA and a server certificate for 127.0.0.1/localhost.
"""
