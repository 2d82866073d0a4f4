"""Explain a model you already trained: ``lrp.convert``, composites and the
conservation report.

A user's own PyG model (``GCNConv``, ``SAGEConv`` and an MLP head, nothing
LRP-specific in it) is trained on Zachary's karate club, saved with
``torch.save(model.state_dict(), path)`` and loaded back into a fresh
instance, as it would be in a later session. Then:

1. ``lrp.convert(model)`` gives an LRP-ready copy that shares the model's
   parameters (no tensor is copied);
2. ``lrp.check_conservation`` runs one relevance pass for one node's predicted
   class and prints how much relevance enters and leaves each module;
3. a composite with custom rules (``ZBox`` for the one-hot input layer,
   ``Gamma`` for the second convolution, ``Epsilon`` for the head) is
   converted and checked the same way, and the most relevant nodes under both
   composites are compared;
4. LRP-0 everywhere is compared with gradient x input (equal on a ReLU
   network), and the original model is shown to be untouched: same
   ``state_dict``, same outputs, same module classes, gradients still
   enabled, no ``.grad`` filled in, no hooks.

Run: ``python examples/convert_trained_model.py``.
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.datasets import KarateClub
from torch_geometric.nn import GCNConv, SAGEConv

import torch_geometric_lrp as lrp
from torch_geometric_lrp.rules import Epsilon, Gamma, ZBox


class Net(nn.Module):
    """The user's model: two graph convolutions and an MLP head."""

    def __init__(self, in_channels: int, hidden: int, classes: int):
        super().__init__()
        self.conv1 = GCNConv(in_channels, hidden)
        self.conv2 = SAGEConv(hidden, hidden)
        self.head = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Dropout(0.2), nn.Linear(hidden, classes))

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        x = F.relu(self.conv1(x, edge_index))
        x = F.dropout(x, p=0.2, training=self.training)
        x = F.relu(self.conv2(x, edge_index))
        return self.head(x)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--node", type=int, default=5, help="node whose prediction is explained")
    parser.add_argument("--hidden", type=int, default=16)
    parser.add_argument("--epochs", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (graphs this small run fastest on one)")
    return parser.parse_args(argv)


def snapshot(model: nn.Module, x: Tensor, edge_index: Tensor) -> dict:
    """Everything about ``model`` that explaining it must leave as it was."""
    with torch.no_grad():
        out = model(x, edge_index)
    return {
        "state": {k: v.clone() for k, v in model.state_dict().items()},
        "out": out,
        "classes": [type(m) for m in model.modules()],
        "requires_grad": [p.requires_grad for p in model.parameters()],
        "training": [m.training for m in model.modules()],
        "grads": [p.grad for p in model.parameters()],
        "hooks": sum(len(m._forward_hooks) + len(m._forward_pre_hooks) + len(m._backward_hooks)
                     for m in model.modules()),
    }


def input_relevance(lrp_model: nn.Module, x: Tensor, edge_index: Tensor, seed: Tensor) -> Tensor:
    """The relevance pass by hand: seed the output, read ``x.grad``."""
    x = x.clone().requires_grad_()
    with lrp.relevance_pass(lrp_model):
        out = lrp_model(x, edge_index)
        out.backward(seed)
    return x.grad


def top_nodes(relevance: Tensor, k: int = 5) -> str:
    return ", ".join(f"{j} ({relevance[j].item():+.3f})" for j in relevance.abs().argsort(descending=True)[:k].tolist())


def main(argv=None) -> None:
    args = parse_args(argv)
    start = time.perf_counter()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    data = KarateClub()[0]
    x, edge_index = data.x, data.edge_index

    # The user's training run ...
    trained = Net(data.num_features, args.hidden, 4)
    optimizer = torch.optim.Adam(trained.parameters(), lr=0.01, weight_decay=5e-4)
    trained.train()
    for _ in range(args.epochs):
        optimizer.zero_grad()
        F.cross_entropy(trained(x, edge_index)[data.train_mask], data.y[data.train_mask]).backward()
        optimizer.step()
    # ... saved as a checkpoint and loaded back into a fresh instance.
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "net.pt"
        torch.save(trained.state_dict(), path)
        model = Net(data.num_features, args.hidden, 4)
        model.load_state_dict(torch.load(path))
    model.eval()
    before = snapshot(model, x, edge_index)
    accuracy = (before["out"].argmax(dim=1) == data.y).float().mean().item()
    print(f"loaded the trained checkpoint: accuracy {accuracy:.2f} on all {data.num_nodes} nodes")

    # 1. An LRP-ready copy over the same parameters.
    lrp_model = lrp.convert(model)
    swapped = [f"{name}: {type(m).__name__} -> {type(c).__module__}.{type(c).__name__}"
               for (name, m), c in zip(model.named_modules(), lrp_model.modules()) if type(m) is not type(c)]
    print("lrp.convert swapped " + "; ".join(swapped))
    shared = all(p is q for p, q in zip(model.parameters(), lrp_model.parameters()))
    print(f"converted model shares the original's parameters: {shared}")
    with torch.no_grad():
        difference = (lrp_model(x, edge_index) - before["out"]).abs().max().item()
    print(f"converted model's output differs from the original's by {difference:.1e}")
    print("default composite: " + ", ".join(f"{n} {r}" for n, r in lrp_model._lrp_rules.items()
                                            if n in ("conv1", "conv2", "head")))

    # 2. One relevance pass for the predicted class of one node, module by module.
    node = args.node
    target = int(before["out"][node].argmax())
    seed = torch.zeros_like(before["out"])
    seed[node, target] = before["out"][node, target]
    print(f"\nnode {node}: predicted class {target}, logit {seed.sum().item():.6f}")
    report = lrp.check_conservation(lrp_model, x, edge_index, seed=seed)
    print("conservation report, default composite:")
    print(report)
    print(f"conserved: {report.conserved(1e-4)}")

    # 3. A composite of your own: a rule per module type or qualified name (globs allowed).
    composite = {
        "conv1": ZBox(low=0.0, high=1.0),  # the input layer sees one-hot features in [0, 1]
        SAGEConv: Gamma(0.5),
        "head.*": Epsilon(0.01),
    }
    custom = lrp.convert(model, rules=composite)
    report_custom = lrp.check_conservation(custom, x, edge_index, seed=seed)
    print("\nconservation report, custom composite (ZBox / Gamma(0.5) / Epsilon(0.01)):")
    print(report_custom)
    print(f"conserved: {report_custom.conserved(1e-4)}")
    default_relevance = input_relevance(lrp_model, x, edge_index, seed).sum(dim=1)
    custom_relevance = input_relevance(custom, x, edge_index, seed).sum(dim=1)
    print(f"most relevant nodes, default composite: {top_nodes(default_relevance)}")
    print(f"most relevant nodes, custom composite:  {top_nodes(custom_relevance)}")
    explanation = lrp.explain(model, x, edge_index, index=node, rules=composite)
    print(f"lrp.explain with the same composite: input relevance {explanation.relevance_total:+.6f} "
          f"(check_conservation: {report_custom.total_input:+.6f})")

    # LRP-0 everywhere is gradient x input on a ReLU network (biases included):
    # an independent check of the whole pass.
    lrp0 = lrp.convert(model, rules={nn.Module: Epsilon(0.0)})
    x_grad = x.clone().requires_grad_()
    (gradient,) = torch.autograd.grad(model(x_grad, edge_index)[node, target], x_grad)  # leaves no .grad
    deviation = (input_relevance(lrp0, x, edge_index, seed) - gradient * x).abs().max().item()
    print(f"LRP-0 everywhere vs gradient x input: max difference {deviation:.1e}")

    # 4. The original model is exactly as it was.
    after = snapshot(model, x, edge_index)
    checks = {
        "state_dict": before["state"].keys() == after["state"].keys()
        and all(torch.equal(before["state"][k], after["state"][k]) for k in before["state"]),
        "outputs": torch.equal(before["out"], after["out"]),
        "classes": before["classes"] == after["classes"],
        "requires_grad": before["requires_grad"] == after["requires_grad"],
        "train/eval mode": before["training"] == after["training"],
        "no .grad": all(g is None for g in before["grads"] + after["grads"]),
        "no hooks": after["hooks"] == before["hooks"] == 0,
    }
    print("\noriginal model untouched: " + ", ".join(f"{k} {v}" for k, v in checks.items()))
    print(f"original model untouched: {all(checks.values())}")
    print(f"done in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
