"""The project's Python check tools (tools/check-peft.py, tools/check-export.py, ...) called in
the calling process. An e2e test that makes several checks runs them from one Python process:
importing torch, transformers and PEFT takes ~5-7 s a start-up on a 2-core machine, which one
process per check paid again and again (job_lora_peft: 17 start-ups, 116 s; 27 s after).

    sys.path.insert(0, "tests/e2e"); from tool_calls import tool, check
    peft = tool("check-peft")
    check(peft, "lora_peft: FAIL: make-adapter (a)", "make-adapter", base, out, "--r", "4")
"""
import importlib.util
import os
import sys

TOOLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools")


def tool(name):
    """tools/NAME.py as a module; its main(argv) runs one command line."""
    spec = importlib.util.spec_from_file_location(name.replace("-", "_"), os.path.join(TOOLS, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check(module, failure, *argv):
    """Runs module.main(argv); exits with `failure` as the message when it does not return 0."""
    if module.main([str(a) for a in argv]) != 0:
        sys.exit(failure)


def installed(*packages):
    """Whether every package can be imported, without importing any (a guard that costs no start-up)."""
    return all(importlib.util.find_spec(p) is not None for p in packages)


if __name__ == "__main__":  # tool_calls.py PACKAGE...: exit status 0 when every one is installed
    sys.exit(0 if installed(*sys.argv[1:]) else 1)
