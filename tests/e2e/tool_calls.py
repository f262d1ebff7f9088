"""The project's Python tools (tools/check-peft.py, tools/check-export.py, tools/make-v1-fixture.py)
called in one process. An e2e test that makes several checks runs them from one Python process:
importing torch, transformers and PEFT takes ~5-7 s a start-up on a 2-core machine, which one
process per check paid again and again (job_lora_peft: 17 start-ups, 116 s; 27 s after).

    sys.path.insert(0, "tests/e2e"); from tool_calls import tool, check
    peft = tool("check-peft")
    check(peft, "lora_peft: FAIL: make-adapter (a)", "make-adapter", base, out, "--r", "4")

From a shell:
    tool_calls.py installed PACKAGE...   exit status 0 when every package can be imported (found,
                                         not imported: no start-up cost)
    tool_calls.py run TOOL ARGS... [--then TOOL ARGS...]...
                                         tools/TOOL.py's main(ARGS) for each in turn; stops at the
                                         first that fails, naming it on stderr, with its status
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


def run_all(words):
    """`TOOL ARGS... --then TOOL ARGS...`: each tool's main in turn; the first failure's status."""
    commands, current = [], []
    for word in words:
        if word == "--then":
            commands.append(current)
            current = []
        else:
            current.append(word)
    commands.append(current)
    if any(not c for c in commands):
        print("tool_calls: run: an empty command (TOOL ARGS... [--then TOOL ARGS...])", file=sys.stderr)
        return 2
    modules = {}
    for name, *argv in commands:
        module = modules.setdefault(name, tool(name))
        status = module.main(argv)
        if status:
            print(f"tool_calls: FAIL ({status}): {name} {' '.join(argv)}", file=sys.stderr)
            return status
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "installed":
        sys.exit(0 if installed(*sys.argv[2:]) else 1)
    if len(sys.argv) > 2 and sys.argv[1] == "run":
        sys.exit(run_all(sys.argv[2:]))
    print(__doc__, file=sys.stderr)
    sys.exit(2)
