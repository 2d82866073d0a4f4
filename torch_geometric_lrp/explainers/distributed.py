r"""Many targets over several processes with ``torch.distributed``.

Under ``torchrun`` (or any initialised default process group of ``W > 1``
processes), :func:`~torch_geometric_lrp.explain_nodes` cuts its ``T``
targets into the ``B = ceil(T / batch_size)`` batches one process would run
and gives rank ``r`` the contiguous block of batches

.. math::

    \Big[\Big\lfloor \frac{r B}{W} \Big\rfloor, \Big\lfloor \frac{(r + 1) B}{W} \Big\rfloor\Big),

explains it, and gathers every rank's block (``all_gather_object``), so that
every rank returns all ``T`` results in the order one process would, from
the same batches, hence the same numbers. Every rank must pass the same graph and targets
(checked before any work); the model and inputs are not sent, each rank
holds its own copy. With the NCCL back-end, set each process's CUDA device
(``torch.cuda.set_device(local_rank)``) before the call, as
``all_gather_object`` requires.

An error on one rank reaches all: each rank raises it (the rank that failed
its own exception, the others a ``RuntimeError`` naming that rank) instead of
waiting for a result that never comes.
"""
from __future__ import annotations

import hashlib
from typing import Callable, Optional, TypeVar

import torch
import torch.distributed as dist
from torch import Tensor

__all__ = ["world", "block", "fingerprint", "check_same", "gather"]

T = TypeVar("T")


def world(distributed: Optional[bool]) -> tuple[int, int]:
    """``(rank, world size)`` to split over: the default group's where one is
    initialised (``distributed=None``) or required (``True``); ``(0, 1)``
    where there is none or ``distributed=False``."""
    if distributed is not None and not isinstance(distributed, bool):
        raise ValueError(f"distributed: must be None, True or False, got {distributed!r}.")
    active = dist.is_available() and dist.is_initialized()
    if distributed and not active:
        raise ValueError("distributed: True needs an initialised default process group "
                         "(torch.distributed.init_process_group, as under torchrun); there is none.")
    if not active or distributed is False:
        return 0, 1
    return dist.get_rank(), dist.get_world_size()


def block(count: int, batch_size: int, rank: int, world_size: int) -> slice:
    """The targets (of ``count``) that ``rank`` explains: a contiguous block
    of whole batches of ``batch_size``."""
    batches = -(-count // batch_size)
    return slice(min(count, rank * batches // world_size * batch_size),
                 min(count, (rank + 1) * batches // world_size * batch_size))


def fingerprint(t: Optional[Tensor]) -> Optional[tuple]:
    """A short summary of a tensor (its shape, dtype and a SHA-1 of its
    values in order), equal only where ranks were given the same values in
    the same order; ``None`` for ``None``."""
    if t is None:
        return None
    values = t.detach().cpu().contiguous()
    raw = values.reshape(-1).view(torch.uint8)  # the bytes: numpy has no bfloat16
    return tuple(values.shape), str(values.dtype), hashlib.sha1(raw.numpy().tobytes()).hexdigest()


def check_same(value: object) -> None:
    """Raise on every rank unless every rank passed the same ``value``."""
    values = [None] * dist.get_world_size()
    dist.all_gather_object(values, value)
    for rank, other in enumerate(values):
        if other != values[0]:
            raise ValueError(f"explain_nodes: every rank must pass the same graph and targets; rank {rank} has "
                             f"(nodes, edges, batch_size, output, target per target, and fingerprints of the "
                             f"targets, their classes and edge_index) = {other}, rank 0 has {values[0]}.")


def gather(run: Callable[[], T]) -> list[T]:
    """``run()`` on every rank; every rank's result, in rank order, on every
    rank. An exception on any rank is raised on all of them."""
    error: Optional[BaseException] = None
    try:
        value = run()
    except Exception as caught:  # told to every rank below, then raised here
        error, value = caught, None
    results = [None] * dist.get_world_size()
    dist.all_gather_object(results, (None if error is None else f"{type(error).__name__}: {error}", value))
    if error is not None:
        raise error
    for rank, (failure, _) in enumerate(results):
        if failure is not None:
            raise RuntimeError(f"explain_nodes failed on rank {rank}: {failure}")
    return [value for _, value in results]
