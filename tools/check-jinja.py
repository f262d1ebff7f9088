#!/usr/bin/env python3
"""Compares lftrain's Jinja renderer with transformers' apply_chat_template, byte for byte.

For every fixture template, generates seeded, varied conversations (system prompt or not,
multi-turn, tools and tool calls and tool results, reasoning_content and <think> in content,
add_generation_prompt and enable_thinking both ways, unicode, quotes, newlines), renders each once
with transformers' own compiled template (render_jinja_template, the function apply_chat_template
calls, with the special tokens a tokenizer of that family passes) and once with the C++ CLI, and
compares the strings exactly, the {% generation %} spans too, and that both fail the same way
when the template rejects a conversation (same exception class and message). The C++ side gets the
raw chat and builds the context itself (make_chat_context), unless --python-context.
Before that, each line of tests/fixtures/jinja_snippets/*.jinja-lines is rendered by both as a
template of its own (language-level checks: printing, filters, whitespace, errors).

Run with the project's virtual environment (transformers and jinja2 are installed there):
  /work/main/.venv/bin/python tools/check-jinja.py --render build/lft_jinja_render
      [--templates tests/fixtures/chat_templates] [--count 50] [--seed 0] [--only NAME]
Exit status 1 on any difference.
"""
import argparse
import json
import random
import re
import subprocess
import sys
from pathlib import Path

from transformers.utils.chat_template_utils import (
    _alias_reasoning_fields,
    _plain_template_data,
    render_jinja_template,
)

# Special tokens a tokenizer of each family passes (its special_tokens_map), picked by file name.
FAMILY_TOKENS = [
    ("llama3", {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}),
    ("glm", {"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"}),
    ("gptoss", {"bos_token": "<|startoftext|>", "eos_token": "<|return|>", "pad_token": "<|endoftext|>"}),
    ("nemotron", {"bos_token": "<s>", "eos_token": "<|im_end|>", "unk_token": "<unk>"}),
    ("lfm2", {"bos_token": "<|startoftext|>", "eos_token": "<|im_end|>", "pad_token": "<|pad|>"}),
    ("phi3", {"bos_token": "<s>", "eos_token": "<|endoftext|>", "unk_token": "<unk>", "pad_token": "<|endoftext|>"}),
    ("Llama-3", {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}),
    ("Hermes-3", {"bos_token": "<|begin_of_text|>", "eos_token": "<|im_end|>", "pad_token": "<|end_of_text|>"}),
    ("Qwen", {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}),
    ("DeepSeek", {"bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<｜end▁of▁sentence｜>"}),
    ("deepseek-coder", {"bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<|EOT|>"}),
    ("gemma", {"bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>", "pad_token": "<pad>"}),
    ("Phi-3", {"bos_token": "<s>", "eos_token": "<|endoftext|>", "unk_token": "<unk>", "pad_token": "<|endoftext|>"}),
    ("phi-4", {"bos_token": "<|endoftext|>", "eos_token": "<|im_end|>", "pad_token": "<|dummy_85|>"}),
    ("gpt-oss", {"bos_token": "<|startoftext|>", "eos_token": "<|return|>", "pad_token": "<|endoftext|>"}),
    ("Kimi", {"bos_token": "[BOS]", "eos_token": "[EOS]", "unk_token": "[UNK]", "pad_token": "[PAD]"}),
    ("granite", {"bos_token": "<|end_of_text|>", "eos_token": "<|end_of_text|>", "pad_token": "<|end_of_text|>"}),
    ("c4ai", {"bos_token": "<BOS_TOKEN>", "eos_token": "<|END_OF_TURN_TOKEN|>", "pad_token": "<PAD>"}),
    ("Seed-OSS", {"bos_token": "<seed:bos>", "eos_token": "<seed:eos>", "pad_token": "<seed:pad>"}),
    ("", {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}),
]

TEXTS = [
    "Hello!",
    "What's the weather like in Paris today?",
    'He said "hi" and left.',
    "Line one\nLine two\n\nLine four",
    "  leading and trailing spaces  ",
    "Ünïcödé: café, naïve, 日本語のテキスト, emoji 🚀🎉, Ωμέγα, Привет",
    "Tabs\tand backslashes \\ and braces {{ not jinja }} {% neither %}",
    "It's a 'quoted' string with both ' and \" quotes.",
    "Compute 3/2 and 7 // 2 please.",
    "<think>not really a think tag</think> from the user",
    "",
    "Multi\nline\nanswer with a trailing newline\n",
    "Écris un poème sur la mer.",
    "\u3000full-width space and zero\u200bwidth",
    "JSON: {\"a\": [1, 2.5, null, true]}",
]
TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city.",
        "parameters": {"type": "object", "properties": {
            "location": {"type": "string", "description": "City name, e.g. Paris"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["location"]}}},
    {"type": "function", "function": {
        "name": "search_docs",
        "description": "Search the documentation. Returns \"snippets\" with scores like 0.5 or 1e-05.",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string"},
            "limit": {"type": "integer", "description": "How many results", "default": 3},
            "tags": {"type": "array", "items": {"type": "string"}}},
            "required": ["query"]}}},
]


def tokens_for(name):
    for key, tokens in FAMILY_TOKENS:
        if key.lower() in name.lower():
            return tokens
    return FAMILY_TOKENS[-1][1]


def call_id(rng):
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(9))


def tool_call(rng):
    if rng.random() < 0.5:
        args = {"location": rng.choice(["Paris", "Zürich", "東京"]), "unit": rng.choice(["celsius", "fahrenheit"])}
        name = "get_weather"
    else:
        args = {"query": rng.choice(TEXTS[:4]), "limit": rng.choice([1, 3, 2.5]), "tags": ["a", "b"]}
        name = "search_docs"
    if rng.random() < 0.15:
        args = json.dumps(args, ensure_ascii=False)  # some clients pass arguments as a JSON string
    return {"id": call_id(rng), "type": "function", "function": {"name": name, "arguments": args}}


def conversation(rng, uses_tools, uses_thinking):
    """Returns (messages, tools, add_generation_prompt, extra kwargs)."""
    messages = []
    if rng.random() < 0.5:
        messages.append({"role": "system", "content": rng.choice(TEXTS[:9] + TEXTS[11:])})
    with_tools = uses_tools and rng.random() < 0.5
    turns = rng.randint(1, 4)
    add_generation_prompt = rng.random() < 0.5
    for turn in range(turns):
        content = rng.choice(TEXTS)
        if rng.random() < 0.12:  # multimodal-style content blocks
            content = [{"type": "text", "text": content}] + ([{"type": "text", "text": "second part"}] if rng.random() < 0.5 else [])
        messages.append({"role": "user", "content": content})
        last = turn == turns - 1
        if last and add_generation_prompt:
            break
        if with_tools and rng.random() < 0.5:
            calls = [tool_call(rng) for _ in range(rng.choice([1, 1, 2]))]
            msg = {"role": "assistant", "tool_calls": calls}
            if rng.random() < 0.3:
                msg["content"] = rng.choice(TEXTS[:3])
            elif rng.random() < 0.5:
                msg["content"] = None  # apply_chat_template drops None-valued keys
            messages.append(msg)
            for c in calls:
                messages.append({"role": "tool", "tool_call_id": c["id"], "name": c["function"]["name"],
                                 "content": rng.choice(['{"temperature": 21.5, "unit": "celsius"}', "no results", TEXTS[5]])})
            if last and add_generation_prompt:
                break
        reply = {"role": "assistant", "content": rng.choice(TEXTS)}
        r = rng.random()
        if uses_thinking and r < 0.3:
            key = rng.choice(["reasoning_content", "reasoning_content", "thinking", "reasoning"])
            reply[key] = rng.choice(["Let me think.\nStep 1.", "  short thought  ", "思考中"])
        elif uses_thinking and r < 0.5:
            reply["content"] = "<think>\nI should answer briefly.\n</think>\n\n" + reply["content"]
        messages.append(reply)
    kwargs = {}
    if uses_thinking and rng.random() < 0.7:
        kwargs["enable_thinking"] = rng.random() < 0.5
    if rng.random() < 0.2:
        kwargs["custom_flag"] = rng.choice([True, 3, "text"])
    return messages, (TOOLS if with_tools else None), add_generation_prompt, kwargs


def drop_none(messages):
    # apply_chat_template drops the keys whose value is None before rendering.
    return [{k: v for k, v in m.items() if v is not None} for m in messages]


def python_render(template, messages, tools, agp, kwargs, tokens, spans_wanted):
    messages = drop_none(messages)
    try:
        rendered, indices = render_jinja_template(
            conversations=[messages], tools=tools, documents=None, chat_template=template,
            return_assistant_tokens_mask=spans_wanted, add_generation_prompt=agp, **{**tokens, **kwargs})
        return {"text": rendered[0], "spans": [list(s) for s in indices[0]] if spans_wanted else []}
    except Exception as e:  # noqa: BLE001 - every failure is compared
        return {"error": f"{type(e).__name__}: {e}", "kind": type(e).__name__, "message": str(e)}


def cpp_context(messages, tools, agp, kwargs, tokens):
    """The variables render_jinja_template passes to the compiled template, in its order."""
    chat = _alias_reasoning_fields(_plain_template_data(drop_none(messages)))
    context = {"messages": chat, "tools": _plain_template_data(tools), "documents": None,
               "add_generation_prompt": agp}
    context.update(_plain_template_data({**tokens, **kwargs}))
    return context


def same(py, cpp):
    if "error" in py or "error" in cpp:
        if "error" not in py or "error" not in cpp:
            return False
        # Same exception class, and the same message (raise_exception's verbatim).
        return cpp["kind"] == py["kind"] and cpp["message"] == py["message"]
    return py["text"] == cpp["text"] and py["spans"] == cpp["spans"]


def first_difference(py, cpp):
    if "error" in py or "error" in cpp:
        return f"python: {py.get('error', 'rendered')!r}\n      c++:    {cpp.get('error', 'rendered')!r}"
    a, b = py["text"], cpp["text"]
    if a == b:
        return f"spans differ: python {py['spans']} c++ {cpp['spans']}"
    i = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
    return f"at char {i}: python {a[max(0, i - 40):i + 40]!r}\n      c++    {b[max(0, i - 40):i + 40]!r}"


def check_snippets(proc, files, show):
    """Each line of each file is a template (and each file as a whole): language-level checks."""
    from transformers.utils.chat_template_utils import _compile_jinja_template, _render_with_assistant_indices

    messages = [{"role": "system", "content": "  Be brief.  "}, {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello!"}]
    context = {"messages": messages, "tools": TOOLS, "documents": None, "add_generation_prompt": False,
               "bos_token": "<s>", "eos_token": "</s>"}
    failed = False
    for path in files:
        text = path.read_text(encoding="utf-8")
        templates = [line for line in text.split("\n") if line.strip()] + [text]
        equal = 0
        for t in templates:
            try:
                compiled = _compile_jinja_template(t)
                if "generation" in t:
                    text, spans = _render_with_assistant_indices(compiled, **context)
                    py = {"text": text, "spans": [list(s) for s in spans]}
                else:
                    py = {"text": compiled.render(**context), "spans": []}
            except Exception as e:  # noqa: BLE001
                py = {"error": f"{type(e).__name__}: {e}", "kind": type(e).__name__, "message": str(e)}
            proc.stdin.write(json.dumps({"template": t, "name": path.name, "context": context},
                                        ensure_ascii=False) + "\n")
            proc.stdin.flush()
            cpp = json.loads(proc.stdout.readline())
            cpp.setdefault("spans", [])
            # Syntax errors must agree on the kind; their wording is jinja2's only approximately.
            if py.get("kind") in ("TemplateSyntaxError", "TemplateAssertionError") and \
                    cpp.get("kind") == "TemplateSyntaxError":
                equal += 1
            elif "error" in py and "not supported by lftrain" in cpp.get("error", ""):
                equal += 1  # refused on purpose where jinja2 fails too
            elif re.search(r"<[\w.]+ object( \w+)? at 0x", py.get("text", "")) and \
                    "cannot print" in cpp.get("error", ""):
                equal += 1  # jinja2 prints a memory address; lftrain refuses
            elif same(py, cpp):
                equal += 1
            else:
                failed = True
                if show:
                    print(f"  DIFF {path.name} template {t[:70]!r}:\n      {first_difference(py, cpp)}")
        print(f"{path.name:<55} {len(templates):>8} {equal:>6} {'ok' if equal == len(templates) else 'FAIL'}")
    return failed


def bench(render_bin, path, n, seed):
    """Times n renders of one template: transformers, and the CLI (JSON parsing and I/O included)."""
    import time
    template = path.read_text(encoding="utf-8")
    tokens = tokens_for(path.name)
    rng = random.Random(f"{seed}:{path.name}")
    convs = [conversation(rng, "tool" in template, "think" in template) for _ in range(n)]
    t0 = time.perf_counter()
    for messages, tools, agp, kwargs in convs:
        python_render(template, messages, tools, agp, kwargs, tokens, False)
    t_py = time.perf_counter() - t0
    lines = "".join(json.dumps({"template": template, "context": cpp_context(m, t, a, k, tokens)},
                               ensure_ascii=False) + "\n" for m, t, a, k in convs)
    t0 = time.perf_counter()
    subprocess.run([render_bin], input=lines, capture_output=True, text=True, encoding="utf-8", check=True)
    t_cpp = time.perf_counter() - t0
    print(f"{path.name}: {n} renders, transformers {t_py * 1e3 / n:.3f} ms each, "
          f"lft_jinja_render {t_cpp * 1e3 / n:.3f} ms each (JSON parse + I/O included)")


def main():
    here = Path(__file__).resolve().parent.parent
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--render", required=True, help="path to lft_jinja_render")
    ap.add_argument("--templates", default=str(here / "tests/fixtures/chat_templates"))
    ap.add_argument("--count", type=int, default=50, help="conversations each template must render")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", default="", help="substring of the template file names to check")
    ap.add_argument("--snippets", default=str(here / "tests/fixtures/jinja_snippets"),
                    help="folder of *.jinja-lines files: one template per line, compared with jinja2")
    ap.add_argument("--bench", type=int, default=0, help="time N renders of each --only template instead")
    ap.add_argument("--python-context", action="store_true",
                    help="send the context built in Python instead of the raw chat (tests the renderer alone)")
    ap.add_argument("--verbose", action="store_true", help="tally the error kinds per template")
    ap.add_argument("--show", type=int, default=1, help="differences to print per template")
    args = ap.parse_args()

    if args.bench:
        for path in sorted(p for p in Path(args.templates).glob("*.jinja") if args.only in p.name):
            bench(args.render, path, args.bench, args.seed)
        return
    proc = subprocess.Popen([args.render], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            encoding="utf-8")
    failed = check_snippets(proc, sorted(Path(args.snippets).glob("*.jinja-lines")), args.show) \
        if args.snippets else False
    files = sorted(p for p in Path(args.templates).glob("*.jinja") if args.only in p.name)
    print(f"{'template':<55} {'compared':>8} {'equal':>6} {'rendered':>8} {'errors':>6} {'spans':>6}")
    for path in files:
        template = path.read_text(encoding="utf-8")
        tokens = tokens_for(path.name)
        spans_wanted = "generation" in template
        rng = random.Random(f"{args.seed}:{path.name}")
        uses_tools = "tool" in template
        uses_thinking = "think" in template or "reasoning" in template
        compared = equal = rendered = errors = shown = 0
        error_kinds = {}
        span_count = 0
        tries = 0
        while rendered < args.count and tries < args.count * 6:
            tries += 1
            messages, tools, agp, kwargs = conversation(rng, uses_tools, uses_thinking)
            py = python_render(template, messages, tools, agp, kwargs, tokens, spans_wanted)
            request = {"template": template, "name": path.name}
            if args.python_context:
                request["context"] = cpp_context(messages, tools, agp, kwargs, tokens)
            else:  # the raw inputs: the C++ side builds the context (make_chat_context)
                request["chat"] = {"messages": messages, "tools": tools, "documents": None,
                                   "add_generation_prompt": agp, "special_tokens": tokens, "kwargs": kwargs}
            proc.stdin.write(json.dumps(request, ensure_ascii=False) + "\n")
            proc.stdin.flush()
            cpp = json.loads(proc.stdout.readline())
            compared += 1
            if "error" in py:
                errors += 1
                key = f"{py['kind']} / {cpp.get('kind', 'rendered')}"
                error_kinds[key] = error_kinds.get(key, 0) + 1
            else:
                rendered += 1
            span_count += len(py.get("spans", []))
            if same(py, cpp):
                equal += 1
            elif shown < args.show:
                shown += 1
                print(f"  DIFF {path.name} conversation {compared}:\n      {first_difference(py, cpp)}")
        for kind, n in sorted(error_kinds.items()):
            if args.verbose:
                print(f"    errors {kind}: {n}")
        ok = equal == compared and rendered >= args.count
        failed |= not ok
        print(f"{path.name:<55} {compared:>8} {equal:>6} {rendered:>8} {errors:>6} {span_count:>6} "
              f"{'ok' if ok else 'FAIL'}")
    proc.stdin.close()
    proc.wait()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
