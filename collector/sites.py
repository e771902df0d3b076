"""Exact call sites of sync-prone calls: the user's file and line, the OS thread, and the trace-clock time.

``with SyncSiteRecorder() as rec: ...`` then ``rec.records()`` gives the sidecar's ``sync_sites``
(``docs/sidecar.md``): one record per (file, line, function, op, thread) with the call count and the start
time of each call on the trace clock (:mod:`stallscope.collector.clock`).

How: a :class:`torch.overrides.TorchFunctionMode` sees every tensor method and torch function; only the
sync-prone ones (a dict lookup, plus a cheap argument check for ``to``/``copy_``/indexing/...) do any
work. ``torch.cuda.synchronize``, ``torch.cuda.Stream.synchronize``, ``torch.cuda.Event.synchronize``,
``torch.accelerator.synchronize`` and ``torch.cpu.synchronize`` (what device-agnostic code calls on a CPU:
``torch.get_device_module(device).synchronize()``) are not torch functions: they are wrapped while the recorder is active
and restored on exit (also after an exception).

The site is the innermost frame outside torch, site-packages, the standard library and stallscope's own
packages (the classification is cached per code object). A call made by stallscope itself (its innermost
non-library frame is in ``collector``/``analyzer``/``stallscope``/``dashboard``, e.g. the step timer
reading its CUDA events) is not recorded; a call with no user frame at all is not recorded either. The
session's wrapper around ``optimizer.step`` passes calls through (``_PASS_THROUGH``): the optimizer's
own reads inside it are recorded at the user's ``opt.step()`` line. A call made inside a library also
records that library (``library``: the module that made it) and the library call the user's line made
(``library_call``, ``module.qualname``; see ``_library_call``).

Decisions:

- It records sync-*prone* calls, whatever device the tensor is on: on a CPU-only run it marks the sites
  that would sync on a GPU, and on a GPU run a record with no blocking call near it is simply not used by
  the analyzer's join. So ``.item()``, ``.tolist()``, ``.numpy()``, ``.cpu()`` and ``.to("cpu")`` /
  ``.to(cpu_tensor)`` count even on a CPU tensor (an explicit move to the host is where a GPU tensor
  would wait). ``dst.copy_(src)`` counts only when ``dst`` is on the CPU and ``src`` is not: a CPU-to-CPU
  copy is an ordinary copy (optimizers and data code do many) and says nothing about a device.
- Data-dependent shapes: ``nonzero``, ``argwhere``, ``masked_select``, ``unique``(``_consecutive``),
  one-argument ``torch.where``, indexing with a bool tensor (``x[mask]``, op ``Tensor.__getitem__``;
  ``x[mask] = t`` with a non-scalar ``t``, op ``Tensor.__setitem__``), ``repeat_interleave`` with tensor
  repeats and no ``output_size``, ``bincount``, ``one_hot`` without ``num_classes``.
- Scalar reads: ``item``, ``__bool__`` (``if t:``), ``__int__``, ``__float__``, ``__index__``,
  ``__complex__``, ``is_nonzero``, ``__contains__``, ``equal``, ``allclose``, ``__repr__``/``__format__``
  (printing a device tensor copies it to the host).
- ``SyncSiteRecorder(strategy="patch")`` wraps the sync-prone methods and functions themselves instead
  of pushing a mode: the other torch calls then cost nothing extra (a TorchFunctionMode adds about 2-3 µs
  to *every* torch call, whatever its handler does), and every thread is covered; calls through aliases
  bound before entry (``from torch import nonzero``) are missed.
- Learning (``patch`` strategy, CPU-only runs): while ``tracked`` (``stallscope.collector.origin``'s tracking is
  on) the sites whose tensor would be on the accelerator are kept; while ``learning`` too, calls are
  only learnt from, not logged. A call logged while not tracked counts as on the device when its site
  was known to be. So origin tracking, a mode that slows every torch call, can be on for the step
  before the window and off inside it.
- The mode is thread-local (torch keeps the mode stack per thread): tensor calls are recorded on the thread
  that entered the recorder; the CUDA synchronize wrappers are process-wide and record on any thread.
- Calls made from inside another recorded call (torch's own Python code under ``Tensor.unique``, for
  instance) are not recorded again: torch disables the mode while its handler runs.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
import sysconfig
import threading
import time
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any

from stallscope.collector.clock import TRACE_BASE_NS
from stallscope.collector.modes import ThreadMode
from stallscope.collector.origin import bound_tensor, device_bound, torch_types

_LIB, _USER, _OURS = 0, 1, 2
#: stallscope's packages: one folder tree when installed, four folders in a checkout (pyproject's package-dir)
_OUR_PACKAGES = ("stallscope", "stallscope.analyzer", "stallscope.collector", "stallscope.dashboard")
_LIB_PREFIXES = ("<frozen ", "<eval_with_key>", "<torch_package_", "<built-in")
#: stallscope's wrappers that the user's calls pass through (the session wraps ``optimizer.step`` to
#: find steps): a sync inside them is the user's (``LBFGS.step`` reading its loss), not stallscope's
_PASS_THROUGH = frozenset({"Session._wrap_step.<locals>.step"})
_Pred = Callable[[tuple[Any, ...], "dict[str, Any] | None"], bool]


def _our_folders() -> tuple[str, ...]:
    """The folders stallscope's own code is read from (found without importing the packages)."""
    folders: list[str] = []
    for name in _OUR_PACKAGES:
        spec = importlib.util.find_spec(name)
        for folder in (spec.submodule_search_locations or []) if spec is not None else []:
            folders.append(os.path.realpath(folder) + os.sep)
    return tuple(folders)


class _FrameFilter:
    """Classifies code objects as library / user / stallscope's own, cached per code object."""

    def __init__(self) -> None:
        import torch

        self.this_file = os.path.realpath(__file__)
        self.ours = _our_folders()
        libs = {
            os.path.dirname(os.path.realpath(torch.__file__)),
            os.path.dirname(os.path.realpath(os.__file__)),
        }
        paths = sysconfig.get_paths()
        for key in ("stdlib", "platstdlib", "purelib", "platlib"):
            if paths.get(key):
                libs.add(os.path.realpath(paths[key]))
        self.libs = tuple(sorted(p + os.sep for p in libs))
        # keyed by id(code): hashing a code object hashes its constants and names on every call (0.2 µs
        # for a small function, 5 µs for a script's module code); ``codes`` keeps each one alive, so
        # its id is never reused while cached
        self.cache: dict[int, int] = {}
        self.codes: dict[int, CodeType] = {}
        self.paths: dict[str, int] = {}

    def kind(self, code: CodeType) -> int:
        k = self.paths.get(code.co_filename)
        if k is None:
            k = self.paths[code.co_filename] = self._kind(code.co_filename)
        if k == _OURS and getattr(code, "co_qualname", "") in _PASS_THROUGH:
            k = _LIB  # stallscope's wrapper around the user's call: the call is still the user's
        self.cache[id(code)] = k
        self.codes[id(code)] = code
        return k

    def _kind(self, filename: str) -> int:
        if filename.startswith("<"):
            return _LIB if filename.startswith(_LIB_PREFIXES) else _USER
        path = os.path.realpath(os.path.abspath(filename))
        if path == self.this_file:
            return _LIB  # the recorder's own frames (a nested recorder's handler): look further out
        if path.startswith(self.ours):
            return _OURS
        parts = path.replace("\\", "/")
        if "/site-packages/" in parts or "/dist-packages/" in parts or path.startswith(self.libs):
            return _LIB
        return _USER


_FILTER: _FrameFilter | None = None


def _frame_filter() -> _FrameFilter:
    global _FILTER
    if _FILTER is None:
        _FILTER = _FrameFilter()
    return _FILTER


# --- which calls are sync-prone --------------------------------------------------------------------------


def _on_accelerator(t: Any) -> bool:
    """Whether ``t`` is a tensor off the host (a GPU run's test: the tensor's own device says it)."""
    return getattr(t, "is_cpu", True) is False


def _is_host(d: Any) -> bool:
    import torch

    if isinstance(d, str):
        return d == "cpu" or d.startswith("cpu:")
    if isinstance(d, torch.device):
        return d.type == "cpu"
    if isinstance(d, torch.Tensor):
        return d.device.type == "cpu"
    return False


def _to_host(args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> bool:
    if len(args) > 1 and _is_host(args[1]):
        return True
    if not kwargs:
        return False
    return _is_host(kwargs.get("device")) or _is_host(kwargs.get("other"))


def _copy_to_host(args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> bool:
    import torch

    src = args[1] if len(args) > 1 else (kwargs or {}).get("src")
    dst = args[0] if args else None
    return (
        isinstance(dst, torch.Tensor)
        and isinstance(src, torch.Tensor)
        and dst.device.type == "cpu"
        and src.device.type != "cpu"
    )


def _has_mask(index: Any) -> bool:
    import torch

    if isinstance(index, torch.Tensor):
        return index.dtype == torch.bool
    if isinstance(index, tuple):
        return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in index)
    return False


def _mask_index(args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> bool:
    return len(args) > 1 and _has_mask(args[1])


def _mask_assign(args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> bool:
    import torch

    # ``x[mask] = scalar`` is a masked_fill (no sync); a tensor of values goes through nonzero
    return len(args) > 2 and isinstance(args[2], torch.Tensor) and args[2].dim() > 0 and _has_mask(args[1])


def _tensor_repeats(args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> bool:
    import torch

    kw = kwargs or {}
    if kw.get("output_size") is not None:
        return False
    repeats = args[1] if len(args) > 1 else kw.get("repeats")
    if repeats is None:  # torch.repeat_interleave(repeats_tensor)
        return len(args) == 1 and isinstance(args[0], torch.Tensor)
    return isinstance(repeats, torch.Tensor)


def _single_arg(args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> bool:
    return len(args) + len(kwargs or ()) == 1


def _no_num_classes(args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> bool:
    n = args[1] if len(args) > 1 else (kwargs or {}).get("num_classes", -1)
    return n is None or n == -1


_TENSOR_METHODS: dict[str, _Pred | None] = {
    # scalar reads and copies to the host
    "item": None, "tolist": None, "numpy": None, "__array__": None, "cpu": None,
    "__bool__": None, "__int__": None, "__float__": None, "__index__": None, "__complex__": None,
    "is_nonzero": None, "__contains__": None, "equal": None, "allclose": None,
    "__repr__": None, "__format__": None,
    "to": _to_host, "copy_": _copy_to_host,
    # data-dependent output shapes
    "nonzero": None, "argwhere": None, "masked_select": None, "unique": None, "unique_consecutive": None,
    "bincount": None, "repeat_interleave": _tensor_repeats,
    "__getitem__": _mask_index, "__setitem__": _mask_assign,
}  # fmt: skip
_TORCH_FUNCTIONS: dict[str, _Pred | None] = {
    "nonzero": None, "argwhere": None, "masked_select": None, "unique": None, "unique_consecutive": None,
    "equal": None, "allclose": None, "is_nonzero": None, "bincount": None,
    "repeat_interleave": _tensor_repeats, "where": _single_arg,
}  # fmt: skip

_SPECS: dict[Any, tuple[str, _Pred | None]] | None = None


def _specs() -> dict[Any, tuple[str, _Pred | None]]:
    """func object (as ``__torch_function__`` receives it) -> (op name, argument check or None)."""
    global _SPECS
    if _SPECS is None:
        import torch
        import torch.nn.functional as F

        specs: dict[Any, tuple[str, _Pred | None]] = {}
        for name, pred in _TENSOR_METHODS.items():
            for owner in (torch.Tensor, torch._C.TensorBase):
                fn = getattr(owner, name, None)
                if fn is not None:
                    specs.setdefault(fn, (f"Tensor.{name}", pred))
        for name, pred in _TORCH_FUNCTIONS.items():
            fn = getattr(torch, name, None)
            if fn is not None:
                specs.setdefault(fn, (f"torch.{name}", pred))
        specs.setdefault(F.one_hot, ("torch.nn.functional.one_hot", _no_num_classes))
        _SPECS = specs
    return _SPECS


# --- the recorder ------------------------------------------------------------------------------------------

_MODE_CLASS: type | None = None


def _mode_class() -> type:
    """The TorchFunctionMode subclass (made on first use, so that importing this module needs no torch)."""
    global _MODE_CLASS
    if _MODE_CLASS is None:
        from torch.overrides import TorchFunctionMode

        class _SyncSiteMode(TorchFunctionMode):
            def __init__(self, recorder: SyncSiteRecorder) -> None:
                super().__init__()
                self._specs = _specs()
                self._record = recorder._record
                self._on_device = recorder._on_device

            def __torch_function__(
                self,
                func: Any,
                types: Any,
                args: tuple[Any, ...] = (),
                kwargs: dict[str, Any] | None = None,
            ) -> Any:
                spec = self._specs.get(func)
                if spec is not None and (spec[1] is None or spec[1](args, kwargs)):
                    self._record(spec[0], 2, self._on_device(spec[0], args, True))
                if kwargs is None:
                    return func(*args)
                return func(*args, **kwargs)

        _MODE_CLASS = _SyncSiteMode
    return _MODE_CLASS


# code, instruction (f_lasti), op, OS thread id, time.time_ns(), whether the tensor is (would be) on
# the accelerator, the library call it was made inside (``_library_call``; None: the user's own call)
_Call = tuple[CodeType, int, str, int, int, bool, "tuple[str, str] | None"]


def _package(module: str) -> str:
    """A module's package as advice names it: ``torch.optim`` for ``torch.optim.lbfgs``, ``numpy`` for
    ``numpy.linalg``."""
    parts = module.split(".")
    return ".".join(parts[:2] if parts[0] == "torch" and len(parts) > 2 else parts[:1])


def _library_call(f: FrameType | None, user: FrameType) -> tuple[str, str] | None:
    """For a call made inside a library (frames ``f`` ... up to the user's frame ``user``): the module
    of the library frame that made it (``torch.distributions.distribution``) and the library call the
    user made, as ``module.qualname`` (``torch.optim.lbfgs.LBFGS.step``): the outermost frame of the
    same package that is not a decorator's inner function. Walked only for calls through a library."""
    inner: str | None = None
    call: str | None = None
    package = ""
    while f is not None and f is not user:
        module = f.f_globals.get("__name__")
        if isinstance(module, str) and not module.startswith("stallscope"):
            if inner is None:
                inner, package = module, _package(module)
            if (module == package or module.startswith(package + ".")) and "<locals>" not in (
                qualname := getattr(f.f_code, "co_qualname", f.f_code.co_name)
            ):
                call = f"{module}.{qualname}"
        f = f.f_back
    return None if inner is None or call is None else (inner, call)


_DIRECTED = ("Tensor.to", "Tensor.copy_")


def _line_of(code: CodeType, at: int) -> int:
    """The source line of the instruction at byte offset ``at`` (a frame's ``f_lasti``) in ``code``."""
    for start, end, line in code.co_lines():
        if start <= at < end and line is not None:
            return line
    return code.co_firstlineno


class _Guard(threading.local):
    """Per thread, ``state``: [1 while a wrapped call runs on this thread (calls made inside it are not
    recorded), this thread's OS id]. A wrapper looks the thread-local up once per call and uses list
    items for the rest (each thread-local attribute access is a dictionary lookup by thread);
    ``get_native_id`` is a system call, made once a thread."""

    def __init__(self) -> None:
        self.state = [0, threading.get_native_id()]


class SyncSiteRecorder:
    """Records the user's call sites of sync-prone torch calls while active (see the module docstring)."""

    def __init__(
        self, *, strategy: str = "mode", wrap_synchronize: bool = True, latent: bool = False
    ) -> None:
        if strategy not in ("mode", "patch"):
            raise ValueError(f"strategy must be 'mode' or 'patch', not {strategy!r}")
        self._strategy = strategy
        self._filter = _frame_filter()
        self._log: list[_Call] = []  # one entry per recorded call; aggregated by ``records()``
        self._wrap_synchronize = wrap_synchronize
        # CPU-only run: whether a call's tensor would be on the accelerator comes from stallscope.collector.origin
        self._latent = latent
        # CPU-only runs (see "Learning" in the module docstring): ``tracked`` while origin tracking is on
        # (the sites whose tensor would be on the accelerator are kept in ``_known``); ``learning``: do
        # not log calls, only learn. While not tracked, a call from a known site counts as on the device.
        self.tracked = True
        self.learning = False
        self._known: set[tuple[int, int, str]] = set()  # (id(code), f_lasti, op)
        self._patched: list[tuple[Any, str, Any, bool]] = []  # (owner, name, original, was in __dict__)
        self._mode: Any = None

    # context manager -------------------------------------------------------------------------------------
    def __enter__(self) -> SyncSiteRecorder:
        if self._mode is not None:
            raise RuntimeError("SyncSiteRecorder is already active")
        try:
            if self._wrap_synchronize:
                self._patch()
            if self._strategy == "patch":
                self._patch_calls()
                mode: Any = True
            else:
                mode = ThreadMode(_mode_class()(self))
                mode.install()
        except BaseException:
            self._unpatch()
            raise
        self._mode = mode
        return self

    def __exit__(self, *exc: object) -> None:
        mode, self._mode = self._mode, None
        try:
            if isinstance(mode, ThreadMode):
                mode.remove()
        finally:
            self._unpatch()

    @property
    def active(self) -> bool:
        return self._mode is not None

    # recording -------------------------------------------------------------------------------------------
    def _on_device(self, op: str, args: tuple[Any, ...], direct: bool) -> bool:
        """Whether the call's tensor is on the accelerator (a GPU run) or would be (a CPU-only run: see
        ``stallscope.collector.origin``). For a copy the source counts. On a CPU-only run a ``.to(device)`` or
        ``copy_`` made inside a library (``model.to(device)``, ``clip_grad_norm_``) is never a copy
        to the host: its direction is the library's business, and on the host it is a no-op."""
        t = args[1] if op == "Tensor.copy_" and len(args) > 1 else (args[0] if args else None)
        if not self._latent:
            return _on_accelerator(t)
        if op in _DIRECTED and not direct:
            return False
        return device_bound(t)

    def _record(self, op: str, depth: int, on_device: bool = True) -> None:
        """One call of ``op``; ``depth`` is the frame of the caller of the hooked function, counted from
        this method's frame. (The ``patch`` strategy's wrappers inline this: see ``_call_wrapper``.)"""
        if self.learning:
            return
        t = time.time_ns()
        start = sys._getframe(depth)
        f: FrameType | None = start
        cache = self._filter.cache
        while f is not None:
            code = f.f_code
            k = cache.get(id(code))
            if k is None:
                k = self._filter.kind(code)
            if k == _USER:
                via = _library_call(start, f) if f is not start else None
                self._log.append((code, f.f_lasti, op, threading.get_native_id(), t, on_device, via))
                return
            if k == _OURS:
                return
            f = f.f_back

    def _patch(self) -> None:
        import torch

        targets: list[tuple[Any, str, str]] = [
            (torch.cuda, "synchronize", "torch.cuda.synchronize"),
            (torch.cuda.Stream, "synchronize", "torch.cuda.Stream.synchronize"),
            (torch.cuda.Event, "synchronize", "torch.cuda.Event.synchronize"),
        ]
        cpu = getattr(torch, "cpu", None)  # device-agnostic code calls torch.cpu.synchronize on a CPU
        if cpu is not None and hasattr(cpu, "synchronize"):
            targets.append((cpu, "synchronize", "torch.cpu.synchronize"))
        accelerator = getattr(torch, "accelerator", None)
        if accelerator is not None and hasattr(accelerator, "synchronize"):
            targets.append((accelerator, "synchronize", "torch.accelerator.synchronize"))
        for owner, name, op in targets:
            original = getattr(owner, name, None)
            if original is None:
                continue
            own = name in vars(owner)
            setattr(owner, name, self._wrapper(original, op))
            self._patched.append((owner, name, original, own))

    def _patch_calls(self) -> None:
        """The ``patch`` strategy: wrap the sync-prone tensor methods and torch functions themselves."""
        import torch
        import torch.nn.functional as F

        guard = _Guard()
        targets: list[tuple[Any, str, str, _Pred | None]] = [
            (torch.Tensor, name, f"Tensor.{name}", pred) for name, pred in _TENSOR_METHODS.items()
        ]
        targets += [(torch, name, f"torch.{name}", pred) for name, pred in _TORCH_FUNCTIONS.items()]
        targets.append((F, "one_hot", "torch.nn.functional.one_hot", _no_num_classes))
        for owner, name, op, pred in targets:
            original = getattr(owner, name, None)
            if original is None:
                continue
            own = name in vars(owner)
            setattr(owner, name, self._call_wrapper(original, op, pred, guard))
            self._patched.append((owner, name, original, own))

    def _call_wrapper(
        self, original: Callable[..., Any], op: str, pred: _Pred | None, guard: _Guard
    ) -> Callable[..., Any]:
        """The wrapper of one sync-prone method. It is on the hot path of every such call (a decode loop
        reads a token every few dozen µs), so it does the least it can per call: one thread-local
        lookup, the caller's code object and instruction offset (``records()`` turns them into a line),
        the clock; a call whose arguments make it no sync (``pred``) goes straight through. On a CPU-only
        run with origin tracking off (inside the window) a site learnt as device-bound answers the device
        question with one set lookup, before the tensor is asked."""
        log = self._log
        kind_of = self._filter.cache.get  # a bound method: one lookup per frame
        classify = self._filter.kind
        getframe, now = sys._getframe, time.time_ns
        on_device = self._on_device
        known = self._known
        latent = self._latent
        directed = op in _DIRECTED  # ``to``/``copy_``: direction and source need ``_on_device``
        types = torch_types()
        tensor: Any = types.tensor
        recorder = self
        library_call = _library_call
        last_user: CodeType | None = None  # the last user code seen: the usual next caller

        def latent_device(args: tuple[Any, ...], direct: bool) -> bool:
            """CPU-only run: whether the call's tensor would be on the accelerator (``stallscope.collector.origin``)."""
            if directed:
                return on_device(op, args, direct)
            t = args[0] if args else None  # ``stallscope.collector.origin.device_bound``, one call
            return isinstance(t, tensor) and bound_tensor(t, types)

        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            nonlocal log, last_user  # ``log += ...`` extends the shared list in place (and is no traced call)
            state = guard.state
            if state[0] or not (pred is None or pred(args, kwargs or None)):
                return original(*args, **kwargs) if kwargs else original(*args)
            f: FrameType | None = getframe(1)
            direct = True  # called from the user's own frame (not through a library)
            while f is not None:
                code = f.f_code
                k = _USER if code is last_user else kind_of(id(code))
                if k is None:
                    k = classify(code)
                if k == _USER:
                    last_user = code
                    # the instruction, not the line: f_lineno scans the code's line table
                    at = f.f_lasti
                    if not latent:  # a GPU run: the tensor's own device says it
                        t = args[0] if args else None
                        on = (
                            on_device(op, args, direct)
                            if directed
                            else isinstance(t, tensor) and not t.is_cpu
                        )
                    elif recorder.tracked:  # origin tracking is on: learn the site's verdict
                        on = latent_device(args, direct)
                        if on:
                            known.add((id(code), at, op))  # code objects are slow to hash: their id
                        if recorder.learning:
                            break
                    else:
                        on = (id(code), at, op) in known or latent_device(args, direct)
                    via = None if direct else library_call(getframe(1), f)
                    # the clock last: the call starts right after it
                    log += ((code, at, op, state[1], now(), on, via),)  # not a call: the tracer skips it
                    break
                if k == _OURS:
                    break
                direct = False
                f = f.f_back
            state[0] = 1
            try:
                return original(*args, **kwargs) if kwargs else original(*args)
            finally:
                state[0] = 0

        return wrapper

    def _unpatch(self) -> None:
        while self._patched:
            owner, name, original, own = self._patched.pop()
            if own:
                setattr(owner, name, original)
            else:
                delattr(owner, name)

    def _wrapper(self, original: Callable[..., Any], op: str) -> Callable[..., Any]:
        record = self._record

        @functools.wraps(original)
        def synchronize(*args: Any, **kwargs: Any) -> Any:
            record(op, 2)
            return original(*args, **kwargs)

        return synchronize

    # results ---------------------------------------------------------------------------------------------
    def clear(self) -> None:
        self._log.clear()  # the same list: the wrappers hold it

    def records(
        self, *, since_us: float | None = None, until_us: float | None = None
    ) -> list[dict[str, Any]]:
        """The sidecar's ``sync_sites``, ordered by first call. ``count`` and ``first_us`` cover every call;
        ``since_us``/``until_us`` (trace clock) keep only the ``times_us`` inside that span."""
        Key = tuple[int, int, str, int, bool, "tuple[str, str] | None"]
        grouped: dict[Key, list[float]] = {}
        lines: dict[tuple[int, int], int] = {}
        codes: dict[int, CodeType] = {}  # by id: code objects are slow to hash
        for code, at, op, tid, ns, on, via in list(self._log):
            key = (id(code), at)
            line = lines.get(key)
            if line is None:
                line = lines[key] = _line_of(code, at)
                codes[id(code)] = code
            grouped.setdefault((id(code), line, op, tid, on, via), []).append((ns - TRACE_BASE_NS) / 1000.0)
        out: list[dict[str, Any]] = []
        for (code_id, line, op, tid, on, via), times in grouped.items():
            code = codes[code_id]
            kept = [
                t
                for t in times
                if (since_us is None or t >= since_us) and (until_us is None or t <= until_us)
            ]
            out.append(
                {
                    "file": code.co_filename,
                    "line": line,
                    "function": code.co_name,
                    "op": op,
                    "thread": str(tid),
                    "on_device": on,
                    "count": len(times),
                    "first_us": min(times),
                    "times_us": kept,
                }
            )
            if via is not None:  # made inside a library the user called
                out[-1]["library"], out[-1]["library_call"] = via
        out.sort(key=lambda r: (r["first_us"], r["file"], r["line"], r["op"]))
        return out
