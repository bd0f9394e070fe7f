"""The layout of `ir`, read from its source and its tables (no kernel is built): no import circle,
a docstring saying each file's role, no long function without a reason, `ir` never importing an
executor, and each op family standing together: a prim's grad rule and torch source are
registered by the module that defines the prim (`ir/ops/<family>.py`)."""
import ast

import pytest

from ir import prims
from ir.ops.registry import GRAD_RULES, TORCH_SOURCE
from test_codegen_layout import ROOT, circles, imported, modules

IR = ROOT / "ir"
MAX_FUNCTION_LINES = 60
FILES = sorted(IR.rglob("*.py"))


def test_ir_has_no_import_circle():
    # imports inside functions count (`imported` walks the whole tree): they hid the old circles
    known = modules("ir")
    assert circles({m: imported(p, known) for m, p in known.items()}) == []


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(IR)))
def test_each_file_says_its_role(path):
    docstring = ast.get_docstring(ast.parse(path.read_text()))
    assert docstring and len(docstring.split()) >= 10, f"{path.name}: no docstring saying its role"


def long_functions(paths, root=ROOT) -> list:
    """Functions over MAX_FUNCTION_LINES lines whose docstring gives no reason (a sentence
    starting "Long:")."""
    found = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                reason = "Long:" in (ast.get_docstring(node) or "")
                if lines > MAX_FUNCTION_LINES and not reason:
                    found.append(f"{path.relative_to(root)}:{node.name} ({lines} lines)")
    return found


def test_no_function_is_long_without_a_reason():
    assert long_functions(FILES) == []


def test_a_long_function_is_found_unless_it_says_why(tmp_path):
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    path = tmp_path / "m.py"
    path.write_text(f'def f():\n{body}\n\ndef g():\n    """Long: one table."""\n{body}')
    assert long_functions([path], root=tmp_path) == [f"m.py:f ({MAX_FUNCTION_LINES + 1} lines)"]


def test_the_op_families_never_name_an_executor_but_torch():
    # a new op is one place per floor: the executors' own rules live on their floor
    for path in sorted((IR / "ops").glob("*.py")):
        assert "triton" not in path.read_text().lower(), path.name


def test_ir_imports_no_executor():
    for path in FILES:
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(n.split(".")[0] in ("triton", "triton_exec") for n in names), path


def defining_module(prim) -> str:
    """The module whose `define` call made the prim (where its meta or printer is written)."""
    return (prim.meta or prim.render_rhs).__module__


TENSOR_PRIMS = [p for p in prims.PRIMS.values() if p.kind != "host"]


@pytest.mark.parametrize("prim", TENSOR_PRIMS, ids=lambda p: p.name)
def test_each_tensor_prim_is_defined_in_its_family_with_its_rules(prim):
    family = defining_module(prim)
    assert family.startswith("ir.ops."), f"{prim.name} is defined in {family}"
    for table in (GRAD_RULES, TORCH_SOURCE):
        if prim in table:
            assert table[prim].__module__ == family, (prim.name, table[prim].__module__)


def test_every_family_is_imported_by_the_namespace_of_prims():
    # `ir.prims` imports every family, so the tables are full once `ir` is imported
    families = {p.stem for p in (IR / "ops").glob("*.py")} - {"__init__"}
    shared = {"registry", "shapes", "scalars", "vjp"}
    namespace = {m.rsplit(".", 1)[1] for m in imported(IR / "prims.py", modules("ir"))
                 if m.startswith("ir.ops.")}
    assert families - shared <= namespace, sorted(families - shared - namespace)
