"""A failure of storage: raised as kcompact's ``StorageError``, said as one line a person can act on.

An object store that cannot be reached, credentials missing or refused, a file missing, a full
disk: the environment's, not a bug, so every public function of ``storage`` raises them as
``errors.StorageError`` (``typed``), and a command ends on one with a line naming the file, the
endpoint or the bucket and what to check (``describe_failure``). botocore raises some of these bare
(``NoCredentialsError``, ``EndpointConnectionError``); s3fs turns a refusal into an OSError
(``PermissionError('Forbidden')``) with botocore's error as its cause. Any other OSError is
``describe_error``'s.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar
from urllib.parse import urlsplit

from kcompact import errors
from kcompact.storage.describing import describe_error

_KEYS = "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
_ENV_NAMES = {"access": "AWS_ACCESS_KEY_ID", "secret": "AWS_SECRET_ACCESS_KEY", "token": "AWS_SESSION_TOKEN"}
_REFUSALS = {  # botocore's error code of a refused request: what it means ({access} and the rest: where they came from)
    "InvalidAccessKeyId": "the access key is not known to the object store (InvalidAccessKeyId): check {access}",
    "SignatureDoesNotMatch": "the secret key does not match the access key (SignatureDoesNotMatch): check {secret}",
    "AccessDenied": "access denied (AccessDenied): the credentials in use ({access}) may not read or write this bucket",
    "AllAccessDisabled": "access denied (AllAccessDisabled): all access to this bucket is disabled",
    "403": "the object store refused the request (403 Forbidden): a wrong access key or secret key ({access}, "
           "{secret}), or credentials without access to this bucket",
    "ExpiredToken": "the credentials have expired (ExpiredToken): renew them ({token})",
    "InvalidToken": "the session token is not valid (InvalidToken): check {token}",
    "RequestTimeTooSkewed": "this machine's clock is too far from the object store's (RequestTimeTooSkewed)",
}
_REFUSALS["Forbidden"] = _REFUSALS["403"]
_REFUSALS["ExpiredTokenException"] = _REFUSALS["TokenRefreshRequired"] = _REFUSALS["ExpiredToken"]


F = TypeVar("F", bound=Callable)


def as_storage_error(exc: BaseException) -> errors.StorageError | None:
    """``exc`` as kcompact's StorageError when it is a failure of storage (None for any other
    error): an OSError, as the StorageError subclass of its own builtin subclass, its words, errno
    and file names kept; or one of botocore's that ``describe_failure`` can say."""
    if isinstance(exc, errors.KcompactError):
        return None
    if isinstance(exc, OSError):
        kind = next((typed for base, typed in errors.STORAGE_ERRORS.items() if isinstance(exc, base)),
                    errors.StorageError)
        typed = kind(*exc.args)
        for name in ("filename", "filename2"):
            if getattr(exc, name) is not None:
                setattr(typed, name, getattr(exc, name))
        return typed
    try:
        from botocore import exceptions as boto
    except ImportError:
        return None
    if isinstance(exc, boto.BotoCoreError | boto.ClientError) and _describe_boto(boto, exc) is not None:
        return errors.StorageError(str(exc))
    return None


@contextlib.contextmanager
def raising_typed() -> Iterator[None]:
    """A failure of storage inside raised as a StorageError (``as_storage_error``), from the original."""
    try:
        yield
    except Exception as exc:
        typed = as_storage_error(exc)
        if typed is None:
            raise
        raise typed from exc


@contextlib.contextmanager
def naming(path: str, fs_path: str) -> Iterator[None]:
    """An object store's error names the URL read, as a local file's error names its path: s3fs
    names ``bucket/key`` or nothing (``PermissionError('Access Denied')``), and an error raised in
    a Spark task reaches the report with no other trace of the object it was about."""
    with raising_typed():
        try:
            yield
        except OSError as exc:
            if exc.filename is None or exc.filename == fs_path:
                exc.filename = path
            raise


def typed(function: F) -> F:
    """``function``, raising its failures of storage as StorageErrors (``raising_typed``)."""
    @functools.wraps(function)
    def call(*args, **kwargs):
        with raising_typed():
            return function(*args, **kwargs)

    return call


def environment_problem(urls: Iterable[str]) -> str | None:
    """What is wrong with the ``FSSPEC_<PROTOCOL>`` variable of an object store among ``urls``, or
    None. fsspec ignores one that is not a JSON object (a warning, no error), and the store is
    then met without its endpoint or keys: 'no credentials' would name the wrong culprit."""
    for bucket in _buckets(urls):
        name = f"FSSPEC_{bucket.split(':', 1)[0].upper()}"
        text = os.environ.get(name)
        if text is None:
            continue
        try:
            value = json.loads(text)
        except ValueError as exc:
            return (f"{name} is not valid JSON ({getattr(exc, 'msg', exc)} at character {getattr(exc, 'pos', 0)}), "
                    "so fsspec ignores it and none of its settings (endpoint_url, key, secret) is used; "
                    f"give it a JSON object, as {name}='{{\"client_kwargs\": {{\"endpoint_url\": \"...\"}}}}'")
        if not isinstance(value, dict):
            return (f"{name} is JSON but not an object ({type(value).__name__}), so fsspec ignores it and none of its "
                    "settings is used; give it a JSON object of s3fs's options")
    return None


def credential_names() -> dict[str, str]:
    """Where the object store's credentials in use came from, as the settings to check: the
    access key's, the secret key's and the session token's. s3fs takes fsspec's ``key``,
    ``secret`` and ``token`` (``FSSPEC_S3_KEY``..., ``FSSPEC_S3``, fsspec's config files) before
    botocore's own chain (``AWS_*``, a profile, instance metadata)."""
    import fsspec.config

    conf = fsspec.config.conf.get("s3", {})
    if conf.get("key") or conf.get("secret") or conf.get("token"):
        if any(f"FSSPEC_S3_{k}" in os.environ for k in ("KEY", "SECRET", "TOKEN")):
            return {"access": "FSSPEC_S3_KEY", "secret": "FSSPEC_S3_SECRET", "token": "FSSPEC_S3_TOKEN"}
        where = "FSSPEC_S3" if "FSSPEC_S3" in os.environ else "fsspec's configuration (FSSPEC_CONFIG_DIR)"
        return {k: f"{v} in {where}" for k, v in (("access", "key"), ("secret", "secret"), ("token", "token"))}
    client = conf.get("client_kwargs", {})
    if client.get("aws_access_key_id"):
        return {k: f"{v} in FSSPEC_S3's client_kwargs" for k, v in
                (("access", "aws_access_key_id"), ("secret", "aws_secret_access_key"), ("token", "aws_session_token"))}
    return _botocore_names(conf.get("profile"))


def _botocore_names(profile: str | None) -> dict[str, str]:
    """botocore's chain, as far as it can be told without asking the network (instance metadata):
    the environment, then the profile's keys in the shared credentials or config file."""
    if os.environ.get("AWS_ACCESS_KEY_ID"):
        return dict(_ENV_NAMES)
    import configparser

    profile = profile or os.environ.get("AWS_PROFILE") or "default"
    for variable, default, section in (("AWS_SHARED_CREDENTIALS_FILE", "~/.aws/credentials", profile),
                                       ("AWS_CONFIG_FILE", "~/.aws/config",
                                        profile if profile == "default" else f"profile {profile}")):
        path = os.path.expanduser(os.environ.get(variable, default))
        parser = configparser.RawConfigParser()
        try:
            parser.read(path)
        except (OSError, configparser.Error):
            continue
        if parser.has_option(section, "aws_access_key_id"):
            where = f"profile {profile} in {path}"
            return {k: f"aws_{v} of {where}" for k, v in
                    (("access", "access_key_id"), ("secret", "secret_access_key"), ("token", "session_token"))}
    return {k: f"{v}, profile {profile} or the instance's role" for k, v in _ENV_NAMES.items()}


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
        return describe_error(exc)
    return None


def _describe_boto(boto, error: BaseException) -> str | None:
    if isinstance(error, boto.NoCredentialsError):
        return (f"no credentials for the object store: none in {_KEYS}, AWS_PROFILE, the shared credentials "
                "file or instance metadata")
    if isinstance(error, boto.PartialCredentialsError):
        return f"incomplete credentials for the object store: {str(error)[:1].lower()}{str(error)[1:]}"
    if isinstance(error, boto.ClientError):
        refusal = _REFUSALS.get(str(error.response.get("Error", {}).get("Code", "")))
        return refusal.format(**credential_names()) if refusal else None
    if isinstance(error, boto.ConnectionClosedError):  # a server that died or restarted under the request
        return (f"the object store at {_endpoint(error.kwargs.get('endpoint_url'))} closed the connection before "
                "it answered (the server stopped or restarted?): check that it runs; the next run or "
                "'kcompact recover' finishes or undoes what was under way")
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
