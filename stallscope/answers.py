"""Cache of whole ``analyze`` answers: a second ``analyze`` of the same trace with the same options prints
and writes what the first one did, without loading the trace or importing the analyzer.

An answer is keyed by everything it depends on: the trace's content key (``stallscope.analyzer.load.cachekeys``), the path
as given (the JSON names it), the options that change it (``--rank``, ``--top``, ``--top-ops``,
``--max-inflated-mb``), and the code that computes it (a hash of stallscope's own source and the versions
of the libraries whose numbers it uses). Any change to one of them is a different key: an answer is never
served stale, only left unused. Only single trace files are cached (a folder or a job has several files
and a sidecar beside them). Entries live beside the model cache, in ``$XDG_CACHE_HOME/stallscope``:
``answers-v<N>/<key>/{summary.txt, analysis.json}``, each file written whole through a rename. Both caches
share one size limit (``stallscope.analyzer.load.cachekeys.prune``: least recently used entries go first).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from stallscope.analyzer.load.cachekeys import atomic_write, cache_home, content_key, prune, touch

ANSWERS_VERSION = 1
_PACKAGES = ("stallscope.analyzer", "stallscope")  # the source that computes and renders an answer
_COMPONENTS = ("analyzer", "collector", "dashboard")  # inside the front's folder once installed
_LIBRARIES = ("msgspec", "numpy")  # their numbers end up in it


def answers_root() -> Path:
    return cache_home() / f"answers-v{ANSWERS_VERSION}"


def _sources(package: str) -> list[tuple[str, Path]]:
    """A package's Python files, named from the package, the same in a checkout (pyproject's package-dir
    maps the components to root folders) and in an install (one tree): a component's files are its own."""
    spec = importlib.util.find_spec(package)
    folders = spec.submodule_search_locations if spec is not None else None
    if not folders:
        return []
    root = Path(folders[0])
    nested = {root / c for c in _COMPONENTS} if package == "stallscope" else set()
    out = []
    for source in sorted(root.rglob("*.py")):
        if not nested.intersection(source.parents):
            out.append((package + "/" + source.relative_to(root).as_posix(), source))
    return out


@functools.lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """A hash of the Python source of the analyzer and the CLI, and of the versions of Python and the
    libraries that compute with it: any edit or upgrade gives new answer keys."""
    h = hashlib.blake2b(digest_size=16)
    for package in _PACKAGES:
        for name, source in _sources(package):
            h.update(name.encode() + b"\0" + source.read_bytes() + b"\0")
    h.update(sys.version.encode())
    for lib in _LIBRARIES:
        version = _installed_version(lib)
        if version is not None:
            h.update(f"{lib}={version}".encode())
    return h.hexdigest()


def _installed_version(lib: str) -> str | None:
    """``importlib.metadata.version(lib)`` (None when not installed), read from the name of the
    ``<lib>-<version>.dist-info`` folder beside the package where there is one: importing
    ``importlib.metadata`` alone takes 30 ms, a tenth of a cached answer."""
    import importlib.util

    spec = importlib.util.find_spec(lib)  # finds the package without importing it
    if spec is None:
        return None
    for location in spec.submodule_search_locations or ():
        found = sorted(Path(location).parent.glob(f"{lib}-*.dist-info"))
        if len(found) == 1:
            return found[0].name[len(lib) + 1 : -len(".dist-info")]
    from importlib import metadata  # another layout (an egg, a zip, two dist-info folders)

    try:
        return metadata.version(lib)
    except metadata.PackageNotFoundError:
        return None


def answer_key(trace: str, options: dict[str, object]) -> str:
    """The key of ``analyze``'s answer for the trace file ``trace`` (the path as given) and ``options``;
    ``TraceError`` when the file cannot be read."""
    facts = {
        "trace": trace,
        "content": content_key(Path(trace)),
        "options": options,
        "code": code_fingerprint(),
    }
    return hashlib.blake2b(json.dumps(facts, sort_keys=True).encode(), digest_size=16).hexdigest()


@dataclass(frozen=True)
class Answer:
    """What a cached answer holds: the terminal summary, and the file that holds the JSON document as
    ``--json`` writes it (either may be absent when the run that stored it did not make it)."""

    summary: str | None
    json: Path | None


_SUMMARY = "summary.txt"
_JSON = "analysis.json"


def lookup(key: str) -> Answer:
    """The stored parts of the answer ``key`` (none when it is not cached or cannot be read)."""
    folder = answers_root() / key
    summary = _read(folder / _SUMMARY)
    try:
        text = summary.decode() if summary is not None else None
    except UnicodeDecodeError:
        text = None
    document = folder / _JSON
    if text is not None:
        touch(folder)
    return Answer(text, document if document.is_file() else None)


def store(key: str, summary: str | None, document: bytes | None) -> None:
    """Keep the parts of an answer that were made (``document``: the JSON document, kept as ``--json``
    writes it, with its final newline); a cache that cannot be written is not an error."""
    folder = answers_root() / key
    with contextlib.suppress(OSError):
        if document is not None:
            atomic_write(folder / _JSON, document, b"\n")
        if summary is not None:
            atomic_write(folder / _SUMMARY, summary.encode())
    prune()


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None
