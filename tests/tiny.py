"""The tiny in-process model every engine/scorer/recipe test builds (STYLE: vocab 64, hidden 64, 2 layers).

model = tiny_llama()                      # head_dim 32, random init, eval mode
model = tiny_llama(eos_bias=4.0)          # an lm_head bias that makes EOS likely (finishes, padding)
"""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM

VOCAB, EOS, PAD = 64, 2, 0


def tiny_llama(
    seed: int = 0,
    *,
    dtype: torch.dtype = torch.float32,
    tie: bool = False,
    eos_bias: float = 0.0,
    initializer_range: float = 0.02,  # 0.2: peaked next-token distributions, so perturbations move them measurably
    max_position_embeddings: int = 512,
) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=tie,
        initializer_range=initializer_range,
    )
    model = LlamaForCausalLM(cfg).to(dtype).eval()
    if eos_bias:
        head = torch.nn.Linear(64, VOCAB, bias=True, dtype=dtype)
        with torch.no_grad():
            head.weight.copy_(model.lm_head.weight)
            head.bias.zero_()
            head.bias[EOS] = eos_bias
        model.lm_head = head
    return model
