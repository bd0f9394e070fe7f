"""Offline compilation of Triton kernels to PTX for a GPU target, and PTX access-width counting.

This lets the tests check which load/store widths a kernel compiles to on a machine without a GPU.
The offline-compile interface of Triton (``ASTSource``, ``GPUTarget``, ``triton.compile``) is kept
behind ``compile_asm`` only (checked identical on Triton 3.6.0 and 3.9.0).
"""

from __future__ import annotations

import functools
import inspect
import re
import types
from collections import Counter
from collections.abc import Iterable

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.runtime.interpreter import InterpretedFunction
from triton.runtime.jit import JITFunction

_CUDA_WARP_SIZE = 32
_asm_cache: dict[tuple, dict] = {}


def _as_jit_function(fn) -> JITFunction:
    """The compilable form of a ``@triton.jit`` kernel, also under ``TRITON_INTERPRET=1``.

    Under the interpreter ``triton.jit`` returns an ``InterpretedFunction`` that ``triton.compile``
    refuses; the plain Python function it wraps (``fn.fn``) compiles when wrapped in a JITFunction.
    """
    if isinstance(fn, JITFunction):
        return fn
    python_fn = getattr(fn, "fn", fn)
    if not inspect.isfunction(python_fn):
        raise TypeError(f"expected a @triton.jit function, got {fn!r}")
    return JITFunction(_with_compilable_helpers(python_fn, {}))


def _with_compilable_helpers(python_fn, converted: dict):
    """``python_fn`` with the interpreted ``@triton.jit`` helpers it names turned into JITFunctions.

    The compiler rejects an ``InterpretedFunction`` referenced from a kernel, so a copy of the
    function gets globals in which each such helper (recursively) is compilable; the module's own
    globals are left alone. ``converted`` maps helpers already done to their JITFunction.
    """
    helpers = {
        name: value
        for name, value in python_fn.__globals__.items()
        if name in python_fn.__code__.co_names and isinstance(value, InterpretedFunction)
    }
    if not helpers:
        return python_fn
    compilable_globals = dict(python_fn.__globals__)
    for name, helper in helpers.items():
        if helper not in converted:
            converted[helper] = JITFunction(_with_compilable_helpers(helper.fn, converted))
        compilable_globals[name] = converted[helper]
    copy = types.FunctionType(
        python_fn.__code__, compilable_globals, python_fn.__name__, python_fn.__defaults__, python_fn.__closure__
    )
    return functools.update_wrapper(copy, python_fn)


def compile_asm(
    fn,
    signature: dict[str, str],
    constexprs: dict[str, object],
    divisible_by_16: Iterable[str],
    num_warps: int,
    arch: int = 90,
    options: dict | None = None,
) -> dict:
    """Compile ``fn`` for CUDA compute capability ``arch``; its assembly by stage ("ptx", "llir":
    the LLVM IR, which carries each instruction's source line, and "cubin" bytes where ptxas ran).

    ``signature`` maps every parameter name to a Triton type ("*bf16", "i32", "constexpr", ...);
    ``constexprs`` gives the values of the constexpr parameters; ``divisible_by_16`` names the
    pointer/integer parameters that get ``tt.divisibility = 16``, as a GPU launch specializes them
    when the pointer is 16-byte aligned or the integer a multiple of 16. ``options``: compile
    options beside ``num_warps`` (generated kernels pass ``codegen.KERNEL_OPTIONS``).
    """
    jit_fn = _as_jit_function(fn)
    divisible = frozenset(divisible_by_16)
    unknown = (set(signature) | set(constexprs) | divisible) - set(jit_fn.arg_names)
    if unknown:
        raise ValueError(f"{jit_fn.__name__} has no parameters named {sorted(unknown)}")
    key = (
        jit_fn.src,
        tuple(signature.items()),
        tuple(sorted((name, repr(value)) for name, value in constexprs.items())),
        tuple(sorted(divisible)),
        num_warps,
        arch,
        tuple(sorted((options or {}).items())),
    )
    if key not in _asm_cache:
        attrs = {(jit_fn.arg_names.index(name),): [["tt.divisibility", 16]] for name in divisible}
        source = ASTSource(fn=jit_fn, signature=dict(signature), constexprs=dict(constexprs), attrs=attrs)
        compiled = triton.compile(
            source, target=GPUTarget("cuda", arch, _CUDA_WARP_SIZE), options={"num_warps": num_warps, **(options or {})}
        )
        _asm_cache[key] = {stage: compiled.asm[stage] for stage in ("ptx", "llir", "cubin")
                           if stage in compiled.asm}
    return _asm_cache[key]


def compile_ptx(fn, signature, constexprs, divisible_by_16, num_warps, arch: int = 90) -> str:
    """The PTX of ``compile_asm``."""
    return compile_asm(fn, signature, constexprs, divisible_by_16, num_warps, arch)["ptx"]


# ld.global / st.global with any cache/eviction qualifiers, an optional vector count and the element type,
# e.g. "@%p1 ld.global.nc.L1::evict_last.v4.b32" or "st.global.b16".
_GLOBAL_ACCESS = re.compile(
    r"\b(?P<op>ld|st)\.global(?:\.[A-Za-z0-9_:]+?)*?(?:\.v(?P<vec>\d+))?\.[bfsu](?P<bits>\d+)\b"
)


def access_widths(ptx: str) -> dict[str, dict[int, int]]:
    """Count global loads ("ld") and stores ("st") in ``ptx`` by access width in bytes.

    E.g. ``{"ld": {16: 3, 2: 1}, "st": {16: 1}}``; width = vector count x element bits / 8.
    """
    counts = {"ld": Counter(), "st": Counter()}
    for line in ptx.splitlines():
        code = line.split("//", 1)[0]
        for match in _GLOBAL_ACCESS.finditer(code):
            vector_count = int(match["vec"] or 1)
            counts[match["op"]][vector_count * int(match["bits"]) // 8] += 1
    return {op: dict(sorted(widths.items())) for op, widths in counts.items()}


_DEBUG_REF = re.compile(r"!dbg !(?P<id>\d+)")
_LOCATION = re.compile(r"^!(?P<id>\d+) = !DILocation\(line: (?P<line>\d+)")


def access_widths_by_line(llir: str) -> dict[int, dict[str, set[int]]]:
    """The widths in bytes of the global loads and stores of a compiled kernel by the line of
    its source file each was compiled from: ``{12: {"ld": {16}}, 20: {"st": {16}}}``. Read from
    the LLVM IR (``asm["llir"]``), where each access is the inline-asm `ld.global`/`st.global`
    that the PTX holds verbatim, with its source location attached (the PTX's own `.loc` lines
    follow LLVM's scheduling: Triton 3.9 attributes loads to the lines that use them)."""
    lines = {m["id"]: int(m["line"]) for line in llir.splitlines()
             if (m := _LOCATION.match(line))}
    found: dict[int, dict[str, set[int]]] = {}
    for line in llir.splitlines():
        ref = _DEBUG_REF.search(line)
        if ref is None or ref["id"] not in lines:
            continue
        asm = line.replace("\\09", "\t").replace("\\0A", "\n")    # LLVM's escapes in asm text
        for match in _GLOBAL_ACCESS.finditer(asm):
            width = int(match["vec"] or 1) * int(match["bits"]) // 8
            found.setdefault(lines[ref["id"]], {}).setdefault(match["op"], set()).add(width)
    return found


def max_width(widths: dict[str, dict[int, int]], op: str) -> int:
    """The widest access of kind ``op`` ("ld" or "st") in bytes; 0 if there is none."""
    return max(widths[op], default=0)


def min_width(widths: dict[str, dict[int, int]], op: str) -> int:
    """The narrowest access of kind ``op`` ("ld" or "st") in bytes; 0 if there is none."""
    return min(widths[op], default=0)
