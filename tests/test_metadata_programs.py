"""Random programs whose Python control flow reads tensor metadata and Python-visible properties
(`dim()`, `ndim`, `shape`/`size()`/`numel()`, `dtype`, `device`, `is_contiguous()`, `stride()`,
`requires_grad`, `is_leaf`, `is_floating_point()`, `isinstance`, `len()`, iteration over the
first dim, `bool()`/`int()`/`.item()` that eager refuses whatever the data) give eager's result
under `ir.jit`: the tensor's values, dtype, shape and `requires_grad`, every Python value the
program collected with its Python type, or eager's exception type; in both cache modes, with the
Triton and the torch executor, on a first call and on a hit.

Layout queries (`stride()`, `is_contiguous()`) are asked of the argument and of views of it,
where eager promises a layout; a value the jit computes is new contiguous memory (README,
"Numerical contract")."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from hypothesis import given, note, settings
from hypothesis import strategies as st

from semantics import EXAMPLES, grid, jit, outcome
from programs import assert_close, layout_tensors
from test_traced_shapes import assert_same_python

# (predicate or value expression of `t`, applies(t, is_view_of_argument))
QUERIES = (
    ("t.dim() == 2", None), ("t.ndim > 1", None), ("t.ndimension()", None),
    ("t.shape[-1] % 2 == 0", lambda t, v: t.ndim > 0), ("t.size(0) > 2", lambda t, v: t.ndim > 0),
    ("t.numel() > 8", None),
    ("t.nelement()", None), ("torch.numel(t)", None), ("t.shape", None), ("t.size()", None),
    ("len(t) > 1", lambda t, v: t.ndim > 0), ("t.dtype", None),
    ("t.dtype == torch.float32", None), ("t.dtype in (torch.float16, torch.bfloat16)", None),
    ("t.is_floating_point()", None), ("torch.is_floating_point(t)", None),
    ("t.dtype.is_floating_point", None), ("t.element_size()", None), ("t.itemsize", None),
    ("t.nbytes", None), ("torch.finfo(t.dtype).bits", lambda t, v: t.is_floating_point()),
    ("torch.iinfo(t.dtype).max", lambda t, v: not t.is_floating_point()),
    ("t.device", None), ("t.device.type == 'cpu'", None), ("t.is_cuda", None),
    ("t.get_device()", None), ("str(t.device)", None), ("t.layout is torch.strided", None),
    ("t.is_contiguous()", lambda t, v: v), ("t.stride()", lambda t, v: v),
    ("t.stride(-1) == 1", lambda t, v: v and t.ndim > 0), ("t.dim_order()", lambda t, v: v),
    ("t.requires_grad", None), ("t.is_leaf", None), ("t.detach().requires_grad", None),
    ("isinstance(t, torch.Tensor)", None), ("torch.is_tensor(t)", None),
    ("isinstance(t, torch.nn.Parameter)", None), ("t.is_complex()", None),
    ("t.is_sparse", None), ("t.type()", None), ("t.is_same_size(t.t())", lambda t, v: t.ndim == 2),
    ("[r.shape for r in t]", lambda t, v: t.ndim > 0), ("len(list(t))", lambda t, v: t.ndim > 0),
    ("len(t.unbind(0))", lambda t, v: t.ndim > 0), ("t.T.shape", lambda t, v: t.ndim == 2),
    ("t.new_zeros(t.shape[-1:]).dtype", lambda t, v: t.ndim > 0),
    ("torch.zeros_like(t).requires_grad", None),
)
# Python reading the data of a tensor eager refuses whatever the data: several elements or none
REFUSED_READS = ("bool(t)", "int(t)", "float(t)", "t.item()", "[0, 1, 2][t]",
                 "1 if t else 0", "operator.index(t)")
# (transform of `t`, applies(t), keeps t a view of the argument)
TRANSFORMS = (
    ("t * 2", None, False), ("t + 1", None, False), ("t.float()", None, None),
    ("t.to(torch.bfloat16)", None, False), ("t.sum(-1)", lambda t: t.ndim > 0, False),
    ("t.t()", lambda t: t.ndim == 2, True), ("t.transpose(0, -1)", lambda t: t.ndim > 0, True),
    ("t[..., ::2]", lambda t: t.ndim > 0, True), ("t.unsqueeze(0)", None, True),
    ("t.flatten()", None, None), ("t.contiguous()", None, None), ("t.detach()", None, True),
    ("t[0]", lambda t: t.ndim > 0, True), ("F.relu(t)", lambda t: t.dtype != torch.bool, False),
    ("t.abs()", lambda t: t.dtype != torch.bool, False),
)


@st.composite
def metadata_programs(draw, example: torch.Tensor):
    """Source of `f(x)`: steps that collect a query of the current tensor `t` or branch on one
    into one of two transforms; maybe a final read eager refuses. Built on the eager run of each
    step, so every query and transform applies to the tensor it meets."""
    lines, t, view = ["t = x", "out = []"], example, True
    for _ in range(draw(st.integers(1, 5))):
        queries = [q for q, applies in QUERIES if applies is None or applies(t, view)]
        query = draw(st.sampled_from(queries))
        namespace = {"t": t, "torch": torch, "F": F}
        value = eval(query, namespace)  # noqa: S307  (a generated test expression)
        transforms = [(e, keeps) for e, applies, keeps in TRANSFORMS
                      if applies is None or applies(t)]
        if isinstance(value, bool) and draw(st.booleans()):
            (yes, keeps_yes), (no, keeps_no) = draw(st.lists(
                st.sampled_from(transforms), min_size=2, max_size=2))
            lines += [f"if {query}:", f"    t = {yes}", "else:", f"    t = {no}"]
            chosen, keeps = (yes, keeps_yes) if value else (no, keeps_no)
        else:
            lines.append(f"out.append({query})")
            chosen, keeps = draw(st.sampled_from(transforms))
            lines.append(f"t = {chosen}")
        new = eval(chosen, namespace)   # noqa: S307
        # .float() of a float32 view, .contiguous() of a contiguous one: eager returns the view
        view = view and (keeps or (keeps is None and new is t))
        t = new
    if t.numel() != 1 and draw(st.booleans()):
        lines.append(f"out.append({draw(st.sampled_from(REFUSED_READS))})")
    body = "\n".join(f"    {line}" for line in lines)
    return f"def f(x):\n{body}\n    return t, out\n"


def compile_program(source):
    import operator
    namespace = {"torch": torch, "F": F, "operator": operator}
    exec(source, namespace)     # noqa: S102
    return namespace["f"]


DTYPES = (torch.float32, torch.float32, torch.bfloat16, torch.float16, torch.int32)


@settings(max_examples=EXAMPLES)
@given(data=st.data(), where=grid, dtype=st.sampled_from(DTYPES), grad=st.booleans(),
       shape=st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple))
def test_metadata_programs_match_eager(data, where, dtype, grad, shape):
    executor, mode = where
    x = data.draw(layout_tensors(shape, dtype, torch.Generator().manual_seed(0)))
    x.requires_grad_(grad and dtype.is_floating_point)
    source = data.draw(metadata_programs(x))
    note(f"{executor}, {mode}, x: {dtype}{list(shape)} stride {x.stride()}, "
         f"requires_grad {x.requires_grad}\n{source}")
    fn = compile_program(source)
    jfn = jit(fn, executor, mode)
    expected = outcome(fn, x)
    for _ in range(2):      # the first call traces, the second hits its entry
        actual = outcome(jfn, x)
        if isinstance(expected, type):
            assert actual is expected, f"eager raised {expected.__name__}, ir.jit gave {actual}"
            continue
        assert not isinstance(actual, type), f"ir.jit raised {actual.__name__}"
        (t, out), (expected_t, expected_out) = actual, expected
        assert_close(t.detach(), expected_t.detach())
        assert t.requires_grad == expected_t.requires_grad
        assert_same_python(out, expected_out)
