"""Explain one node's prediction of a small GCN on Zachary's karate club.

The model is written once against an "ops" namespace: trained with torch's
ops (ordinary gradients), explained with ``torch_geometric_lrp.functional``
(relevance instead of gradients). Run: ``python examples/demo.py``.
"""
import torch
import torch.nn.functional as F
from torch_geometric.datasets import KarateClub
from torch_geometric.utils import add_self_loops, degree

import torch_geometric_lrp as lrp
from torch_geometric_lrp import functional as R


class TorchOps:
    linear = staticmethod(F.linear)
    relu = staticmethod(F.relu)
    matmul = staticmethod(lambda adj, x: adj @ x)


def gcn(params, x, adj, ops):
    """Two GCN layers: A_hat relu(A_hat X W1 + b1) W2 + b2."""
    (w1, b1), (w2, b2) = params
    h = ops.relu(ops.matmul(adj, ops.linear(x, w1, b1)))
    return ops.matmul(adj, ops.linear(h, w2, b2))


def normalized_adjacency(edge_index, n):
    edge_index, _ = add_self_loops(edge_index, num_nodes=n)
    deg = degree(edge_index[0], n)
    w = deg[edge_index[0]].rsqrt() * deg[edge_index[1]].rsqrt()
    return torch.sparse_coo_tensor(edge_index.flip(0), w, (n, n), check_invariants=True).coalesce()


def main(node: int = 5) -> None:
    torch.manual_seed(0)
    data = KarateClub()[0]
    adj = normalized_adjacency(data.edge_index, data.num_nodes)
    params = [
        (torch.nn.Parameter(torch.randn(16, 34) * 0.3), torch.nn.Parameter(torch.zeros(16))),
        (torch.nn.Parameter(torch.randn(4, 16) * 0.3), torch.nn.Parameter(torch.zeros(4))),
    ]
    opt = torch.optim.Adam([p for layer in params for p in layer], lr=0.05)
    for _ in range(100):
        opt.zero_grad()
        out = gcn(params, data.x, adj, TorchOps)
        F.cross_entropy(out[data.train_mask], data.y[data.train_mask]).backward()
        opt.step()
    acc = (out.argmax(1) == data.y).float().mean().item()

    # Relevance pass: same forward, relevance Functions, seeded at the logit.
    x = data.x.clone().requires_grad_()
    out = gcn(params, x, adj, R)
    target = int(out[node].argmax())
    score = out[node, target]
    seed = torch.zeros_like(out)
    seed[node, target] = score.detach()
    with lrp.RelevanceAudit() as audit:
        out.backward(seed)
    relevance = x.grad                                # [34 nodes, 34 features]

    per_node = relevance.sum(dim=1)
    print(f"trained accuracy {acc:.2f}; explaining node {node}, class {target}, logit {score.item():.4f}")
    print("most relevant input nodes:")
    for j in per_node.abs().argsort(descending=True)[:5].tolist():
        print(f"  node {j:2d}  relevance {per_node[j].item():+.4f}")
    total = relevance.sum().item()
    print(f"input relevance  {total:+.6f}")
    print(f"absorbed         {audit.absorbed:+.6f}")
    print(f"lost (zero out)  {audit.lost:+.6f}")
    print(f"sum              {total + audit.absorbed + audit.lost:+.6f}  vs score {score.item():+.6f}")


if __name__ == "__main__":
    main()
