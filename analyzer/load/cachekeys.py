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
from typing import Any

from stallscope.analyzer.core.errors import TraceError

CACHE_VERSION = 9  # bump whenever the model or the loader changes what it builds
DEFAULT_LIMIT_MB = 4096  # the whole cache folder, all versions; ``STALLSCOPE_CACHE_MB`` overrides it
_RECENT_S = 60.0  # entries used this recently are never evicted (another process may be reading them)


def cache_home() -> Path:
    """``$XDG_CACHE_HOME/stallscope`` (``~/.cache/stallscope`` by default)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "stallscope"


def cache_root() -> Path:
    """The model cache of this version of the loader."""
    return cache_home() / f"models-v{CACHE_VERSION}"


def hasher() -> Any:
    """Content hash of a trace file (its bytes as stored, compressed or not) -> cache key: SHA-256, which
    processors hash in hardware (twice as fast as BLAKE2 here), the first 128 bits."""
    return hashlib.sha256()


def hash_file(path: Path) -> str:
    """The content key of ``path``; ``TraceError`` when it cannot be read. Read into one reused buffer
    (``hashlib.file_digest``): no fresh memory per block."""
    try:
        with path.open("rb") as f:
            h = hashlib.file_digest(f, hasher)
    except OSError as exc:
        raise TraceError(str(path), f"cannot read ({exc.strerror or exc})") from None
    return str(h.hexdigest()[:32])


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


def cache_limit_bytes() -> int:
    """The cache's size limit: ``$STALLSCOPE_CACHE_MB`` megabytes, else ``DEFAULT_LIMIT_MB``."""
    raw = os.environ.get("STALLSCOPE_CACHE_MB", "")
    try:
        mb = float(raw) if raw.strip() else DEFAULT_LIMIT_MB
    except ValueError:
        mb = DEFAULT_LIMIT_MB
    return int(max(mb, 0.0) * (1 << 20))


def touch(entry: Path) -> None:
    """Mark a cache entry as just used (eviction removes the least recently used first)."""
    with contextlib.suppress(OSError):
        os.utime(entry)


def prune(limit: int | None = None, now: float | None = None) -> list[Path]:
    """Evict whole entries, least recently used first, until the cache folder (models and answers, of
    every version: an older version's entries are never read again, so they are the first to go) holds at
    most ``limit`` bytes. Entries used in the last minute stay. Returns what was removed; errors are
    ignored (a cache that cannot be pruned is still a cache)."""
    import shutil
    import time

    limit = cache_limit_bytes() if limit is None else limit
    now = time.time() if now is None else now
    entries: list[tuple[float, int, Path]] = []
    total = 0
    with contextlib.suppress(OSError):
        for kind in cache_home().iterdir():
            if not kind.name.startswith(("models-v", "answers-v")) or not kind.is_dir():
                continue
            for entry in kind.iterdir():
                if entry.name == "index" or entry.name.startswith(".tmp-") or not entry.is_dir():
                    continue
                with contextlib.suppress(OSError):
                    size = sum(f.stat().st_size for f in entry.iterdir() if f.is_file())
                    entries.append((entry.stat().st_mtime, size, entry))
                    total += size
    removed = []
    for mtime, size, entry in sorted(entries):
        if total <= limit:
            break
        if now - mtime < _RECENT_S:
            continue
        shutil.rmtree(entry, ignore_errors=True)
        if not entry.exists():
            total -= size
            removed.append(entry)
    return removed
