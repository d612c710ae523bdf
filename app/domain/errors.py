"""S3 errors as domain values.

Every layer raises ``S3Error``; only the protocol layer turns it into XML. The table below is
the single place that knows which HTTP status a code carries, so a handler can never answer
``NoSuchKey`` with a 500.

    S3Error
     └── raised with a code from ERROR_TABLE (unknown codes are a programming error)
"""

from __future__ import annotations

from collections.abc import Mapping

ERROR_TABLE: dict[str, tuple[int, str]] = {
    "AccessDenied": (403, "Access Denied"),
    "AuthorizationHeaderMalformed": (400, "The authorization header is malformed."),
    "AuthorizationQueryParametersError": (400, "Error parsing the X-Amz-Credential parameter."),
    "BadDigest": (400, "The Content-MD5 or checksum you specified did not match what we received."),
    "BucketAlreadyExists": (409, "The requested bucket name is not available."),
    "BucketAlreadyOwnedByYou": (
        409,
        "Your previous request to create the named bucket succeeded and you already own it.",
    ),
    "AccessControlListNotSupported": (400, "The bucket does not allow ACLs"),
    "BucketNotEmpty": (409, "The bucket you tried to delete is not empty."),
    "EntityTooLarge": (400, "Your proposed upload exceeds the maximum allowed object size."),
    "EntityTooSmall": (400, "Your proposed upload is smaller than the minimum allowed object size."),
    "ExistingObjectIsFile": (409, "Existing Object is a file."),  # SeaweedFS's, for 'a/' over a file 'a'
    "ExpiredToken": (400, "The provided token has expired."),
    "IncompleteBody": (400, "You did not provide the number of bytes specified by the Content-Length HTTP header."),
    "InternalError": (500, "We encountered an internal error. Please try again."),
    "InvalidAccessKeyId": (403, "The AWS Access Key Id you provided does not exist in our records."),
    "InvalidArgument": (400, "Invalid Argument"),
    "InvalidBucketAclWithObjectOwnership": (
        400, "Bucket cannot have ACLs set with ObjectOwnership's BucketOwnerEnforced setting"),
    "InvalidBucketName": (400, "The specified bucket is not valid."),
    "InvalidDigest": (400, "The Content-MD5 or checksum you specified is not valid."),
    "InvalidPart": (400, "One or more of the specified parts could not be found."),
    "InvalidPartOrder": (400, "The list of parts was not in ascending order."),
    "InvalidPartNumber": (416, "The requested partnumber is not satisfiable"),
    "InvalidRange": (416, "The requested range is not satisfiable"),
    "InvalidRequest": (400, "Invalid Request"),
    "InvalidURI": (400, "Couldn't parse the specified URI."),
    "MaxMessageLengthExceeded": (400, "Your request was too big."),
    "InvalidStorageClass": (400, "The storage class you specified is not valid."),
    "KeyTooLongError": (400, "Your key is too long."),
    "MalformedDate": (400, "Invalid date format header, expected to be in ISO8601, RFC1123 or RFC1123Z time format."),
    "MalformedACLError": (400, "The XML you provided was not well-formed or did not validate against our published schema"),
    "MalformedXML": (400, "The XML you provided was not well-formed or did not validate against our published schema."),
    "MalformedTrailerError": (400, "The request contained trailing data that was not well-formed."),
    "MetadataTooLarge": (400, "Your metadata headers exceed the maximum allowed metadata size."),
    "MethodNotAllowed": (405, "The specified method is not allowed against this resource."),
    "MissingContentLength": (411, "You must provide the Content-Length HTTP header."),
    "MissingSecurityHeader": (400, "Your request is missing a required header."),
    "NoSuchBucket": (404, "The specified bucket does not exist"),
    "NoSuchKey": (404, "The specified key does not exist."),
    "NoSuchUpload": (
        404,
        "The specified multipart upload does not exist. The upload ID may be invalid, "
        "or the upload may have been aborted or completed.",
    ),
    "NoSuchVersion": (404, "The specified version does not exist."),
    "NotImplemented": (501, "A header you provided implies functionality that is not implemented."),
    "NotModified": (304, "Not Modified"),
    "ConditionalRequestConflict": (409, "A conflicting operation occurred. If using PutObject you can retry the "
                                   "request. If using CompleteMultipartUpload you should initiate another "
                                   "upload and try again."),
    "OperationAborted": (409, "A conflicting conditional operation is currently in progress against this "
                         "resource. Try again."),
    "PreconditionFailed": (412, "At least one of the pre-conditions you specified did not hold"),
    "RequestTimeTooSkewed": (403, "The difference between the request time and the current time is too large."),
    "RequestTimeout": (400, "Your socket connection to the server was not read from or written to within the timeout period."),
    "ServiceUnavailable": (503, "Service is unable to handle request."),
    "SignatureDoesNotMatch": (
        403,
        "The request signature we calculated does not match the signature you provided. "
        "Check your key and signing method.",
    ),
    "SlowDown": (503, "Please reduce your request rate."),
    "XAmzContentSHA256Mismatch": (400, "The provided 'x-amz-content-sha256' header does not match what was computed."),
}


class S3Error(Exception):
    """An error with an S3 code; ``fields`` become extra XML elements (Key, BucketName...)."""

    def __init__(
        self,
        code: str,
        message: str | None = None,
        *,
        status: int | None = None,
        headers: dict[str, str] | None = None,
        extra: Mapping[str, str] | None = None,
        **fields: str,
    ) -> None:
        default_status, default_message = ERROR_TABLE.get(code, (500, code))
        self.code = code
        self.status = status if status is not None else default_status
        self.message = message or default_message
        self.headers = headers or {}
        self.fields = {**(extra or {}), **fields}  # extra: fields whose names are not identifiers
        super().__init__(f"{code}: {self.message}")


class CatalogUnavailable(S3Error):
    """The catalog database cannot be reached (restarting, a network cut): the gateway is
    unavailable for a moment, a 503 a client retries, not a 500. The message names no address."""

    def __init__(self) -> None:
        super().__init__("ServiceUnavailable", "The gateway's catalog database is unreachable; please retry.")


class CatalogFull(S3Error):
    """The SQLite catalog's disk is full ("database or disk is full"): a write that carries no
    body (DELETE, CreateMultipartUpload, a 0-byte PUT) is refused like a body that does not fit,
    503 SlowDown with Retry-After, never a 500."""

    def __init__(self) -> None:
        super().__init__("SlowDown", "The data directory's disk is full; retry later.", headers={"Retry-After": "5"})
