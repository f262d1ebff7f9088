#!/usr/bin/env python3
"""tokenizer_parity.py LFT_TOKENIZE [--sweep]: lft's HfTokenizer against Hugging Face `tokenizers`.

For every fixture tokenizer in tests/fixtures/tokenizers (and variants written to a temporary
folder: the Metaspace pre-tokenizer forms of the SentencePiece one; a Llama 3 one with NFKC, a regex
Replace and every Split behavior; a GPT-2 one with legacy "a b" merges, add_prefix_space and
lstrip/rstrip/single_word/normalized added tokens), encodes
  - every string field of every record of every ../shared/data dataset (LFT_SHARED_DATA overrides),
  - adversarial strings (NFD text, CR/LF runs, emoji and ZWJ sequences, digit runs, special-token
    look-alikes, odd white space, mixed scripts),
  - with --sweep, instead: every code point of planes 0-3 and 14 in a few contexts (the four
    fixtures only: their regexes, NFC and byte fallback),
with both (add_special_tokens=False; lft_tokenize adds none) and requires identical ids and
identical decode(ids, skip_special_tokens=True). Prints counts per tokenizer, the first mismatch,
and single-thread throughput (tokens/s) of both.
Exit status 0 when all agree, 1 otherwise, 77 (skip) when `tokenizers` is not installed.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# One thread for the library, as for lft (set before `tokenizers` is imported).
os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
try:
    import tokenizers
    from tokenizers import AddedToken, Tokenizer
except ImportError:
    venv = os.path.join(ROOT, ".venv", "bin", "python")
    in_venv = os.path.realpath(sys.prefix) == os.path.realpath(os.path.join(ROOT, ".venv"))
    if os.path.exists(venv) and not in_venv:
        os.execv(venv, [venv] + sys.argv)
    print("tokenizer_parity: FAIL: the tokenizers package is not installed; run tools/install-python-env "
          "(make test does)")
    sys.exit(1)


def data_dir():
    for d in (os.environ.get("LFT_SHARED_DATA"), os.path.join(ROOT, "..", "shared", "data"),
              "/work/shared/data"):
        if d and os.path.exists(os.path.join(d, "c4_demo.jsonl")):
            return d
    return None


def strings_of(value, out):
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, dict):
        for v in value.values():
            strings_of(v, out)
    elif isinstance(value, list):
        for v in value:
            strings_of(v, out)


def dataset_texts(d):
    """{file: [every string field of every record]} (a .txt file: its lines)."""
    sets = {}
    for name in sorted(os.listdir(d)):
        path = os.path.join(d, name)
        out = []
        if name.endswith(".json"):
            with open(path, encoding="utf-8") as f:
                strings_of(json.load(f), out)
        elif name.endswith(".jsonl"):
            with open(path, encoding="utf-8") as f:
                for line in f:
                    strings_of(json.loads(line), out)
        elif name.endswith(".txt"):
            with open(path, encoding="utf-8") as f:
                out = [line.rstrip("\n") for line in f]
        else:
            continue
        sets[name] = out
    return sets


ADVERSARIAL = [
    "", " ", "  ", "\t", "\n", "\r\n", "\r\n\r\n\n", "\n\n\n\n", " \n  x", "x\r\n\r\ny",
    "a\rb\r\r", "e\u0301", "e\u0301\u0302 cafe\u0301", "\u1100\u1161\u11a8", "A\u030a\u0323",
    "\u212b \u2126", "Hello\u00a0world\u2003x\u3000y\u180ez\u200bw\ufeffv\u0085u\u2028t",
    "\U0001F600\U0001F601 \U0001F44D\U0001F3FD", "\U0001F468\u200d\U0001F469\u200d\U0001F467",
    "\U0001F3F3\ufe0f\u200d\U0001F308", "\U00020000\U0002A6D6 \U0001D400\U0001D7D8", "\U000E0041",
    "1234567890" * 20, " 123 12345", "\u00b2\u00bd\u2167 \u0661\u0662", "3.14159, 2,718 -1e-9",
    # special-token look-alikes and real ones inside text
    "<|eot_id|", "<|eot_id|>", "<|eot_id|><|eot_id|>x", "<|im_start|>x",
    "<|im_start|>user\nhi<|im_end|>\n",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
    "<s>", "a <s> b", "</s></s>", "<unk>", "<s >", "<<s>>", "<|endoftext|>", "x<|endoftext|>y",
    "<|endoftext|", "< s>", "[INST] hi [/INST]",
    # the gpt2-variant's lstrip/rstrip, single_word and normalized added tokens
    "<|user|>hello <|user|> x", "x  <|user|>  y\n<|user|>\t", "[WORD] [WORD]x x[WORD] ([WORD])",
    "hello hello", "\u0120 \u2581 \u2581\u2581x",
    "  leading", "trailing  ", "  both  ", "\ttab\tbed\t",
    "I'M WE'LL you're 'sup it\u2019s 'S '\u017f",
    "don't", "\u017f \u212a",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0915\u094d\u0937\u0924\u094d\u0930\u093f\u092f",
    "\u4f60\u597d\u4e16\u754c\uff0c\u6d4b\u8bd5\u3002",
    "\u3053\u3093\u306b\u3061\u306f \u30ab\u30bf\u30ab\u30ca",
    "\u0645\u0631\u062d\u0628\u0627 \u05e9\u05dc\u05d5\u05dd",
    "\u041f\u0440\u0438\u0432\u0435\u0442 \u043c\u0438\u0440",
    "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35",
    "mixed English \u4e2d\u6587 \u0440\u0443\u0441 \u0627\u0644\u0639 123",
    "\ufffd", "a\ufffdb", "\u0000nul\u0001\u001f\u007f", "\u00ad soft\u00adhyphen",
    "\ufb01 \ufb03 \u2460", "!!!???...", "hello!!!\n\nnext",
    "def f(x):\n    return x  # ok\n\n\tpass", "https://example.com/a?b=c&d=e#f",
    "email@example.com", "$100.00 and 50% off",
]


def sweep():
    """Every code point of planes 0-3 and 14 (but surrogates), 256 per string, in contexts that
    exercise the regex classes, case folding and composition."""
    cps = [c for c in range(0x40000) if not 0xD800 <= c <= 0xDFFF] + list(range(0xE0000, 0xE1000))
    out = []
    for i in range(0, len(cps), 256):
        out.append("".join(f"{c}a{c} {c}'{c}e{c}1\n" for c in map(chr, cps[i:i + 256])))
    return out


def write_json(tokenizer, folder):
    os.makedirs(folder)
    with open(os.path.join(folder, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer, f)


def variants(tmp):
    """Tokenizer folders written at test time to cover the pipeline forms the fixtures lack."""
    fixtures = os.path.join(ROOT, "tests", "fixtures", "tokenizers")
    out = []
    with open(os.path.join(fixtures, "sentencepiece", "tokenizer.json"), encoding="utf-8") as f:
        sp = json.load(f)
    sp["normalizer"] = None
    sp["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first",
                           "split": False}
    folder = os.path.join(tmp, "sentencepiece-metaspace")
    write_json(sp, folder)
    out.append(folder)

    sp["pre_tokenizer"]["split"] = True
    sp["pre_tokenizer"]["prepend_scheme"] = "always"
    sp["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "ByteFallback"}, {"type": "Metaspace", "replacement": "\u2581",
                                   "prepend_scheme": "always", "split": True}]}
    folder = os.path.join(tmp, "sentencepiece-metaspace-split")
    write_json(sp, folder)
    out.append(folder)

    # Every Split behavior, invert, a regex Replace and NFKC in one (odd) pipeline.
    with open(os.path.join(fixtures, "llama3", "tokenizer.json"), encoding="utf-8") as f:
        l3 = json.load(f)
    l3["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "NFKC"}, {"type": "Replace", "pattern": {"Regex": r" {2,}"}, "content": "\t"}]}
    split_steps = [(r"\s+", "MergedWithPrevious", False), (r"\p{N}", "Contiguous", False),
                   (r"[aeiou]", "MergedWithNext", True), (r"[.,;]", "Removed", False)]
    l3["pre_tokenizer"]["pretokenizers"][1:1] = [
        {"type": "Split", "pattern": {"Regex": r}, "behavior": b, "invert": i}
        for r, b, i in split_steps]
    l3["pre_tokenizer"]["pretokenizers"].insert(1, {
        "type": "Split", "pattern": {"String": "th"}, "behavior": "Isolated", "invert": False})
    folder = os.path.join(tmp, "llama3-stages")
    write_json(l3, folder)
    out.append(folder)

    tok = Tokenizer.from_file(os.path.join(fixtures, "gpt2", "tokenizer.json"))
    tok.add_tokens([
        AddedToken("<|user|>", lstrip=True, rstrip=True, special=False, normalized=False),
        AddedToken("[WORD]", single_word=True, special=False, normalized=True),
        AddedToken("hello hello", special=False, normalized=True)])
    g = json.loads(tok.to_str())
    g["pre_tokenizer"]["add_prefix_space"] = True
    g["model"]["merges"] = [" ".join(m) for m in g["model"]["merges"]]
    folder = os.path.join(tmp, "gpt2-variant")
    write_json(g, folder)
    out.append(folder)
    return out


def run_hf(tok, texts):
    """ids, decoded texts, tokens, seconds of encoding (one thread; encode_batch_fast skips the
    offsets, which lft does not compute either)."""
    encode = getattr(tok, "encode_batch_fast", tok.encode_batch)
    t0 = time.perf_counter()
    encs = encode(texts, add_special_tokens=False)
    seconds = time.perf_counter() - t0
    ids = [e.ids for e in encs]
    return ids, tok.decode_batch(ids, skip_special_tokens=True), [e.tokens for e in encs], seconds


def run_lft(exe, folder, texts, tmp, repeat=0):
    """ids, decoded texts, seconds of the first pass, seconds of the best warm pass."""
    path = os.path.join(tmp, "strings.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps(t) + "\n")
    p = subprocess.run([exe, folder, path, "--repeat", str(repeat)], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"tokenizer_parity: lft_tokenize failed on {folder}:\n{p.stderr}")
    records = [json.loads(l) for l in p.stdout.split("\n") if l]  # not splitlines: U+2028
    words = p.stderr.replace(",", " ").split()  # "... first pass X s, best of N warm passes Y s"
    first = float(words[words.index("pass") + 1])
    warm = float(words[words.index("passes") + 1]) if repeat else first
    return [r["ids"] for r in records], [r["decoded"] for r in records], first, warm


def compare(name, texts, owner, hf, lft):
    """Prints the counts and the first mismatch of ids and of decoded texts; True when all agree."""
    hf_ids, hf_text, hf_tokens = hf
    lft_ids, lft_text = lft
    bad_ids = [i for i in range(len(texts)) if hf_ids[i] != lft_ids[i]]
    bad_text = [i for i in range(len(texts)) if hf_text[i] != lft_text[i]]
    print(f"{name:29s} ids equal {len(texts) - len(bad_ids)}/{len(texts)}, decode equal "
          f"{len(texts) - len(bad_text)}/{len(texts)} ({sum(map(len, hf_ids))} tokens)", flush=True)
    for kind, bad, a, b in (("ids", bad_ids, hf_ids, lft_ids),
                            ("decode", bad_text, hf_text, lft_text)):
        if bad:
            i = bad[0]
            print(f"  {len(bad)} {kind} mismatches; first: {owner[i]} string {i}: "
                  f"{texts[i][:200]!r}\n"
                  f"    HF  {a[i][:60] if kind == 'ids' else a[i][:200]!r}\n"
                  f"    lft {b[i][:60] if kind == 'ids' else b[i][:200]!r}")
            if kind == "ids":
                print(f"    HF tokens {hf_tokens[i][:60]}")
    return not bad_ids and not bad_text


def main():
    if len(sys.argv) < 2 or sys.argv[2:] not in ([], ["--sweep"]):
        sys.exit("usage: tokenizer_parity.py LFT_TOKENIZE [--sweep]")
    exe, sweep_only = sys.argv[1], sys.argv[2:] == ["--sweep"]
    if sweep_only:
        sets, d = {"code point sweep": sweep()}, "-"
    else:
        d = data_dir()
        if d is None:
            sys.exit("tokenizer_parity: ../shared/data not found (set LFT_SHARED_DATA)")
        sets = dataset_texts(d)
    corpus = [t for strings in sets.values() for t in strings]
    owner = [name for name, strings in sets.items() for _ in strings]
    extra = {} if sweep_only else {"adversarial": ADVERSARIAL}
    print(f"tokenizer_parity: tokenizers {tokenizers.__version__}; strings: "
          + ", ".join(f"{name} {len(s)}" for name, s in list(sets.items()) + list(extra.items()))
          + f" (data from {d})")
    if not sweep_only:
        print("throughput: the dataset strings, one thread, tokens/s; cold = a fresh tokenizer's "
              "first pass, warm = a second pass (pre-token caches filled)")
    texts = corpus + [t for strings in extra.values() for t in strings]
    owner += [name for name, strings in extra.items() for _ in strings]

    ok = True
    with tempfile.TemporaryDirectory(prefix="lft-tok-") as tmp:
        fixtures = os.path.join(ROOT, "tests", "fixtures", "tokenizers")
        folders = [os.path.join(fixtures, n) for n in ("llama3", "qwen2", "gpt2", "sentencepiece")]
        # The variants differ from their fixture in pipeline stages, not in regex or normalizer:
        # the code point sweep runs on the four fixtures only.
        for folder in folders + ([] if sweep_only else variants(tmp)):
            name = os.path.basename(folder)
            timed = folder in folders and not sweep_only
            tok = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
            hf_ids, hf_text, hf_tokens, hf_cold = run_hf(tok, corpus)
            hf_warm = run_hf(tok, corpus)[3] if timed else 0
            rest = run_hf(tok, texts[len(corpus):])
            lft_ids, lft_text, lft_cold, lft_warm = run_lft(exe, folder, corpus, tmp, int(timed))
            lft_rest = run_lft(exe, folder, texts[len(corpus):], tmp)
            ok &= compare(name, texts, owner,
                          (hf_ids + rest[0], hf_text + rest[1], hf_tokens + rest[2]),
                          (lft_ids + lft_rest[0], lft_text + lft_rest[1]))
            n = sum(map(len, hf_ids))
            if timed:
                print(f"  throughput: lft {n / lft_cold / 1e6:.2f}M cold, "
                      f"{n / lft_warm / 1e6:.2f}M warm; HF {n / hf_cold / 1e6:.2f}M cold, "
                      f"{n / hf_warm / 1e6:.2f}M warm; lft/HF {hf_cold / lft_cold:.1f}x cold, "
                      f"{hf_warm / lft_warm:.1f}x warm")
    print("tokenizer_parity: " + ("ok" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
