"""Upload a trace to a running dashboard with the standard library only (no ``requests``): used by
``stallscope upload FILE --to URL`` and ``stallscope profile --upload URL``.

A dashboard that needs a token gets it as ``Authorization: Bearer TOKEN``: the ``token`` argument, else
``$STALLSCOPE_DASHBOARD_TOKEN``, else a ``?token=`` in the dashboard's URL (the one it printed at start).

The multipart body is streamed from the file, so a trace of any size is never held in memory. A folder
(a stallscope bundle or a folder of rank files) is sent as a ``.tar.gz`` of its regular files.
"""

from __future__ import annotations

import json
import os
import tarfile
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from stallscope.analyzer.core.errors import StallscopeError

_CHUNK = 1 << 20


class UploadError(StallscopeError):
    """The dashboard could not be reached or refused the upload (its one-line reason is included)."""


def upload(
    path: str | Path,
    url: str,
    *,
    timeout: float = 600.0,
    tags: tuple[str, ...] = (),
    token: str | None = None,
) -> dict[str, Any]:
    """POST ``path`` to the dashboard at ``url`` (``http://host:port``); returns the dashboard's answer
    ``{"id", "url", "status"}``. Raises ``UploadError`` with the server's reason on failure."""
    p = Path(path)
    if not p.exists():
        raise UploadError(f"{path}: no such file or directory")
    if p.is_dir():
        with tempfile.TemporaryDirectory(prefix="stallscope-upload-") as tmp:
            packed = Path(tmp) / f"{p.resolve().name or 'bundle'}.tar.gz"
            _pack(p, packed)
            return _post(packed, url, timeout, tags, token)
    return _post(p, url, timeout, tags, token)


def status(trace_id: str, url: str, timeout: float = 30.0, token: str | None = None) -> dict[str, Any]:
    """The dashboard's entry for ``trace_id`` (``status``, ``progress``, ``error``, ``summary``)."""
    request = urllib.request.Request(_api(url, f"traces/{trace_id}"), headers=_auth(url, token))
    return _json(_open(request, timeout))


def wait(
    trace_id: str, url: str, timeout: float = 600.0, poll_s: float = 0.5, token: str | None = None
) -> dict[str, Any]:
    """Poll until the upload is analysed (or failed); returns the final entry."""
    deadline = time.monotonic() + timeout
    while True:
        entry = status(trace_id, url, token=token)
        if entry.get("status") not in ("pending", "analysing") or time.monotonic() > deadline:
            return entry
        time.sleep(poll_s)


def base_url(url: str) -> str:
    """The dashboard's address as given: ``http://host:port``, or a bare ``host:port`` (http assumed);
    a ``?token=`` (the URL a dashboard prints at start) is left out."""
    url = url.strip()
    if "://" not in url:
        url = f"http://{url}"
    parts = urllib.parse.urlsplit(url)
    if parts.query or parts.fragment:
        parts = parts._replace(query="", fragment="")
        url = urllib.parse.urlunsplit(parts)
    try:
        parts.port  # noqa: B018 (raises ValueError on a port that is not a number in range)
    except ValueError:
        parts = parts._replace(netloc="")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UploadError(
            f"--to {url}: give the dashboard's address, like 127.0.0.1:8050 or http://host:8050"
        )
    return url.rstrip("/")


def token_for(url: str, token: str | None = None) -> str | None:
    """The token to send: ``token``, else ``$STALLSCOPE_DASHBOARD_TOKEN``, else the URL's ``?token=``."""
    from stallscope.dashboard.auth import ENV

    if token:
        return token
    if os.environ.get(ENV):
        return os.environ[ENV]
    query = urllib.parse.urlsplit(url.strip() if "://" in url else f"http://{url.strip()}").query
    return urllib.parse.parse_qs(query).get("token", [None])[0]


def _auth(url: str, token: str | None) -> dict[str, str]:
    found = token_for(url, token)
    return {"Authorization": f"Bearer {found}"} if found else {}


def _api(url: str, route: str) -> str:
    return f"{base_url(url)}/api/{route}"


def _pack(folder: Path, target: Path) -> None:
    with tarfile.open(target, "w:gz") as tf:
        for f in sorted(folder.rglob("*")):
            if f.is_file() and not f.is_symlink():
                tf.add(f, arcname=str(f.relative_to(folder)), recursive=False)


def _post(path: Path, url: str, timeout: float, tags: tuple[str, ...], token: str | None) -> dict[str, Any]:
    boundary = f"stallscope-{uuid.uuid4().hex}"
    name = path.name.replace('"', "_").replace("\r", "_").replace("\n", "_")
    fields = b""
    if tags:
        fields = (
            f'--{boundary}\r\nContent-Disposition: form-data; name="tags"\r\n\r\n{",".join(tags)}\r\n'
        ).encode()
    head = (
        fields
        + (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
    )
    tail = f"\r\n--{boundary}--\r\n".encode()
    size = len(head) + path.stat().st_size + len(tail)

    def body() -> Iterator[bytes]:
        yield head
        with path.open("rb") as f:
            while chunk := f.read(_CHUNK):
                yield chunk
        yield tail

    request = urllib.request.Request(
        _api(url, "traces"),
        data=body(),
        method="POST",
        headers={
            "Content-Type": f"multipart/form-data; boundary={boundary}",
            "Content-Length": str(size),
            **_auth(url, token),
        },
    )
    return _json(_open(request, timeout))


def _open(request: urllib.request.Request, timeout: float) -> bytes:
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            data: bytes = response.read()
            return data
    except urllib.error.HTTPError as exc:
        raise UploadError(f"{request.full_url}: {exc.code} {_reason(exc)}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise UploadError(f"{request.full_url}: cannot reach the dashboard ({reason})") from None


def _reason(exc: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(exc.read())["error"])
    except (ValueError, KeyError, TypeError, OSError):
        return str(exc.reason)


def _json(data: bytes) -> dict[str, Any]:
    try:
        doc = json.loads(data)
    except ValueError:
        raise UploadError("the dashboard answered something that is not JSON") from None
    if not isinstance(doc, dict):
        raise UploadError("the dashboard answered something unexpected")
    return doc
