"""``lrp.check_conservation``: one relevance pass, accounted layer by layer."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence, Union

import torch
from torch import Tensor
from torch_geometric.data import HeteroData

from .audit import RelevanceAudit
from .explainers.core import check_layer_state
from .maps import _Close
from .mode import current_mode, relevance_pass, unwrap
from .rules import Rule

_CLOSE = _Close._backward_cls  # the backward node of a map's end

__all__ = ["check_conservation", "ConservationReport", "LayerRelevance"]


@dataclass
class LayerRelevance:
    """Relevance entering a module (at its output) and leaving it (at its
    inputs that carry relevance) in one pass."""

    name: str
    type: str
    entering: float = 0.0
    leaving: float = 0.0

    @property
    def gap(self) -> float:
        """``entering - leaving``: what the module absorbed or lost (or, if
        negative, created)."""
        return self.entering - self.leaving


@dataclass
class ConservationReport:
    """What one relevance pass did with the seeded relevance.

    Every amount is measured where it happens (input relevance at the inputs,
    absorbed at each bias, constant and stabiliser, lost at outputs equal to
    0), so ``seed = input_relevance + absorbed + lost`` is a check: an op that
    has no rule (listed in ``unsupported``) or changes relevance without
    reporting it shows in :attr:`residual`.
    """

    seed: float
    input_relevance: dict[str, float]
    lost: float
    absorbed: float
    by_op: dict[str, dict[str, float]]
    layers: list[LayerRelevance]
    unsupported: dict[str, int] = field(default_factory=dict)

    @property
    def total_input(self) -> float:
        return sum(self.input_relevance.values())

    @property
    def residual(self) -> float:
        """``seed - input - absorbed - lost``: relevance created or destroyed
        without being accounted for (0 up to float error when every op has a rule)."""
        return self.seed - self.total_input - self.absorbed - self.lost

    def conserved(self, rtol: float = 1e-5) -> bool:
        """No unsupported op and a residual within ``rtol`` of the seed."""
        return not self.unsupported and abs(self.residual) <= rtol * max(abs(self.seed), 1e-12)

    def __str__(self) -> str:
        rows = [f"{'module':<32} {'type':<20} {'entering':>12} {'leaving':>12} {'gap':>12}"]
        rows += [f"{l.name:<32} {l.type:<20} {l.entering:>12.6g} {l.leaving:>12.6g} {l.gap:>12.6g}"
                 for l in self.layers]
        rows.append(f"seed {self.seed:.6g} = input {self.total_input:.6g} + absorbed {self.absorbed:.6g} "
                    f"+ lost {self.lost:.6g} + residual {self.residual:.3g}")
        for name, count in self.unsupported.items():
            rows.append(f"NO RULE: {name} ({count} call(s))")
        return "\n".join(rows)


def _each(value, fn):
    """``fn`` applied to each item of a list, tuple, namedtuple or dict (the
    same container back); anything else as it is."""
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(fn(v) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(fn(v) for v in value)
    if isinstance(value, dict):
        return type(value)((k, fn(v)) for k, v in value.items())
    return value


def _tensors(value) -> list[Tensor]:
    if isinstance(value, Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


def _check_in_place(model, mode, out: Tensor, args, kwargs) -> None:
    """Compare the pass's output with a plain forward (see
    :meth:`~torch_geometric_lrp.mode.RelevanceMode.check_in_place`)."""
    with mode.paused(), torch.no_grad():
        plain = _tensors(model(*[a.detach() if isinstance(a, Tensor) else a for a in args],
                               **{k: v.detach() if isinstance(v, Tensor) else v for k, v in kwargs.items()}))[0]
    mode.check_in_place(model, plain, out)


def check_conservation(
    model: torch.nn.Module,
    *args: Any,
    inputs: Optional[Sequence[str]] = None,
    seed: Optional[Tensor] = None,
    rules: Union[None, Rule, dict] = None,
    **kwargs: Any,
) -> ConservationReport:
    """Run one relevance pass of ``model(*args, **kwargs)`` and account for it.

    Parameters
    ----------
    model : torch.nn.Module
        A model, converted (:func:`torch_geometric_lrp.convert`) or not: any
        model that :func:`torch_geometric_lrp.explain` explains, on floating
        inputs (categorical ones are not checked module by module yet). The pass
        runs on it as :func:`~torch_geometric_lrp.relevance_pass` does (put
        back as it was after), with hooks of this call on its modules,
        removed on return (other threads' forwards pass them untouched).
    *args, **kwargs
        The forward's arguments.
    inputs : list of str, optional
        Which arguments carry relevance: positional indices as strings
        (``"0"``) or keyword names. Default: the first positional argument and
        the keyword arguments ``edge_attr`` and ``u``. Other arguments
        (``edge_index``, ``edge_weight``, ``batch``) are constants.
    seed : Tensor, optional
        Relevance to seed on the output; default the output itself
        (``R = f(x)``, all outputs explained at once).
    rules : Rule or dict, optional
        A rule for every module or a composite, as for
        :func:`torch_geometric_lrp.relevance_pass` (e.g. ``Epsilon(0.0)`` for
        LRP-0 everywhere); default: a converted model's own rules, else the
        default composite.

    Returns
    -------
    ConservationReport
        Seed, input relevance per input, lost and absorbed amounts (total and
        per op), relevance entering and leaving every module, and every op
        that ran without a relevance rule.
    """
    def heterogeneous(value) -> bool:
        if isinstance(value, HeteroData):
            return True
        if isinstance(value, dict) and value and all(isinstance(t, Tensor) for t in value.values()):
            return True
        return isinstance(value, (list, tuple)) and any(heterogeneous(v) for v in value)

    if any(heterogeneous(v) for v in (*args, *kwargs.values())):
        raise TypeError(
            "check_conservation: the inputs hold a HeteroData or dicts ({node_type: x}, {edge_type: edge_index}): "
            "heterogeneous models are not checked module by module yet. lrp.explain and LRP in PyG's Explainer "
            "explain them and report the totals (score, relevance_total, absorbed, lost, residual).")
    model = unwrap(model)  # a torch.compile-d model: its eager module (the pass runs op by op)
    given = (args, kwargs)  # as the user's model takes them, before the carriers are made leaves
    check_layer_state(model, lambda: model(*given[0], **given[1]))
    names = [str(i) for i in range(len(args))] + list(kwargs)
    if isinstance(inputs, str):
        raise TypeError(f"inputs: expected a list of argument names, got the string {inputs!r}: pass "
                        f"[{inputs!r}].")
    inputs = list(inputs) if inputs is not None else ["0"] + [k for k in ("edge_attr", "u") if k in kwargs]
    for name in inputs:
        if name not in names:
            raise ValueError(f"check_conservation: inputs names {name!r}, which is not an argument "
                             f"(positional '0'..'{len(args) - 1}' or one of {list(kwargs)}).")
    args = list(args)
    carriers: dict[str, Tensor] = {}
    for name in inputs:
        value = args[int(name)] if name.isdigit() else kwargs[name]
        if not (isinstance(value, Tensor) and value.is_floating_point()):
            raise TypeError(f"check_conservation: input {name!r} must be a floating-point tensor, got "
                            f"{value.dtype if isinstance(value, Tensor) else type(value).__name__}. Integer inputs "
                            f"looked up in embeddings (categorical x) are explained by lrp.explain, which reports "
                            f"the totals, but are not checked module by module yet; name only floating inputs in "
                            f"inputs=[...].")
        with torch.inference_mode(False):  # a leaf that can require grad, also called under inference mode
            leaf = value.detach().clone().requires_grad_()
        carriers[name] = leaf
        if name.isdigit():
            args[int(name)] = leaf
        else:
            kwargs[name] = leaf
    # the other arguments are constants: one that still requires grad from an
    # earlier computation would carry relevance out of the pass
    args = [a.detach() if str(i) not in carriers and isinstance(a, Tensor) and a.requires_grad else a
            for i, a in enumerate(args)]
    kwargs = {k: v.detach() if k not in carriers and isinstance(v, Tensor) and v.requires_grad else v
              for k, v in kwargs.items()}

    layers = {n: LayerRelevance(n, type(m).__name__) for n, m in model.named_modules() if n}
    hooks = []
    thread = threading.get_ident()  # the hooks sit on the model's modules: other threads' forwards pass them

    # Every map end that a hook aliased (an alias continues its map, so the
    # backward reaches the last alias's end, not the ones before it), with the
    # modules it is the output of and the modules it is an input of: what the
    # stabiliser keeps (and loses) at the end the backward reaches counts for
    # each of them. Nested modules share their outputs and inputs; a module
    # that returns its input (Identity) has the same tensor as input and output.
    ends: dict[int, tuple[Tensor, list[str], list[str]]] = {}

    def _roles(t: Tensor) -> tuple[list[str], list[str]]:
        entry = ends.get(id(t))
        return (list(entry[1]), list(entry[2])) if entry is not None and entry[0] is t else ([], [])

    def _aliased(mode, a: Tensor, name: str, attr: str) -> Tensor:
        """An alias of ``a`` whose relevance counts for ``name``'s ``attr``."""
        outputs_of, inputs_of = _roles(a)
        a = mode.alias(a)
        mode.relevance_hook(a, lambda r: _add(name, attr, r))
        if type(a.grad_fn) is _CLOSE:
            (outputs_of if attr == "entering" else inputs_of).append(name)
            targets = [(n, "entering") for n in outputs_of] + [(n, "leaving") for n in inputs_of]
            a.grad_fn.kept = lambda r: _add_each(targets, r)
            ends[id(a)] = (a, outputs_of, inputs_of)
        return a

    def watch(name):
        def pre(module, margs, mkwargs):
            # An alias per input, so that its gradient is this module's share only.
            mode = current_mode()
            if threading.get_ident() != thread:
                return None

            def alias(a):
                if isinstance(a, Tensor) and a.requires_grad and mode is not None:
                    return _aliased(mode, a, name, "leaving")
                return _each(a, alias)
            return tuple(alias(a) for a in margs), {k: alias(v) for k, v in mkwargs.items()}

        def post(module, margs, out):
            # An alias per output too: the gradient of the output itself would
            # also count the uses of that tensor inside the module (a module
            # that returns h and also computed its other output from h).
            mode = current_mode()
            if threading.get_ident() != thread:
                return None

            def alias(a):
                if isinstance(a, Tensor) and a.requires_grad and mode is not None:
                    return _aliased(mode, a, name, "entering")
                return _each(a, alias)
            return alias(out)
        return pre, post

    def _add(name, attr, relevance):
        setattr(layers[name], attr, getattr(layers[name], attr) + relevance.sum().item())

    def _add_each(targets, relevance):
        for name, attr in targets:
            _add(name, attr, relevance)

    try:  # (the hooks inside it, so that an interrupt while they are set leaves none behind)
        for name, module in model.named_modules():
            if name:
                pre, post = watch(name)
                hooks.append(module.register_forward_pre_hook(pre, with_kwargs=True))
                hooks.append(module.register_forward_hook(post))
        with RelevanceAudit() as audit, relevance_pass(model, strict=False, rules=rules) as mode:
            out = model(*args, **kwargs)
            outputs = _tensors(out)
            if len(outputs) != 1:
                raise TypeError("check_conservation: the model must return one tensor to seed.")
            out = outputs[0]
            if mode.in_place:  # run out of place in the pass: the same function only if the output agrees
                _check_in_place(model, mode, out, args, kwargs)
            relevance = out.detach() if seed is None else seed
            if not isinstance(relevance, Tensor) or relevance.shape != out.shape:
                shape = tuple(relevance.shape) if isinstance(relevance, Tensor) else type(relevance).__name__
                raise ValueError(f"seed: expected the output's shape {tuple(out.shape)}, got {shape}.")
            found = mode.backward(out, relevance, list(carriers.values()))
    finally:
        for h in hooks:
            h.remove()
    return ConservationReport(
        seed=relevance.sum().item(),
        input_relevance={n: r.sum().item() for n, r in zip(carriers, found)},
        lost=audit.lost,
        absorbed=audit.absorbed,
        by_op=audit.by_op,
        layers=[l for l in layers.values() if l.entering or l.leaving],
        unsupported=dict(mode.unsupported),
    )
