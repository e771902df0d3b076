"""Where a tensor would live on a GPU run, tracked on CPU-only runs: the ground for would-be syncs.

On a CPU-only run every tensor is on the host, so ``.item()`` on the loss and ``.item()`` on a label that
a dataset made from a Python int look alike; on a GPU the first waits for the device and the second does
not. ``OriginTracker`` marks a tensor as *device-bound* when the program would have put it on the
accelerator:

- parameters and tensors that require grad (``model.to(device)`` moves them; the forward and backward
  passes compute from them), and gradients read from a parameter (``p.grad``);
- what ``.to(...)`` / ``.cuda()`` return when given a device, and what a factory returns when given
  ``device=`` (``x.to(device, non_blocking=True)`` is the program moving its batch to its device),
  except torch's own code naming the host (``device="cpu"``: Adam's step counters stay there);
- the outputs of any torch call with a device-bound tensor among its arguments (so a decode loop's
  ``logits.argmax(-1)`` made under ``no_grad`` stays device-bound).

The mark is an attribute on the tensor object. The tracker is a ``TorchFunctionMode``, on CPU-only runs
only (never on GPU runs, where the tensor's own device says it). Any such mode costs every torch call
made from Python a few µs (torch's dispatch to Python, most of it whatever the handler does: not per
aten op, a module's C++ kernels and the backward pass are not slowed), so the session keeps it on only
from the start to the first step and for the one step before a scheduled window, where the sync sites
learn their verdict (``stallscope.collector.session.Session._retrack``, ``stallscope.collector.sites``); inside the window and
after it, no mode slows the program. The handler itself allocates nothing and imports nothing per call.
"""

from __future__ import annotations

import sys
from types import FrameType, FunctionType
from typing import Any

from stallscope.collector.modes import ThreadMode

MARK = "_stallscope_device_bound"
_PLAIN = (bool, int, float, complex, str)  # outputs that carry no mark: the fast path skips them


class TorchTypes:
    """The torch objects the per-call path compares against, looked up once (torch is imported lazily)."""

    def __init__(self) -> None:
        import torch

        self.tensor: type = torch.Tensor
        self.parameter: type = torch.nn.Parameter
        self.device: type = torch.device
        # what the mode receives for ``t.to(...)`` / ``t.cuda()`` (one object each for Tensor and TensorBase)
        self.to = torch.Tensor.to
        self.cuda = torch.Tensor.cuda


_T: TorchTypes | None = None


def torch_types() -> TorchTypes:
    global _T
    if _T is None:
        _T = TorchTypes()
    return _T


def device_bound(t: Any) -> bool:
    """Whether tensor ``t`` would be on the accelerator (see the module docstring). A tensor that is on
    a device already is."""
    T = _T or torch_types()
    if not isinstance(t, T.tensor):
        return False
    return bound_tensor(t, T)


def bound_tensor(t: Any, T: TorchTypes) -> bool:
    """``device_bound`` for a tensor, cheapest test first (a frozen parameter, whose ``isinstance``
    check runs Python code, last)."""
    if getattr(t, MARK, False) or t.requires_grad or not t.is_cpu:
        return True
    cls = t.__class__
    return cls is not T.tensor and issubclass(cls, T.parameter)


def _any_bound(values: Any, T: TorchTypes) -> bool:
    """Whether a device-bound tensor is among ``values`` (or the first 8 items of a list/tuple there)."""
    tensor = T.tensor
    for v in values:
        if isinstance(v, tensor):
            if bound_tensor(v, T):
                return True
        elif isinstance(v, tuple | list):
            for x in v[:8]:
                if isinstance(x, tensor) and bound_tensor(x, T):
                    return True
    return False


def _moves_to_device(func: Any, args: tuple[Any, ...], T: TorchTypes) -> bool:
    """``t.to(device, ...)`` or ``t.cuda()`` (a call given ``device=`` is checked by the caller). While
    the sync-site recorder wraps ``Tensor.to``, torch hands the mode its wrapper (``__wrapped__``)."""
    if func.__class__ is FunctionType:
        func = getattr(func, "__wrapped__", func)
    if func is T.cuda:
        return True
    if func is not T.to or len(args) < 2:
        return False
    d = args[1]
    return isinstance(d, str | T.device) or (isinstance(d, int) and not isinstance(d, bool))


def _mark(out: Any, T: TorchTypes) -> None:
    if isinstance(out, T.tensor):
        try:  # noqa: SIM105 (contextlib.suppress builds an object per call)
            setattr(out, MARK, True)
        except (AttributeError, RuntimeError, TypeError):  # a subclass may refuse
            pass
    elif isinstance(out, tuple | list):
        for o in out[:64]:
            if isinstance(o, T.tensor):
                _mark(o, T)


def _on_call(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> Any:
    """The tracker's handler: run the call, then mark its output when it would be on the device. On the
    hot path of every torch call made from Python: no allocation, no import, the common answers first."""
    out = func(*args, **kwargs) if kwargs else func(*args)
    if out is None or out.__class__ in _PLAIN:
        return out
    T = _T or torch_types()
    if _any_bound(args, T) or (kwargs and _any_bound(kwargs.values(), T)):
        _mark(out, T)
    elif kwargs and kwargs.get("device") is not None:
        if not _torch_host(kwargs["device"]):
            _mark(out, T)
    elif _moves_to_device(func, args, T) and not _torch_host(args[1] if len(args) > 1 else None):
        _mark(out, T)
    return out


def _torch_host(device: Any) -> bool:
    """Whether torch's own code asks for the host by name (``torch.tensor(0.0, device="cpu")``: Adam's
    step counter, which stays on the host on a GPU run too). Only a literal ``"cpu"`` string made in a
    ``torch.*`` module counts: the user's ``device`` variable is ``"cpu"`` on a CPU-only run too, and a
    library's ``device=p.device`` follows its parameter. Rare (calls given a device), so the frames
    are looked at only here."""
    if device != "cpu" or device.__class__ is not str:
        return False
    f: FrameType | None = sys._getframe(
        3
    )  # this, _on_call, the mode's handler, then the caller (or a recorder's wrapper)
    for _ in range(3):
        if f is None:
            return False
        name = f.f_globals.get("__name__")
        if not (isinstance(name, str) and name.startswith("stallscope.")):
            return isinstance(name, str) and name.startswith("torch.")
        f = f.f_back
    return False


class OriginTracker:
    """Marks device-bound tensors while installed (a mode on the installing thread). ``install()`` /
    ``remove()``; ``remove`` takes it off only when it is on top of this thread's mode stack."""

    def __init__(self) -> None:
        from torch.overrides import TorchFunctionMode

        torch_types()

        class _Origin(TorchFunctionMode):
            def __torch_function__(
                self,
                func: Any,
                types: Any,
                args: tuple[Any, ...] = (),
                kwargs: dict[str, Any] | None = None,
            ) -> Any:
                return _on_call(func, args, kwargs)

        self._slot = ThreadMode(_Origin())

    @property
    def installed(self) -> bool:
        return self._slot.installed

    def install(self) -> None:
        self._slot.install()

    def remove(self) -> bool:
        """Take the mode off (when on top of this thread's stack); True when it came off."""
        return self._slot.remove()


def clear_marks(out: Any, depth: int = 0) -> None:
    """Take the device mark off every tensor in ``out`` (a batch: tensors in tuples, lists and dicts,
    at most 64 per container, 4 containers deep)."""
    T = _T or torch_types()
    if isinstance(out, T.tensor):
        if getattr(out, MARK, False):
            try:  # noqa: SIM105 (as in _mark)
                setattr(out, MARK, False)
            except (AttributeError, RuntimeError, TypeError):
                pass
    elif depth < 4 and isinstance(out, tuple | list | dict):
        items = list(out.values()) if isinstance(out, dict) else out
        for o in items[:64]:
            clear_marks(o, depth + 1)


_LOADER_ARGS = ("batch_size", "num_workers", "pin_memory", "prefetch_factor", "persistent_workers")


class DataLoaderWatch:
    """Records the arguments of every ``torch.utils.data.DataLoader`` made while installed (the input
    advice needs to know whether the program already has workers). Wraps ``DataLoader.__init__``;
    ``remove()`` restores it.

    It also wraps the loader iterators' ``__next__``: a batch that comes back from worker processes
    is host data (workers cannot hand the main process an accelerator tensor), but the main process
    rebuilds it from shared memory with ``torch.empty(..., device=storage.device)`` and ``set_``,
    which ``OriginTracker`` would take for the program putting it on its device. With workers, the
    batch's tensors lose the mark; with none, the batch keeps what the dataset's own code gave it."""

    def __init__(self) -> None:
        self.loaders: list[dict[str, Any]] = []
        self._original: Any = None
        self._next: Any = None

    def install(self) -> None:
        import functools

        from torch.utils.data import DataLoader

        original = DataLoader.__init__
        loaders = self.loaders

        @functools.wraps(original)
        def __init__(loader: Any, *args: Any, **kwargs: Any) -> None:
            original(loader, *args, **kwargs)
            if len(loaders) < 16:
                loaders.append({k: _plain(getattr(loader, k, None)) for k in _LOADER_ARGS})

        setattr(DataLoader, "__init__", __init__)  # noqa: B010
        self._original = original
        base = _iterator_base()
        if base is not None:
            original_next = base.__next__

            @functools.wraps(original_next)
            def __next__(it: Any) -> Any:
                batch = original_next(it)
                if getattr(it, "_num_workers", 0):
                    clear_marks(batch)
                return batch

            setattr(base, "__next__", __next__)  # noqa: B010
            self._next = original_next

    def remove(self) -> None:
        if self._original is not None:
            from torch.utils.data import DataLoader

            setattr(DataLoader, "__init__", self._original)  # noqa: B010
            self._original = None
        if self._next is not None:
            base = _iterator_base()
            if base is not None:
                setattr(base, "__next__", self._next)  # noqa: B010
            self._next = None


def _iterator_base() -> Any:
    """torch's base class of DataLoader iterators (None where this torch has no such class)."""
    from torch.utils.data import dataloader

    return getattr(dataloader, "_BaseDataLoaderIter", None)


def _plain(v: Any) -> Any:
    return v if isinstance(v, bool | int | float | str) or v is None else str(v)
