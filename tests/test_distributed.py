"""``lrp.explain_nodes`` over two processes (gloo, spawned by the test
itself): every rank returns what one process returns, in float64 exactly
(on CUDA with ``torch.use_deterministic_algorithms(True)``);
ranks given different targets, and an error on one rank, stop all ranks.
On CUDA both processes share the one GPU (gloo: NCCL takes one GPU per
rank), and the results stay on it."""
from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import torch_geometric_lrp as lrp
from devices import DEVICES, on
from explain_cases import DATA, build
from torch_geometric_lrp.explainers import distributed as shard

TARGETS = torch.tensor([0, 1, 17, 22, 9, 1, 29])  # batches of 2: ranks get 4 and 3 targets, a repeat across


def same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        a, b = (a.to_dense(), b.to_dense()) if a.layout == torch.sparse_coo else (a, b)
        return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    return a == b


def _worker(rank: int, init_file: str, out_dir: str, device: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    try:
        model = build("gcn").double().to(device)
        x, edge_index = on(device, DATA["x"].double(), DATA["edge_index"])
        # CUDA's atomic adds sum in no fixed order: bitwise equal results need its deterministic kernels
        torch.use_deterministic_algorithms(device == "cuda")
        kinds = dict(mine=dict(), per_target=dict(target=torch.tensor([0, 1, 2, 0, 1, 2, 0])),
                     mask=dict(index=torch.arange(30) % 4 == 1))
        for name, extra in kinds.items():
            args = dict(index=TARGETS, batch_size=2) | extra
            alone = lrp.explain_nodes(model, x, edge_index, distributed=False, **args)
            shared = lrp.explain_nodes(model, x, edge_index, **args)
            assert len(shared) == len(alone)
            for a, b in zip(shared, alone):
                assert a.keys() == b.keys()
                assert all(a[k].device.type == device for k in ("node_mask", "edge_mask", "node_index"))
                assert all(same(a[key], b[key]) for key in a.keys()), name
            alone = lrp.explain_nodes(model, x, edge_index, distributed=False, output="sparse", **args)
            shared = lrp.explain_nodes(model, x, edge_index, output="sparse", **args)
            assert shared.node_relevance.device.type == device and shared.edge_relevance.device.type == device
            for key in ("index", "target", "score", "relevance_total", "node_relevance", "edge_relevance"):
                assert same(getattr(shared, key), getattr(alone, key)), (name, key)
        # ranks that disagree on the targets are refused on every rank
        with pytest.raises(ValueError, match="every rank must pass the same graph and targets"):
            lrp.explain_nodes(model, x, edge_index, TARGETS[rank:])
        # so are ranks with another order of the targets, other classes, or another graph of the same size
        order = TARGETS if rank == 0 else TARGETS.flip(0)
        classes = torch.tensor([0, 1, 2, 0, 1, 2, rank])
        edges = edge_index if rank == 0 else edge_index.flip(0)
        for args in (dict(index=order), dict(index=TARGETS, target=classes), dict(index=TARGETS, edges=edges)):
            with pytest.raises(ValueError, match="every rank must pass the same graph and targets"):
                lrp.explain_nodes(model, x, args.pop("edges", edge_index), **args)
        # an error in one rank's block (class 9 of 3, rank 1's last target) reaches both ranks
        bad = torch.tensor([0, 1, 2, 0, 1, 2, 9])
        expected = ValueError if rank == 1 else RuntimeError
        with pytest.raises(expected, match="target: class 9 is out of range"):
            lrp.explain_nodes(model, x, edge_index, TARGETS, target=bad)
        with open(os.path.join(out_dir, f"rank{rank}"), "w") as f:
            f.write("ok")
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("device", DEVICES)
def test_two_processes_return_what_one_returns(tmp_path, device):
    # fork where there is one: spawned children would spend seconds importing torch and PyG again;
    # not where a GPU is: autograd starts a thread per device at this process's first backward (CUDA
    # unused or not), and neither those threads nor CUDA survive a fork
    forks = "fork" in mp.get_all_start_methods() and not torch.cuda.is_available()
    method = "fork" if forks and device == "cpu" else "spawn"
    mp.start_processes(_worker, args=(str(tmp_path / "rendezvous"), str(tmp_path), device), nprocs=2, join=True,
                       start_method=method)
    assert [(tmp_path / f"rank{r}").read_text() for r in range(2)] == ["ok", "ok"]


def test_blocks_are_whole_batches_covering_the_targets_in_order():
    for count in (0, 1, 5, 7, 64):
        for batch_size in (1, 2, 3, 64):
            for size in (1, 2, 3, 8):
                blocks = [shard.block(count, batch_size, r, size) for r in range(size)]
                assert [i for b in blocks for i in range(count)[b]] == list(range(count))
                assert all(b.start % batch_size == 0 for b in blocks)
                batches = [-(-(b.stop - b.start) // batch_size) for b in blocks]
                assert max(batches) - min(batches) <= 1
    assert shard.block(7, 2, 0, 2) == slice(0, 4) and shard.block(7, 2, 1, 2) == slice(4, 7)


def test_without_a_process_group():
    assert not dist.is_initialized()
    assert shard.world(None) == (0, 1) and shard.world(False) == (0, 1)
    assert shard.fingerprint(torch.tensor([1, 2])) != shard.fingerprint(torch.tensor([2, 1]))
    # the same count, sum and position-weighted sum
    assert shard.fingerprint(torch.tensor([0, 3, 1, 2])) != shard.fingerprint(torch.tensor([0, 2, 3, 1]))
    # dtypes numpy lacks (a bfloat16 regression target), 0-dim and non-contiguous tensors
    half = torch.tensor([0.5, 1.5], dtype=torch.bfloat16)
    assert shard.fingerprint(half) != shard.fingerprint(half * 2)
    assert shard.fingerprint(torch.tensor(3)) != shard.fingerprint(torch.tensor(4))
    edges = torch.tensor([[0, 1, 2], [1, 2, 0]])
    assert shard.fingerprint(edges.t().contiguous().t()) == shard.fingerprint(edges)
