#!/usr/bin/env python3
"""chat_template_sft.py LFT_CHAT_ENCODE: supervised examples made with a model's own Jinja chat
template (template = "model") equal LlamaFactory main's v1 rule computed with transformers.

For each of several real templates (tests/fixtures/chat_templates) a model folder is made of a
fixture tokenizer and the template (chat_template.jinja), and seeded conversations in v1's messages
format (system prompts, several turns, answers with reasoning parts, answers with loss_weight 0,
unicode, newlines; tool definitions, answers that call tools (one or two calls, arguments as an
object or as a JSON string) and the tools' results) are written to a JSONL file. The reference, in Python, is LlamaFactory main's
rendering (v1/core/rendering): one example per answer with a loss_weight above 1e-6 (the messages
up to it), tokens = tokenizer(apply_chat_template(messages, add_generation_prompt=False,
enable_thinking=<the answer has reasoning>), add_special_tokens=False), prompt = the same of the
messages before it with add_generation_prompt=True, every token after the prompt trained with the
answer's weight, cut to cutoff_len; tool_call parts become tool_calls [{"type": "function",
"function": {"name", "arguments"}}] and the record's tools (a JSON string) the `tools` argument. lft_chat_encode makes lftrain's examples of the same file; the
ids and weights must be equal. Conversations a template rejects (it raises) are left out of the
file, and counted. Exit 1 on any difference.
"""
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
from transformers import AutoTokenizer  # noqa: E402

TEMPLATES = {  # template file -> fixture tokenizer
    "Qwen-Qwen3-0.6B.jinja": "qwen2",
    "Qwen-QwQ-32B.jinja": "qwen2",
    "Qwen-Qwen2.5-7B-Instruct.jinja": "qwen2",
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja": "qwen2",
    "microsoft-phi-4.jinja": "qwen2",
    "moonshotai-Kimi-K2.jinja": "qwen2",
    "deepseek-ai-DeepSeek-V3.1.jinja": "qwen2",
    "trl-qwen3_5_think.jinja": "qwen2",
    "meta-llama-Llama-3.1-8B-Instruct.jinja": "llama3",
    "meta-llama-Llama-3.2-3B-Instruct.jinja": "llama3",
    "google-gemma-2-2b-it.jinja": "llama3",
    "microsoft-Phi-3.5-mini-instruct.jinja": "llama3",
    "mistralai-Mistral-7B-Instruct-v0.2.jinja": "llama3",
    "ibm-granite-granite-3.3-2B-Instruct.jinja": "qwen2",
    "openai-gpt-oss-120b.jinja": "qwen2",
    None: "qwen2",  # no template in the folder: v1's ChatML fallback
}
# LlamaFactory main's _FALLBACK_CHATML_JINJA (v1/core/rendering/format.py), as its text reads.
CHATML_FALLBACK = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
                   "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
                   "{% endif %}")
CUTOFF = 640  # whole examples: a tools system prompt alone is ~150 tokens
WORDS = ["hello", "Paris", "2+2=4", "naïve café", "日本語", "it's", '"quoted"', "new\nline", "  spaced  ",
         "<b>tag</b>", "x" * 30, "emoji 🙂", "tab\tsep"]


def text(rng, n=None):
    return " ".join(rng.choice(WORDS) for _ in range(n or rng.randint(1, 8)))


TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                      "parameters": {"type": "object", "properties": {
                                          "city": {"type": "string", "description": "the city's name"},
                                          "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                                          "required": ["city"]}}},
    {"type": "function", "function": {"name": "add", "description": "Adds two numbers",
                                      "parameters": {"type": "object", "properties": {
                                          "a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}}},
]


def tool_call(rng):
    if rng.random() < 0.5:
        call = {"name": "get_weather", "arguments": {"city": text(rng, 1), "unit": rng.choice(["celsius", "fahrenheit"])}}
    else:
        call = {"name": "add", "arguments": {"a": rng.choice([1, 2.5, -3, 1e-3]), "b": rng.randint(0, 99)}}
    if rng.random() < 0.25:  # OpenAI's form: the arguments as a JSON string
        call["arguments"] = json.dumps(call["arguments"])
    return {"type": "tool_call", "value": json.dumps(call, ensure_ascii=False)}


def tool_turns(rng):
    """A question, an answer that calls one or two tools, their result, and the final answer."""
    calls = [tool_call(rng) for _ in range(rng.choice([1, 1, 1, 2]))]
    before = [{"type": "text", "value": text(rng)}] if rng.random() < 0.3 else []
    return [{"role": "user", "content": [{"type": "text", "value": text(rng)}], "loss_weight": 0.0},
            {"role": "assistant", "content": before + calls, "loss_weight": rng.choice([1.0, 1.0, 0.0])},
            {"role": "tool", "content": [{"type": "text", "value": json.dumps({"result": text(rng, 2)})}],
             "loss_weight": 0.0},
            {"role": "assistant", "content": [{"type": "text", "value": text(rng, rng.randint(1, 12))}],
             "loss_weight": 1.0}]


def conversation(rng):
    if rng.random() < 0.35:
        messages = []
        if rng.random() < 0.4:
            messages.append({"role": "system", "content": [{"type": "text", "value": text(rng)}], "loss_weight": 0.0})
        messages += tool_turns(rng)
        tools = TOOLS if rng.random() < 0.7 else TOOLS[:1]
        return {"messages": messages, "tools": json.dumps(tools, ensure_ascii=False)}
    messages = []
    if rng.random() < 0.4:
        messages.append({"role": "system", "content": [{"type": "text", "value": text(rng)}], "loss_weight": 0.0})
    for _ in range(rng.randint(1, 3)):
        messages.append({"role": "user", "content": [{"type": "text", "value": text(rng)}], "loss_weight": 0.0})
        parts = []
        if rng.random() < 0.4:
            parts.append({"type": "reasoning", "value": text(rng)})
        parts.append({"type": "text", "value": text(rng, rng.randint(1, 25))})
        messages.append({"role": "assistant", "content": parts, "loss_weight": rng.choice([1.0, 1.0, 1.0, 0.0, 0.5])})
    return {"messages": messages}


def hf_message(m):
    out = {"role": m["role"], "content": "".join(p["value"] for p in m["content"] if p["type"] == "text")}
    calls = [json.loads(p["value"]) for p in m["content"] if p["type"] == "tool_call"]
    if calls:
        out["tool_calls"] = [{"type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                             for c in calls]
    reasoning = "".join(p["value"] for p in m["content"] if p["type"] == "reasoning")
    if reasoning:
        out["reasoning_content"] = reasoning
    return out


def reference(tok, record):
    """LlamaFactory main's examples of one record: [(ids, weights)]."""
    messages = [hf_message(m) for m in record["messages"]]
    tools = json.loads(json.dumps(json.loads(record["tools"]))) if record.get("tools") else None
    if tools is not None and not isinstance(tools, list):
        tools = [tools]
    out = []
    for i, m in enumerate(record["messages"]):
        if m["role"] != "assistant" or m["loss_weight"] <= 1e-6:
            continue
        kwargs = {"enable_thinking": bool(messages[i].get("reasoning_content")), "tools": tools}
        full = tok.apply_chat_template(messages[:i + 1], tokenize=False, add_generation_prompt=False, **kwargs)
        prompt = tok.apply_chat_template(messages[:i], tokenize=False, add_generation_prompt=True, **kwargs)
        ids = tok(full, add_special_tokens=False)["input_ids"]
        prompt_ids = tok(prompt, add_special_tokens=False)["input_ids"]
        if ids[:len(prompt_ids)] != prompt_ids:
            raise ValueError("not prefix-stable")
        weights = [0.0] * len(prompt_ids) + [float(m["loss_weight"])] * (len(ids) - len(prompt_ids))
        out.append((ids[:CUTOFF], [round(w, 6) for w in weights[:CUTOFF]]))
    return out


def main():
    encode = sys.argv[1]
    work = tempfile.mkdtemp(prefix="lft-chatsft-")
    failed, total = [], 0
    try:
        for template, tokenizer in TEMPLATES.items():
            name = template or "chatml-fallback"
            folder = os.path.join(work, name)
            shutil.copytree(os.path.join(ROOT, "tests/fixtures/tokenizers", tokenizer), folder)
            if template:
                shutil.copy(os.path.join(ROOT, "tests/fixtures/chat_templates", template),
                            os.path.join(folder, "chat_template.jinja"))
            tok = AutoTokenizer.from_pretrained(folder)
            if not template:  # what LlamaFactory main sets when the model has none
                tok.chat_template = CHATML_FALLBACK
            rng = random.Random(name)
            kept, expected, rejected, unstable = [], [], 0, None
            for _ in range(60):
                record = conversation(rng)
                try:
                    examples = reference(tok, record)
                except Exception as e:  # the template raises on it (or is not prefix-stable there)
                    rejected += 1
                    if str(e) == "not prefix-stable" and unstable is None:
                        unstable = record
                    continue
                kept.append(record)
                expected.extend(examples)
            data = os.path.join(work, name + ".jsonl")
            with open(data, "w") as f:
                for r in kept:
                    f.write(json.dumps(r, ensure_ascii=False) + "\n")
            if unstable is not None:  # refused by lftrain as by LlamaFactory
                with open(data, "w") as f:
                    f.write(json.dumps(unstable, ensure_ascii=False) + "\n")
                run = subprocess.run([encode, folder, data, str(CUTOFF)], capture_output=True, text=True)
                if run.returncode == 0 or "is not prefix-stable" not in run.stderr:
                    failed.append(f"{name}: a conversation whose prompt is not a prefix was not refused: {run.stderr[-300:]}")
                with open(data, "w") as f:
                    for r in kept:
                        f.write(json.dumps(r, ensure_ascii=False) + "\n")
            run = subprocess.run([encode, folder, data, str(CUTOFF)], capture_output=True, text=True)
            if run.returncode != 0:
                failed.append(f"{name}: lft_chat_encode failed: {run.stderr.strip()[-400:]}")
                continue
            got = [json.loads(line) for line in run.stdout.splitlines()]
            got = [(g["ids"], [round(w, 6) for w in g["weights"]]) for g in got]
            same = sum(1 for a, b in zip(expected, got) if a == b)
            total += len(expected)
            status = "ok" if same == len(expected) == len(got) else "FAIL"
            with_tools = sum(1 for r in kept if r.get("tools"))
            print(f"chat_template_sft: {name:52} {len(kept):3} conversations ({with_tools:2} with tool calls; "
                  f"{rejected:2} rejected by the template), "
                  f"{len(expected):3} examples, {same:3} equal {status}" +
                  (" (not prefix-stable refused)" if unstable is not None else ""))
            if status != "ok":
                for k, (a, b) in enumerate(zip(expected, got)):
                    if a != b:
                        print(f"  example {k}: expected ids {a[0][:40]} weights {a[1][:40]}\n"
                              f"  {' ' * len(str(k))}          got      ids {b[0][:40]} weights {b[1][:40]}")
                        break
                failed.append(name)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if failed:
        print("chat_template_sft: FAIL:", "; ".join(failed))
        return 1
    print(f"chat_template_sft: PASS ({len(TEMPLATES)} templates, {total} examples)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
