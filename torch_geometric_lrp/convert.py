"""``lrp.convert``: an LRP-ready model that shares the original's parameters.

The converted model is a copy of the module tree whose modules hold the very
same ``Parameter`` and buffer objects as the original, in the same dicts
(training one trains both; ``.to()`` on either moves both), with PyG layers
swapped for their :mod:`torch_geometric_lrp.nn` subclasses and a *composite*
(which rule each module's weighted ops use) attached. The original is never modified: no class swap, no hook, no flag.
"""
from __future__ import annotations

import collections
import copy
import fnmatch
import inspect
from typing import Optional, Union

import torch
import torch_geometric.nn as pyg_nn
from torch_geometric.nn.aggr import MaxAggregation, MeanAggregation, MinAggregation, SumAggregation
from torch_geometric.nn.conv import MessagePassing
from torch_geometric.nn.models.attentive_fp import GATEConv
from torch_geometric.nn.models.basic_gnn import BasicGNN
from torch_geometric.nn.models import sgformer
from torch_geometric.nn.sequential import Sequential as PyGSequential
from torch_geometric.utils._trim_to_layer import TrimToLayer

from . import nn as lrp_nn
from .mode import compiled_modules, unwrap
from .rules import Epsilon, Gamma, Rule, ZPlus, check_rule

__all__ = ["convert", "register", "resolve_rules", "type_rules", "composite", "UnsupportedModuleError", "DEFAULT_INPUT",
           "DEFAULT_LOWER", "DEFAULT_UPPER", "CONV_WRAPPERS"]

#: PyG layer -> its LRP subclass.
LRP_LAYERS: dict[type, type] = {getattr(pyg_nn, name): getattr(lrp_nn, name) for name in lrp_nn.__all__}

#: LRP subclass -> the PyG layer it stands for.
_PYG_LAYER: dict[type, type] = {lrp: pyg for pyg, lrp in LRP_LAYERS.items()}

_SUPPORTED: set[type] = {
    # torch.nn building blocks
    torch.nn.Linear, torch.nn.Identity, torch.nn.Flatten, torch.nn.Unflatten,
    torch.nn.Dropout, torch.nn.AlphaDropout, torch.nn.FeatureAlphaDropout, torch.nn.Dropout1d,
    torch.nn.ReLU, torch.nn.LeakyReLU, torch.nn.ELU, torch.nn.SELU, torch.nn.CELU, torch.nn.GELU,
    torch.nn.SiLU, torch.nn.Mish, torch.nn.Sigmoid, torch.nn.Tanh, torch.nn.Softplus, torch.nn.PReLU,
    torch.nn.ReLU6, torch.nn.Hardtanh, torch.nn.Hardswish, torch.nn.Hardsigmoid, torch.nn.Softsign,
    torch.nn.Softmax, torch.nn.LogSoftmax, torch.nn.BatchNorm1d, torch.nn.LayerNorm, torch.nn.RMSNorm,
    torch.nn.GLU, torch.nn.LogSigmoid, torch.nn.CosineSimilarity, torch.nn.PairwiseDistance,
    torch.nn.Embedding,  # a lookup: of a categorical x it starts relevance, otherwise a constant
    torch.nn.Sequential, torch.nn.ModuleList, torch.nn.ModuleDict,
    # recurrent and attention modules, explained with their own rules (recurrent.py, attention.py;
    # tests/test_recurrent.py)
    torch.nn.LSTM, torch.nn.GRU, torch.nn.LSTMCell, torch.nn.GRUCell, torch.nn.MultiheadAttention,
    torch.nn.modules.linear.NonDynamicallyQuantizableLinear,  # MultiheadAttention's out_proj: a Linear
    # PyG building blocks
    pyg_nn.Linear, pyg_nn.MLP, pyg_nn.MetaLayer, pyg_nn.BatchNorm, pyg_nn.JumpingKnowledge,
    SumAggregation, MeanAggregation, MaxAggregation, MinAggregation,
    TrimToLayer,  # BasicGNN's helper for NeighborLoader batches: slicing only
    *LRP_LAYERS, *LRP_LAYERS.values(),
    # PyG layers explained as they are (their ops get the mode's rules), each
    # checked against a reference twin in tests/test_more_layers.py
    pyg_nn.TAGConv, pyg_nn.SSGConv, pyg_nn.MixHopConv, pyg_nn.ClusterGCNConv, pyg_nn.LEConv,
    pyg_nn.AGNNConv, GATEConv, pyg_nn.RGCNConv, pyg_nn.FastRGCNConv, pyg_nn.NNConv, pyg_nn.FiLMConv,
    pyg_nn.ResGatedGraphConv, pyg_nn.ARMAConv, pyg_nn.SimpleConv, pyg_nn.LGConv, pyg_nn.WLConvContinuous,
    pyg_nn.DirGNNConv,
    # SGFormer's containers around SGFormerAttention (tests/test_more_layers.py)
    pyg_nn.SGFormer, sgformer.SGModule, sgformer.GraphModule,
    # PyG normalisation layers, statistics held constant (tests/test_norm_layers.py)
    pyg_nn.GraphNorm, pyg_nn.LayerNorm, pyg_nn.InstanceNorm, pyg_nn.PairNorm,
}
# Bases whose generated or user-facing subclasses are supported as a family.
_SUPPORTED_BASES: tuple[type, ...] = (PyGSequential, BasicGNN)

#: Default composite, chosen on ``benchmarks/rules.py`` (5 datasets, GCN and
#: GIN, 3 training seeds, with a ``Linear`` head and in PyG's ``BasicGNN``
#: layout without one: the best mean edge + node AUROC over both layouts).
#: The first message-passing layer sees the signed input features, so it gets
#: ``ZPlus`` (:data:`DEFAULT_INPUT`), which keeps positive *contributions*
#: :math:`x_j w_{ij} > 0` whatever the sign of :math:`x_j`; hidden
#: message-passing layers (followed by an activation) get ``Gamma(1)``
#: (:data:`DEFAULT_LOWER`: favours positive evidence, keeps relevance bounded
#: in deep stacks); the maps that produce the output scores, signed, get
#: ``Epsilon`` (:data:`DEFAULT_UPPER`): heads, readouts, and the last
#: message-passing layer where no head follows it.
DEFAULT_INPUT: Rule = ZPlus()
DEFAULT_LOWER: Rule = Gamma(1.0)
DEFAULT_UPPER: Rule = Epsilon(1e-6)


class UnsupportedModuleError(TypeError):
    """The model holds modules that the relevance pass does not know."""


def register(module_type: type) -> type:
    """Declare ``module_type`` explainable.

    Its ``forward`` runs inside the relevance mode, which gives its torch ops
    relevance rules and reports any op without one at run time. Usable as a
    class decorator.
    """
    if not (isinstance(module_type, type) and issubclass(module_type, torch.nn.Module)):
        hint = (f" (an instance: pass its class, lrp.register({type(module_type).__name__}))"
                if isinstance(module_type, torch.nn.Module) else "")
        raise TypeError(f"register: expected a torch.nn.Module subclass, got {module_type!r}{hint}.")
    _SUPPORTED.add(module_type)
    return module_type


def _is_hetero(model: torch.nn.Module) -> bool:
    """Whether ``model`` holds modules of PyG's heterogeneous models:
    ``HeteroConv``, ``HGTConv``, ``HANConv``, ``HeteroDictLinear``, or PyG's
    ``ModuleDict`` / ``ParameterDict`` keyed by types (``to_hetero``)."""
    return any("Hetero" in type(m).__name__ or type(m).__name__ in ("HGTConv", "HANConv", "HEATConv") or
               type(m).__module__ in ("torch_geometric.nn.module_dict", "torch_geometric.nn.parameter_dict") or
               # to_hetero: a ModuleDict keyed by edge types, 'src__rel__dst'
               (isinstance(m, torch.nn.ModuleDict) and any(k.count("__") == 2 for k in m.keys()))
               for m in model.modules())


def _is_supported(module: torch.nn.Module, extra: tuple) -> bool:
    cls = type(module)
    if cls in _SUPPORTED or issubclass(cls, _SUPPORTED_BASES) or (extra and isinstance(module, extra)):
        return True
    # A module the user wrote (its own model class, a custom layer): its
    # forward is plain torch code that the relevance mode checks op by op.
    root = cls.__module__.split(".")[0]
    return root not in ("torch", "torch_geometric", "torch_scatter", "torch_sparse")


#: Dicts of a module that its copy shares with it, so that what replaces a
#: parameter or buffer object (``.to()``, ``.double()``, ``.cuda()`` replace
#: buffers; ``load_state_dict(assign=True)`` parameters) does so in both.
_SHARED_DICTS = ("_parameters", "_buffers")


def _share_copy(module: torch.nn.Module, memo: Optional[dict] = None) -> torch.nn.Module:
    """A new module object holding the same parameters and buffers (the
    same dicts of them); a module registered under several names (weights
    tied by ``ModuleList([conv] * 3)``) is copied once, as it is one module."""
    top, memo = memo is None, {} if memo is None else memo
    if id(module) in memo:
        return memo[id(module)]
    new = memo[id(module)] = copy.copy(module)
    state = new.__dict__
    for key, value in list(state.items()):
        if isinstance(value, dict) and key not in _SHARED_DICTS:  # _modules, hook dicts, ...
            state[key] = copy.copy(value)
        elif inspect.ismethod(value) and value.__self__ is module:  # bound to the original
            state[key] = value.__func__.__get__(new)
    new._modules = {name: None if child is None else _share_copy(child, memo)
                    for name, child in module._modules.items()}
    if top:
        for copied in memo.values():
            _follow_containers(copied, memo)
    if type(module) in LRP_LAYERS:
        new.__class__ = LRP_LAYERS[type(module)]
    if isinstance(new, MessagePassing):
        _clear_explainer_state(new)
    return new


_FOLLOWED = (list, tuple, dict, collections.OrderedDict)


def _follow_containers(copied: torch.nn.Module, memo: dict) -> None:
    """Plain lists, tuples and dicts (values) in ``copied``'s attributes that
    hold modules of the model (``self.order = [self.c1, self.c2]``, which a
    forward may loop over) get new containers holding the copies: the
    copy's forward must run the copied layers, with their rules, not the
    original's. (The original's containers stay as they were.) Modules of
    the model held any other way (a set, a dict keyed by modules, a deque, a
    namedtuple, another object) are refused by name: followed in part, the
    copy would mix copies and originals (``c in self.skip`` false for a
    copy), computing another function."""
    def follow(value):
        if isinstance(value, torch.nn.Module):
            return memo.get(id(value), value)
        if type(value) in _FOLLOWED:
            items = value.items() if isinstance(value, dict) else None
            return type(value)((k, follow(v)) for k, v in items) if items is not None else \
                type(value)(follow(v) for v in value)
        return value

    def held(value, depth: int = 0) -> tuple[bool, bool]:
        """(holds a module of the model, in a way ``follow`` rebuilds)"""
        if isinstance(value, torch.nn.Module):
            return id(value) in memo, True
        if depth > 8 or isinstance(value, (str, bytes, torch.Tensor)):
            return False, True
        if isinstance(value, dict):
            keys = [held(k, depth + 1) for k in value]
            values = [held(v, depth + 1) for v in value.values()]
            found = any(h for h, _ in keys + values)
            return found, type(value) in _FOLLOWED and not any(h for h, _ in keys) and all(ok for _, ok in values)
        if isinstance(value, (list, tuple, set, frozenset, collections.deque)):
            parts = [held(v, depth + 1) for v in value]
            return any(h for h, _ in parts), type(value) in _FOLLOWED and all(ok for _, ok in parts)
        return False, True

    state = copied.__dict__
    for key, value in list(state.items()):
        if key in _SHARED_DICTS or key == "_modules" or isinstance(value, torch.nn.Module):
            continue
        found, followable = held(value)
        if not found:
            continue
        if not followable:
            raise UnsupportedModuleError(
                f"lrp.convert: {type(copied).__name__}.{key} holds modules of the model in a "
                f"{type(value).__name__} (as set members, dict keys or in another container), which lrp.convert "
                f"cannot point at the converted copies: the copy's forward would mix them with the original's "
                f"layers. Hold the layers in torch.nn.ModuleList / ModuleDict, a list or a dict (values), or "
                f"explain the model as it is (lrp.explain, or LRP in PyG's Explainer, with rules=).")
        state[key] = follow(value)


def _clear_explainer_state(layer: MessagePassing) -> None:
    """Turn off, on our copy only, what another explainer may have left on
    the original layer (PyG's ``explain`` flag and edge masks): the copy
    reads no mask. An ``_edge_mask`` slot in the shared ``_parameters`` stays
    (the dict is one for both: see ``_SHARED_DICTS``); the copy's own
    attribute hides it."""
    if layer._explain:
        layer.explain = False
    layer.__dict__.update(_edge_mask=None, _loop_mask=None, _explain=None)


def composite(rules) -> dict:
    """``rules`` as a composite dict (a single rule is ``{torch.nn.Module: rule}``);
    anything else raises a ``TypeError`` naming ``rules``."""
    if rules is None:
        return {}
    if isinstance(rules, Rule):
        check_rule(rules)
        return {torch.nn.Module: rules}
    if not isinstance(rules, dict):
        raise TypeError(
            f"rules: expected a rule (e.g. lrp.rules.Gamma(0.25)) or a dict mapping module types or "
            f"qualified names to rules (e.g. {{GCNConv: lrp.rules.Gamma(0.25), 'lin': lrp.rules.Epsilon()}}), "
            f"got {type(rules).__name__}: {rules!r}."
        )
    for key, value in rules.items():
        if not (isinstance(key, str) or isinstance(key, type) and issubclass(key, torch.nn.Module)):
            raise TypeError(f"rules: keys must be module types or qualified names, got {key!r} (a type key "
                            f"must be a subclass of torch.nn.Module).")
        if not isinstance(value, Rule):
            raise TypeError(f"rules: values must be rules from torch_geometric_lrp.rules, got {value!r} "
                            f"for key {key!r}.")
        check_rule(value)
    # a torch_geometric_lrp.nn layer stands for the PyG layer of the same name, which a model
    # explained as it is holds (lrp.convert swaps in the subclass, an instance of both)
    merged, given = {}, {}
    for key, value in rules.items():
        same = _PYG_LAYER.get(key, key) if isinstance(key, type) else key
        if same in merged and merged[same] != value:
            first = given[same]
            raise ValueError(
                f"rules: {first.__module__}.{first.__qualname__} and {key.__module__}.{key.__qualname__} are one "
                f"key (the LRP layer stands for the PyG layer it mirrors), given two rules, {merged[same]!r} and "
                f"{value!r}. Give the layer one rule.")
        merged[same], given[same] = value, key
    return merged


def unused_types(rules, modules) -> tuple:
    """The type keys of the composite ``rules`` where none of its keys
    applies to any of ``modules`` (``()`` otherwise, and for a single rule or
    a composite with name keys, which :func:`resolve_rules` checks itself):
    such rules change nothing, and the user would get the default believing
    their rules were applied. Some keys without a module are fine: a
    composite may be written for several models."""
    keys = list(composite(rules))
    if not keys or not all(isinstance(k, type) for k in keys):
        return ()
    if any(isinstance(m, tuple(keys)) for m in modules):
        return ()
    return tuple(keys)


def _qualified(cls: type) -> str:
    """``torch.nn.Linear``, ``torch_geometric.nn.dense.linear.Linear``: two
    classes of one name told apart."""
    module = cls.__module__
    return f"torch.nn.{cls.__name__}" if module.startswith("torch.nn.modules") else f"{module}.{cls.__qualname__}"


def unused_types_error(model: torch.nn.Module, types: tuple) -> ValueError:
    present = sorted({_qualified(type(m)) for n, m in model.named_modules() if n})
    return ValueError(
        f"rules: no module of {type(model).__name__} is an instance of {', '.join(map(_qualified, types))}, so "
        f"these rules change nothing (this model has {', '.join(present[:8])}{', ...' if len(present) > 8 else ''}"
        f"; key a rule by one of these types or by a qualified name, or give a single rule for every module).")


def type_rule(module: torch.nn.Module, by_type, parent: Optional[torch.nn.Module] = None) -> Optional[Rule]:
    """The rule of the most specific type key that ``module`` is an instance
    of, among the ``(type, rule)`` pairs ``by_type``: the one nearest to its
    class in its method resolution order (``GCNConv`` before
    ``MessagePassing`` before ``torch.nn.Module``; a virtual subclass's key
    counts least, ties go by order). ``None`` where none matches, or where
    ``parent`` (the module it runs inside) is an instance of that type too:
    the parent's rule, which no less specific key beat, stays on what runs
    inside it (``{GCNConv: Gamma(), torch.nn.Module: Epsilon()}`` keeps
    ``Gamma`` on the GCN layer's own ``lin``)."""
    mro = type(module).__mro__
    best = None
    for t, rule in by_type:
        if isinstance(module, t):
            rank = mro.index(t) if t in mro else len(mro)
            if best is None or rank < best[0]:
                best = (rank, t, rule)
    if best is None or (parent is not None and isinstance(parent, best[1])):
        return None
    return best[2]


def _glob_rule(name: str, by_name: dict, parent: Optional[str] = None) -> Optional[Rule]:
    """The rule of the most specific glob key matching ``name``: the one with
    the most literal characters (``"convs.1*"`` before ``"convs*"``; ties go
    by order). A pattern that matches the ``parent`` too is the parent's:
    a glob keys the outermost modules it matches, whose insides take their
    rule (``"convs.*"`` keys each layer, not ``convs.0.lin`` again, which
    would split ``convs.0`` where a key names it)."""
    found = [(len(pattern) - sum(pattern.count(c) for c in "*?["), -i, rule)
             for i, (pattern, rule) in enumerate(by_name.items()) if fnmatch.fnmatchcase(name, pattern)
             and not (parent is not None and fnmatch.fnmatchcase(parent, pattern))]
    return max(found, key=lambda f: f[:2])[2] if found else None


def type_rules(rules) -> tuple:
    """The ``(type, rule)`` entries of ``rules`` (a single rule: every module),
    for modules that are not part of the model (a forward may call them)."""
    return tuple((k, v) for k, v in composite(rules).items() if isinstance(k, type))


#: PyG's conv layers that are not ``MessagePassing`` themselves but run
#: message-passing layers inside (``DirGNNConv``: ``conv_in`` and ``conv_out``
#: side by side; ``GPSConv``, ``AntiSymmetricConv``, ``HeteroConv``). Each is
#: one layer of the model: the default composite gives all of it one rule.
CONV_WRAPPERS: tuple[type, ...] = tuple(
    cls for cls in (getattr(pyg_nn.conv, name) for name in pyg_nn.conv.__all__)
    if isinstance(cls, type) and issubclass(cls, torch.nn.Module) and not issubclass(cls, MessagePassing))


def _layers(named: list) -> list[str]:
    """The graph layers of a model, in registration order: message-passing
    modules and :data:`CONV_WRAPPERS`, each counted once with what runs
    inside it (the outermost one)."""
    found: list[str] = []
    for name, module in named:
        if isinstance(module, (MessagePassing, *CONV_WRAPPERS)) and \
                not any(name.startswith(f"{outer}.") for outer in found):
            found.append(name)
    return found


def _layer_of(named: dict, graph_layers: list, name: str) -> set:
    """Graph layer ``name`` and, where it is one of a ``ModuleDict`` of
    layers per edge type (as ``to_hetero`` makes them), its siblings: one
    layer of the model."""
    parent = name.rpartition(".")[0]
    if isinstance(named.get(parent), torch.nn.ModuleDict):
        return {n for n in graph_layers if n.rpartition(".")[0] == parent}
    return {name}


_NORM_MODULES = ("torch.nn.modules.batchnorm", "torch.nn.modules.instancenorm", "torch.nn.modules.normalization",
                 "torch_geometric.nn.norm")


def _is_norm(module: torch.nn.Module) -> bool:
    """A normalisation layer of torch or PyG (``BatchNorm1d``, ``LayerNorm``, ``GraphNorm``, ...)."""
    return type(module).__module__.startswith(_NORM_MODULES)


def _output_layer(named: list, modules: dict, graph_layers: list) -> set:
    """The last graph layer when it produces the model's output scores: no
    module with weights of its own (other than a normalisation, and outside
    graph layers) is registered after it, as in PyG's
    ``BasicGNN`` models and a ``conv1 -> conv2`` classifier. A head
    registered after it (a ``Linear``, an ``MLP``) makes it a hidden layer."""
    last = _layer_of(modules, graph_layers, graph_layers[-1])
    after = max(i for i, (name, _) in enumerate(named) if name in last) + 1
    inside = tuple(f"{n}." for n in graph_layers)
    for name, module in named[after:]:
        if name.startswith(inside) or _is_norm(module):
            continue
        if next(module.parameters(recurse=False), None) is not None:
            return set()
    return last


def resolve_rules(model: torch.nn.Module, rules=None, named: Optional[list] = None) -> dict[str, Rule]:
    """The rule of every module of ``model``, by qualified name.

    ``rules`` is a single :class:`~torch_geometric_lrp.rules.Rule` (every
    module) or a composite dict. For each module, in this order: an entry of
    ``rules`` whose key is its qualified name, or else a glob pattern of it
    that its parent's name does not match too (e.g. ``"convs.0*"``; the one
    with the most literal characters); an
    entry whose key is a type it is an instance of (the most specific one,
    ``type_rule``), unless its parent is an instance of that type too;
    the rule of its parent; the
    default composite, by graph layer (a message-passing module, or a PyG
    conv layer that runs them inside, :data:`CONV_WRAPPERS`; all of a layer
    gets its rule): :data:`DEFAULT_INPUT` for the first graph layer (in a
    heterogeneous model, its layer of every edge type); :data:`DEFAULT_UPPER`
    for the last one when it outputs the model's scores (no head with weights
    is registered after it) and for everything outside graph layers;
    :data:`DEFAULT_LOWER` for the graph layers between (hidden layers,
    followed by an activation).

    Without ``rules``, a model made by :func:`convert` gets the rules it was
    converted with, as the relevance pass gives them; so do the modules of
    one converted with ``rules`` used inside another model (a wrapper,
    ``DataParallel``), the rest the default composite.
    """
    stored = getattr(model, "_lrp_rules", None)
    if rules is None and stored is not None:
        return dict(stored)
    named = list(model.named_modules()) if named is None else named
    if rules is None:
        # rules given to convert (a model converted without rules stored the default composite, which the
        # outer model's default composite replaces: its last layer may be a hidden layer there)
        inner = [(name, m._lrp_rules) for name, m in named
                 if name and getattr(m, "_lrp_rules_given", False) and isinstance(getattr(m, "_lrp_rules", None), dict)]
        if inner:
            found = resolve_rules(model, {}, named)
            for prefix, kept in inner:
                found.update({f"{prefix}.{k}" if k else prefix: rule for k, rule in kept.items()})
            return found
    rules = composite(rules)
    by_type = [(k, v) for k, v in rules.items() if isinstance(k, type)]
    by_name = {k: v for k, v in rules.items() if isinstance(k, str)}

    graph_layers = _layers(named)
    modules = dict(named)
    every_name = [n for n, _ in model.named_modules(remove_duplicate=False)]
    unmatched = [k for k in by_name if k not in modules and not any(fnmatch.fnmatchcase(n, k) for n in modules)
                 and not (any(c in k for c in "*?[") and any(fnmatch.fnmatchcase(n, k) for n in every_name))]
    aliases = {n: m for n, m in model.named_modules(remove_duplicate=False) if n in unmatched}
    if aliases:  # a module registered under several names has one rule: key it by its first name
        name, module = next(iter(aliases.items()))
        first = next(n for n, m in named if m is module)
        raise ValueError(
            f"rules: {name!r} is the module {first!r} registered under a second name (one module, its weights "
            f"tied); a module has one rule, so key it by {first!r}, the name model.named_modules() gives it.")
    if unmatched:  # a misspelt name would leave its module on the default, silently
        names = [repr(n) for n in modules if n][:8]
        raise ValueError(
            f"rules: no module of {type(model).__name__} is named {', '.join(map(repr, unmatched))} (keys are "
            f"qualified names as model.named_modules() gives them, glob patterns allowed; this model has "
            f"{', '.join(names)}{', ...' if len(modules) > 9 else ''}).")
    input_layer = _layer_of(modules, graph_layers, graph_layers[0]) if graph_layers else set()
    output_layer = _output_layer(named, modules, graph_layers) if graph_layers else set()
    resolved: dict[str, Rule] = {}
    inherited: set[str] = set()  # modules whose children take over their rule
    for name, module in named:
        parent = name.rpartition(".")[0] if name else None
        rule = by_name.get(name)
        if rule is None:
            rule = _glob_rule(name, by_name, parent)
        if rule is None:
            rule = type_rule(module, by_type, modules[parent] if parent in inherited else None)
        if rule is None and parent in inherited:
            rule = resolved[parent]
        if rule is None and name in graph_layers:
            rule = DEFAULT_INPUT if name in input_layer else DEFAULT_UPPER if name in output_layer else \
                DEFAULT_LOWER
        if rule is None:
            resolved[name] = DEFAULT_UPPER  # not passed on: children resolve on their own
            continue
        resolved[name] = rule
        inherited.add(name)
    _check_glob_aliases(model, named, by_name, resolved)
    return resolved


def _ruleless(module: torch.nn.Module) -> bool:
    """An activation or dropout module (``ReLU``, ``Dropout``), which runs no
    linear op: its rule changes nothing (one shared by two parents is
    common, ``self.act`` reused in an ``MLP``)."""
    return type(module).__module__ in ("torch.nn.modules.activation", "torch.nn.modules.dropout") and \
        next(module.parameters(), None) is None


def _check_glob_aliases(model: torch.nn.Module, named: list, by_name: dict, resolved: dict) -> None:
    """A module registered under a second name (``self.first`` and
    ``self.convs[0]``) has one rule, resolved at its first name. A glob key
    that matches it only at its second name (``"convs.*"``) would be left
    out there without a word; refused, unless its first name has a key of
    its own (the most specific key, which wins) or resolves to the glob's
    rule anyway."""
    globs = {k: v for k, v in by_name.items() if any(c in k for c in "*?[")}
    if not globs:
        return
    first_names = {id(m): n for n, m in named}
    for name, module in model.named_modules(remove_duplicate=False):
        first = first_names.get(id(module))
        if first is None or first == name or first in by_name or _ruleless(module):
            continue
        parent = name.rpartition(".")[0] if name else None
        rule = _glob_rule(name, globs, parent)
        if rule is not None and resolved.get(first) != rule:
            pattern = next(k for k, v in globs.items() if v is rule and fnmatch.fnmatchcase(name, k))
            raise ValueError(
                f"rules: {pattern!r} matches {name!r}, which is the module {first!r} registered under a second "
                f"name (one module, its weights tied); a module has one rule, resolved at its first name, which "
                f"this key does not match. Key it by {first!r} as well (its own key wins).")


def convert(model: torch.nn.Module, rules: Optional[dict[Union[str, type], Rule]] = None) -> torch.nn.Module:
    """Return an LRP-ready version of ``model`` that shares its parameters.

    Parameters
    ----------
    model : torch.nn.Module
        A PyG model (stock layers, ``MLP``, pooling and functional code in its
        own ``forward`` are all fine). It is left exactly as it was.
    rules : dict, optional
        A composite: ``{module type or qualified name (glob allowed): Rule}``,
        e.g. ``{GCNConv: Gamma(0.25), "lin": Epsilon()}``. Merged over the
        default composite (see :func:`resolve_rules`). Types named here count
        as supported.

    Returns
    -------
    torch.nn.Module
        A copy of the module tree over the same parameters, with PyG layers
        swapped for :mod:`torch_geometric_lrp.nn` layers. Its forward equals
        the original's; run it inside :func:`torch_geometric_lrp.relevance_pass`
        to get relevance. The composite is stored as ``_lrp_rules``.

    Raises
    ------
    UnsupportedModuleError
        Listing every module the relevance pass does not know, with how to
        declare it.
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"convert: model must be a torch.nn.Module, got {type(model).__name__}.")
    model = unwrap(model)
    compiled = compiled_modules(list(model.named_modules()))
    if compiled:  # (a rule for OptimizedModule would write the copy's modules into the compiled original)
        raise UnsupportedModuleError(f"lrp.convert: {compiled}")
    # a converted model given again without rules keeps its composite
    kept = getattr(model, "_lrp_rules", None) if rules is None else None
    given = rules is not None  # without rules, converted modules inside keep theirs (resolve_rules)
    rules = composite(rules)
    unused = unused_types(rules, model.modules())
    if unused:
        raise unused_types_error(model, unused)
    extra = tuple(k for k in rules if isinstance(k, type) and k is not torch.nn.Module)
    lazy = [name for name, p in model.named_parameters() if isinstance(p, torch.nn.parameter.UninitializedParameter)]
    if lazy:
        # its first forward would replace the lazy parameters and remove the hook that does it in one
        # model only (the hook is the original's): run it before copying
        raise ValueError(f"lrp.convert: {type(model).__name__} has parameters whose shapes its first forward "
                         f"sets (in_channels=-1: {', '.join(lazy[:3])}{', ...' if len(lazy) > 3 else ''}). Run "
                         f"the model once (model(x, edge_index)) before lrp.convert.")
    unsupported = [(name or "<model>", type(m)) for name, m in model.named_modules() if not _is_supported(m, extra)]
    if unsupported:
        lines = "\n".join(f"  - {name} ({t.__module__}.{t.__qualname__})" for name, t in unsupported)
        example = unsupported[0][1]
        if _is_hetero(model):
            raise UnsupportedModuleError(
                f"lrp.convert: {type(model).__name__} is a heterogeneous model (it holds\n{lines}\n), which "
                f"lrp.convert does not copy yet. Explain it as it is: lrp.explain(model, x_dict, "
                f"edge_index_dict, ...) or LRP in PyG's Explainer, with rules= for the composite.")
        if any(torch.nn.utils.parametrize.is_parametrized(m) for m in model.modules()):
            # torch makes a class per parametrized module, and its parametrizations are modules too:
            # registering them one by one is no way out
            raise UnsupportedModuleError(
                f"lrp.convert: {type(model).__name__} has parametrized modules (torch.nn.utils.parametrize: "
                f"weight_norm, spectral_norm, orthogonal), which lrp.convert does not copy:\n{lines}\n"
                f"Explain the model as it is (lrp.explain, or LRP in PyG's Explainer, with rules= for the "
                f"composite), or remove the parametrizations first "
                f"(torch.nn.utils.parametrize.remove_parametrizations(module, 'weight')).")
        raise UnsupportedModuleError(
            f"lrp.convert: {len(unsupported)} module(s) have no relevance support:\n{lines}\n"
            f"If a module only computes with ops that have relevance rules (linear maps, sums, "
            f"scatters, element-wise activations), declare it with "
            f"lrp.register({example.__qualname__}) (the layers inside keep their rules), or give it a rule, e.g. "
            f"lrp.convert(model, rules={{{example.__qualname__}: lrp.rules.Epsilon()}}), which the layers "
            f"inside it inherit in place of the default composite; the relevance pass then checks its ops as it "
            f"runs."
        )
    converted = _share_copy(model)
    converted._lrp_rules = dict(kept) if kept is not None else resolve_rules(converted, rules if given else None)
    converted._lrp_rules_given = given or (kept is not None and getattr(model, "_lrp_rules_given", False)) or \
        any(getattr(m, "_lrp_rules_given", False) for name, m in converted.named_modules() if name)
    return converted
