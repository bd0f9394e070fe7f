"""The scripts of perf/ imported by the tests: each call executes the script afresh as the module
`perf_<name>`, registered in `sys.modules` (its dataclasses look their module up)."""
import importlib.util
import sys
from pathlib import Path

PERF = Path(__file__).resolve().parent.parent / "perf"


def perf_module(name: str):
    """perf/<name>.py, imported."""
    spec = importlib.util.spec_from_file_location(f"perf_{name}", PERF / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
