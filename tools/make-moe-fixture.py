#!/usr/bin/env python3
"""Writes the mixture-of-experts fixtures that tests/unit/test_moe_vs_transformers.cpp compares
lftrain's MoE families against: tiny Qwen3-MoE, Qwen2-MoE and Mixtral models made by
transformers 5 (.venv), float32 on the CPU, seeded random weights, the experts computed by
transformers' "eager" experts loop (the textbook one).

For each fixture, tests/fixtures/<name>/ gets
  config.json, model.safetensors   model.save_pretrained(...): the Hub layout, one tensor per
                                   expert (transformers 5 converts its fused experts back on save)
  fused.safetensors                the same weights in transformers 5's in-memory layout
                                   (<block>.experts.gate_up_proj [E, 2I, H], .down_proj [E, H, I])
  io.safetensors                   input_ids [2, 9] (row 1 ends in 3 pads), logits [2, 9, vocab],
                                   loss (the summed next-token cross-entropy of the unpadded
                                   targets), aux_loss (load_balancing_loss_func over the router
                                   logits of every MoE layer, padding masked out), and grad.<name>
                                   of loss + router_aux_loss_coef * aux_loss for every parameter
                                   in the Hub layout
The configs make each feature matter: qwen3-moe-tiny renormalises its top-2 of 4 experts;
qwen2-moe-tiny has a shared expert with its sigmoid gate, and layer 1 dense (mlp_only_layers);
mixtral-tiny uses Mixtral's names (block_sparse_moe, w1/w2/w3) and a sliding window of 4.
  .venv/bin/python tools/make-moe-fixture.py [output_root [name ...]]
"""
import json
import os
import sys

import torch
from safetensors.torch import load_file, save_file
from transformers import (MixtralConfig, MixtralForCausalLM, Qwen2MoeConfig, Qwen2MoeForCausalLM,
                          Qwen3MoeConfig, Qwen3MoeForCausalLM)
from transformers.models.qwen3_moe.modeling_qwen3_moe import load_balancing_loss_func

PAD_ID = 0
COEF = 0.5  # large beside the summed cross-entropy (~40), so that the aux gradient shows

COMMON = dict(vocab_size=61, hidden_size=32, intermediate_size=28, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-6,
              hidden_act="silu", pad_token_id=PAD_ID, bos_token_id=1, eos_token_id=2,
              num_hidden_layers=2, tie_word_embeddings=False, output_router_logits=True,
              router_aux_loss_coef=COEF)

FIXTURES = {
    "qwen3-moe-tiny": (Qwen3MoeForCausalLM, lambda: Qwen3MoeConfig(
        **COMMON, head_dim=16, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=12,
        norm_topk_prob=True, rope_theta=1000000.0)),
    "qwen2-moe-tiny": (Qwen2MoeForCausalLM, lambda: Qwen2MoeConfig(
        **COMMON, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=12,
        shared_expert_intermediate_size=20, norm_topk_prob=False, mlp_only_layers=[1],
        rope_theta=1000000.0)),
    "mixtral-tiny": (MixtralForCausalLM, lambda: MixtralConfig(
        **{**COMMON, "intermediate_size": 12}, num_local_experts=4, num_experts_per_tok=2,
        sliding_window=4, rope_theta=1000000.0)),
}


def randomize(model, seed):
    """O(1) activations: matrices ~ N(0, 1/fan_in) (fan_in the last dim, experts' 3-d tensors
    included), embeddings ~ N(0, 0.09), norm weights ~ 1 + N(0, 0.2), biases ~ N(0, 0.1)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * noise)
            elif name.endswith(".bias"):
                p.copy_(0.1 * noise)
            elif "embed_tokens" in name:
                p.copy_(0.3 * noise)
            else:
                p.copy_(noise / p.shape[-1] ** 0.5)


def make(name, root, seed):
    cls, make_config = FIXTURES[name]
    config = make_config()
    config._attn_implementation = "eager"
    config._experts_implementation = "eager"
    torch.manual_seed(seed)
    model = cls(config).to(torch.float32).eval()
    randomize(model, seed)

    gen = torch.Generator().manual_seed(seed + 1)
    ids = torch.randint(3, config.vocab_size, (2, 9), generator=gen, dtype=torch.int64)
    ids[1, 6:] = PAD_ID
    mask = (ids != PAD_ID).long()
    out = model(input_ids=ids, output_router_logits=True)
    logits = out.logits
    targets = ids[:, 1:]
    ce = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, config.vocab_size), targets.reshape(-1),
                                           reduction="none").view_as(targets)
    loss = (ce * (targets != PAD_ID)).sum()
    experts = getattr(config, "num_experts", None) or config.num_local_experts
    aux = load_balancing_loss_func(out.router_logits, experts, config.num_experts_per_tok, mask)
    model.zero_grad()
    (loss + COEF * aux).backward()

    dest = os.path.join(root, name)
    os.makedirs(dest, exist_ok=True)
    model.save_pretrained(dest)
    gen_config = os.path.join(dest, "generation_config.json")
    if os.path.exists(gen_config):
        os.remove(gen_config)
    saved = load_file(os.path.join(dest, "model.safetensors"))
    assert any(".experts.0." in k for k in saved), "transformers saved no per-expert tensors"
    # transformers' in-memory (fused) layout of the same weights, and the gradients in the Hub
    # layout (split the fused gradients as save_pretrained splits the weights).
    fused = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    save_file(fused, os.path.join(dest, "fused.safetensors"))
    io = {"input_ids": ids.contiguous(), "logits": logits.detach().contiguous(),
          "loss": loss.detach().reshape([]).contiguous(), "aux_loss": aux.detach().reshape([]).contiguous()}
    grads = dict(model.named_parameters())
    for key in saved:
        io["grad." + key] = hub_gradient(key, grads, config).contiguous()
    save_file(io, os.path.join(dest, "io.safetensors"), metadata={"pad_id": str(PAD_ID)})
    print(f"{dest}: {sum(p.numel() for p in model.parameters())} parameters, loss {loss.item():.6f}, "
          f"aux {aux.item():.6f}")


def hub_gradient(key, grads, config):
    """The gradient of Hub tensor `key` from the model's (possibly fused) parameters."""
    if key in grads:
        return grads[key].grad.detach()
    mixtral = ".block_sparse_moe." in key
    memory = key.replace(".block_sparse_moe.", ".mlp.")
    if memory in grads:  # Mixtral's router
        return grads[memory].grad.detach()
    prefix, rest = memory.split(".experts.")
    expert, proj, _ = rest.split(".")
    e = int(expert)
    if mixtral:
        proj = {"w1": "gate_proj", "w3": "up_proj", "w2": "down_proj"}[proj]
    if proj == "down_proj":
        return grads[prefix + ".experts.down_proj"].grad[e].detach()
    gate_up = grads[prefix + ".experts.gate_up_proj"].grad[e].detach()
    half = gate_up.shape[0] // 2
    return gate_up[:half] if proj == "gate_proj" else gate_up[half:]


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures")
    names = sys.argv[2:] or list(FIXTURES)
    for i, name in enumerate(FIXTURES):
        if name in names:
            make(name, root, 2000 + 10 * i)


if __name__ == "__main__":
    main()
