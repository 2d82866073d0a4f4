"""Peak resident memory of this process, on Linux.

Writing ``5`` to ``/proc/self/clear_refs`` resets the peak resident set size
(VmHWM in ``/proc/self/status``) to the current one, so ``peak() - reset()``
around a piece of work is the most extra memory it held at once.
"""
from __future__ import annotations


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def can_track() -> bool:
    """Whether this system lets the process reset and read its peak."""
    try:
        reset()
        _status_kib("VmHWM")
        return True
    except (OSError, KeyError):
        return False


def reset() -> int:
    """Reset VmHWM to the current RSS; return the current RSS in bytes."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return _status_kib("VmRSS") * 1024


def peak() -> int:
    """VmHWM in bytes: the largest RSS since the last :func:`reset`."""
    return _status_kib("VmHWM") * 1024
