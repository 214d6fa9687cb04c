"""On PYTHONPATH, makes pyarrow unimportable in that process: pandas then runs as it does
where pyarrow is not installed (its strings are arrays of Python objects). Used by the
tests' "without pyarrow" leg (tests/engine/test_differential.py and others)."""

import importlib.abc
import sys


class _WithoutPyarrow(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "pyarrow" or name.startswith("pyarrow."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _WithoutPyarrow())
