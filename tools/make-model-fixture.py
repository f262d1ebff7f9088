#!/usr/bin/env python3
"""Writes the reference fixtures that tests/unit/test_model_vs_transformers.cpp compares the C++
Llama against: tiny Hugging Face models built with `transformers` (tools/install-python-env),
float32 on the CPU, with seeded random weights.

For each fixture, tests/fixtures/<name>/ gets
  config.json, model.safetensors   model.save_pretrained(...)
  io.safetensors                   input_ids [2, 9] (int64), logits [2, 9, vocab] (float32),
                                   loss (float32 scalar), and grad.<hf name> for every parameter
where loss = sum over rows b and positions t < 8 whose target input_ids[b, t+1] != pad_id of the
cross-entropy of logits[b, t] against input_ids[b, t+1] (the pad id is in the metadata; the
second row ends in padding so the mask is exercised). mistral-tiny has sliding-window attention
with a window (4) shorter than the 9 tokens, and the script checks that the window changes the
logits (the eager reference honours it). qwen3-tiny has an explicit head_dim (16) that differs
from hidden_size / num_attention_heads (8), and per-head RMSNorms on the queries and keys
(self_attn.q_norm.weight, self_attn.k_norm.weight [head_dim]). tests/fixtures/rope-llama3/
holds a Llama 3.1 style RoPE-scaling config and transformers' rotary tables for it (no weights).

Deterministic: run it again and the files are the same (same machine and torch version). On
another machine or torch build, logits and gradients can differ in the last bits (~1e-6), so
io.safetensors of untouched fixtures would change: name the fixtures to (re)write, and only
those are written (each keeps its seed, which depends on its place in FIXTURES, not on the
selection).
  .venv/bin/python tools/make-model-fixture.py [output_root [name ...]]
      output_root  default tests/fixtures
      name         llama-tiny, llama-tiny-tied, qwen2-tiny, mistral-tiny, qwen3-tiny, gemma2-tiny,
                   gemma-tiny, rope-llama3;
                   default all of them
  e.g. .venv/bin/python tools/make-model-fixture.py tests/fixtures qwen3-tiny
"""
import json
import os
import sys

import torch
from safetensors.torch import save_file
from transformers import (Gemma2Config, Gemma2ForCausalLM, GemmaConfig, GemmaForCausalLM,
                          LlamaConfig, LlamaForCausalLM,
                          MistralConfig, MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM,
                          Qwen3Config, Qwen3ForCausalLM)

PAD_ID = 0

# Small enough that the five fixtures together stay under 650 KB, large enough to exercise
# grouped-query attention (4 query heads sharing 2 key/value heads, head_dim 8 unless set).
COMMON = dict(vocab_size=61, hidden_size=32, intermediate_size=28, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-6,
              hidden_act="silu", pad_token_id=PAD_ID, bos_token_id=1, eos_token_id=2)

FIXTURES = {
    # name: (model class, config)
    "llama-tiny": (LlamaForCausalLM, lambda: LlamaConfig(
        **COMMON, num_hidden_layers=2, rope_theta=10000.0, tie_word_embeddings=False)),
    "llama-tiny-tied": (LlamaForCausalLM, lambda: LlamaConfig(
        **COMMON, num_hidden_layers=1, rope_theta=500000.0, tie_word_embeddings=True)),
    "qwen2-tiny": (Qwen2ForCausalLM, lambda: Qwen2Config(
        **COMMON, num_hidden_layers=1, rope_theta=1000000.0, tie_word_embeddings=True,
        use_sliding_window=False)),
    # Every layer attends to the 4 most recent positions only (itself and the 3 before it).
    "mistral-tiny": (MistralForCausalLM, lambda: MistralConfig(
        **COMMON, num_hidden_layers=2, rope_theta=10000.0, tie_word_embeddings=False,
        sliding_window=4)),
    # head_dim 16 != hidden_size / num_attention_heads (8): q/o projections are 64 wide, not 32.
    # Qwen3Config's head_dim defaults to 128, so it must be given. Listed last, so the seeds
    # (1000 + 10 * index) of the fixtures above stay as they were.
    "qwen3-tiny": (Qwen3ForCausalLM, lambda: Qwen3Config(
        **COMMON, head_dim=16, num_hidden_layers=2, rope_theta=1000000.0,
        tie_word_embeddings=False, attention_bias=False, use_sliding_window=False)),
    # Gemma2's hooks, each made to matter (make() checks that removing it changes the logits):
    # scores scaled by 1/sqrt(24) (not head_dim 16) and soft-capped at 2, final logits capped at 3,
    # layers 0 and 2 sliding (window 4 < 9 tokens), layer 1 full; GELU-tanh MLP; (1 + w) norms;
    # embeddings times sqrt(32); tied head.
    "gemma2-tiny": (Gemma2ForCausalLM, lambda: Gemma2Config(
        **{k: v for k, v in COMMON.items() if k != "hidden_act"}, hidden_activation="gelu_pytorch_tanh",
        head_dim=16, num_hidden_layers=3, query_pre_attn_scalar=24, attn_logit_softcapping=2.0,
        final_logit_softcapping=3.0, sliding_window=4, tie_word_embeddings=True)),
    # Gemma: Llama's block with Gemma's hooks (scaled embeddings, (1 + w) norms, GELU-tanh, tied
    # head); a family that is a spec only (src/model/gemma.cpp).
    "gemma-tiny": (GemmaForCausalLM, lambda: GemmaConfig(
        **{k: v for k, v in COMMON.items() if k != "hidden_act"}, hidden_act="gelu_pytorch_tanh",
        head_dim=16, num_hidden_layers=2, tie_word_embeddings=True)),
}

# What each fixture's special features are; make() checks that each changes the logits. name:
# [(feature, a change of the config that removes it)].
def _no_window(c):
    if getattr(c, "layer_types", None) and "sliding_attention" in c.layer_types:
        c.layer_types = ["full_attention"] * c.num_hidden_layers
    else:
        c.sliding_window = None


FEATURES = {
    "mistral-tiny": [("sliding_window", _no_window)],
    "gemma2-tiny": [("sliding_window", _no_window),
                    ("attn_logit_softcapping", lambda c: setattr(c, "attn_logit_softcapping", None)),
                    ("final_logit_softcapping", lambda c: setattr(c, "final_logit_softcapping", None)),
                    ("query_pre_attn_scalar", lambda c: setattr(c, "query_pre_attn_scalar", 16))],
}


def randomize(model, seed, norm_centre=1.0):
    """O(1) activations (not HF's 0.02 init), so that attention is far from uniform and every
    nonlinearity matters: linear weights ~ N(0, 1/fan_in), embeddings ~ N(0, 0.09), norm weights
    ~ norm_centre + N(0, 0.2), biases ~ N(0, 0.1). Norm weights are the parameters whose names
    end in "norm.weight": input_layernorm, post_attention_layernorm, model.norm, Qwen3's per-head
    self_attn.q_norm / self_attn.k_norm and Gemma2's pre_/post_feedforward_layernorm. Parameters are filled in name order from one generator."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if name.endswith("norm.weight"):
                p.copy_(norm_centre + 0.2 * noise)
            elif name.endswith(".bias"):
                p.copy_(0.1 * noise)
            elif "embed_tokens" in name:
                p.copy_(0.3 * noise)
            else:
                p.copy_(noise / p.shape[1] ** 0.5)


def input_batch(vocab, seed):
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (2, 9), generator=gen, dtype=torch.int64)
    ids[1, 6:] = PAD_ID  # right padding: the last three targets of row 1 are ignored
    return ids


def make(name, root, seed):
    cls, make_config = FIXTURES[name]
    config = make_config()
    config._attn_implementation = "eager"  # the textbook softmax(q k^T / sqrt(d)) path
    torch.manual_seed(seed)
    model = cls(config).to(torch.float32)
    model.eval()  # no dropout (attention_dropout is 0 anyway)
    # Gemma's norms scale by (1 + weight): weights around 0 are scales around 1.
    randomize(model, seed, norm_centre=0.0 if "gemma" in name else 1.0)

    ids = input_batch(config.vocab_size, seed + 1)
    logits = model(input_ids=ids).logits  # [2, 9, V]
    targets = ids[:, 1:]
    ce = torch.nn.functional.cross_entropy(
        logits[:, :-1].float().reshape(-1, config.vocab_size), targets.reshape(-1),
        reduction="none").view_as(targets)
    loss = (ce * (targets != PAD_ID)).sum()
    model.zero_grad()
    loss.backward()
    for feature, remove in FEATURES.get(name, []):
        # The feature must matter: the same weights without it give other logits.
        other_config = make_config()
        remove(other_config)
        other_config._attn_implementation = "eager"
        other = cls(other_config).to(torch.float32).eval()
        other.load_state_dict(model.state_dict())
        with torch.no_grad():
            other_logits = other(input_ids=ids).logits
        diff = (logits.detach() - other_logits).abs()
        if feature == "sliding_window":
            assert diff[:, :config.sliding_window].max() == 0, "window changed the first rows"
        assert diff.max() > 1e-2, f"{feature} changes nothing ({diff.max()})"
        print(f"{name}: without {feature}: logits max|diff| {diff.max().item():.3g}")

    out = os.path.join(root, name)
    os.makedirs(out, exist_ok=True)
    model.save_pretrained(out)  # config.json + model.safetensors (safetensors is the only format)
    for extra in ("generation_config.json",):
        path = os.path.join(out, extra)
        if os.path.exists(path):
            os.remove(path)
    io = {"input_ids": ids.contiguous(), "logits": logits.detach().contiguous(),
          "loss": loss.detach().reshape([]).contiguous()}
    for pname, p in model.named_parameters():
        io["grad." + pname] = p.grad.detach().contiguous()
    # One metadata key only: safetensors writes __metadata__ from a hash map, so with several
    # keys their order (and the file's bytes) would change from run to run.
    save_file(io, os.path.join(out, "io.safetensors"), metadata={"pad_id": str(PAD_ID)})
    size = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
    print(f"{out}: {sum(p.numel() for p in model.parameters())} parameters, "
          f"loss {loss.item():.6f}, {size} bytes")
    return size


def make_rope_llama3(root):
    """Llama 3.1's RoPE scaling (rope_type llama3) on a 64-wide head: config.json only, and
    rope.safetensors with transformers' inv_freq [32] and cos/sin [12, 64] for positions 0..11."""
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
    config = LlamaConfig(vocab_size=16, hidden_size=256, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=1,
                         max_position_embeddings=131072,
                         rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0,
                                          "factor": 8.0, "low_freq_factor": 1.0,
                                          "high_freq_factor": 4.0,
                                          "original_max_position_embeddings": 8192})
    out = os.path.join(root, "rope-llama3")
    os.makedirs(out, exist_ok=True)
    config.save_pretrained(out)
    rope = LlamaRotaryEmbedding(config)
    x = torch.zeros(1, 12, 64, dtype=torch.float32)
    cos, sin = rope(x, torch.arange(12).unsqueeze(0))
    save_file({"inv_freq": rope.inv_freq.contiguous(), "cos": cos[0].contiguous(),
               "sin": sin[0].contiguous()}, os.path.join(out, "rope.safetensors"))
    size = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
    print(f"{out}: {size} bytes")
    return size


def main(root="tests/fixtures", *names):
    known = [*FIXTURES, "rope-llama3"]
    unknown = [n for n in names if n not in known]
    if unknown:
        sys.exit(f"unknown fixture(s) {', '.join(unknown)}; known: {', '.join(known)}")
    selected = set(names or known)
    torch.use_deterministic_algorithms(True)
    total = 0
    for i, name in enumerate(FIXTURES):
        if name in selected:
            total += make(name, root, seed=1000 + 10 * i)
    if "rope-llama3" in selected:
        total += make_rope_llama3(root)
    print(f"total {total} bytes")


if __name__ == "__main__":
    main(*sys.argv[1:])
