r"""Multi-head attention in the relevance pass: frozen weights times values.

``torch.nn.MultiheadAttention`` runs one fused op,
``F.multi_head_attention_forward``. In the pass it is run as

.. math::

    \mathrm{out} = \Big[\,A_h\, (V W_V^{h} + b_V^{h})\,\Big]_{h} W_O + b_O,
    \qquad A_h = \mathrm{softmax}\big(Q_h K_h^\top / \sqrt{d}\big)

with the attention weights :math:`A_h` computed from the values of query and
key and held constant: the convention of the attention layers of this package
(GAT, Transformer) and of AttnLRP (Achtibat et al., ICML 2024), where the
softmax is a gate. What remains is one linear map from ``value`` to the
output, so every rule acts on it: :math:`W_V` and :math:`W_O` are the weights
the rule modifies, the biases absorb relevance. Query and key receive
relevance only through ``value`` when they are the same tensor (self-attention,
as in GraphGPS).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["ATTENTION_HANDLERS"]


def _multi_head_attention(mode, query, key, value, embed_dim_to_check, num_heads, in_proj_weight, in_proj_bias,
                          bias_k, bias_v, add_zero_attn, dropout_p, out_proj_weight, out_proj_bias, training=True,
                          key_padding_mask=None, need_weights=True, attn_mask=None,
                          use_separate_proj_weight=False, q_proj_weight=None, k_proj_weight=None,
                          v_proj_weight=None, static_k=None, static_v=None, average_attn_weights=True,
                          is_causal=False):
    if bias_k is not None or bias_v is not None:
        return mode.refuse("with add_bias_kv=True (learned key and value rows)")
    if add_zero_attn:
        return mode.refuse("with add_zero_attn=True (a zero key and value row)")
    if static_k is not None or static_v is not None:
        return mode.refuse("with static_k / static_v")
    if training and dropout_p > 0:
        return mode.refuse("with dropout in training mode")
    # the weights A_h from the values (no relevance): the op itself, per head
    _, weights = F.multi_head_attention_forward(
        query.detach(), key.detach(), value.detach(), embed_dim_to_check, num_heads, in_proj_weight,
        in_proj_bias, None, None, False, 0.0, out_proj_weight, out_proj_bias, training=False,
        key_padding_mask=key_padding_mask, need_weights=True, attn_mask=attn_mask,
        use_separate_proj_weight=use_separate_proj_weight, q_proj_weight=q_proj_weight,
        k_proj_weight=k_proj_weight, v_proj_weight=v_proj_weight, average_attn_weights=False,
        is_causal=is_causal)
    batched = query.dim() == 3
    if not batched:
        value = mode.call(torch.unsqueeze, value, 1)
        weights = weights.unsqueeze(0)
    # the width of the attention is embed_dim; the values may be narrower or wider (vdim)
    length, (sources, batch), embed = query.shape[0], value.shape[:2], embed_dim_to_check
    head = embed // num_heads
    if use_separate_proj_weight:
        w_v = v_proj_weight
    else:
        w_v = in_proj_weight[2 * embed:]
    b_v = None if in_proj_bias is None else in_proj_bias[2 * embed:]
    v = mode.call(F.linear, value, w_v, b_v)  # [S, N, E]
    v = mode.call(torch.transpose, mode.call(torch.reshape, v, (sources, batch * num_heads, head)), 0, 1)
    attention = weights.reshape(batch * num_heads, length, sources).to(v.dtype)
    out = mode.call(torch.bmm, attention, v)  # [N H, L, d]: linear in v, A a gate
    out = mode.call(torch.reshape, mode.call(torch.transpose, out, 0, 1), (length, batch, embed))
    out = mode.call(F.linear, out, out_proj_weight, out_proj_bias)
    if not batched:
        out = mode.call(torch.squeeze, out, 1)
        weights = weights.squeeze(0)
    if not need_weights:
        return out, None
    return out, weights.mean(dim=-3) if average_attn_weights else weights


ATTENTION_HANDLERS = {"multi_head_attention_forward": _multi_head_attention}
