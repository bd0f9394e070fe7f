"""The layout of `triton_exec`, read from its source (no kernel is built): no import circle, code
generation in rooms that say what they import, no long function, and an assembly that names no
prim (each op family's lowering reaches it through the rule table, `triton_exec.rules`)."""
import ast
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
CODEGEN = ROOT / "triton_exec" / "codegen"
MAX_FUNCTION_LINES = 60


def module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(package: str) -> dict:
    return {module_name(p): p for p in (ROOT / package).rglob("*.py")}


def imported(path: pathlib.Path, known: dict) -> set:
    """The modules of `known` that `path` imports anywhere (function-level imports too):
    `from a.b import c` imports the module a.b.c where there is one, else a.b."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in known}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [f"{node.module}.{a.name}" for a in node.names]
            found |= {n for n in names if n in known}
            if any(n not in known for n in names) and node.module in known:
                found.add(node.module)
    return found - {module_name(path)}


def circles(graph: dict) -> list:
    """The strongly connected components of more than one module (Tarjan)."""
    order, low, stack, found = {}, {}, [], []

    def visit(v):
        order[v] = low[v] = len(order)
        stack.append(v)
        for w in graph[v]:
            if w not in order:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], order[w])
        if low[v] == order[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in order:
            visit(v)
    return found


def test_triton_exec_has_no_import_circle():
    known = modules("triton_exec")
    assert circles({m: imported(p, known) for m, p in known.items()}) == []


def test_circles_are_found():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


@pytest.mark.parametrize("path", sorted(p for p in CODEGEN.glob("*.py") if p.stem != "__init__"),
                         ids=lambda p: p.stem)
def test_each_codegen_file_says_its_role_and_what_it_imports(path):
    docstring = ast.get_docstring(ast.parse(path.read_text()))
    assert docstring, f"{path.name} has no docstring"
    siblings = {p.stem for p in CODEGEN.glob("*.py")}
    named = set(re.findall(r"`(\w+)`", docstring)) & siblings
    uses = {m.rsplit(".", 1)[1] for m in imported(path, modules("triton_exec"))
            if m.startswith("triton_exec.codegen.")}
    assert uses <= named, f"{path.name} imports {sorted(uses - named)} unsaid in its docstring"


def test_no_codegen_function_is_long():
    long = [f"{path.name}:{node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for path in CODEGEN.glob("*.py") for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.FunctionDef)
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert long == []


@pytest.mark.parametrize("room", ["writer", "loads", "assembly", "stores", "render", "pipeline"])
def test_the_kernel_assembly_names_no_prim(room):
    # an op family is a `lower_<family>.py` that registers its rules: the writer and the
    # assembly reach every lowering through `triton_exec.rules`, never by a prim's name
    source = (CODEGEN / f"{room}.py").read_text()
    assert "prims" not in source and ".prim" not in source
