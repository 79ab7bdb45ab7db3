"""Hugging Face transformer blocks at their published sizes, with random weights (no downloads), each called
on hidden states alone and returning its main output tensor: the blocks of bench/joint_scaling.py (where the
joint e-graph's scaling is judged) and of the GPU suite (bench/gpu/export_plans.py, where those plans are
exported and timed). transformers is imported only when a block is built, so the GPU machine runs the rest
of its suite without it (a block it cannot build is recorded as an error of that program).

Every builder takes its sizes as keyword arguments (defaults: the published model's), so the tests build the
same blocks tiny.
"""
from __future__ import annotations

import torch
import torch.nn as nn


def first_tensor(out) -> torch.Tensor:
    """A model's main output (logits or last hidden state), whatever structure holds it."""
    if isinstance(out, torch.Tensor):
        return out
    return out[0] if isinstance(out, (tuple, list)) else next(iter(out.values()))


class FirstOutput(nn.Module):
    """A layer called on hidden states alone, returning its main output tensor."""

    def __init__(self, layer: nn.Module):
        super().__init__()
        self.layer = layer

    def forward(self, x):
        return first_tensor(self.layer(x))


class LlamaLayer(nn.Module):
    """A LlamaDecoderLayer with the rotary tables its model would pass it (causal attention, no mask)."""

    def __init__(self, config):
        import transformers.models.llama.modeling_llama as llama
        super().__init__()
        self.layer = llama.LlamaDecoderLayer(config, layer_idx=0)
        self.rotary = llama.LlamaRotaryEmbedding(config)

    def forward(self, x):
        positions = torch.arange(x.shape[1], device=x.device)[None]
        return first_tensor(self.layer(x, position_ids=positions, position_embeddings=self.rotary(x, positions)))


def _bert_config(hidden: int, heads: int, ffn: int, layers: int = 1):
    import transformers as T
    return T.BertConfig(hidden_size=hidden, num_attention_heads=heads, intermediate_size=ffn,
                        num_hidden_layers=layers, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def bert_layer(hidden: int = 768, heads: int = 12, ffn: int = 3072) -> nn.Module:
    """One BertLayer of BERT-base."""
    from transformers.models.bert.modeling_bert import BertLayer
    return FirstOutput(BertLayer(_bert_config(hidden, heads, ffn)))


def bert_encoder(hidden: int = 768, heads: int = 12, ffn: int = 3072, layers: int = 12) -> nn.Module:
    """BERT-base's encoder: twelve layers (the repeated-block path)."""
    from transformers.models.bert.modeling_bert import BertEncoder
    return FirstOutput(BertEncoder(_bert_config(hidden, heads, ffn, layers)))


def gpt2_block(hidden: int = 768, heads: int = 12) -> nn.Module:
    """One GPT2Block of GPT-2 (small)."""
    import transformers as T
    cfg = T.GPT2Config(n_embd=hidden, n_head=heads, n_layer=1, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return FirstOutput(T.models.gpt2.modeling_gpt2.GPT2Block(cfg, layer_idx=0))


def llama_layer(hidden: int = 4096, heads: int = 32, kv_heads: int = 8, ffn: int = 11008,
                max_positions: int = 256) -> nn.Module:
    """A Llama-2-7B-wide decoder layer with grouped-query attention (8 key/value heads)."""
    import transformers as T
    cfg = T.LlamaConfig(hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=kv_heads,
                        intermediate_size=ffn, num_hidden_layers=1, max_position_embeddings=max_positions)
    return LlamaLayer(cfg)


def t5_block(hidden: int = 768, heads: int = 12, head_dim: int = 64, ffn: int = 3072) -> nn.Module:
    """The first T5Block of t5-base's encoder (with the relative attention bias)."""
    import transformers as T
    cfg = T.T5Config(d_model=hidden, d_kv=head_dim, d_ff=ffn, num_heads=heads, num_layers=1, dropout_rate=0.0)
    return FirstOutput(T.models.t5.modeling_t5.T5Block(cfg, has_relative_attention_bias=True, layer_idx=0))


def vit_layer(hidden: int = 768, heads: int = 12, ffn: int = 3072) -> nn.Module:
    """One ViTLayer of ViT-base."""
    import transformers as T
    cfg = T.ViTConfig(hidden_size=hidden, num_attention_heads=heads, intermediate_size=ffn, hidden_dropout_prob=0.0,
                      attention_probs_dropout_prob=0.0)
    return FirstOutput(T.models.vit.modeling_vit.ViTLayer(cfg))
