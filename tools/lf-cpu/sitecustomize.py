"""Workaround for LlamaFactory's classic trainer (0.9.5) in .venv-v1, loaded at start-up by every
Python process that tools/lf-reference starts (it puts this folder first on PYTHONPATH, which
torchrun's workers inherit) and active only under LFT_LF_CPU=1. The installed package is never
edited.

llamafactory.data.mm_plugin, which every classic stage imports through llamafactory.data, does
`import torchaudio` at the top, for audio inputs only. tools/install-v1-env leaves torchaudio out
(torch comes from .venv, and a torchaudio wheel pins its own torch), so this gives that import an
empty stand-in module: a finder placed last on sys.meta_path, so a real torchaudio, when
installed, still wins. Touching any of its attributes (torchaudio.load, ...: an audio dataset)
raises an ImportError that says why. transformers' is_torchaudio_available() still says False (it
asks the package metadata, which the stand-in has none of).
"""
import os

if os.environ.get("LFT_LF_CPU") == "1":
    import importlib.abc
    import importlib.machinery
    import sys
    import types

    class _NoTorchaudio(types.ModuleType):
        def __getattr__(self, name):
            if name.startswith("__"):
                raise AttributeError(name)
            raise ImportError(f"torchaudio.{name}: torchaudio is not installed in this environment "
                              "(tools/lf-cpu/sitecustomize.py stands in for it; audio inputs are "
                              "not supported)")

    class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        def find_spec(self, fullname, path=None, target=None):
            if fullname == "torchaudio":
                return importlib.machinery.ModuleSpec(fullname, self)
            return None

        def create_module(self, spec):
            return _NoTorchaudio(spec.name)

        def exec_module(self, module):
            pass

    sys.meta_path.append(_StubFinder())
