"""Turn an uploaded file into something the loader reads, without trusting its name or its contents.

A single trace is kept as ``trace.json`` or ``trace.json.gz`` (chosen by the bytes, not the uploaded name);
a zip or tar bundle is extracted member by member into a folder, refusing absolute paths, ``..``, links,
devices, too many members and too many bytes. The uploaded name never becomes a path.
"""

from __future__ import annotations

import shutil
import tarfile
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import IO

from stallscope.analyzer.core.errors import StallscopeError

GZIP_MAGIC = b"\x1f\x8b"
ZIP_MAGIC = b"PK\x03\x04"
MAX_MEMBERS = 4096
MAX_NAME, MAX_PART = 1024, 200  # a member's path and each of its parts (file systems allow 255 bytes)


class BadUpload(StallscopeError):
    """An upload that cannot be stored: unsafe bundle member, not a trace or bundle, too large."""


def kind_of(path: Path) -> str:
    """``zip``, ``tar``, ``gzip`` (a gzipped trace) or ``json``, from the first bytes; ``BadUpload`` for
    anything else (an image, a program, a pickle, random bytes), so that it is refused at once."""
    with path.open("rb") as f:
        head = f.read(512)
    if head.startswith(ZIP_MAGIC):
        return "zip"
    if head.startswith(GZIP_MAGIC):
        if _is_tar(path):
            return "tar"
        inflated = _inflated_head(path)
        if inflated is None:
            raise BadUpload("not a trace or bundle: a gzip file that does not inflate")
        if not _looks_like_json(inflated):
            raise BadUpload("not a trace or bundle: a gzip file whose content is not JSON")
        return "gzip"
    if len(head) >= 262 and head[257:262] == b"ustar":
        return "tar"
    if not _looks_like_json(head):
        raise BadUpload(f"not a trace or bundle: {_what(head)}, not JSON, gzip, zip or tar")
    return "json"


_SIGNATURES = (
    (b"\x89PNG", "a PNG image"), (b"\xff\xd8\xff", "a JPEG image"), (b"GIF8", "a GIF image"),
    (b"\x7fELF", "an ELF program"), (b"MZ", "a Windows program"), (b"%PDF", "a PDF document"),
    (b"\x80", "a Python pickle"), (b"BZh", "a bzip2 file"), (b"\xfd7zXZ", "an xz file"),
    (b"\x28\xb5\x2f\xfd", "a zstd file"), (b"PAR1", "a Parquet file"), (b"SQLite format", "an SQLite file"),
)  # fmt: skip


def _what(head: bytes) -> str:
    for magic, name in _SIGNATURES:
        if head.startswith(magic):
            return name
    return "unknown content"


def _looks_like_json(head: bytes) -> bool:
    """Whether ``head`` could start a trace: a JSON object or array after optional BOM and whitespace
    (or nothing but whitespace so far: a document may follow a long run of it)."""
    text = head.removeprefix(b"\xef\xbb\xbf").lstrip(b" \t\r\n")
    return not text or text[:1] in (b"{", b"[")


def _inflated_head(path: Path, size: int = 4096) -> bytes | None:
    """The first bytes of a gzip file's content; None when not even they inflate."""
    inflate = zlib.decompressobj(wbits=31)
    try:
        with path.open("rb") as f:
            return inflate.decompress(f.read(64 << 10), size)
    except (OSError, zlib.error):
        return None


def _is_tar(path: Path) -> bool:
    try:
        with tarfile.open(path, "r:gz") as tf:
            return tf.next() is not None
    except (tarfile.TarError, OSError, EOFError):
        return False


def place(upload: Path, folder: Path, max_bytes: int) -> Path:
    """Put the uploaded file ``upload`` into ``folder`` in loadable form; returns what to pass to
    ``stallscope.analyzer.load.loader.load`` (a file or a folder, relative to ``folder``). Raises ``BadUpload``."""
    kind = kind_of(upload)
    if kind in ("json", "gzip"):
        target = folder / ("trace.json.gz" if kind == "gzip" else "trace.json")
        shutil.move(upload, target)
        return Path(target.name)
    out = folder / "bundle"
    out.mkdir()
    members = _zip_members(upload) if kind == "zip" else _tar_members(upload)
    total = 0
    for count, (rel, stream) in enumerate(members, 1):
        if count > MAX_MEMBERS:
            raise BadUpload(f"bundle has more than {MAX_MEMBERS} files")
        target = out.joinpath(*rel.parts)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            with stream as src, target.open("xb") as dst:
                total += _copy_bounded(src, dst, max_bytes - total)
        except FileExistsError:
            raise BadUpload(f"bundle has two members named {str(rel)[:100]!r}") from None
        except (NotADirectoryError, IsADirectoryError):
            raise BadUpload(f"bundle member {str(rel)[:100]!r} is both a file and a folder") from None
        except OSError as exc:  # a name the file system refuses (too long, ...)
            raise BadUpload(f"bundle member {str(rel)[:100]!r} cannot be stored ({exc.strerror})") from None
    upload.unlink()
    return _trace_root(out).relative_to(folder)


def _copy_bounded(src: IO[bytes], dst: IO[bytes], budget: int) -> int:
    copied = 0
    while chunk := src.read(1 << 20):
        copied += len(chunk)
        if copied > budget:
            raise BadUpload("bundle unpacks to more than the upload size limit")
        dst.write(chunk)
    return copied


def safe_member(name: str) -> PurePosixPath:
    """A bundle member's name as a relative path inside the bundle, or ``BadUpload``."""
    rel = PurePosixPath(name.replace("\\", "/"))
    if len(name) > MAX_NAME or any(len(p.encode()) > MAX_PART for p in rel.parts):
        raise BadUpload(f"bundle member {name[:100]!r}... has a name longer than the store allows")
    if not name or rel.is_absolute() or ".." in rel.parts or ":" in name or "\x00" in name:
        raise BadUpload(f"bundle member {name!r} has an unsafe path")
    parts = [p for p in rel.parts if p not in ("", ".")]
    if not parts:
        raise BadUpload(f"bundle member {name!r} has an unsafe path")
    return PurePosixPath(*parts)


def _zip_members(path: Path) -> Iterator[tuple[PurePosixPath, IO[bytes]]]:
    try:
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                mode = (info.external_attr >> 16) & 0o170000
                if mode == 0o120000:
                    raise BadUpload(f"bundle member {info.filename!r} is a symbolic link")
                if info.is_dir():
                    safe_member(info.filename)
                    continue
                yield safe_member(info.filename), zf.open(info)
    except zipfile.BadZipFile as exc:
        raise BadUpload(f"not a valid zip file ({exc})") from None


def _tar_members(path: Path) -> Iterator[tuple[PurePosixPath, IO[bytes]]]:
    try:
        with tarfile.open(path, "r:*") as tf:
            for member in tf:
                rel = safe_member(member.name)
                if member.isdir():
                    continue
                if not member.isfile():
                    raise BadUpload(f"bundle member {member.name!r} is not a regular file")
                stream = tf.extractfile(member)
                if stream is None:
                    raise BadUpload(f"bundle member {member.name!r} cannot be read")
                yield rel, stream
    except (tarfile.TarError, EOFError) as exc:
        raise BadUpload(f"not a valid tar file ({exc})") from None


def _trace_root(out: Path) -> Path:
    """The folder holding the trace files: the bundle itself, or its single top folder (``tar czf b.tgz
    run/`` puts everything under ``run/``)."""
    root = out
    while True:
        entries = list(root.iterdir())
        if len(entries) == 1 and entries[0].is_dir():
            root = entries[0]
            continue
        break
    if not any(f.is_file() and f.name.endswith((".json", ".json.gz")) for f in root.iterdir()):
        raise BadUpload("bundle holds no trace files (*.json, *.json.gz)")
    return root
