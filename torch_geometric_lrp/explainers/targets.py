r"""What is explained: arguments checked before any work, the task read off
the model's output, and the relevance seeded on it.

The seed is the target's score, taken from the logits :math:`z` (the input of
a final softmax / log-softmax / sigmoid, else the output itself), at the
explained rows :math:`r` and zero elsewhere:

* multiclass, class :math:`c_r`: :math:`R_{r, c_r} = z_{r, c_r}`;
* binary (one or several labels :math:`k`, target :math:`t_{rk} \in \{0, 1\}`):
  :math:`R_{rk} = (2 t_{rk} - 1)\, z_{rk}`, the evidence for the target label;
* regression: :math:`R_r = z_r`, the output itself (behind a final sigmoid,
  its input: the score is then the logit, not the predicted value). A target (the observed
  value of a ``phenomenon`` explanation) stays on the explanation and does
  not change the relevance, which explains the prediction, as PyG's Captum
  explainer does (a value the model did not output has no relevance to
  spread).

The score is :math:`\sum R`. Without a target, the model's prediction is
explained (the argmax, or :math:`z > 0` per label).
"""
from __future__ import annotations

import operator
from typing import Optional

import torch
from torch import Tensor
from torch_geometric import EdgeIndex
from torch_geometric.explain.config import ModelMode, ModelReturnType, ModelTaskLevel

from ..convert import composite

__all__ = ["MASK_VIEWS", "check_x", "check_edge_index", "is_sparse", "check_rows", "check_rules", "check_view",
           "check_batch_size", "check_target", "infer_task_level", "infer_mode", "infer_return_type", "seed_of"]

#: How the signed relevance is shown in the masks.
MASK_VIEWS = {
    "signed": lambda r: r,
    "abs": lambda r: r.abs(),
    "positive": lambda r: r.clamp(min=0),
}


def check_x(x, categorical: bool = False, hetero: bool = False) -> None:
    """``x`` is a tensor of floating-point node features or, where
    ``categorical`` (``explain``, ``LRP``), integer categories that the
    model looks up in embeddings (checked in the pass). Where ``hetero``,
    it may be a ``{node_type: features}`` dict of floating-point tensors."""
    if isinstance(x, dict):
        if not hetero:
            raise ValueError("x: heterogeneous graphs (dicts of node features) are explained by lrp.explain and "
                             "lrp.LRP; this function takes one homogeneous graph.")
        if not x:
            raise ValueError("x: the dict of node features is empty.")
        for node_type, features in x.items():
            if not isinstance(features, Tensor) or not features.is_floating_point():
                raise TypeError(
                    f"x['{node_type}']: a heterogeneous graph's relevance is carried by floating-point node "
                    f"features, got {type(features).__name__ if not isinstance(features, Tensor) else features.dtype}. "
                    f"Pass float features for every node type (look up the embeddings of featureless node types "
                    f"outside the model's forward and pass them as x).")
        return
    if not isinstance(x, Tensor):
        raise TypeError(f"x: expected the node features as a tensor, got {type(x).__name__}.")
    if x.device.type == "meta" or x.dim() == 0 or not x.shape[0]:
        what = "on the meta device (no values)" if x.device.type == "meta" else f"of shape {tuple(x.shape)}"
        raise ValueError(f"x: expected node features with one row per node, got a tensor {what}.")
    if categorical and not x.is_complex() and x.dtype != torch.bool and x.dim() in (1, 2):
        return
    if not x.is_floating_point():
        raise TypeError(
            f"x: relevance is carried by floating-point node features, got dtype {x.dtype}. Pass x.float() "
            f"(for categorical features held as integers, explain the float embeddings: move the "
            f"embedding lookup out of the model's forward; lrp.explain and LRP also explain integer x "
            f"that the model looks up in embeddings)."
        )


def is_sparse(edge_index) -> bool:
    """A ``torch_sparse.SparseTensor`` or a torch sparse tensor."""
    return not isinstance(edge_index, Tensor) or edge_index.layout != torch.strided


def check_edge_index(edge_index, edge_mask_type, x=None):
    """``[2, E]`` integers, or a sparse adjacency without an edge mask. With
    ``x`` a ``{node_type: features}`` dict, a ``{edge_type: edges}`` dict of
    those whose edge types join node types of ``x``. Returns the edges as
    the explainers read them: a PyG ``EdgeIndex`` as the plain tensor it
    wraps (the explainers cut and index it; the layers read either alike)."""
    if x is None and isinstance(edge_index, dict):
        raise ValueError("edge_index: heterogeneous graphs (dicts of edges) are explained by lrp.explain and "
                         "lrp.LRP; this function takes one homogeneous graph.")
    if x is not None and isinstance(x, dict) != isinstance(edge_index, dict):
        raise ValueError(f"edge_index: a heterogeneous graph takes x and edge_index as dicts (x_dict, "
                         f"edge_index_dict), a homogeneous one as tensors; got x as {type(x).__name__} and "
                         f"edge_index as {type(edge_index).__name__}.")
    if isinstance(edge_index, dict):
        for edge_type, edges in edge_index.items():
            if not (isinstance(edge_type, tuple) and len(edge_type) == 3):
                raise ValueError(f"edge_index: keys are edge types (source, relation, destination), got "
                                 f"{edge_type!r}.")
            missing = [t for t in (edge_type[0], edge_type[2]) if t not in x]
            if missing:
                raise ValueError(f"edge_index[{edge_type!r}]: node type '{missing[0]}' has no features in x.")
            try:
                check_edge_index(edges, edge_mask_type)
            except ValueError as error:
                raise ValueError(f"edge_index[{edge_type!r}]: {str(error).split(': ', 1)[1]}") from None
        return {edge_type: _plain(edges) for edge_type, edges in edge_index.items()}
    if not isinstance(edge_index, Tensor) and not hasattr(edge_index, "sparse_sizes"):
        raise TypeError(f"edge_index: expected the edges as an integer tensor of shape [2, E] (or a sparse "
                        f"adjacency), got {type(edge_index).__name__}.")
    if is_sparse(edge_index):
        if edge_mask_type is not None:
            raise ValueError(
                f"edge_mask_type: an edge mask needs edge_index as a [2, E] tensor; this adjacency is a "
                f"{type(edge_index).__name__} (layout {getattr(edge_index, 'layout', 'SparseTensor')}). Pass "
                f"edge_mask_type=None for node relevance only, or pass the edges as edge_index "
                f"(torch_geometric.utils.to_edge_index(adj)) to get one relevance value per edge."
            )
        return edge_index
    if edge_index.dim() >= 2 and edge_index.shape[-1] == edge_index.shape[-2] and edge_index.shape[-1] != 2 and \
            (edge_index.is_floating_point() or edge_index.dtype == torch.bool):
        raise ValueError(f"edge_index: got a dense adjacency matrix of shape {tuple(edge_index.shape)}; LRP explains "
                         f"message passing over edges: pass edge_index as integers of shape [2, E] "
                         f"(torch_geometric.utils.dense_to_sparse(adj)[0]), or a sparse adjacency with "
                         f"edge_mask_type=None. Models built on dense adjacencies (DenseGCNConv, dense_diff_pool) "
                         f"are not supported.")
    if edge_index.dim() != 2 or edge_index.shape[0] != 2 or edge_index.is_floating_point():
        raise ValueError(f"edge_index: expected integers of shape [2, E], got {edge_index.dtype} of shape "
                         f"{tuple(edge_index.shape)}.")
    if edge_index.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"edge_index: expected int64 (or int32) node ids, got {edge_index.dtype}; pass "
                        f"edge_index.long().")
    return _plain(edge_index)


#: Model inputs with one row per edge, checked against ``edge_index``.
PER_EDGE = ("edge_attr", "edge_weight", "edge_type")


def check_graph_inputs(x, edge_index, kwargs: dict) -> None:
    """The model's other inputs of a homogeneous graph that have a known
    shape: ``batch`` one non-negative graph id per node, ``edge_attr``,
    ``edge_weight`` and ``edge_type`` one row per edge (a wrong one would
    fail deep inside the pass, or index other rows)."""
    if not isinstance(x, Tensor) or not isinstance(edge_index, Tensor) or is_sparse(edge_index):
        return
    n, e = x.shape[0], edge_index.shape[1]
    batch = kwargs.get("batch")
    if isinstance(batch, Tensor):
        if batch.is_floating_point() or batch.dtype == torch.bool or batch.dim() != 1 or batch.numel() != n:
            raise ValueError(f"batch: expected one integer graph id per node ({n}), got {batch.dtype} of shape "
                             f"{tuple(batch.shape)}.")
        if n and int(batch.min()) < 0:
            raise ValueError(f"batch: graph ids must be >= 0, got {int(batch.min())}.")
    for key in PER_EDGE:
        value = kwargs.get(key)
        if isinstance(value, Tensor) and value.dim() > 0 and value.shape[0] != e:
            raise ValueError(f"{key}: expected one row per edge of edge_index ({e}), got shape "
                             f"{tuple(value.shape)}.")


def _plain(edges):
    """A PyG ``EdgeIndex`` (a tensor subclass) as the plain tensor it wraps."""
    return edges.as_tensor() if isinstance(edges, EdgeIndex) else edges


def check_rows(index, num_rows: Optional[int], name: str = "index", allow_empty: bool = True) -> Optional[Tensor]:
    """``index`` as a 1-D tensor of row positions (``None`` stays ``None``):
    an int is one row, a boolean mask selects its ``True`` rows (and must
    have ``num_rows`` entries when that is known). Negative positions are
    refused (they would silently mean rows counted from the end), and so is
    a selection of no rows unless ``allow_empty``."""
    if index is None:
        return None
    rows = _rows_of(index, num_rows, name)
    if not allow_empty and not rows.numel():
        raise ValueError(f"{name}: selects no rows (an empty list or an all-False mask); give at least one row "
                         f"to explain, or {name}=None for all of them.")
    return rows


def mask_rows(index) -> Optional[int]:
    """The length of ``index`` where it is a boolean mask (``None`` otherwise):
    the number of output rows it must match, checked by
    :func:`check_mask_rows` once the forward has given the output."""
    if isinstance(index, (list, tuple)) or type(index).__module__ == "numpy":
        try:  # a mask as a list or a numpy array has its length checked too
            index = torch.as_tensor(index)
        except (TypeError, ValueError, RuntimeError):
            return None  # refused by check_rows, naming the argument
    if isinstance(index, Tensor) and index.dtype == torch.bool and index.dim() == 1:
        return index.numel()
    return None


def check_mask_rows(length: Optional[int], num_rows: int, name: str = "index") -> None:
    """A boolean ``index`` of ``length`` entries must have one per output row:
    its positions would otherwise select other rows than the user meant."""
    if length is not None and length != num_rows:
        raise ValueError(f"{name}: a boolean mask needs one entry per output row ({num_rows}), got {length} "
                         f"entries.")


def _rows_of(index, num_rows: Optional[int], name: str) -> Tensor:
    if isinstance(index, bool) or (isinstance(index, Tensor) and index.dtype == torch.bool and index.dim() == 0):
        raise TypeError(f"{name}: expected row positions or a boolean mask over the rows, got a single bool.")
    if isinstance(index, dict):
        raise TypeError(f"{name}: expected row positions or a boolean mask over the rows of one output, got a dict "
                        f"({', '.join(map(repr, index))}). For a heterogeneous model, the explained rows are those "
                        f"of the node type it outputs: pass their positions (an int, list or tensor).")
    if isinstance(index, str) or (isinstance(index, (list, tuple)) and any(isinstance(i, str) for i in index)):
        raise TypeError(f"{name}: expected row positions or a boolean mask over the rows, got {index!r}.")
    if isinstance(index, (slice, set, frozenset)) or index is Ellipsis:
        raise TypeError(f"{name}: expected row positions (an int, a list, a tensor) or a boolean mask over the "
                        f"rows, got {index!r}; for a range of rows pass torch.arange(start, stop) (sets have no "
                        f"order: pass a sorted list).")
    index = torch.as_tensor(index, dtype=torch.long) if isinstance(index, (list, tuple)) and not index \
        else torch.as_tensor(index)
    if index.dtype == torch.bool:
        if index.dim() != 1 or (num_rows is not None and index.numel() != num_rows):
            raise ValueError(f"{name}: a boolean mask needs one entry per row ({num_rows}), got shape "
                             f"{tuple(index.shape)}.")
        return index.nonzero().view(-1)
    if index.is_floating_point() or index.is_complex():
        raise TypeError(f"{name}: expected integer row positions or a boolean mask, got {index.dtype}.")
    if index.dtype == torch.uint8:  # torch indexes with it as a mask, other integers are positions
        raise TypeError(f"{name}: a uint8 tensor is a mask to torch's indexing and positions elsewhere; pass "
                        f"{name}.bool() for a mask or {name}.long() for row positions.")
    index = index.long().view(-1)
    if index.numel() and int(index.min()) < 0:
        raise ValueError(f"{name}: row positions must be >= 0, got {int(index.min())}.")
    if num_rows is not None and index.numel() and int(index.max()) >= num_rows:
        raise ValueError(f"{name}: row {int(index.max())} is out of range for {num_rows} rows.")
    return index


def enum_of(cls, value, name: str):
    """``value`` (a string or member) as a member of the enum ``cls``, ``None``
    for ``None``; anything else refused naming the argument ``name``."""
    if value is None:
        return None
    try:
        return cls(value)
    except ValueError:
        raise ValueError(f"{name}: must be one of {[v.value for v in cls]}, got {value!r}.") from None


def check_rules(rules) -> None:
    """``rules`` is a rule or a composite dict (see :func:`~torch_geometric_lrp.convert.resolve_rules`);
    anything else raises a ``TypeError`` naming ``rules``."""
    composite(rules)


def check_view(mask: str) -> None:
    if mask not in MASK_VIEWS:
        raise ValueError(f"mask: must be one of {list(MASK_VIEWS)}, got {mask!r}.")


def check_flags(**flags) -> None:
    """Each flag is a bool (``subgraph="no"`` is truthy, and would mean yes)."""
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise TypeError(f"{name}: expected True or False, got {value!r}.")


def whole(value):
    """``value`` as an int where it is an integer of any kind (numpy's too),
    else as it is (a bool and a tensor too, which callers check themselves)."""
    if isinstance(value, (bool, Tensor)):
        return value
    try:
        return operator.index(value)
    except TypeError:
        return value


def check_batch_size(batch_size) -> int:
    """``batch_size`` as an int (numpy integers too), refused unless positive."""
    batch_size = whole(batch_size)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size: expected a positive int (targets per pass), got {batch_size!r}.")
    return batch_size


def check_target(target, mode: Optional[ModelMode]) -> Optional[Tensor]:
    """What can be told about ``target`` before the forward: its kind for
    the mode. Returns it as a tensor."""
    if target is None:
        return None
    target = torch.as_tensor(target)
    if mode == ModelMode.multiclass_classification and (target.is_floating_point() or target.dtype == torch.bool):
        raise TypeError(
            f"target: a multiclass model's target holds class indices, got {target.dtype}. Pass "
            f"target.long() if these are class indices."
        )
    if mode == ModelMode.binary_classification and target.numel() and \
            not bool(((target == 0) | (target == 1)).all()):
        raise ValueError("target: a binary model's target holds 0 or 1 per label, got other values.")
    return target


def infer_task_level(out: Tensor, num_nodes, edge_index, kwargs: dict) -> ModelTaskLevel:
    """``node``, ``edge`` or ``graph`` from the shape of the model's output
    (``num_nodes``: an int, or one per node type of a heterogeneous graph)."""
    batch = kwargs.get("batch")
    if batch is None and isinstance(kwargs.get("batch_dict"), dict):  # heterogeneous: graph ids per node type
        ids = [b for b in kwargs["batch_dict"].values() if isinstance(b, Tensor) and b.numel()]
        batch = torch.stack([b.max() for b in ids]) if ids else None
    label_index = kwargs.get("edge_label_index")
    # edge_label_index first: with as many label pairs as nodes, the node
    # check below would call a link predictor node-level.
    if isinstance(label_index, Tensor) and label_index.dim() == 2 and out.shape[0] == label_index.shape[1]:
        return ModelTaskLevel.edge
    if out.shape[0] in (num_nodes if isinstance(num_nodes, tuple) else (num_nodes,)):
        return ModelTaskLevel.node
    if isinstance(batch, Tensor) and batch.numel() and out.shape[0] == int(batch.max()) + 1:
        return ModelTaskLevel.graph
    if isinstance(edge_index, Tensor) and edge_index.dim() == 2 and out.shape[0] == edge_index.shape[1]:
        return ModelTaskLevel.edge
    if out.shape[0] == 1:
        return ModelTaskLevel.graph
    vector = (f" (A vector of one graph's {out.shape[0]} class scores would be read as {out.shape[0]} rows: "
              f"return [1, C], out.unsqueeze(0).)" if out.dim() == 1 else "")
    raise ValueError(f"task_level: cannot tell it from an output of shape {tuple(out.shape)} for {num_nodes} "
                     f"nodes; pass task_level='node', 'edge' or 'graph'.{vector}")


def _rows_sum_to_one(out: Tensor) -> bool:
    flat = out.reshape(out.shape[0], -1)
    return flat.shape[1] > 1 and bool((flat >= 0).all()) and torch.allclose(
        flat.sum(-1), torch.ones((), dtype=flat.dtype), atol=1e-4)


def _is_log_probs(out: Tensor) -> bool:
    flat = out.reshape(out.shape[0], -1)
    return flat.shape[1] > 1 and bool((flat <= 0).all()) and torch.allclose(
        flat.logsumexp(-1), torch.zeros((), dtype=flat.dtype), atol=1e-4)


def _width(out: Tensor) -> str:
    """The output's shape without its number of rows (which may be a
    subgraph's, not the user's graph's)."""
    return f"shape [rows, {', '.join(str(s) for s in out.shape[1:])}]" if out.dim() > 1 else "a vector"


def check_output_shape(out: Tensor, mode: ModelMode) -> None:
    """An output with rows to explain: not a single number, and with a row
    of class scores per row for a multiclass model (a ``[C]`` vector of one
    graph's classes would be read as ``C`` rows of one class each)."""
    if out.dim() == 0:
        raise ValueError("model: the output is a single number (shape ()), and explanations are of an output's "
                         "rows: return shape [1] (out.view(1)) for one graph's score, or [1, C] for its class "
                         "scores.")
    if mode == ModelMode.multiclass_classification and out.dim() == 1:
        raise ValueError(f"mode='multiclass_classification': the output has shape ({out.shape[0]},), one value "
                         f"per row, so no row holds class scores. A classifier returns [rows, classes]: for one "
                         f"graph, [1, C] (out.unsqueeze(0)).")


def check_one_graph(out: Tensor, activated: bool, level: ModelTaskLevel, kwargs: dict) -> None:
    """A graph-level output of one graph (no ``batch``) that is one softmax
    or log-softmax over a vector: one graph's class scores, which would be
    read as as many graphs (the mode is read off the output then)."""
    graphs_given = any(kwargs.get(k) is not None for k in ("batch", "batch_dict"))
    if level == ModelTaskLevel.graph and activated and not graphs_given and out.dim() == 1 and \
            out.numel() > 1 and (_rows_sum_to_one(out.view(1, -1)) or _is_log_probs(out.view(1, -1))):
        raise ValueError(f"mode: the output of one graph (shape ({out.shape[0]},)) is one softmax or log-softmax "
                         f"over its only dimension, the graph's class scores, which would be read as "
                         f"{out.shape[0]} graphs. Return [1, C] (out.unsqueeze(0)), or pass mode= to say what the "
                         f"output is.")


def infer_mode(out: Tensor, activated: bool) -> ModelMode:
    """Multiclass for a final softmax / log-softmax, binary for a final
    sigmoid (one label or several), multiclass for several raw outputs per
    row; a single raw output per row has to be named."""
    columns = out.reshape(out.shape[0], -1).shape[1] if out.dim() else 1
    if activated:
        if _rows_sum_to_one(out) or _is_log_probs(out):
            return ModelMode.multiclass_classification
        return ModelMode.binary_classification
    if columns > 1:
        return ModelMode.multiclass_classification
    raise ValueError(
        f"mode: the model has one raw output per row ({_width(out)}), which can be binary "
        f"classification or regression; pass mode='binary_classification' or mode='regression'."
    )


def infer_return_type(out: Tensor, mode: ModelMode, activated: bool) -> ModelReturnType:
    """``raw`` without a final activation, else ``log_probs`` or ``probs``."""
    if not activated or mode == ModelMode.regression:
        return ModelReturnType.raw
    if mode == ModelMode.multiclass_classification and _is_log_probs(out):
        return ModelReturnType.log_probs
    return ModelReturnType.probs


def _per_row(target: Tensor, rows: Tensor, num_rows: Optional[int], width: int) -> Tensor:
    """``target`` for the explained ``rows``: it holds one entry (or one per
    label, ``width``, possibly flattened) per output row or per explained row
    (only the latter where ``num_rows`` is ``None``: the caller knows); a
    single number (one label) is every explained row's."""
    target = target.to(rows.device)
    if target.dim() == 0 and width == 1:
        return target.expand(rows.numel(), 1)
    for size, pick in ((num_rows, True), (rows.numel(), False)):
        if size is None:
            continue
        if tuple(target.shape) in ((size,), (size, 1)) if width == 1 else \
                tuple(target.shape) == (size, width) or (target.dim() == 1 and target.numel() == size * width):
            target = target.reshape(size, width)
            return target[rows] if pick else target
    raise ValueError(
        (f"target: expected one entry per output row ({num_rows}) or per explained row ({rows.numel()})"
         if num_rows is not None else f"target: expected one entry per explained row ({rows.numel()})")
        + (f", times {width} labels" if width > 1 else "") + f"; got shape {tuple(target.shape)}."
    )


def _check_repeated_labels(place: Tensor, rows: Tensor, target: Tensor) -> None:
    """A binary row given twice must ask for the same labels: ``+z`` and
    ``-z`` for one logit contradict each other (a multiclass row given twice
    with two classes explains both)."""
    order = torch.argsort(place, stable=True)
    same = place[order][1:] == place[order][:-1]
    if bool(same.any()):
        differs = (target[order][1:] != target[order][:-1]).any(dim=-1) & same
        if bool(differs.any()):
            row = int(rows[order][1:][differs][0])
            raise ValueError(f"target: row {row} is given twice with different labels; a binary label is "
                             f"explained as +z (label 1) or -z (label 0), not both. Give each row once.")


def seed_of(logits: Tensor, place: Tensor, rows: Tensor, num_rows: Optional[int], target: Optional[Tensor],
            mode: ModelMode, joint: bool = True) -> tuple[Tensor, Tensor]:
    """The seed on an output with ``logits``, at its rows ``place``, for
    the explained rows ``rows`` of an output of ``num_rows`` rows (the full
    graph's; ``place`` differs from ``rows`` on a cut). Returns the seed
    (shaped like ``logits``) and the target of each explained row. A seed
    that is not ``joint`` is only read for its targets (each row gets a
    backward of its own), so a binary row may be given twice with two labels."""
    logits = logits.detach()
    flat = logits.reshape(logits.shape[0], -1)
    seed = torch.zeros_like(flat)
    z = flat[place]
    if mode == ModelMode.regression:  # a target (the observed value) is not seeded, but kept
        seed[place] = z
        kept = z if target is None else _per_row(target, rows, num_rows, flat.shape[1]).to(z.dtype)
        return seed.view_as(logits), kept.reshape(rows.numel(), *logits.shape[1:])
    width = flat.shape[1]
    if mode == ModelMode.multiclass_classification:
        if target is None:
            target = z.argmax(dim=-1)
        else:
            target = _per_row(target, rows, num_rows, 1).view(-1).long()
            bad = (target < 0) | (target >= width)
            if bool(bad.any()):
                raise ValueError(f"target: class {int(target[bad][0])} is out of range for a model with "
                                 f"{width} classes (0 .. {width - 1}).")
        seed[place, target] = z.gather(1, target.view(-1, 1)).view(-1)
        return seed.view_as(logits), target
    target = (z > 0).long() if target is None else _per_row(target, rows, num_rows, width).view(-1, width).long()
    if joint and place.numel() > 1:  # one seed for all rows (else each row gets a backward of its own)
        _check_repeated_labels(place, rows, target)
    seed[place] = torch.where(target == 1, z, -z)
    return seed.view_as(logits), target.view(-1) if width == 1 else target
