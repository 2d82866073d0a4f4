"""Layer-level rules: a rule sees the whole linear map between two
non-linearities (messages, aggregation, root term, bias), not one op.

The GNN-LRP-gamma reference below is written from the formula with a dense
normalised adjacency; the library never builds one.
"""
import threading

import pytest
import torch
from torch_geometric.nn import GCNConv, GraphConv
from torch_geometric.nn.conv.gcn_conv import gcn_norm

import torch_geometric_lrp as lrp
from torch_geometric_lrp.explainers.edges import EdgeRelevance
from torch_geometric_lrp.mode import is_active
from torch_geometric_lrp.rules import AlphaBeta, Epsilon, Gamma

DTYPE = torch.float64


def _graph(n=7, e=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    pairs = set()
    while len(pairs) < e:
        s, t = torch.randint(0, n, (2,), generator=g).tolist()
        if s != t:
            pairs.add((s, t))
    edge_index = torch.tensor(sorted(pairs)).t()
    x = torch.randn(n, 3, generator=g, dtype=DTYPE)
    return x, edge_index


class GCN3(torch.nn.Module):
    """Three GCN layers with biases and ReLU, then a Linear head."""

    def __init__(self, bias=True):
        super().__init__()
        self.convs = torch.nn.ModuleList([GCNConv(3, 5, bias=bias), GCNConv(5, 5, bias=bias),
                                          GCNConv(5, 4, bias=bias)])
        self.lin = torch.nn.Linear(4, 3, bias=bias)

    def forward(self, x, edge_index):
        for conv in self.convs:
            x = conv(x, edge_index).relu()
        return self.lin(x)


def _model(bias=True, seed=1):
    torch.manual_seed(seed)
    model = GCN3(bias).to(DTYPE)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.7)  # biases of both signs, not PyG's zeros
    return model


def _relevance(model, x, edge_index, seed_fn, rules):
    with EdgeRelevance(model, edge_index, x.shape[0]) as edges:
        with lrp.relevance_pass(model, rules=rules) as mode:
            x_ = mode.watch(x)
            out = model(x_, edge_index)
            seed = seed_fn(out.detach())
            (rx,) = mode.backward(out, seed, [x_])
    return out.detach(), seed, rx, edges.edge


def _target_seed(node, cls):
    def seed_fn(out):
        seed = torch.zeros_like(out)
        seed[node, cls] = out[node, cls]
        return seed
    return seed_fn


def _gamma_reference(model, x, edge_index, seed, gamma, eps):
    """GNN-LRP-gamma by the formula: for each layer (Linear head, then the GCN
    layers top-down) z'_i = sum_j a_ij x_j W~ + b~, s = R / stab(z'),
    R_j = x_j * sum_i a_ij (s_i W~^T), edge (j -> i) gets sum_k a_ij (x_j W~)_k s_ik."""
    n = x.shape[0]
    ei, w = gcn_norm(edge_index, None, n, add_self_loops=True, dtype=DTYPE)
    a = torch.zeros(n, n, dtype=DTYPE)
    a.index_put_((ei[1], ei[0]), w, accumulate=True)  # a[i, j]: message j -> i

    def mod(t):
        return t + gamma * t.clamp(min=0)

    def stab(z):
        return z + eps * torch.where(z >= 0, 1.0, -1.0).to(z.dtype)

    hs = [x]
    with torch.no_grad():
        h = x
        for conv in model.convs:
            h = torch.relu(a @ h @ conv.lin.weight.t() + conv.bias)
            hs.append(h)
    # the head
    W, b = model.lin.weight, model.lin.bias
    z = hs[-1] @ mod(W).t() + mod(b)
    s = seed / stab(z)
    r = hs[-1] * (s @ mod(W))
    edge = torch.zeros(edge_index.shape[1], dtype=DTYPE)
    for layer in reversed(range(3)):
        conv, h_in = model.convs[layer], hs[layer]
        Wt, bt = mod(conv.lin.weight), mod(conv.bias)
        msg = h_in @ Wt.t()                              # x_j W~, [n, out]
        z = a @ msg + bt
        s = r / stab(z)                                  # relevance after the ReLU = before it
        for e, (j, i) in enumerate(edge_index.t().tolist()):
            edge[e] += (a[i, j] * msg[j] * s[i]).sum()
        r = h_in * ((a.t() @ s) @ Wt)
    return r, edge


def test_gamma_reproduces_gnn_lrp_formula():
    """Gamma(0.25, epsilon=1e-9) on every layer of a 3-layer GCN with biases
    plus a Linear head is the published GNN-LRP-gamma, in node and edge
    relevance."""
    x, edge_index = _graph()
    model = _model()
    rule = Gamma(0.25, epsilon=1e-9)
    out, seed, rx, edge = _relevance(model, x, edge_index, _target_seed(2, 1), rule)
    ref_node, ref_edge = _gamma_reference(model, x, edge_index, seed, 0.25, 1e-9)
    torch.testing.assert_close(rx, ref_node, rtol=1e-6, atol=1e-10)
    torch.testing.assert_close(edge, ref_edge, rtol=1e-6, atol=1e-10)
    assert ref_node.abs().sum() > 1e-3  # not a degenerate case


def test_explosion_is_bounded_by_the_stabiliser():
    """Two messages of 1 and -0.999999 meet at node 0. Op-level LRP split the
    sum with LRP-0 after a stabilised linear, turning a seed of 1 into input
    relevance of about 5e5; with the rule on the whole layer the stabiliser
    sits on the layer output and keeps it of the order of the inputs."""
    conv = GraphConv(1, 1, aggr="add", bias=False).to(DTYPE)
    with torch.no_grad():
        conv.lin_rel.weight.fill_(1.0)
        conv.lin_root.weight.fill_(0.0)
    x = torch.tensor([[0.0], [1.0], [-0.999999]], dtype=DTYPE)
    edge_index = torch.tensor([[1, 2], [0, 0]])
    with lrp.relevance_pass(conv, rules=Epsilon(1.0)) as mode:
        x_ = mode.watch(x)
        out = conv(x_, edge_index)
        seed = torch.zeros_like(out)
        seed[0, 0] = 1.0
        (rx,) = mode.backward(out, seed, [x_])
    assert rx.abs().max() < 1.0
    # the same layer's relevance under LRP-0 is what explodes (no stabiliser)
    with lrp.relevance_pass(conv, rules=Epsilon(0.0)) as mode:
        x_ = mode.watch(x)
        (r0,) = mode.backward(conv(x_, edge_index), seed, [x_])
    assert r0.abs().max() > 1e5


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lrp0_is_gradient_times_input(seed):
    """On a bias-free ReLU model LRP-0 equals gradient x input, also when the
    rule governs whole layers."""
    x, edge_index = _graph(seed=seed)
    model = _model(bias=False, seed=seed)
    _, seed_t, rx, _ = _relevance(model, x, edge_index, _target_seed(3, 0), Epsilon(0.0))
    x_ = x.clone().requires_grad_()
    out = model(x_, edge_index)
    (out * torch.where(out != 0, seed_t / out.detach(), 0)).sum().backward()
    torch.testing.assert_close(rx, x_.grad * x, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("rule", [Epsilon(0.1), Gamma(0.5), AlphaBeta(2, 1)], ids=repr)
def test_bare_rule_equals_module_mapping(rule):
    x, edge_index = _graph()
    model = _model()
    a = _relevance(model, x, edge_index, _target_seed(1, 2), rule)
    b = _relevance(model, x, edge_index, _target_seed(1, 2), {torch.nn.Module: rule})
    for u, v in zip(a[2:], b[2:]):
        torch.testing.assert_close(u, v, rtol=0, atol=0)


@pytest.mark.parametrize("rule", [Epsilon(0.01), Gamma(0.25), AlphaBeta(2, 1)], ids=repr)
def test_absorbed_is_measured(rule):
    """What biases and stabilisers absorb is reported by each of them; the
    seed is the sum of the parts up to float error (a leak would show)."""
    x, edge_index = _graph()
    model = _model()
    with lrp.RelevanceAudit() as audit:
        _, seed, rx, _ = _relevance(model, x, edge_index, _target_seed(4, 0), rule)
    assert abs(audit.absorbed) > 1e-6  # biases of both signs absorb something
    residual = seed.sum().item() - rx.sum().item() - audit.absorbed - audit.lost
    assert abs(residual) < 1e-9 * max(1.0, abs(seed.sum().item()))
    assert {"bias", "stabilizer"} <= set(audit.by_op)


def test_constant_cat_operand_is_booked_as_absorbed():
    """A degree feature concatenated in forward is a constant input of the next
    layer: the relevance it takes is booked, not lost silently."""
    class WithDegree(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 2, bias=False)

        def forward(self, x, edge_index):
            degree = torch.ones(x.shape[0], 1, dtype=x.dtype) * 2.0
            return self.lin(torch.cat([x, degree], dim=1))

    torch.manual_seed(0)
    model = WithDegree().to(DTYPE)
    x = torch.rand(5, 3, dtype=DTYPE)
    with lrp.RelevanceAudit() as audit:
        with lrp.relevance_pass(model, rules=Epsilon(0.0)) as mode:
            x_ = mode.watch(x)
            out = model(x_, None)
            (rx,) = mode.backward(out, out.detach(), [x_])
    constant = audit.by_op["constant"]["absorbed"]
    expected = (2.0 * model.lin.weight[:, 3] * torch.ones_like(out)).sum().item()
    assert constant == pytest.approx(expected, rel=1e-9)
    assert rx.sum().item() + constant == pytest.approx(out.sum().item(), rel=1e-9)


def test_rules_argument_is_validated():
    model = _model()
    for bad in ("gamma", [Gamma()], {GCNConv: "eps"}, {3: Gamma()}):
        with pytest.raises(TypeError, match="rules"):
            with lrp.relevance_pass(model, rules=bad):
                pass


def test_pass_state_is_per_thread():
    """A pass in one thread is invisible to another (which may train a model
    with the same layers meanwhile)."""
    seen = []
    started, done = threading.Event(), threading.Event()

    def other():
        started.wait()
        seen.append(is_active())
        done.set()

    thread = threading.Thread(target=other)
    thread.start()
    model = _model()
    x, edge_index = _graph()
    with lrp.relevance_pass(model):
        started.set()
        done.wait(10)
        assert is_active()
    thread.join()
    assert seen == [False]


def test_model_is_left_as_it_was():
    model = _model()
    model.train()
    x, edge_index = _graph()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    flags = [p.requires_grad for p in model.parameters()]
    hooks = [len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules()]
    _relevance(model, x, edge_index, _target_seed(0, 0), Gamma(0.25))
    assert all(m.training for m in model.modules())
    assert [p.requires_grad for p in model.parameters()] == flags
    assert all(p.grad is None for p in model.parameters())
    assert hooks == [len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules()]
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k])


def test_gamma_formula_through_pyg_explainer():
    """The same formula end to end: PyG's Explainer with
    lrp.LRP(rules=Gamma(0.25, epsilon=1e-9)) (node and edge masks)."""
    from torch_geometric.explain import Explainer

    x, edge_index = _graph()
    model = _model()
    explainer = Explainer(model, algorithm=lrp.LRP(rules=Gamma(0.25, epsilon=1e-9)), explanation_type="phenomenon",
                          node_mask_type="attributes", edge_mask_type="object",
                          model_config=dict(mode="multiclass_classification", task_level="node", return_type="raw"))
    target = torch.full((x.shape[0],), 1, dtype=torch.long)
    explanation = explainer(x, edge_index, target=target, index=2)
    seed = torch.zeros(x.shape[0], 3, dtype=DTYPE)
    seed[2, 1] = model(x, edge_index)[2, 1].detach()
    ref_node, ref_edge = _gamma_reference(model, x, edge_index, seed, 0.25, 1e-9)
    torch.testing.assert_close(explanation.node_mask, ref_node, rtol=1e-6, atol=1e-10)
    torch.testing.assert_close(explanation.edge_mask, ref_edge, rtol=1e-6, atol=1e-10)


def test_non_finite_input_the_output_depends_on_is_named():
    x, edge_index = _graph()
    x[2, 0] = float("inf")
    model = _model()
    with pytest.warns(RuntimeWarning, match=r"non-finite.*An explained input holds it; the first op .*'linear'"):
        _relevance(model, x, edge_index, _target_seed(2, 1), Gamma(0.25))


@pytest.mark.parametrize("rule", [lrp.rules.Flat(), lrp.rules.WSquare()])
def test_flat_and_wsquare_share_by_gate_magnitudes(rule):
    """Edge weights 1 and -0.999 into one node: with the gates kept signed
    the denominator was 0.001, and the two nodes got +500 and -500 for a
    score of 0.5 (all of it lost for -1). Gates count with their
    magnitudes: each neighbour gets its share of |a|, within the score."""
    from torch_geometric.nn import GCNConv

    conv = GCNConv(1, 1, normalize=False, bias=False).double()
    with torch.no_grad():
        conv.lin.weight.fill_(1.0)
    x = torch.tensor([[0.5], [1.0], [2.0]], dtype=torch.float64)
    edge_index = torch.tensor([[1, 2], [0, 0]])  # (normalize=False: no self-loops)
    for weights in ([1.0, -0.499], [1.0, -0.5]):
        edge_weight = torch.tensor(weights, dtype=torch.float64)
        found = lrp.explain(conv, x, edge_index, index=0, rules=rule, mode="regression", edge_weight=edge_weight)
        score = 1.0 + 2.0 * weights[1]  # 0.002, then 0
        assert found.score == pytest.approx(score, abs=1e-12)
        shares = torch.tensor([0.0, 1.0, abs(weights[1])], dtype=torch.float64)
        torch.testing.assert_close(found.node_mask.view(-1), score * shares / shares.sum())
        torch.testing.assert_close(found.edge_mask, score * shares[1:] / shares.sum())
