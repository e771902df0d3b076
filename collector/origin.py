"""Where a tensor would live on a GPU run, tracked on CPU-only runs: the ground for would-be syncs.

On a CPU-only run every tensor is on the host, so ``.item()`` on the loss and ``.item()`` on a label that
a dataset made from a Python int look alike; on a GPU the first waits for the device and the second does
not. ``OriginTracker`` marks a tensor as *device-bound* when the program would have put it on the
accelerator:

- parameters and tensors that require grad (``model.to(device)`` moves them; the forward and backward
  passes compute from them), and gradients read from a parameter (``p.grad``);
- what ``.to(...)`` / ``.cuda()`` return when given a device, and what a factory returns when given
  ``device=`` (``x.to(device, non_blocking=True)`` is the program moving its batch to its device);
- the outputs of any torch call with a device-bound tensor among its arguments (so a decode loop's
  ``logits.argmax(-1)`` made under ``no_grad`` stays device-bound).

The mark is an attribute on the tensor object. The tracker is a ``TorchFunctionMode`` pushed for the
whole run on CPU-only runs (never on GPU runs, where the tensor's own device says it): about 2 µs more
per torch call made from Python (not per aten op: a module's C++ kernels and the backward pass are not
slowed), the price of telling a would-be sync from a host-side read.
"""

from __future__ import annotations

import contextlib
from typing import Any

from collector.modes import ThreadMode

MARK = "_stallscope_device_bound"
_MOVES = ("to", "cuda")


def device_bound(t: Any) -> bool:
    """Whether tensor ``t`` would be on the accelerator (see the module docstring). A tensor that is on
    a device already is."""
    import torch

    if not isinstance(t, torch.Tensor):
        return False
    if t.device.type != "cpu" or t.requires_grad or isinstance(t, torch.nn.Parameter):
        return True
    return bool(getattr(t, MARK, False))


def _is_device(d: Any) -> bool:
    import torch

    return isinstance(d, str | torch.device | int) and not isinstance(d, bool)


def _moves_to_device(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """``t.to(device, ...)``, ``t.cuda()``, or any call given ``device=`` (factories)."""
    if kwargs.get("device") is not None:
        return True
    name = getattr(func, "__name__", "")
    if name == "cuda":
        return True
    return name == "to" and len(args) > 1 and _is_device(args[1])


def _mark(out: Any) -> None:
    import torch

    if isinstance(out, torch.Tensor):
        with contextlib.suppress(AttributeError, RuntimeError, TypeError):  # a subclass may refuse
            setattr(out, MARK, True)
    elif isinstance(out, tuple | list):
        for o in out[:64]:
            if isinstance(o, torch.Tensor):
                _mark(o)


def _any_bound(values: Any) -> bool:
    for v in values:
        if device_bound(v):
            return True
        if isinstance(v, tuple | list) and any(device_bound(x) for x in v[:8]):
            return True
    return False


class OriginTracker:
    """Marks device-bound tensors while installed (a mode on the installing thread). ``install()`` /
    ``remove()``; ``remove`` takes it off only when it is on top of this thread's mode stack."""

    def __init__(self) -> None:
        from torch.overrides import TorchFunctionMode

        class _Origin(TorchFunctionMode):
            def __torch_function__(
                self,
                func: Any,
                types: Any,
                args: tuple[Any, ...] = (),
                kwargs: dict[str, Any] | None = None,
            ) -> Any:
                kw = kwargs or {}
                out = func(*args, **kw)
                if out is not None and (
                    _moves_to_device(func, args, kw) or _any_bound(args) or _any_bound(kw.values())
                ):
                    _mark(out)
                return out

        self._slot = ThreadMode(_Origin())

    def install(self) -> None:
        self._slot.install()

    def remove(self) -> None:
        self._slot.remove()


_LOADER_ARGS = ("batch_size", "num_workers", "pin_memory", "prefetch_factor", "persistent_workers")


class DataLoaderWatch:
    """Records the arguments of every ``torch.utils.data.DataLoader`` made while installed (the input
    advice needs to know whether the program already has workers). Wraps ``DataLoader.__init__``;
    ``remove()`` restores it."""

    def __init__(self) -> None:
        self.loaders: list[dict[str, Any]] = []
        self._original: Any = None

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

    def remove(self) -> None:
        if self._original is not None:
            from torch.utils.data import DataLoader

            setattr(DataLoader, "__init__", self._original)  # noqa: B010
            self._original = None


def _plain(v: Any) -> Any:
    return v if isinstance(v, bool | int | float | str) or v is None else str(v)
