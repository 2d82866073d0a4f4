"""``lrp.explain_loader``: seeds of NeighborLoader mini-batches, explained on
the mini-batch, ids mapped back to the loader's graph."""
from __future__ import annotations

import warnings

import pytest
import torch
from torch_geometric.data import Data, HeteroData
from torch_geometric.loader import NeighborLoader
from torch_geometric.nn import GCNConv, GINEConv
from torch_geometric.typing import WITH_PYG_LIB, WITH_TORCH_SPARSE

import torch_geometric_lrp as lrp

pytestmark = pytest.mark.skipif(not (WITH_PYG_LIB or WITH_TORCH_SPARSE),
                                reason="PyG's NeighborLoader samples with pyg-lib or torch-sparse; neither is installed")

N, E, F = 40, 160, 5


class GCN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = GCNConv(F, 8), GCNConv(8, 3)

    def forward(self, x, edge_index):
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)


class GINE(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = GINEConv(torch.nn.Sequential(torch.nn.Linear(F, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3)),
                             edge_dim=2)

    def forward(self, x, edge_index, edge_attr):
        return self.conv(x, edge_index, edge_attr)


def graph(seed=0) -> Data:
    g = torch.Generator().manual_seed(seed)
    return Data(x=torch.randn(N, F, generator=g, dtype=torch.float64),
                edge_index=torch.randint(0, N, (2, E), generator=g),
                edge_attr=torch.randn(E, 2, generator=g, dtype=torch.float64),
                y=torch.randint(0, 3, (N,), generator=g))


@pytest.fixture(autouse=True)
def quiet():
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*pyg-lib.*")  # NeighborSampler without pyg-lib
        yield


def dense(ex, num_nodes=N, num_edges=E):
    """An explanation's node relevance ``[N, F]`` and edge relevance ``[E]`` on the whole graph."""
    node = torch.zeros(num_nodes, ex.node_mask.shape[1], dtype=ex.node_mask.dtype)
    node[ex.node_index] = ex.node_mask
    edge = torch.zeros(num_edges, dtype=ex.edge_mask.dtype)
    edge[ex.edge_id] = ex.edge_mask
    return node, edge


def test_full_neighbourhoods_give_the_full_graph_explanation():
    """GCN reads its sources' degrees: L + 1 = 3 hops of all neighbours make
    each seed's relevance the one on the whole graph, node ids mapped back."""
    torch.manual_seed(0)
    model = GCN().double().eval()
    data = graph()
    seeds = torch.tensor([3, 17, 0, 29, 11, 8, 35])
    loader = NeighborLoader(data, num_neighbors=[-1] * 3, batch_size=3, input_nodes=seeds)
    reference = lrp.explain_nodes(model, data.x, data.edge_index, seeds, batch_size=1)
    got = [ex for block in lrp.explain_loader(model, loader, batch_size=2) for ex in block]
    assert len(got) == seeds.numel()
    for seed, ex, ref in zip(seeds.tolist(), got, reference):
        assert int(ex.node_index[ex.index]) == seed
        assert ex.score == pytest.approx(ref.score, rel=1e-10)
        node, edge = dense(ex)
        ref_node, ref_edge = dense(ref)
        assert node.abs().sum() > 0
        torch.testing.assert_close(node, ref_node, rtol=1e-9, atol=1e-12)
        torch.testing.assert_close(edge, ref_edge, rtol=1e-9, atol=1e-12)


def test_sparse_output_is_the_list_on_the_loaders_ids():
    torch.manual_seed(1)
    model = GCN().double().eval()
    data = graph(1)
    loader = NeighborLoader(data, num_neighbors=[4, 4], batch_size=5, input_nodes=torch.arange(12))
    torch.manual_seed(2)
    blocks = list(lrp.explain_loader(model, loader, output="sparse"))
    torch.manual_seed(2)  # the same samples
    lists = list(lrp.explain_loader(model, loader))
    assert [b.index.tolist() for b in blocks] == [[int(ex.node_index[ex.index]) for ex in block]
                                                  for block in lists]
    for block, explanations in zip(blocks, lists):
        assert block.node_relevance.shape == (block.index.numel(), N)
        assert block.edge_relevance.shape == (block.index.numel(), E)
        for row, ex in enumerate(explanations):
            node, edge = dense(ex)
            torch.testing.assert_close(block.node_relevance.to_dense()[row], node.sum(-1))
            torch.testing.assert_close(block.edge_relevance.to_dense()[row], edge)


def test_sparse_output_needs_the_loaders_graph():
    """The sparse matrices' columns are the loader's graph's nodes and edges,
    read from ``loader.data``: mini-batches without it (a list of them) are
    refused for that output. Before, each matrix was as wide as its own
    mini-batch's largest id, so one call gave matrices of different widths,
    none of them the graph's."""
    torch.manual_seed(1)
    model = GCN().double().eval()
    loader = NeighborLoader(graph(1), num_neighbors=[4, 4], batch_size=5, input_nodes=torch.arange(12))
    batches = list(loader)
    with pytest.raises(ValueError, match="output='sparse'.*loader.data.*list has none"):
        lrp.explain_loader(model, batches, output="sparse")
    assert len(list(lrp.explain_loader(model, batches))) == len(batches)  # the list output needs no graph


def test_sampled_neighbourhoods_explain_the_mini_batch_prediction():
    """With sampled neighbours the score is the model's logit on the
    mini-batch (not on the whole graph), and the pass conserves it."""
    torch.manual_seed(3)
    model = GCN().double().eval()
    data = graph(3)
    loader = NeighborLoader(data, num_neighbors=[2, 2], batch_size=4, input_nodes=torch.arange(8))
    torch.manual_seed(4)
    batches = list(loader)
    torch.manual_seed(4)
    blocks = list(lrp.explain_loader(model, loader, batch_size=1))
    full = model(data.x, data.edge_index)
    differs = False
    for batch, block in zip(batches, blocks):
        logits = model(batch.x, batch.edge_index)[:batch.batch_size]
        for k, ex in enumerate(block):
            assert ex.score == pytest.approx(logits[k].max().item(), rel=1e-10)
            assert abs(ex.residual) < 1e-9 * max(1.0, abs(ex.score))
            differs |= abs(ex.score - full[batch.n_id[k]].max().item()) > 1e-6
    assert differs  # the samples change the predictions: it is the mini-batch that is explained


def test_inputs_and_target_come_from_the_mini_batch():
    torch.manual_seed(5)
    model = GINE().double().eval()
    data = graph(5)
    seeds = torch.tensor([1, 4, 9])
    loader = NeighborLoader(data, num_neighbors=[-1, -1], batch_size=3, input_nodes=seeds)
    [block] = list(lrp.explain_loader(model, loader, inputs=["edge_attr"], target="y"))
    reference = lrp.explain_nodes(model, data.x, data.edge_index, seeds, target=data.y[seeds],
                                  edge_attr=data.edge_attr)
    for ex, ref in zip(block, reference):
        assert int(ex.target) == int(ref.target)
        torch.testing.assert_close(dense(ex)[0], dense(ref)[0])
        edge_attr = torch.zeros(E, 2, dtype=torch.float64)
        edge_attr[ex.edge_id] = ex.edge_attr_mask
        ref_edge_attr = torch.zeros(E, 2, dtype=torch.float64)
        ref_edge_attr[ref.edge_id] = ref.edge_attr_mask
        torch.testing.assert_close(edge_attr, ref_edge_attr)


def test_bad_loaders_and_arguments_are_refused():
    model = GCN().double().eval()
    data = graph()
    loader = NeighborLoader(data, num_neighbors=[2], batch_size=4, input_nodes=torch.arange(4))
    with pytest.raises(TypeError, match="index: explain_loader sets it"):
        lrp.explain_loader(model, loader, index=torch.arange(2))  # at the call, before any mini-batch
    with pytest.raises(ValueError, match="output: must be one of"):
        lrp.explain_loader(model, loader, output="dense")
    with pytest.raises(ValueError, match="inputs: the mini-batch has no attribute 'edge_weight'"):
        next(lrp.explain_loader(model, loader, inputs=["edge_weight"]))
    with pytest.raises(ValueError, match="target: the mini-batch has no attribute 'label'"):
        next(lrp.explain_loader(model, loader, target="label"))
    with pytest.raises(ValueError, match="loader: a mini-batch has no 'n_id'"):
        next(lrp.explain_loader(model, [Data(x=data.x, edge_index=data.edge_index, batch_size=2)]))
    hetero = HeteroData()
    hetero["a"].x = data.x
    with pytest.raises(TypeError, match="loader: expected mini-batches of torch_geometric.data.Data"):
        next(lrp.explain_loader(model, [hetero]))


def test_reversed_edge_copies_are_refused():
    """``subgraph_type='bidirectional'`` adds reversed copies of edges whose
    ``e_id`` names the edge they reverse: mapped back, their relevance would
    land on the other direction's edge. Refused, naming the option."""
    torch.manual_seed(0)
    model = GCN().double().eval()
    data = graph()
    data.edge_index = torch.cat([data.edge_index, data.edge_index.flip(0)], dim=1)
    data.edge_attr = None
    loader = NeighborLoader(data, num_neighbors=[-1] * 3, batch_size=2, input_nodes=torch.tensor([3, 17]),
                            subgraph_type="bidirectional")
    with pytest.raises(ValueError, match=r"e_id names edge .*subgraph_type='directional'"):
        next(iter(lrp.explain_loader(model, loader)))
    # its mini-batches without the loader (no graph to check the ids against): still named
    with pytest.raises(ValueError, match=r"more than once.*subgraph_type='bidirectional'"):
        next(iter(lrp.explain_loader(model, list(loader))))


def test_induced_mini_batches_give_the_full_graph_explanation():
    """``subgraph_type='induced'`` keeps every edge among the sampled nodes
    with its own id: with all neighbours it is the full graph's explanation."""
    torch.manual_seed(0)
    model = GCN().double().eval()
    data = graph()
    seeds = torch.tensor([3, 17])
    loader = NeighborLoader(data, num_neighbors=[-1] * 3, batch_size=2, input_nodes=seeds, subgraph_type="induced")
    [block] = list(lrp.explain_loader(model, loader))
    for ex, ref in zip(block, lrp.explain_nodes(model, data.x, data.edge_index, seeds)):
        for got, expected in zip(dense(ex), dense(ref)):
            torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-12)


def test_a_seed_listed_twice_is_refused():
    """A seed given twice in ``input_nodes`` is two nodes of the mini-batch
    with one id: its relevance would be split over two entries."""
    torch.manual_seed(0)
    model = GCN().double().eval()
    loader = NeighborLoader(graph(), num_neighbors=[-1] * 3, batch_size=4, input_nodes=torch.tensor([3, 17, 3]))
    with pytest.raises(ValueError, match=r"holds node 3 of the loader.s graph \(n_id\) more than once.*unique\(\)"):
        next(iter(lrp.explain_loader(model, loader)))


def test_an_edge_sampled_twice_is_refused_naming_replace():
    """NeighborLoader(replace=True) can list one edge twice in a mini-batch
    (the model counts it twice): refused, naming replace=True (the error
    spoke only of seeds, which were unique)."""
    import warnings
    torch.manual_seed(0)
    model = GCN().double().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pyg-lib missing: PyG samples with torch-sparse
        loader = NeighborLoader(graph(), num_neighbors=[8] * 3, batch_size=4, replace=True, shuffle=False)
        torch.manual_seed(1)
        batch = next(iter(loader))
    assert batch.e_id.unique().numel() < batch.e_id.numel()
    with pytest.raises(ValueError, match=r"edge \d+ of the loader.s graph \(e_id\) more than once.*replace=True"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.manual_seed(1)  # the same sample
            next(iter(lrp.explain_loader(model, loader)))


def test_disjoint_mini_batches_give_the_full_graph_explanation():
    """A mini-batch in ``disjoint=True``'s layout (each seed its own copy of
    its neighbourhood; built by hand, as that needs pyg-lib): a node in two
    seeds' copies is fine, each explanation holds it once."""
    from torch_geometric.utils import k_hop_subgraph
    torch.manual_seed(0)
    model = GCN().double().eval()
    data = graph()
    seeds = torch.tensor([3, 17])
    nodes, ids = [], []
    for seed in seeds.tolist():
        subset, _, _, mask = k_hop_subgraph(seed, 3, data.edge_index, num_nodes=N)
        subset = torch.cat([torch.tensor([seed]), subset[subset != seed]])
        nodes.append(subset)
        ids.append(mask.nonzero().view(-1))
    first = len(nodes[0])  # the seeds come first: positions 0 and `first` of the concatenation
    order = [0, first] + [i for i in range(first + len(nodes[1])) if i not in (0, first)]
    n_id = torch.cat(nodes)
    position = torch.cat([torch.full((len(nodes[0]),), 0), torch.full((len(nodes[1]),), 1)])
    n_id, position = n_id[order], position[order]
    local = {(int(p), int(v)): k for k, (p, v) in enumerate(zip(position, n_id))}
    e_id = torch.cat(ids)
    owner = torch.cat([torch.full((len(ids[0]),), 0), torch.full((len(ids[1]),), 1)])
    edge_index = torch.tensor([[local[int(o), int(data.edge_index[r, e])] for e, o in zip(e_id, owner)]
                               for r in (0, 1)])
    batch = Data(x=data.x[n_id], edge_index=edge_index, n_id=n_id, e_id=e_id, batch_size=2)
    assert n_id.unique().numel() < n_id.numel()  # the layout holds nodes twice
    [block] = list(lrp.explain_loader(model, [batch]))
    for ex, ref in zip(block, lrp.explain_nodes(model, data.x, data.edge_index, seeds)):
        for got, expected in zip(dense(ex), dense(ref)):
            torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-12)
