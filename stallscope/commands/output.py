"""What the commands write: JSON documents to a file or stdout, and the check that an output file can be
written before a long analysis starts."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from stallscope.analyzer.core.errors import UsageError


def write_json(target: str, doc: object) -> None:
    """Encode ``doc`` as JSON and write it to ``target`` ('-': stdout)."""
    from stallscope.analyzer.document.encoding import encode_json

    write_document(target, encode_json(doc))


def write_document(target: str, document: bytes | Path) -> None:
    """Write a JSON document (its bytes, or a file that holds them with their final newline) to ``target``
    ('-': stdout); ``UsageError`` when it cannot be written."""
    if target == "-":
        if isinstance(document, Path):
            with document.open("rb") as f:
                shutil.copyfileobj(f, sys.stdout.buffer, 1 << 20)
        else:
            sys.stdout.buffer.write(document)
            sys.stdout.buffer.write(b"\n")
        return
    try:
        if isinstance(document, Path):
            shutil.copyfile(document, target)  # a copy in the kernel: the cached file is never shared
        else:
            with Path(target).open("wb") as f:  # not document + newline: a copy of a document of GBs
                f.write(document)
                f.write(b"\n")
    except OSError as exc:
        raise UsageError(f"--json {target}: cannot write ({exc.strerror or exc})") from None


def check_writable(out: Path, flag: str) -> None:
    """Fail before the (possibly long) analyses when the file ``out``, given as ``flag``, cannot be written."""
    folder = out.parent if str(out.parent) else Path(".")
    if out.is_dir():
        raise UsageError(f"{flag} {out}: is a folder; give a file name")
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"{flag} {out}: {folder} is not a folder")
    if not folder.is_dir():
        raise UsageError(f"{flag} {out}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK) or (out.exists() and not os.access(out, os.W_OK)):
        raise UsageError(f"{flag} {out}: cannot write there (permission denied)")
