"""Where stallscope caches things and how a trace file is keyed: light (no numpy, no pyarrow), so that
an answer served from the cache does not import the analyzer's numeric stack.

A trace is keyed by its content (a hash of its bytes as stored). A small stat index (path, size, mtime,
inode -> content key) lets an unchanged file skip even that hash.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from pathlib import Path

from analyzer.errors import TraceError

CACHE_VERSION = 9  # bump whenever the model or the loader changes what it builds


def cache_home() -> Path:
    """``$XDG_CACHE_HOME/stallscope`` (``~/.cache/stallscope`` by default)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "stallscope"


def cache_root() -> Path:
    """The model cache of this version of the loader."""
    return cache_home() / f"models-v{CACHE_VERSION}"


def hasher() -> hashlib.blake2b:
    """Content hash of a trace file (its bytes as stored, compressed or not) -> cache key."""
    return hashlib.blake2b(digest_size=16)


def hash_file(path: Path) -> str:
    """The content key of ``path``; ``TraceError`` when it cannot be read."""
    h = hasher()
    try:
        with path.open("rb") as f:
            while block := f.read(8 << 20):
                h.update(block)
    except OSError as exc:
        raise TraceError(str(path), f"cannot read ({exc.strerror or exc})") from None
    return h.hexdigest()


def stat_token(path: Path) -> dict[str, int]:
    """What identifies this version of the file without reading it (taken *before* it is read)."""
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ino": st.st_ino}


def _index_file(path: Path) -> Path:
    name = hashlib.blake2b(str(path.resolve()).encode(), digest_size=16).hexdigest()
    return cache_root() / "index" / f"{name}.json"


def known_key(path: Path) -> str | None:
    """The content key recorded for this exact file, if it has not changed since."""
    try:
        entry = json.loads(_index_file(path).read_text())
        if entry.get("stat") == stat_token(path) and isinstance(entry.get("key"), str):
            return str(entry["key"])
    except (OSError, ValueError):
        pass
    return None


def remember_key(path: Path, key: str, token: dict[str, int]) -> None:
    """Record that the file, as it was when ``token`` was taken, has content ``key``. The token must come
    from before the file was read: a file changed since then must not inherit the old key."""
    with contextlib.suppress(OSError):
        atomic_write(_index_file(path), json.dumps({"stat": token, "key": key}).encode())


def content_key(path: Path) -> str:
    """``path``'s content key: from the stat index when the file is unchanged, else hashed (and recorded
    under the stat token taken before hashing)."""
    try:
        token = stat_token(path)
    except OSError as exc:
        raise TraceError(str(path), f"cannot read ({exc.strerror or exc})") from None
    key = known_key(path)
    if key is None:
        key = hash_file(path)
        remember_key(path, key, token)
    return key


def atomic_write(target: Path, *chunks: bytes) -> None:
    """Write ``chunks`` to ``target`` through a temporary file and a rename: readers see all or nothing."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
