r"""Relevance of recurrent ops: LSTM and GRU cells and layers.

The rule of Arras et al. 2017 (L. Arras, G. Montavon, K.-R. Müller,
W. Samek, *Explaining Recurrent Neural Network Predictions in Sentiment
Analysis*, WASSA 2017): the sigmoid gates are held constant, so each cell
is linear in its candidate and in its previous state, and relevance flows
only through the candidate path and the previous cell / hidden state. The
gate pre-activations get no relevance.

Each handler runs the fused torch op (``torch.lstm_cell``, ``torch.gru_cell``,
``torch.lstm``, ``torch.gru``) as simple ops through
:meth:`~torch_geometric_lrp.mode.RelevanceMode.call`, so that every op is
routed like an op of the forward: the linear maps ``W_ih x + b_ih +
W_hh h + b_hh`` get the rule in effect (biases absorb relevance), ``tanh``
gets the element-wise pass rule, a product with a gate sends all relevance to
its other factor, and copies (``chunk``, ``stack``, ``cat``) are copies.
The gates are computed from detached pre-activations: held constant
explicitly, also where the other factor is a constant (an initial state
given as a plain tensor), which the mode's product rule would otherwise take
for a weight and send relevance into the gate.

Handlers return what the torch op returns, or, for what they do not cover
(``PackedSequence`` input, ``proj_size``, dropout in training mode),
``mode.refuse(reason)``: the mode then refuses the op naming the reason.
"""
from __future__ import annotations

from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["lstm_cell", "gru_cell", "lstm", "gru", "RECURRENT_HANDLERS"]


def _gate(*pre: Tensor) -> Tensor:
    """``sigmoid(sum(pre))`` held constant (detached: it takes no relevance)."""
    return torch.sigmoid(sum(a.detach() for a in pre))


def lstm_cell(mode, input: Tensor, hx, w_ih: Tensor, w_hh: Tensor, b_ih: Optional[Tensor] = None,
              b_hh: Optional[Tensor] = None):
    r"""One LSTM step, ``torch.lstm_cell``: with
    :math:`(a_i, a_f, a_g, a_o) = W_{ih} x + b_{ih} + W_{hh} h + b_{hh}`,
    gates :math:`i, f, o = \sigma(a_{i,f,o})` (constants) and candidate
    :math:`g = \tanh(a_g)`,

    .. math:: c' = f \odot c + i \odot g, \qquad h' = o \odot \tanh(c').

    Returns ``(h', c')``."""
    h, c = hx
    if input.dim() != 2:
        return NotImplemented
    a = mode.call(torch.add, mode.call(F.linear, input, w_ih, b_ih), mode.call(F.linear, h, w_hh, b_hh))
    a_i, a_f, a_g, a_o = mode.call(torch.chunk, a, 4, 1)
    i, f, o = _gate(a_i), _gate(a_f), _gate(a_o)
    g = mode.call(torch.tanh, a_g)
    c = mode.call(torch.add, mode.call(torch.mul, f, c), mode.call(torch.mul, i, g))
    h = mode.call(torch.mul, o, mode.call(torch.tanh, c))
    return h, c


def gru_cell(mode, input: Tensor, hx: Tensor, w_ih: Tensor, w_hh: Tensor, b_ih: Optional[Tensor] = None,
             b_hh: Optional[Tensor] = None):
    r"""One GRU step, ``torch.gru_cell``: with
    :math:`(x_r, x_z, x_n) = W_{ih} x + b_{ih}` and
    :math:`(h_r, h_z, h_n) = W_{hh} h + b_{hh}`, gates
    :math:`r = \sigma(x_r + h_r)` and :math:`z = \sigma(x_z + h_z)`
    (constants),

    .. math:: n = \tanh(x_n + r \odot h_n), \qquad h' = (1 - z) \odot n + z \odot h.

    Returns ``h'``."""
    if input.dim() != 2:
        return NotImplemented
    x_r, x_z, x_n = mode.call(torch.chunk, mode.call(F.linear, input, w_ih, b_ih), 3, 1)
    h_r, h_z, h_n = mode.call(torch.chunk, mode.call(F.linear, hx, w_hh, b_hh), 3, 1)
    r, z = _gate(x_r, h_r), _gate(x_z, h_z)
    n = mode.call(torch.tanh, mode.call(torch.add, x_n, mode.call(torch.mul, r, h_n)))
    return mode.call(torch.add, mode.call(torch.mul, 1 - z, n), mode.call(torch.mul, z, hx))


def _layers(mode, cell: Callable, input: Tensor, states: list, params, has_biases: bool, num_layers: int,
            bidirectional: bool, batch_first: bool):
    """Run ``cell`` over time, layer by layer and direction by direction, as
    ``torch.lstm`` / ``torch.gru`` do (``params`` per layer and direction:
    ``w_ih, w_hh[, b_ih, b_hh]``; ``states`` the initial state of each).
    Returns the last layer's output and the final state of each layer and
    direction; ``NotImplemented`` for a layout it does not know."""
    directions = 2 if bidirectional else 1
    per = 4 if has_biases else 2
    if input.dim() != 3:
        return mode.refuse(f"on an input of {input.dim()} dimensions")
    if len(params) != num_layers * directions * per or len(states) != num_layers * directions:
        return mode.refuse("with proj_size (the projection w_hr)")  # proj_size adds w_hr: not covered
    x = mode.call(torch.transpose, input, 0, 1) if batch_first else input
    finals = []
    for layer in range(num_layers):
        steps = mode.call(torch.unbind, x, 0)
        outputs = []
        for direction in range(directions):
            k = layer * directions + direction
            weights = params[k * per:(k + 1) * per]
            state, hs = states[k], [None] * len(steps)
            for t in (reversed(range(len(steps))) if direction else range(len(steps))):
                state = cell(mode, steps[t], state, *weights)
                hs[t] = state[0] if isinstance(state, tuple) else state
            outputs.append(mode.call(torch.stack, hs, 0))
            finals.append(state)
        x = outputs[0] if directions == 1 else mode.call(torch.cat, outputs, 2)
    return (mode.call(torch.transpose, x, 0, 1) if batch_first else x), finals


def lstm(mode, input: Tensor, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first=False):
    r"""``torch.lstm`` on padded input ``[T, B, F]`` (``[B, T, F]`` with
    ``batch_first``): :func:`lstm_cell` over time, per layer and direction.
    Returns ``(output, h_n, c_n)``. ``PackedSequence`` input (whose second
    argument is ``batch_sizes``), ``proj_size`` and training mode are not
    covered."""
    if not isinstance(has_biases, bool):  # torch's packed form: (data, batch_sizes, ...)
        return mode.refuse("on a PackedSequence (pad it first: torch.nn.utils.rnn.pad_packed_sequence)")
    if train:
        return mode.refuse("with dropout in training mode")
    h0, c0 = hx
    states = list(zip(mode.call(torch.unbind, h0, 0), mode.call(torch.unbind, c0, 0)))
    out = _layers(mode, lstm_cell, input, states, params, has_biases, num_layers, bidirectional, batch_first)
    if out is NotImplemented:
        return out
    output, finals = out
    return (output, mode.call(torch.stack, [h for h, _ in finals], 0),
            mode.call(torch.stack, [c for _, c in finals], 0))


def gru(mode, input: Tensor, hx: Tensor, params, has_biases, num_layers, dropout, train, bidirectional,
        batch_first=False):
    r"""``torch.gru`` on padded input: :func:`gru_cell` over time, per layer
    and direction. Returns ``(output, h_n)``; not covered as for :func:`lstm`."""
    if not isinstance(has_biases, bool):  # torch's packed form: (data, batch_sizes, ...)
        return mode.refuse("on a PackedSequence (pad it first: torch.nn.utils.rnn.pad_packed_sequence)")
    if train:
        return mode.refuse("with dropout in training mode")
    states = list(mode.call(torch.unbind, hx, 0))
    out = _layers(mode, gru_cell, input, states, params, has_biases, num_layers, bidirectional, batch_first)
    if out is NotImplemented:
        return out
    output, finals = out
    return output, mode.call(torch.stack, finals, 0)


#: Handlers by the short op name the mode sees (``torch._VF.lstm`` is ``lstm``).
RECURRENT_HANDLERS: dict[str, Callable] = {
    "lstm_cell": lstm_cell, "gru_cell": gru_cell, "lstm": lstm, "gru": gru,
}
