"""pytest with the _compcoll extension of another build directory (``make sanitize``).

The editable install points ``import _compcoll`` at its own build whatever PYTHONPATH says, so
the module is loaded from the given directory first and registered under its name: every later
import gets it. Run: ``python scripts/sanitized_pytest.py build/sanitize tests/...``.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path


def main() -> int:
    build, args = Path(sys.argv[1]), sys.argv[2:]
    found = sorted(build.glob("_compcoll*.so"))
    if not found:
        print(f"no _compcoll extension in {build}: build it first (make sanitize)")
        return 2
    spec = importlib.util.spec_from_file_location("_compcoll", found[0])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["_compcoll"] = module
    spec.loader.exec_module(module)
    print(f"# module: {module.__file__}", flush=True)
    import pytest

    return int(pytest.main(args))


if __name__ == "__main__":
    sys.exit(main())
