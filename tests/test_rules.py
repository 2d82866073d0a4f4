"""Each rule against a slow reference that builds every contribution z_ij.

The references transcribe the textbook formulas with an explicit
``[N, in, out]`` tensor of contributions ``z_ij = x_i w_ji``; the rules under
test never build it.
"""
import warnings

import pytest
import torch
import torch_geometric.nn as pyg_nn

import torch_geometric_lrp as lrp
from torch_geometric_lrp import functional as L
from torch_geometric_lrp import rules



@pytest.fixture(autouse=True)
def float64():
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


def stab(z, eps):
    return z + eps * torch.where(z >= 0, 1.0, -1.0)


def safe(num, den, eps=0.0):
    return torch.where(den == 0, 0.0, num / stab(den, eps))


def ref_epsilon(x, w, b, R, eps):
    zij = x[:, :, None] * w.t()[None]                 # [N, in, out]
    zj = zij.sum(1) + (0 if b is None else b)
    return (zij * safe(R, zj, eps)[:, None, :]).sum(2)


def ref_gamma(x, w, b, R, gamma, eps):
    wg = w + gamma * w.clamp(min=0)
    bg = None if b is None else b + gamma * b.clamp(min=0)
    return ref_epsilon(x, wg, bg, R, eps)


def ref_alpha_beta(x, w, b, R, alpha, beta, eps):
    zij = x[:, :, None] * w.t()[None]
    pos, neg = zij.clamp(min=0), zij.clamp(max=0)
    zp = pos.sum(1) + (0 if b is None else b.clamp(min=0))
    zn = neg.sum(1) + (0 if b is None else b.clamp(max=0))
    a = torch.where(zn == 0, 1.0, alpha)          # only positive contributions
    c = torch.where(zp == 0, 1.0 if beta else 0.0, -beta)  # only negative ones
    return (pos * (a * safe(R, zp, eps))[:, None, :] + neg * (c * safe(R, zn, eps))[:, None, :]).sum(2)


def ref_flat(x, w, R):
    return R.sum(1, keepdim=True).expand_as(x) / x.shape[1]


def ref_wsquare(x, w, R):
    zij = (w.t() ** 2)[None].expand(x.shape[0], -1, -1)
    return (zij * safe(R, zij.sum(1))[:, None, :]).sum(2)


def ref_zbox(x, w, R, low, high, eps):
    lo, hi = torch.full_like(x, low), torch.full_like(x, high)
    zij = x[:, :, None] * w.t()[None] - lo[:, :, None] * w.t().clamp(min=0)[None] \
        - hi[:, :, None] * w.t().clamp(max=0)[None]
    return (zij * safe(R, zij.sum(1), eps)[:, None, :]).sum(2)


CASES = {
    "epsilon": (rules.Epsilon(0.1), lambda x, w, b, R: ref_epsilon(x, w, b, R, 0.1)),
    "lrp0": (rules.Epsilon(0.0), lambda x, w, b, R: ref_epsilon(x, w, b, R, 0.0)),
    "gamma": (rules.Gamma(0.5, epsilon=0.01), lambda x, w, b, R: ref_gamma(x, w, b, R, 0.5, 0.01)),
    "alpha2beta1": (rules.AlphaBeta(2, 1, epsilon=0.01),
                    lambda x, w, b, R: ref_alpha_beta(x, w, b, R, 2.0, 1.0, 0.01)),
    "alpha1beta0": (rules.AlphaBeta(1, 0), lambda x, w, b, R: ref_alpha_beta(x, w, b, R, 1.0, 0.0, 1e-6)),
    "zplus": (rules.ZPlus(), lambda x, w, b, R: ref_alpha_beta(x, w, b, R, 1.0, 0.0, 1e-6)),
    "flat": (rules.Flat(), lambda x, w, b, R: ref_flat(x, w, R)),
    "wsquare": (rules.WSquare(), lambda x, w, b, R: ref_wsquare(x, w, R)),
    "zbox": (rules.ZBox(-2.0, 3.0, epsilon=0.01), lambda x, w, b, R: ref_zbox(x, w, R, -2.0, 3.0, 0.01)),
}


def data(seed, bias):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(7, 5, generator=g)
    x[0, :2] = 0.0          # zeros in the input
    x[1] = x[1].abs()       # an all-positive row
    w = torch.randn(4, 5, generator=g)
    w[2, 3] = 0.0           # a zero weight
    b = torch.randn(4, generator=g) if bias else None
    R = torch.randn(7, 4, generator=g)
    return x, w, b, R


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("name", list(CASES))
def test_rule_matches_slow_reference(name, seed, bias):
    rule, reference = CASES[name]
    x, w, b, R = data(seed, bias)
    xl = x.clone().requires_grad_()
    L.linear(xl, w, b, rule=rule).backward(R)
    torch.testing.assert_close(xl.grad, reference(x, w, b, R), rtol=1e-9, atol=1e-9)


def test_alpha_beta_by_hand():
    # z_00 = 1 * 2 = 2 (positive), z_10 = -1 * 1 = -1 (negative), R = 1:
    # R_0 = 2 * 2/2 = 2, R_1 = -1 * (-1)/(-1) = -1
    x = torch.tensor([[1.0, -1.0]], requires_grad=True)
    L.linear(x, torch.tensor([[2.0, 1.0]]), rule=rules.AlphaBeta(2, 1, epsilon=0)).backward(torch.ones(1, 1))
    torch.testing.assert_close(x.grad, torch.tensor([[2.0, -1.0]]))


def test_alpha_beta_only_positive_contributions_conserve():
    # no negative contribution: all relevance goes to the positive ones (seed 003)
    x = torch.tensor([[1.0, 3.0]], requires_grad=True)
    L.linear(x, torch.tensor([[2.0, 1.0]]), rule=rules.AlphaBeta(2, 1, epsilon=0)).backward(torch.ones(1, 1))
    torch.testing.assert_close(x.grad, torch.tensor([[0.4, 0.6]]))


def test_gamma_by_hand():
    # w = [1, -1], gamma = 1 -> w~ = [2, -1]; x = [1, 1]: z = 1, R = [2, -1]
    x = torch.tensor([[1.0, 1.0]], requires_grad=True)
    L.linear(x, torch.tensor([[1.0, -1.0]]), rule=rules.Gamma(1.0, epsilon=0)).backward(torch.ones(1, 1))
    torch.testing.assert_close(x.grad, torch.tensor([[2.0, -1.0]]))


def test_zbox_by_hand():
    # x = [1, 1], w = [1, -1], l = 0, h = 2: z_i = [1 - 0, -1 - 2 * (-1)] = [1, 1]
    x = torch.tensor([[1.0, 1.0]], requires_grad=True)
    L.linear(x, torch.tensor([[1.0, -1.0]]), rule=rules.ZBox(0.0, 2.0, epsilon=0)).backward(torch.ones(1, 1))
    torch.testing.assert_close(x.grad, torch.tensor([[0.5, 0.5]]))


def test_zbox_warns_where_the_input_leaves_its_bounds():
    """z^B's terms are signed as the rule means only for low <= x <= high;
    before, inputs outside the bounds ran without a word. Per-feature
    bounds name the entry that leaves them, not the input's extreme."""
    w = torch.tensor([[1.0, -1.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        L.linear(torch.tensor([[0.0, 2.0]], requires_grad=True), w, rule=rules.ZBox(0.0, 2.0)).sum().backward()
    with pytest.warns(RuntimeWarning, match=r"ZBox: the input of the map it governs reaches 2.5, above high \(1 "):
        L.linear(torch.tensor([[2.5, 1.0]], requires_grad=True), w, rule=rules.ZBox(0.0, 2.0)).sum().backward()
    bounded = rules.ZBox(torch.tensor([0.0, -9.0]), torch.tensor([1.0, 1.0]))
    with pytest.warns(RuntimeWarning, match=r"reaches -0.5, below low"):
        L.linear(torch.tensor([[-0.5, -8.0]], requires_grad=True), w, rule=bounded).sum().backward()


def test_alpha_beta_rejects_non_conserving_parameters():
    with pytest.raises(ValueError, match="alpha - beta must equal 1"):
        rules.AlphaBeta(alpha=2, beta=2)


def test_negative_gamma_is_rejected():
    with pytest.raises(ValueError, match="gamma must be a finite number >= 0"):
        rules.Gamma(-1.0)


@pytest.mark.parametrize("make, error, match", [
    (lambda: rules.Epsilon(-1e-3), ValueError, "Epsilon: epsilon must be a finite number >= 0, got epsilon=-0.001"),
    (lambda: rules.Epsilon(float("inf")), ValueError, "epsilon=inf"),
    (lambda: rules.Gamma(float("nan")), ValueError, "gamma=nan"),
    (lambda: rules.Gamma(0.25, epsilon=-1.0), ValueError, "Gamma: epsilon"),
    (lambda: rules.Gamma("0.25"), TypeError, "Gamma: gamma must be a number, got str"),
    (lambda: rules.ZPlus(epsilon=-1.0), ValueError, "ZPlus: epsilon"),
    (lambda: rules.AlphaBeta(2.0, 1.0, epsilon=float("nan")), ValueError, "AlphaBeta: epsilon"),
    (lambda: rules.ZBox(1.0, 0.0), ValueError, "low <= high"),
    (lambda: rules.ZBox(torch.zeros(3), torch.tensor([1.0, -1.0, 1.0])), ValueError, "low <= high"),
    (lambda: rules.ZBox(float("-inf"), 1.0), ValueError, "finite"),
    (lambda: rules.ZBox(torch.zeros(3), torch.ones(2)), TypeError, "broadcast"),
    # a bound per node: cuts, batches and row blocks would put it on other rows
    (lambda: rules.ZBox(torch.zeros(4, 3), torch.ones(3)), ValueError, r"low of shape \(4, 3\) varies"),
    (lambda: rules.ZBox(0.0, torch.ones(2, 1, 3)), ValueError, "high of shape"),
])
def test_rule_parameters_are_checked(make, error, match):
    """A negative or non-finite stabiliser, gamma, alpha or beta, or box
    bounds out of order, would give relevance without meaning (a negative
    epsilon pushes denominators towards 0): refused, naming the parameter."""
    with pytest.raises(error, match=match):
        make()


def test_valid_rule_parameters_are_kept():
    assert rules.Epsilon(0).epsilon == 0 and rules.Gamma(0.0).gamma == 0.0
    assert rules.ZBox(torch.zeros(3), torch.ones(3)).epsilon == 1e-6


def test_pass_rule_needs_equal_widths():
    x = torch.randn(3, 4, requires_grad=True)
    y = L.linear(x, torch.randn(2, 4), rule=rules.Pass())
    with pytest.raises(ValueError, match="same shape"):
        y.backward(torch.ones(3, 2))
    x.grad = None
    L.linear(x, torch.eye(4), rule=rules.Pass()).backward(torch.full((3, 4), 2.0))
    torch.testing.assert_close(x.grad, torch.full((3, 4), 2.0))


def test_stabilizer_sign_of_zero_is_positive():
    z = torch.tensor([-2.0, 0.0, 3.0])
    torch.testing.assert_close(rules.stabilize(z, 0.5), torch.tensor([-2.5, 0.5, 3.5]))


def test_linear_rejects_mismatched_width():
    with pytest.raises(ValueError, match="3 features"):
        L.linear(torch.randn(2, 3), torch.randn(4, 5))


@pytest.mark.parametrize("same", [True, False])
def test_zbox_rules_with_tensor_bounds_compare_as_rules(same):
    """The pass compares rules to tell where a map continues; ZBox with
    tensor bounds compared them entry by entry and crashed ("Boolean value
    of Tensor ... is ambiguous"). Tensor bounds explain as the same float
    bounds do, and equal bounds are one rule."""
    import torch_geometric_lrp as lrp
    torch.manual_seed(0)

    class Two(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.l1, self.l2 = torch.nn.Linear(4, 4), torch.nn.Linear(4, 2)

        def forward(self, x, edge_index):
            return self.l2(self.l1(x))

    model = Two().double()
    x, edge_index = torch.randn(5, 4, dtype=torch.float64), torch.tensor([[0, 1], [1, 2]])
    second = 3.0 if same else 9.0
    ZBox = rules.ZBox
    as_tensors = {"l1": ZBox(torch.full((4,), -3.0), torch.full((4,), 3.0)),
                  "l2": ZBox(torch.full((4,), -second), torch.full((4,), second))}
    as_floats = {"l1": ZBox(-3.0, 3.0), "l2": ZBox(-second, second)}
    a = lrp.explain(model, x, edge_index, index=0, target=torch.tensor([1]), rules=as_tensors)
    b = lrp.explain(model, x, edge_index, index=0, target=torch.tensor([1]), rules=as_floats)
    torch.testing.assert_close(a.node_mask, b.node_mask, rtol=1e-12, atol=1e-15)
    assert (as_tensors["l1"] == as_tensors["l2"]) == same
    assert hash(ZBox(torch.zeros(3), torch.ones(3))) == hash(ZBox(torch.zeros(3), torch.ones(3)))


def test_parameters_of_other_number_types_become_floats():
    """A Fraction (or numpy scalar) passes the number check; it is kept as a
    float, which the tensors of the backward take (a Fraction made torch
    raise there, naming no parameter)."""
    from fractions import Fraction
    rule = rules.AlphaBeta(Fraction(3, 2), Fraction(1, 2))
    assert type(rule.alpha) is float and rule.alpha == 1.5 and rule.beta == 0.5
    assert rules.Gamma(Fraction(1, 4)) == rules.Gamma(0.25)
    x = torch.tensor([[1.0, -2.0]], requires_grad=True)
    L.linear(x, torch.tensor([[1.0, 0.5], [-1.0, 2.0]]), rule=rules.Epsilon(Fraction(1, 10))).sum().backward()
    assert torch.isfinite(x.grad).all()


def test_a_box_with_per_feature_bounds_is_kept():
    rule = rules.ZBox(torch.zeros(1, 3), torch.ones(3))
    assert rule.low.shape == (1, 3)


def test_the_pass_rule_hands_back_its_own_tensor():
    """x.grad after Pass is not the caller's seed: zeroing the grad, or a
    second backward accumulating into it, left the seed changed."""
    x = torch.randn(2, 3, requires_grad=True)
    seed = torch.ones(2, 3)
    L.linear(x, torch.eye(3), rule=rules.Pass()).backward(seed)
    x.grad.zero_()
    assert torch.equal(seed, torch.ones(2, 3))


@pytest.mark.parametrize("rule", ["epsilon", rules.Epsilon, {"lin": rules.Epsilon()}])
def test_functional_linear_refuses_what_is_no_rule(rule):
    with pytest.raises(TypeError, match="linear: rule must be a rule instance"):
        L.linear(torch.randn(2, 3), torch.randn(4, 3), rule=rule)


@pytest.mark.parametrize("op", ["sum", "mean"])
def test_sum_and_mean_over_no_dims_reduce_everything_as_torch_does(op):
    x = torch.arange(1.0, 7.0).view(2, 3).requires_grad_()
    out = getattr(L, op)(x, dim=())
    expected = getattr(x.detach(), op)(dim=())
    assert out.shape == expected.shape and torch.equal(out.detach(), expected)
    out.backward(torch.tensor(2.0))
    torch.testing.assert_close(x.grad, 2.0 * x.detach() / x.detach().sum())


def _zbox_warnings(model, x, *args):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with lrp.relevance_pass(model, rules=lrp.rules.ZBox(0.0, 1.0)) as mode:
            watched = mode.watch(x)
            out = model(watched, *args)
            (relevance,) = mode.backward(out, out.detach(), [watched])
    return relevance, [str(w.message) for w in caught if "ZBox" in str(w.message)]


def test_zbox_tells_a_map_whose_paths_it_cannot_bound():
    """``ZBox`` chooses each input's bound by the sign of one weight. On
    ``Linear(-1, -1) -> Linear(-1)`` (the map x1 + x2) that gives the high
    bound to paths of positive coefficient: relevance [0.3, 0.45] for x =
    [0.5, 0.25], where ``ZBox`` on the merged ``Linear(1, 1)`` gives [0.5,
    0.25] (by hand: (x - l) w / z times z). A warning says so; one weight per
    path (a ReLU between the two) gets none, nor does the merged layer."""
    chain = torch.nn.Sequential(torch.nn.Linear(2, 1, bias=False), torch.nn.Linear(1, 1, bias=False)).double()
    merged = torch.nn.Linear(2, 1, bias=False).double()
    with torch.no_grad():
        chain[0].weight.fill_(-1.0)
        chain[1].weight.fill_(-1.0)
        merged.weight.fill_(1.0)
    x = torch.tensor([[0.5, 0.25]], dtype=torch.float64)
    relevance, told = _zbox_warnings(merged, x)
    torch.testing.assert_close(relevance, torch.tensor([[0.5, 0.25]], dtype=torch.float64), rtol=1e-5, atol=0)
    assert not told
    relevance, told = _zbox_warnings(chain, x)
    assert len(told) == 1 and "meets a second weight on a path" in told[0]
    assert not torch.allclose(relevance, torch.tensor([[0.5, 0.25]], dtype=torch.float64), rtol=1e-3)
    with_relu = torch.nn.Sequential(chain[0], torch.nn.ReLU(), chain[1])
    assert not _zbox_warnings(with_relu, x)[1]


def test_zbox_tells_a_negative_gate():
    """``ChebConv``'s scaled Laplacian has negative entries: a gate that flips
    paths' signs after ``ZBox`` chose their bounds (told); GCN's
    normalisation is positive (not told)."""
    torch.manual_seed(0)
    x = torch.rand(8, 4, dtype=torch.float64)
    edge_index = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 7], [1, 2, 3, 4, 5, 6, 7, 0]])
    edge_index = torch.cat([edge_index, edge_index.flip(0)], dim=1)
    cheb = pyg_nn.ChebConv(4, 3, K=3).double().eval()
    assert "meets a negative gate" in _zbox_warnings(cheb, x, edge_index)[1][0]
    assert not _zbox_warnings(pyg_nn.GCNConv(4, 3).double().eval(), x, edge_index)[1]


def test_pass_on_a_map_that_changes_the_width_names_the_module():
    """Before, the rule's own error came from the backward, naming no module."""

    class OneLayer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = pyg_nn.GCNConv(4, 3)

        def forward(self, x, edge_index):
            return self.conv(x, edge_index)

    with pytest.raises(ValueError, match=r"rules: Pass in module 'conv.lin' \(Linear\) needs a map whose input and "
                                         r"output have the same shape, got input \(5, 4\) and output width 3"):
        lrp.explain(OneLayer(), torch.randn(5, 4), torch.tensor([[0, 1], [1, 2]]), index=0,
                    rules={"conv": rules.Pass()}, subgraph=False)
