#!/usr/bin/env python3
"""Writes a tiny random Qwen3 model folder for the LlamaFactory v1 comparisons (v1_parity.sh).

  .venv-v1/bin/python tools/make-v1-fixture.py OUT_DIR [--seed 0] [--moe]

--moe: a Qwen3-MoE instead (moe_parity.sh): the same attention, 8 experts of width 32 per layer,
renormalised top-2, router weights ~ N(0, 1) / sqrt(64) so that routing is far from uniform.

float32, seeded (the same files every run on one machine and torch), 2 layers, hidden 64, 4 heads,
2 KV heads, head_dim 16, untied lm_head, vocab 8192 = the qwen2 tokenizer fixture's (8189 BPE
tokens + <|endoftext|> <|im_start|> <|im_end|>), whose tokenizer.json and tokenizer_config.json
are copied in. eos_token_id is <|im_end|> (as in Qwen3 chat models: the qwen3_nothink template
ends every turn with it); pad_token_id is <|endoftext|>, the tokenizer's pad token. v1 itself pads
input_ids with 0, so the pad id is never an input and its padding_idx (no embedding gradient)
does not matter.
"""
import argparse
import json
import os
import shutil
import sys

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM

TOKENIZER_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures",
                             "tokenizers", "qwen2")


def main(argv=None):
    """argv: the command line after the program's name (default sys.argv's); tests/e2e/tool_calls.py
    calls it in a process that makes the adapters too."""
    parser = argparse.ArgumentParser(prog="make-v1-fixture.py", description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--moe", action="store_true")
    args = parser.parse_args(argv)

    tok = json.load(open(os.path.join(TOKENIZER_DIR, "tokenizer.json")))
    special = {t["content"]: t["id"] for t in tok["added_tokens"]}
    vocab = max([*tok["model"]["vocab"].values(), *special.values()]) + 1
    assert vocab == 8192, vocab

    torch.manual_seed(args.seed)
    shape = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                 max_position_embeddings=1024, tie_word_embeddings=False,
                 bos_token_id=None, eos_token_id=special["<|im_end|>"],
                 pad_token_id=special["<|endoftext|>"])
    if args.moe:
        cfg = Qwen3MoeConfig(**shape, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                             norm_topk_prob=True)
        model = Qwen3MoeForCausalLM(cfg).to(torch.float32)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith("mlp.gate.weight"):
                    p.copy_(torch.randn(p.shape) / 8.0)
    else:
        cfg = Qwen3Config(**shape)
        model = Qwen3ForCausalLM(cfg).to(torch.float32)
    model.save_pretrained(args.out_dir)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(TOKENIZER_DIR, name), args.out_dir)
    print(f"make-v1-fixture: wrote {args.out_dir} ({sum(p.numel() for p in model.parameters())} "
          f"parameters, eos {cfg.eos_token_id}, pad {cfg.pad_token_id})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
