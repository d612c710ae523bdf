"""S3 operation handlers: translate a request into a service call and its answer into S3."""
