"""Access control of a shared dashboard: one token, checked before any page, Dash callback, asset or API
route answers.

A request is let in when it carries the token in one of three ways:

- ``Authorization: Bearer TOKEN`` (scripts, ``stallscope upload --token``);
- the dashboard's cookie (HttpOnly, SameSite=Strict), which a browser gets by opening the URL printed at
  start (``/?token=TOKEN``): that request is answered with the cookie and a redirect to the same page
  without the token, so it stays out of the address bar, the history and the access log;
- ``?token=TOKEN`` on a GET (the same redirect for pages; an API read is answered at once).

A state-changing request (anything but GET/HEAD/OPTIONS) let in by the cookie alone must also come from
the dashboard's own origin (its ``Origin`` header, or ``Referer`` when there is none, names this host):
SameSite=Strict already keeps the cookie off cross-site requests, and this keeps a page on another port
of the same host from using it. A Bearer header is never sent by a browser on its own, so it needs no
such check. Tokens are compared with ``hmac.compare_digest``; the token is never logged (``redact``).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import urllib.parse

from flask import Flask, Response, current_app, has_app_context, jsonify, redirect, request
from markupsafe import escape
from werkzeug.wrappers import Response as BaseResponse

ENV = "STALLSCOPE_DASHBOARD_TOKEN"
TOKEN_REQUIRED = "STALLSCOPE_TOKEN_REQUIRED"  # the Flask config key: whether this server needs one
TOKEN_RE = re.compile(r"[A-Za-z0-9._~-]{16,256}")
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_QUERY_TOKEN = re.compile(r"([?&]token=)[^&\s#\"]*", re.IGNORECASE)


def token_required() -> bool:
    """The app serving the current request needs a token (False outside a request)."""
    return has_app_context() and bool(current_app.config.get(TOKEN_REQUIRED))


def new_token() -> str:
    """A fresh random token (256 bits, URL-safe)."""
    return secrets.token_urlsafe(32)


def check_token(token: str) -> str:
    """``token`` if it can be one (16 to 256 URL-safe characters), else ``ValueError`` with the reason
    (which never repeats the token)."""
    if not TOKEN_RE.fullmatch(token):
        raise ValueError("a token is 16 to 256 characters from A-Z a-z 0-9 . _ ~ -")
    return token


def cookie_name(token: str) -> str:
    """The cookie's name: one per token, so two dashboards on one host (cookies ignore the port) do not
    overwrite each other's. Eight hex digits of a hash say nothing useful about the token."""
    return "stallscope_auth_" + hashlib.sha256(token.encode()).hexdigest()[:8]


def redact(text: str) -> str:
    """``text`` (a request line) with the value of any ``token=`` query parameter replaced by ``***``."""
    return _QUERY_TOKEN.sub(r"\1***", text)


def _same(given: str | None, token: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode(), token.encode())


def _bearer() -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    return value.strip() if scheme.lower() == "bearer" else None


def _same_origin() -> bool:
    """The request names this server as its origin (``Origin``, else ``Referer``)."""
    source = request.headers.get("Origin") or request.headers.get("Referer")
    if not source:
        return False
    parts = urllib.parse.urlsplit(source)
    return f"{parts.scheme}://{parts.netloc}" == request.host_url.rstrip("/")


def _refused(why: str) -> Response:
    if request.path.startswith("/api/") or request.path.startswith("/_dash-") or request.method != "GET":
        response = jsonify(error=why)
    else:
        response = Response(
            "<!doctype html><title>stallscope</title><h1>This dashboard needs its token</h1>"
            f"<p>{escape(why)}</p>",
            mimetype="text/html",
        )
    response.status_code = 401
    response.headers["WWW-Authenticate"] = 'Bearer realm="stallscope"'
    return response


def require_token(server: Flask, token: str) -> None:
    """Refuse every request to ``server`` that does not carry ``token`` (see the module's doc)."""
    name = cookie_name(token)
    hint = "open the URL the dashboard printed at start (…/?token=…), or send Authorization: Bearer TOKEN"

    @server.before_request
    def check() -> BaseResponse | None:
        if _same(_bearer(), token):
            return None
        by_query = request.method in _SAFE_METHODS and _same(request.args.get("token"), token)
        if by_query:
            if request.path.startswith("/api/"):
                return None
            rest = [(k, v) for k, v in request.args.items(multi=True) if k != "token"]
            target = request.path + (f"?{urllib.parse.urlencode(rest)}" if rest else "")
            response = redirect(target, code=303)
            response.set_cookie(
                name, token, httponly=True, samesite="Strict", secure=request.is_secure, path="/"
            )
            response.headers["Cache-Control"] = "no-store"
            response.headers["Referrer-Policy"] = "no-referrer"
            return response
        if not _same(request.cookies.get(name), token):
            return _refused(f"missing or wrong token: {hint}")
        if request.method not in _SAFE_METHODS and not _same_origin():
            return _refused("a change sent with the cookie must come from this dashboard's own pages")
        return None
