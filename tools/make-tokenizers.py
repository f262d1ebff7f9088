#!/usr/bin/env python3
"""Trains the four small tokenizer fixtures of tests/fixtures/tokenizers with Hugging Face
`tokenizers` (deterministic: same data, same library version -> same files).

usage: .venv/bin/python tools/make-tokenizers.py [--data ../shared/data]
                                                 [--out tests/fixtures/tokenizers]

Each is an 8192-token BPE trained on the texts of alpaca_en_demo.json, v1_sft_demo.jsonl,
c4_demo.jsonl and wiki_demo.txt, with the pipeline of one model family:
  llama3         ByteLevel BPE, Llama 3's split regex, ignore_merges, <|begin_of_text|> ... specials
  qwen2          NFC, Qwen2's split regex, <|endoftext|> <|im_start|> <|im_end|>
  gpt2           ByteLevel with GPT-2's built-in regex, <|endoftext|>
  sentencepiece  Llama 2 / Mistral style: <unk> <s> </s>, <0x00>..<0xFF>, byte_fallback, fuse_unk,
                 the legacy Prepend/Replace normalizer, the Replace/ByteFallback/Fuse/Strip decoder
Writes <out>/<name>/tokenizer.json and tokenizer_config.json (bos/eos/pad as the family sets them).
"""
import argparse
import collections
import json
import os

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from tokenizers.trainers import BpeTrainer

VOCAB = 8192
LLAMA3_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
             r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
            r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def corpus(data):
    """The training texts: every text field of the four training datasets, in file order."""
    texts = []
    for rec in json.load(open(os.path.join(data, "alpaca_en_demo.json"), encoding="utf-8")):
        texts += [rec[k] for k in ("instruction", "input", "output") if rec.get(k)]
    for line in open(os.path.join(data, "v1_sft_demo.jsonl"), encoding="utf-8"):
        for msg in json.loads(line)["messages"]:
            texts += [c["value"] for c in msg["content"] if c.get("type") == "text"]
    for line in open(os.path.join(data, "c4_demo.jsonl"), encoding="utf-8"):
        texts.append(json.loads(line)["text"])
    texts += [l.rstrip("\n") for l in open(os.path.join(data, "wiki_demo.txt"), encoding="utf-8")]
    return texts


def byte_level(texts, specials, split_re=None, normalizer=None, ignore_merges=False):
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    if normalizer:
        tok.normalizer = normalizer
    if split_re:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(split_re), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    else:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = BpeTrainer(vocab_size=VOCAB - len(specials), min_frequency=2, show_progress=False,
                         initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    tok.add_special_tokens(specials)  # after training: their ids follow the vocab, as in Llama 3
    return tok


def sentencepiece(texts):
    """Llama 2 / Mistral: train words with Metaspace, then rebuild the vocab with <unk> <s> </s>
    and the 256 byte tokens first (plain vocab entries, not added tokens)."""
    head = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    trainer_tok = Tokenizer(models.BPE())
    trainer_tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always",
                                                         split=True)
    # The 300 most frequent characters only, so byte fallback has work to do (SentencePiece's
    # character_coverage does the same). Chosen here, ties by code point: the trainer's own
    # limit_alphabet breaks ties in hash order.
    counts = collections.Counter(c for t in texts for c in t.replace(" ", "▁"))
    alphabet = sorted(counts, key=lambda c: (-counts[c], c))[:300]
    trainer = BpeTrainer(vocab_size=VOCAB - len(head), min_frequency=2, show_progress=False,
                         initial_alphabet=alphabet, limit_alphabet=len(alphabet))
    trainer_tok.train_from_iterator(texts, trainer)
    trained = json.loads(trainer_tok.to_str())["model"]
    vocab = {t: i for i, t in enumerate(head)}
    for t, i in sorted(trained["vocab"].items(), key=lambda kv: kv[1]):
        vocab[t] = len(head) + i
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in trained["merges"]]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", fuse_unk=True,
                               byte_fallback=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"),
                                           normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    tok.add_special_tokens(["<unk>", "<s>", "</s>"])
    return tok


def with_bos(tok, bos):
    bos_id = tok.token_to_id(bos)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, bos_id)])


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=os.path.join(here, "..", "..", "shared", "data"))
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "fixtures", "tokenizers"))
    args = ap.parse_args()
    texts = corpus(args.data)

    l3 = byte_level(texts, ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                            "<|end_header_id|>", "<|eot_id|>"], LLAMA3_RE, ignore_merges=True)
    with_bos(l3, "<|begin_of_text|>")
    qwen = byte_level(texts, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], QWEN2_RE,
                      normalizers.NFC())
    qwen.post_processor = processors.ByteLevel(trim_offsets=False)
    gpt2 = byte_level(texts, ["<|endoftext|>"])
    gpt2.post_processor = processors.ByteLevel(trim_offsets=False)
    sp = sentencepiece(texts)
    with_bos(sp, "<s>")

    # bos/eos/pad as the base models set them (Meta-Llama-3-8B, Qwen2-7B, gpt2, Llama-2-7b);
    # sentencepiece uses the {"content": ...} object form that older configs have.
    def obj(s):
        return {"__type": "AddedToken", "content": s, "lstrip": False, "normalized": False,
                "rstrip": False, "single_word": False}
    configs = {
        "llama3": (l3, {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"}),
        "qwen2": (qwen, {"bos_token": None, "eos_token": "<|endoftext|>",
                         "pad_token": "<|endoftext|>"}),
        "gpt2": (gpt2, {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>",
                        "unk_token": "<|endoftext|>"}),
        "sentencepiece": (sp, {"bos_token": obj("<s>"), "eos_token": obj("</s>"),
                               "unk_token": obj("<unk>"), "pad_token": None}),
    }
    for name, (tok, cfg) in configs.items():
        folder = os.path.join(args.out, name)
        os.makedirs(folder, exist_ok=True)
        tok.save(os.path.join(folder, "tokenizer.json"), pretty=False)
        cfg = dict(cfg, tokenizer_class="PreTrainedTokenizerFast", model_max_length=4096,
                   clean_up_tokenization_spaces=False)
        with open(os.path.join(folder, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(cfg, f, indent=2, ensure_ascii=False)
            f.write("\n")
        size = os.path.getsize(os.path.join(folder, "tokenizer.json"))
        print(f"{name}: vocab {tok.get_vocab_size()}, tokenizer.json {size // 1024} KiB")


if __name__ == "__main__":
    main()
