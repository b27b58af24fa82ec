"""A failure of storage as one line a person can act on, for the command line (``jobs.cli``).

An object store that cannot be reached, credentials missing or refused: configuration, not a
bug, so a command ends on them with one line naming the endpoint or the bucket and what to check.
botocore raises some of these bare (``NoCredentialsError``, ``EndpointConnectionError``); s3fs
turns a refusal into an OSError (``PermissionError('Forbidden')``) with botocore's error as its
cause. Any other OSError is ``describe_error``'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from urllib.parse import urlsplit

_KEYS = "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
_REFUSALS = {  # botocore's error code of a refused request: what it means
    "InvalidAccessKeyId": "the access key is not known to the object store (InvalidAccessKeyId): check "
                          "AWS_ACCESS_KEY_ID or the profile in use",
    "SignatureDoesNotMatch": "the secret key does not match the access key (SignatureDoesNotMatch): check "
                             "AWS_SECRET_ACCESS_KEY or the profile in use",
    "AccessDenied": "access denied (AccessDenied): the credentials in use may not read or write this bucket",
    "AllAccessDisabled": "access denied (AllAccessDisabled): all access to this bucket is disabled",
    "403": f"the object store refused the request (403 Forbidden): a wrong access key or secret key ({_KEYS}), "
           "or credentials without access to this bucket",
    "ExpiredToken": "the credentials have expired (ExpiredToken): renew them (AWS_SESSION_TOKEN or the profile in use)",
    "InvalidToken": "the session token is not valid (InvalidToken): check AWS_SESSION_TOKEN or the profile in use",
    "RequestTimeTooSkewed": "this machine's clock is too far from the object store's (RequestTimeTooSkewed)",
}
_REFUSALS["Forbidden"] = _REFUSALS["403"]
_REFUSALS["ExpiredTokenException"] = _REFUSALS["TokenRefreshRequired"] = _REFUSALS["ExpiredToken"]


def describe_failure(exc: BaseException, urls: Iterable[str] = ()) -> str | None:
    """One line for ``exc`` when it is a failure of storage (None for any other error). ``urls``:
    the command's arguments, whose object-store URLs name the bucket(s) when the error does not."""
    try:
        from botocore import exceptions as boto
    except ImportError:  # no object store support installed: no botocore errors either
        boto = None
    if boto is not None:
        where = ", ".join(_buckets(urls)) or "the object store"
        for error in _chain(exc):
            line = _describe_boto(boto, error)
            if line is not None:
                return f"{where}: {line}"
    if isinstance(exc, OSError):
        from kcompact.storage import describe_error

        return describe_error(exc)
    return None


def _describe_boto(boto, error: BaseException) -> str | None:
    if isinstance(error, boto.NoCredentialsError):
        return (f"no credentials for the object store: none in {_KEYS}, AWS_PROFILE, the shared credentials "
                "file or instance metadata")
    if isinstance(error, boto.PartialCredentialsError):
        return f"incomplete credentials for the object store: {str(error)[:1].lower()}{str(error)[1:]}"
    if isinstance(error, boto.ClientError):
        return _REFUSALS.get(str(error.response.get("Error", {}).get("Code", "")))
    if isinstance(error, boto.ConnectionError) and not isinstance(error, boto.HTTPClientError):
        if isinstance(error, boto.ConnectTimeoutError):
            why = "no answer within the connect timeout"
        elif isinstance(error, boto.ProxyConnectionError):
            why = f"could not connect through the proxy {_endpoint(error.kwargs.get('proxy_url'))}"
        elif isinstance(error, boto.SSLError):
            why = f"TLS failed: {error.kwargs.get('error', '')}"
        else:
            why = "could not connect"
        return (f"cannot connect to the object store at {_endpoint(error.kwargs.get('endpoint_url'))} ({why}): "
                "check its address (endpoint_url in FSSPEC_S3 or fsspec's configuration) and the network")
    return None


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and the errors it was raised from or while handling."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _endpoint(url: str | None) -> str:
    """scheme://host:port of a request's URL (its path is the bucket and key)."""
    if not url:
        return "its endpoint"
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}" if parts.netloc else url


def _buckets(urls: Iterable[str]) -> list[str]:
    """``scheme://bucket`` of every object-store URL among ``urls`` (``--report=s3://b/r.json`` too)."""
    found: list[str] = []
    for token in urls:
        for part in str(token).split("="):
            if "://" not in part:
                continue
            parts = urlsplit(part)
            bucket = f"{parts.scheme}://{parts.netloc}"
            if parts.scheme not in ("file", "local") and parts.netloc and bucket not in found:
                found.append(bucket)
    return found
