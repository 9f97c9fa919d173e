# tests/python/conftest.py - makes `import opfuse` find the module of the build tree when
# PYTHONPATH does not point at it already (ctest's python.pytest sets PYTHONPATH=build/python;
# a developer running `/usr/bin/python3 -m pytest tests/python` from the repository root gets
# build/python, or the folder named by OPFUSE_PYTHON_DIR).
import os
import pathlib
import sys

try:
    import opfuse  # noqa: F401  (only whether it imports)
except ImportError:
    root = pathlib.Path(__file__).resolve().parents[2]
    sys.path.insert(0, os.environ.get("OPFUSE_PYTHON_DIR", str(root / "build" / "python")))
