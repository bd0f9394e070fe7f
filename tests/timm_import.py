"""Imports timm for the tests where torchvision cannot be installed. timm imports torchvision at
its top (its data transforms and datasets, `FrozenBatchNorm2d` for isinstance checks), but its
model code never calls it. torchvision's PyPI wheels for torch 2.13 are CUDA builds whose import
fails on the CPU torch (their `_C` extension needs libtorch_cuda), and a torchvision that pulls its
own torch would replace the pinned CPU one; so where no torchvision is installed, `torchvision`
and its submodules are placeholder modules: any attribute is a placeholder class (subclassable,
hashable, with placeholder attributes) that raises ImportError naming itself when called."""
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types


class _PlaceholderMeta(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _placeholder(f"{cls.__qualname__}.{name}")

    def __call__(cls, *args, **kwargs):
        raise ImportError(f"{cls.__qualname__}: torchvision is not installed (tests/timm_import.py)")


def _placeholder(qualname: str) -> type:
    return _PlaceholderMeta(qualname.rsplit(".", 1)[-1], (), {"__qualname__": qualname})


class _PlaceholderModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        value = _placeholder(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class _PlaceholderFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if fullname == "torchvision" or fullname.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _PlaceholderModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


def import_timm():
    """timm, with placeholder torchvision modules while it is imported when torchvision is not
    installed (afterwards `import torchvision` fails again for everyone else)."""
    if importlib.util.find_spec("torchvision") is not None:
        import timm
        return timm
    finder = _PlaceholderFinder()
    sys.meta_path.append(finder)
    try:
        import timm
    finally:
        sys.meta_path.remove(finder)
        for name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
            del sys.modules[name]
    return timm
