"""Fuzzing stallscope's inputs: generators of Kineto traces, mutators of real traces, and the contract.

Each generator takes a ``random.Random`` and returns a ``Case`` (its class, a file name, the bytes). The
hypothesis strategies (``kineto_cases``, ``mutated_cases``) draw that ``Random`` from hypothesis, so the
suite's examples are reproducible and shrink; ``benchmarks/fuzz.py`` calls the same generators with
seeded ``Random`` objects for long runs and saves any input that breaks the contract to ``tests/corpus/``.

The contract (``check_contract``), for every input: exit 0 or 2; on 2 one line on stderr naming the
problem, never a traceback or an internal error; done within a time bound proportional to the input's
size; the JSON identical byte for byte when analysed twice.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from stallscope.commands import main

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "tests" / "corpus"
SHARED_TRACES = REPO.parent / "shared" / "traces"
#: real traces small enough to mutate many times a second (see ../shared/traces/MANIFEST.tsv)
SMALL_REAL = (
    "hta_a100_item_event_sync.pt.trace.json.gz",
    "hta_a100_multistream_event_sync.pt.trace.json.gz",
    "tracelens_b300_moe_small.pt.trace.json.gz",
    "hta_a100_alexnet_cuda_sync.pt.trace.json.gz",
)
BOUND_BASE_S = 20.0  # time bound: this much, plus BOUND_PER_MB_S per MB of JSON
BOUND_PER_MB_S = 4.0


@dataclass(frozen=True)
class Case:
    kind: str  # the generator or mutation class (docs/performance.md counts per class)
    name: str  # file name (its suffix picks gzip)
    data: bytes


@dataclass(frozen=True)
class Outcome:
    code: int
    stderr: str
    seconds: float
    json_bytes: bytes | None


# ---------------------------------------------------------------- the contract


def time_bound_s(json_size: int) -> float:
    return BOUND_BASE_S + BOUND_PER_MB_S * json_size / 1e6


def run_cli(path: Path, out: Path, limit_s: float) -> Outcome:
    """``stallscope analyze PATH --json OUT`` in-process, with stderr captured."""
    err, sink = io.StringIO(), io.StringIO()
    out.unlink(missing_ok=True)
    start = time.monotonic()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(sink):
        argv = ["analyze", str(path), "--json", str(out), "--no-cache", "-q", "--time-limit", f"{limit_s:g}"]
        code = main(argv)
    seconds = time.monotonic() - start
    return Outcome(code, err.getvalue(), seconds, out.read_bytes() if out.exists() else None)


def contract_problems(first: Outcome, second: Outcome | None, limit_s: float) -> list[str]:
    """What is wrong with an input's outcomes (empty: the contract holds)."""
    problems = []
    if first.code not in (0, 2):
        problems.append(f"exit code {first.code}")
    lines = first.stderr.strip().splitlines()
    if "Traceback" in first.stderr or "internal error" in first.stderr:
        problems.append(f"traceback or internal error: {first.stderr.strip()[-300:]}")
    elif first.code == 2 and len(lines) != 1:
        problems.append(f"exit 2 with {len(lines)} lines on stderr")
    if "stopped after" in first.stderr or first.seconds > limit_s:
        problems.append(f"took {first.seconds:.1f} s (bound {limit_s:.0f} s)")
    if first.code == 0 and first.json_bytes is None:
        problems.append("exit 0 without the JSON")
    if second is not None and second.json_bytes != first.json_bytes:
        problems.append("JSON differs between two runs")
    return problems


def check_contract(path: Path, tmp: Path, twice: bool = True) -> Outcome:
    """Assert the contract for the input at ``path``; returns the first outcome."""
    limit = time_bound_s(json_size(path))
    first = run_cli(path, tmp / "first.json", limit)
    second = run_cli(path, tmp / "second.json", limit) if twice and first.code == 0 else None
    problems = contract_problems(first, second, limit)
    assert not problems, f"{path.name}: {'; '.join(problems)}"
    return first


def json_size(path: Path) -> int:
    """Bytes of JSON behind ``path`` (a gzip file counts as 10 times its size)."""
    files = [f for f in path.rglob("*") if f.is_file()] if path.is_dir() else [path]
    return sum(f.stat().st_size * (10 if f.name.endswith(".gz") else 1) for f in files)


def write_case(case: Case, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / case.name
    path.write_bytes(case.data)
    return path


# ---------------------------------------------------------------- raw JSON with odd literals


class Raw:
    """A literal written into the JSON text as is (``1e400``, ``NaN``, a 5,000-digit number)."""

    def __init__(self, text: str) -> None:
        self.text = text


def dumps(doc: Any) -> bytes:
    """JSON text of ``doc`` where every ``Raw`` is spliced in verbatim."""
    raws: list[str] = []

    def default(value: Any) -> Any:
        if isinstance(value, Raw):
            raws.append(value.text)
            return f"\x00raw{len(raws) - 1}\x00"
        raise TypeError(type(value).__name__)

    text = json.dumps(doc, default=default, ensure_ascii=False)
    for i, raw in enumerate(raws):
        text = text.replace(json.dumps(f"\x00raw{i}\x00"), raw, 1)
    return text.encode("utf-8", "surrogatepass")


ODD_NUMBERS = (
    "1e400", "-1e400", "NaN", "Infinity", "-Infinity", "9" * 400, "9" * 5000, "-0", "1e-400",
    "9223372036854775808", "-9223372036854775809", "0.0000001", "1.7976931348623157e308",
)  # fmt: skip
ODD_STRINGS = (
    "²", "١٢", "5" * 5000, "", " ", "\u202e", "\ud800", "\x00", "<script>alert(1)</script>", "∞", "NaN",
    "ProfilerStep#²", "ProfilerStep#" + "9" * 5000, "iteration#" + "7" * 5000, "train.py(²): f",
    "train.py(" + "9" * 5000 + "): f", "a" * 10000, "🔥" * 50,
)  # fmt: skip


def odd_value(rng: random.Random) -> Any:
    pick = rng.randrange(6)
    if pick == 0:
        return Raw(rng.choice(ODD_NUMBERS))
    if pick == 1:
        return rng.choice(ODD_STRINGS)
    if pick == 2:
        return rng.choice([None, True, False, [], {}, [1, 2], {"a": 1}])
    if pick == 3:
        return rng.choice([-1, 0, -(2**63), 2**63 - 1, 2**64, -5.5, 1e18, 1e300])
    if pick == 4:
        return rng.uniform(-1e6, 1e6)
    return str(rng.randrange(10**6))


# ---------------------------------------------------------------- generated traces

HOST_APIS = (
    "cudaLaunchKernel", "cudaMemcpyAsync", "cudaDeviceSynchronize", "cudaStreamSynchronize",
    "cudaEventRecord", "cudaStreamWaitEvent", "cudaEventSynchronize", "cudaFree", "cudaMalloc",
    "cudaGraphLaunch", "hipLaunchKernel", "cuLaunchKernelEx", "cudaMemcpy",
)  # fmt: skip
OPS = ("aten::add", "aten::item", "aten::_local_scalar_dense", "aten::nonzero", "aten::copy_", "aten::mm")
DEVICE_NAMES = ("gemm_kernel", "Memcpy HtoD (Pageable -> Device)", "Memset (Device)", "volta_sgemm_128x64_nn")
ANNOTATIONS = (
    "ProfilerStep#1", "ProfilerStep#2", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
    "iteration#3", "train_step 4", "my_region",
)  # fmt: skip


def _valid_events(rng: random.Random, n: int) -> list[dict[str, Any]]:
    """A plausible trace: steps holding ops holding API calls, their device work with ac2g flows, python
    frames, sync records and metadata. Times advance; every id links."""
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}},
        {"ph": "M", "name": "process_labels", "pid": 0, "tid": 0, "args": {"labels": "GPU 0"}},
    ]
    t = float(rng.randrange(0, 10**6))
    streams = rng.sample([7, 13, 20, 24], rng.randint(1, 3))
    corr = rng.randrange(1, 1000)
    for step in range(rng.randint(0, 4)):
        step_start = t
        for _ in range(max(1, n // 4)):
            corr += 1
            op_dur = rng.uniform(1, 50)
            api = rng.choice(HOST_APIS)
            events.append(_x("cpu_op", rng.choice(OPS), t, op_dur, 1, 1, {"External id": corr}))
            if rng.random() < 0.3:
                frame = f"train.py({rng.randint(1, 500)}): step"
                events.append(_x("python_function", frame, t, op_dur, 1, 1, {"Python id": corr}))
            api_args = {"correlation": corr, "External id": corr}
            events.append(_x("cuda_runtime", api, t + 1, op_dur / 2, 1, 1, api_args))
            stream = rng.choice(streams)
            k_start = t + rng.uniform(0, 100)
            dev_args = {"device": 0, "stream": stream, "correlation": corr, "External id": corr}
            events.append(
                _x(
                    rng.choice(("kernel", "gpu_memcpy", "gpu_memset")),
                    rng.choice(DEVICE_NAMES),
                    k_start,
                    rng.uniform(0, 80),
                    0,
                    stream,
                    dev_args,
                )
            )
            if rng.random() < 0.8:
                events.append(
                    {"ph": "s", "id": corr, "pid": 1, "tid": 1, "ts": t + 1, "cat": "ac2g", "name": "ac2g"}
                )
                events.append(
                    {
                        "ph": "f",
                        "id": corr,
                        "pid": 0,
                        "tid": stream,
                        "ts": k_start,
                        "cat": "ac2g",
                        "name": "ac2g",
                        "bp": "e",
                    }
                )
            if "Synchronize" in api or "Wait" in api:
                sync_args = {
                    "device": 0,
                    "stream": stream,
                    "correlation": corr,
                    "cuda_sync_kind": "Stream Sync",
                    "wait_on_stream": rng.choice(streams),
                    "wait_on_cuda_event_record_corr_id": corr - 1,
                }
                events.append(
                    _x("cuda_sync", "Stream Sync", k_start, rng.uniform(0, 10), 0, stream, sync_args)
                )
            t += op_dur + rng.uniform(0, 30)
        events.append(
            _x(
                "user_annotation",
                rng.choice(ANNOTATIONS) if step else f"ProfilerStep#{step}",
                step_start,
                t - step_start,
                1,
                1,
                {},
            )
        )
    if rng.random() < 0.5:
        events.append(_x("user_annotation", ANNOTATIONS[2], t, rng.uniform(0, 100), 1, 1, {}))
    if rng.random() < 0.5:  # counter tracks: a device's (pid 0) and one under the host's pid
        for i in range(rng.randint(1, 4)):
            pid = rng.choice([0, 1])
            value = {"value": rng.uniform(0, 100)}
            events.append(
                {"ph": "C", "name": "SM occupancy", "pid": pid, "tid": 0, "ts": t * i / 4, "args": value}
            )
    return events


def _x(
    cat: str, name: str, ts: float, dur: float, pid: Any, tid: Any, args: dict[str, Any]
) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _document(events: list[Any], rng: random.Random) -> dict[str, Any]:
    doc: dict[str, Any] = {"schemaVersion": 1, "traceEvents": events}
    if rng.random() < 0.7:
        major = rng.choice([6, 8, 8, "²"])  # 7 and up: the tensor-core rule runs
        doc["deviceProperties"] = [
            {"id": 0, "name": "Fuzz GPU", "totalGlobalMem": 1 << 34, "computeMajor": major}
        ]
    if rng.random() < 0.3:
        doc["distributedInfo"] = {"rank": rng.choice([0, 1, -1, "0", 2**70]), "world_size": 2}
    if rng.random() < 0.2:
        doc["displayTimeUnit"] = rng.choice(["ns", "ms", 5])
    return doc


def _break_types(rng: random.Random, events: list[dict[str, Any]]) -> None:
    for e in rng.sample(events, min(len(events), rng.randint(1, 5))):
        key = rng.choice(["ph", "cat", "name", "pid", "tid", "ts", "dur", "id", "args"])
        e[key] = rng.choice([None, [], {}, "x", 1.5, True, [1], {"k": "v"}])
        if rng.random() < 0.5 and isinstance(e.get("args"), dict):
            e["args"][rng.choice(["correlation", "External id", "stream", "device", "Python id"])] = (
                odd_value(rng)
            )


def _drop_keys(rng: random.Random, events: list[dict[str, Any]]) -> None:
    for e in rng.sample(events, min(len(events), rng.randint(1, 8))):
        for key in rng.sample(sorted(e), rng.randint(1, len(e))):
            del e[key]


def _odd_numbers(rng: random.Random, events: list[dict[str, Any]]) -> None:
    for e in rng.sample(events, min(len(events), rng.randint(1, 6))):
        key = rng.choice(["ts", "dur", "pid", "tid", "id"])
        e[key] = Raw(rng.choice(ODD_NUMBERS)) if rng.random() < 0.6 else rng.choice([-1e18, -5, 0, 1e17])
        if isinstance(e.get("args"), dict):
            e["args"][rng.choice(["correlation", "External id", "bytes", "stream"])] = odd_value(rng)
    if rng.random() < 0.3:
        for e in events:
            if "dur" in e:
                e["dur"] = 0


NUMERIC_KEYS = ("ts", "dur", "pid", "tid", "id")
NUMERIC_ARGS = ("correlation", "External id", "device", "stream", "Python id", "Python parent id", "bytes")
# str.isdigit or \\d accept them; int() refuses them (or reads another script's digits, or is over its limit)
ODD_DIGITS = ("²", "¹²", "٣", "١٢", "⁴2", "0²", "-²", "²e3", "9" * 5000)


def _odd_digits(rng: random.Random, events: list[dict[str, Any]]) -> None:
    """Digits that ``str.isdigit`` or a regular expression's ``\\d`` accept and ``int`` refuses, written as
    text in every numeric field (event keys, args, counter pids, step numbers, device labels)."""
    for e in events:  # counter tracks under a pid of odd digits
        if e.get("ph") == "C" and rng.random() < 0.7:
            e["pid"] = rng.choice(ODD_DIGITS)
    for e in rng.sample(events, min(len(events), rng.randint(1, 10))):
        for key in rng.sample(NUMERIC_KEYS, rng.randint(1, len(NUMERIC_KEYS))):
            if key in e or rng.random() < 0.3:
                e[key] = rng.choice(ODD_DIGITS)
        args = e.get("args")
        if isinstance(args, dict):
            for key in rng.sample(NUMERIC_ARGS, rng.randint(1, 3)):
                args[key] = rng.choice(ODD_DIGITS)
            if e.get("ph") == "M":
                args["labels"] = rng.choice(["MTIA ", "GPU ", "TPU "]) + rng.choice(ODD_DIGITS)
        if e.get("cat") == "user_annotation" and rng.random() < 0.5:
            e["name"] = rng.choice(["ProfilerStep#", "iteration#"]) + rng.choice(ODD_DIGITS)


SUBNORMAL_AND_HUGE = (5e-324, 1e-320, 2.2e-308, 1e-300, 1e300, 1.7976931348623157e308, 1e18)


def _odd_durations(rng: random.Random, events: list[dict[str, Any]]) -> None:
    """Subnormal and huge durations: busy times whose shares round to zero, ends that overflow to inf."""
    timed = [e for e in events if "dur" in e]
    for e in rng.sample(timed, min(len(timed), rng.randint(1, 8))):
        e["dur"] = rng.choice(SUBNORMAL_AND_HUGE)
        if rng.random() < 0.3:
            e["ts"] = rng.choice([0, 0.0, 5e-324, 1e300])
    if timed and rng.random() < 0.5:  # the trace moved to start at 0, every device event a subnormal at 0:
        start = min(e["ts"] for e in timed if isinstance(e.get("ts"), float | int))  # busy time is positive,
        for e in events:  # a share of it rounds to zero
            if isinstance(e.get("ts"), float | int) and e["ts"] < 1e299:
                e["ts"] -= start
            if e.get("pid") == 0 and "dur" in e:
                e["ts"], e["dur"] = 0, 5e-324
                if e.get("cat") == "kernel" and rng.random() < 0.8:
                    e["name"] = "add_kernel"  # no FP32 GEMM in the share either


def _odd_text(rng: random.Random, events: list[dict[str, Any]]) -> None:
    for e in rng.sample(events, min(len(events), rng.randint(1, 6))):
        e[rng.choice(["name", "cat"])] = rng.choice(ODD_STRINGS)
        if isinstance(e.get("args"), dict):
            e["args"][rng.choice(["correlation", "External id", "name"])] = rng.choice(ODD_STRINGS)


def _disorder(rng: random.Random, events: list[dict[str, Any]]) -> None:
    rng.shuffle(events)
    for e in rng.sample(events, min(len(events), rng.randint(1, 3))):
        if isinstance(e.get("ts"), int | float):
            e["ts"] = e["ts"] + rng.choice([-1e9, -1e3, 1e3, 1e9, -e["ts"]])


def _orphans(rng: random.Random, events: list[dict[str, Any]]) -> None:
    keep = [e for e in events if e.get("cat") not in ("cuda_runtime",) or rng.random() < 0.5]
    events[:] = [e for e in keep if e.get("ph") != "s" or rng.random() < 0.5]
    for e in rng.sample(events, min(len(events), 3)):
        if isinstance(e.get("args"), dict):
            e["args"]["correlation"] = rng.randrange(10**6, 2 * 10**6)


def _nesting(rng: random.Random, events: list[dict[str, Any]]) -> None:
    depth = rng.choice([50, 500, 3000])
    t = 0.0
    for i in range(depth):  # spans nested inside each other, each 1 us shorter on both sides
        events.append(_x("cpu_op", f"nest{i}", t + i, 2 * depth - 2 * i, 1, 1, {"External id": i}))
    if rng.random() < 0.5:  # JSON nested deeper than any decoder's recursion allows
        n = rng.choice([100, 2000, 100000])
        events.append(
            {**_x("cpu_op", "deep args", 0, 1, 1, 1, {}), "args": Raw('{"a":[' * n + "1" + "]}" * n)}
        )


def _cycles(rng: random.Random, events: list[dict[str, Any]]) -> None:
    ids = [e for e in events if e.get("cat") == "python_function"]
    for i, e in enumerate(ids):  # python parents pointing at each other in a ring
        e["args"]["Python parent id"] = ids[(i + 1) % len(ids)]["args"].get("Python id", i)
        e["args"]["Python id"] = e["args"].get("Python id", i)
    flows = [e for e in events if e.get("ph") in ("s", "f")]
    for e in flows:  # every flow end shares one id, starts and ends reversed in time
        e["id"] = 1
        e["ph"] = "f" if e["ph"] == "s" else "s"
    for e in rng.sample(events, min(len(events), 4)):
        if isinstance(e.get("args"), dict):
            e["args"]["External id"] = e["args"].get("correlation", 1)


def _many_lanes(rng: random.Random, events: list[dict[str, Any]]) -> None:
    """Every device event on a stream (or a device) of its own, or every host event on a thread of its
    own: the shapes that once made work grow with the square of the lanes."""
    shape = rng.choice(["streams", "devices", "threads"])
    for i, e in enumerate(events):
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        key = e.get("id") if e.get("ph") in ("s", "f") else args.get("correlation", args.get("External id"))
        n = 100 + (
            key if isinstance(key, int) and not isinstance(key, bool) else 10**6 + i
        )  # a flow's ends stay together
        on_device = e.get("pid") == 0 or e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset", "cuda_sync")
        if shape == "threads" and not on_device and e.get("ph") in ("X", "s"):
            e["tid"] = n
        elif shape == "streams" and on_device and e.get("ph") in ("X", "f"):
            e["tid"] = n
            if "stream" in args:
                args["stream"] = n
        elif shape == "devices" and on_device and e.get("ph") in ("X", "f"):
            e["pid"] = n
            if "device" in args:
                args["device"] = n


BREAKERS: dict[str, Callable[[random.Random, list[dict[str, Any]]], None] | None] = {
    "valid": None, "types": _break_types, "missing": _drop_keys, "numbers": _odd_numbers,
    "unicode": _odd_text, "order": _disorder, "orphans": _orphans, "nesting": _nesting, "cycles": _cycles,
    "digits": _odd_digits, "durations": _odd_durations, "lanes": _many_lanes,
}  # fmt: skip


def generate_case(rng: random.Random, kind: str | None = None) -> Case:
    """A generated trace of class ``kind`` (random when None): ``valid`` or broken one way."""
    kind = kind or rng.choice(sorted(BREAKERS))
    events = _valid_events(rng, rng.randint(0, 40))
    breaker = BREAKERS[kind]
    if breaker is not None and events:
        breaker(rng, events)
    data = dumps(_document(events, rng) if rng.random() < 0.9 else events)
    if rng.random() < 0.3:
        return Case(kind, "fuzz.pt.trace.json.gz", gzip.compress(data, mtime=0))
    return Case(kind, "fuzz.pt.trace.json", data)


def nested_case(rng: random.Random) -> Case:
    """A generated valid trace, then nested deep somewhere (``_nest_bytes``); written plain."""
    events = _valid_events(rng, rng.randint(1, 40))
    return Case("nest", "fuzz.pt.trace.json", _nest_bytes(rng, dumps(_document(events, rng))))


# ---------------------------------------------------------------- mutated real traces


def real_trace_docs(names: tuple[str, ...] = SMALL_REAL) -> list[tuple[str, dict[str, Any]]]:
    """The shared real traces to mutate, decoded (empty when ``../shared/traces`` is absent)."""
    out = []
    for name in names:
        path = SHARED_TRACES / name
        if path.is_file():
            out.append((name, json.loads(gzip.decompress(path.read_bytes()))))
    return out


def _events_of(doc: dict[str, Any]) -> list[Any]:
    events = doc.get("traceEvents")
    return events if isinstance(events, list) else []


def _mutate_structure(rng: random.Random, doc: dict[str, Any]) -> str:
    events = [e for e in _events_of(doc) if isinstance(e, dict)]
    kind = rng.choice(
        ["shift_launch", "retype", "drop_key", "odd_literal", "duplicate", "reorder", "unicode"]
    )
    if not events:
        return kind
    if kind == "shift_launch":
        launches = [e for e in events if "Launch" in str(e.get("name"))] or events
        e = rng.choice(launches)
        if isinstance(e.get("ts"), int | float):
            e["ts"] += rng.choice([-1e9, -1e6, -1e3, 1e3, 1e9])
    elif kind == "retype":
        _break_types(rng, events)
    elif kind == "drop_key":
        _drop_keys(rng, events)
    elif kind == "odd_literal":
        _odd_numbers(rng, events)
    elif kind == "duplicate":
        doc["traceEvents"] = _events_of(doc) + rng.sample(events, min(len(events), rng.randint(1, 50)))
    elif kind == "reorder":
        _disorder(rng, events)
        doc["traceEvents"] = events
    else:
        _odd_text(rng, events)
    return kind


def _mutate_bytes(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    kind = rng.choice(["truncate", "byteflip", "splice", "whitespace", "nest"])
    if kind == "truncate":
        return kind, data[: rng.randrange(len(data) + 1)]
    if kind == "byteflip":
        buf = bytearray(data)
        for _ in range(rng.randint(1, 20)):
            buf[rng.randrange(len(buf))] = rng.randrange(256)
        return kind, bytes(buf)
    if kind == "splice":
        a, b = sorted(rng.randrange(len(data) + 1) for _ in range(2))
        return kind, data[:a] + data[b:]
    if kind == "whitespace":
        return kind, b" \n\t" * rng.randint(1, 10000) + data
    return kind, _nest_bytes(rng, data)


def _nest_bytes(rng: random.Random, data: bytes) -> bytes:
    """JSON nested 100 to 100,000 deep: before the event list, as its first element, inside an event
    half-way through it, or around the whole document; half the time after a MB of whitespace, which
    makes the file (written plain) large enough to be streamed."""
    depth = rng.choice([100, 10000, 100000])
    deep = b"[" * depth + b"]" * depth
    where = rng.choice(["head", "list", "event", "document"])
    if where == "head":
        data = data.replace(b'"traceEvents":', b'"x":' + deep + b',"traceEvents":', 1)
    elif where == "list":
        data = re.sub(rb'("traceEvents":\s*\[)', lambda m: m.group(1) + deep + b",", data, count=1)
    elif where == "event":
        between = re.compile(rb"\}\s*,\s*\{").search(data, len(data) // 2)
        if between is not None:
            cut = between.start() + 1
            data = data[:cut] + b', {"name": "deep", "args": {"a": ' + deep + b"}}" + data[cut:]
    else:
        data = b"[" * depth + data + b"]" * depth
    return (b" " * (1 << 20) if rng.random() < 0.5 else b"") + data


def mutate_case(rng: random.Random, base: tuple[str, dict[str, Any]]) -> Case:
    """A mutated copy of a real trace: a structural change (re-serialised) or a change to its bytes."""
    name, doc = base
    doc = json.loads(json.dumps(doc))  # a private copy
    if rng.random() < 0.6:
        kind = _mutate_structure(rng, doc)
        data = dumps(doc)
    else:
        kind, data = _mutate_bytes(rng, json.dumps(doc).encode())
    gz = rng.random() < 0.5
    if gz and rng.random() < 0.2:  # the gzip itself damaged
        packed = bytearray(gzip.compress(data, mtime=0))
        packed[rng.randrange(10, len(packed))] ^= 0xFF
        return Case(f"real:{kind}+gzip", name, bytes(packed))
    stem = name.removesuffix(".gz")
    return Case(f"real:{kind}", name if gz else stem, gzip.compress(data, mtime=0) if gz else data)


# ---------------------------------------------------------------- hypothesis strategies


def kineto_cases(kind: str | None = None) -> st.SearchStrategy[Case]:
    """Generated Kineto traces, valid and broken (``BREAKERS``), as hypothesis examples."""
    return st.builds(generate_case, st.randoms(use_true_random=False), st.just(kind))


def nested_cases() -> st.SearchStrategy[Case]:
    """``nested_case`` as hypothesis examples."""
    return st.builds(nested_case, st.randoms(use_true_random=False))


def mutated_cases(bases: list[tuple[str, dict[str, Any]]]) -> st.SearchStrategy[Case]:
    """Mutated copies of the shared real traces, as hypothesis examples."""
    return st.builds(mutate_case, st.randoms(use_true_random=False), st.sampled_from(bases))
