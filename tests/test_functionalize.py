"""Functionalization of in-place ops (`ir.functionalize`): random programs of in-place ops on
intermediates, on arguments and on views of both (`detach()` and `.data` included), some in
`no_grad` blocks, against eager in both executors and cache modes, with requires_grad subsets: the outputs, every argument's final value, which arguments'
version counters moved, and the gradients equal eager's; a program eager refuses (a write into a
leaf that requires grad or into an expanded view, an int tensor given a float result, a shape that
does not broadcast) raises eager's exception type."""
from __future__ import annotations

import os

import ir
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, note, settings
from hypothesis import strategies as st

from semantics import grid, jit, outcome

VIEWS = ("[1:]", "[:, ::2]", "[0]", "[..., :1]", "[None]", ".t()", ".transpose(0, -1)",
         ".view(-1)", ".reshape(-1)", ".unsqueeze(0)", ".narrow(-1, 0, 1)", ".diagonal()",
         ".expand(2, *{h}.shape)", ".flip(0)", ".contiguous()", ".split(1)[0]", ".detach()",
         ".data")
IN_PLACE = ("{t}.add_({o})", "{t}.mul_({o})", "{t}.sub_({o}, alpha=2)", "{t} += {o}",
            "{t} *= {o}", "{t}.clamp_(min=-0.5)", "{t}.zero_()", "{t}.fill_(2.0)",
            "{t}.copy_({o})", "{t}.masked_fill_({t} > 0, 0.25)", "{t}[0] = {o}",
            "{t}[..., :1] = {o}", "torch.relu_({t})", "F.relu({t}, inplace=True)",
            "torch.mul({t}, 2, out={t})", "{t}.div_(2)", "{t}.index_fill_(0, torch.tensor([0]), 1.5)")
NUMBERS = ("0.5", "2.0", "-1.0", "3")
EXAMPLES = int(os.environ.get("FUNCTIONALIZE_EXAMPLES", "25"))   # raise it for a soak


@st.composite
def in_place_programs(draw):
    """Source of `f(x, y)`: up to 5 steps that make intermediates, views and in-place writes;
    it returns every value it made. A write's operand is the target itself, a number or a value
    of another storage: an operand partly overlapping the target is undefined in eager (its
    kernels read it while writing) where eager does not refuse it."""
    names, lines = ["x", "y"], []
    storage = {"x": "x", "y": "y"}
    for n in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(("fresh", "view", "view", "write", "write", "write")))
        h = draw(st.sampled_from(names))
        if kind == "fresh":
            lines.append(f"h{n} = {h} * 1.5")
            storage[f"h{n}"] = f"h{n}"
        elif kind == "view":
            lines.append(f"h{n} = {h}" + draw(st.sampled_from(VIEWS)).format(h=h))
            storage[f"h{n}"] = storage[h]
        else:
            operands = [o for o in names if o == h or storage[o] != storage[h]]
            other = draw(st.sampled_from(operands + list(NUMBERS)))
            write = draw(st.sampled_from(IN_PLACE)).format(t=h, o=other)
            hidden = draw(st.sampled_from(("", "", "with torch.no_grad(): ")))
            lines.append(hidden + write)    # a write autograd does not see keeps h's history
            continue
        names.append(f"h{n}")
    body = "\n".join(f"    {line}" for line in lines)
    return f"def f(x, y):\n{body}\n    return ({', '.join(names)},)\n"


def compile_program(source):
    namespace = {"torch": torch, "F": F}
    exec(source, namespace)
    return namespace["f"]


def call(fn, leaves, as_leaf):
    """fn on the arguments made from `leaves` (a leaf itself, or a non-leaf copy of it); returns
    (outputs, arguments, their versions before) or the exception type."""
    args = [leaf if keep or not leaf.requires_grad else leaf * 1 for leaf, keep in zip(
        leaves, as_leaf)]
    versions = [a._version for a in args]
    result = outcome(fn, *args)
    return result, args, versions


def gradients(leaves, result, args):
    """The leaves' gradients of a weighted sum of every float output and argument, or the
    exception type backward raised."""
    values = [v for v in (*result, *args) if v.is_floating_point() and v.requires_grad]
    if not values:
        return None
    loss = sum(((v.float() * (i + 1)).sum() for i, v in enumerate(values)), torch.zeros(()))
    try:
        loss.backward()
    except RuntimeError as e:
        return type(e)
    return [leaf.grad if leaf.is_leaf else None for leaf in leaves]


def leaves_for(draw_values, dtypes, grads):
    return [v.to(dtype, copy=True).requires_grad_(grad and dtype.is_floating_point)
            for v, dtype, grad in zip(draw_values, dtypes, grads)]


@settings(max_examples=EXAMPLES)
@given(source=in_place_programs(), where=grid,
       dtypes=st.tuples(*[st.sampled_from((torch.float32, torch.float32, torch.int32))] * 2),
       grads=st.tuples(st.booleans(), st.booleans()), as_leaf=st.tuples(st.booleans(),
                                                                         st.booleans()),
       rows=st.integers(2, 3), seed=st.integers(0, 2**16))
def test_random_in_place_programs_match_eager(source, where, dtypes, grads, as_leaf, rows, seed):
    executor, mode = where
    note(f"{executor}, {mode}, dtypes {dtypes}, requires_grad {grads}, leaves {as_leaf}\n{source}")
    fn = compile_program(source)
    values = torch.randn(2, rows, 3, generator=torch.Generator().manual_seed(seed)) * 2
    eager_leaves = leaves_for(values, dtypes, grads)
    jit_leaves = leaves_for(values, dtypes, grads)
    expected, eager_args, eager_versions = call(fn, eager_leaves, as_leaf)
    if not isinstance(expected, type):      # eager refuses to use some views only when used
        expected = next((e for e in map(outcome, [torch.clone] * len(expected), expected)
                         if isinstance(e, type)), expected)
    actual, jit_args, jit_versions = call(jit(fn, executor, mode), jit_leaves, as_leaf)
    if isinstance(expected, type):
        assert actual is expected, f"eager raised {expected.__name__}, ir.jit gave {actual}"
        return
    assert not isinstance(actual, type), f"ir.jit raised {actual.__name__}"
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a, e)
    for i, (a, e) in enumerate(zip(jit_args, eager_args)):
        torch.testing.assert_close(a, e, msg=lambda m: f"argument {i}: {m}")
        assert (a._version > jit_versions[i]) == (e._version > eager_versions[i]), f"argument {i}"
    assert actual[0] is jit_args[0] and actual[1] is jit_args[1]     # returned as themselves
    expected_grads = gradients(eager_leaves, expected, eager_args)
    actual_grads = gradients(jit_leaves, actual, jit_args)
    if isinstance(expected_grads, type):    # a value eager saved for backward was overwritten:
        return                              # ir.jit saves a copy (README, Numerical contract)
    if expected_grads is None:
        assert actual_grads is None
        return
    for a, e in zip(actual_grads, expected_grads):
        torch.testing.assert_close(a, e)


def test_a_write_through_a_view_updates_the_argument_and_its_other_views():
    def f(x):
        rows, column = x[1:], x[:, 0]
        rows.mul_(10)
        column.add_(1)          # sees the rows' write
        return rows, column, x

    for executor, mode in (("torch", "constant values"), ("triton", "symbolic values")):
        x, expected_x = torch.arange(12.0).view(3, 4), torch.arange(12.0).view(3, 4)
        expected = f(expected_x)
        actual = jit(f, executor, mode)(x)
        for a, e in zip(actual, expected):
            torch.testing.assert_close(a, e)
        assert actual[2] is x and torch.equal(x, expected_x)


def test_an_in_place_op_on_an_expanded_view_raises_eagers_error():
    def f(x):
        x.expand(2, 3).add_(1)
        return x

    x = torch.zeros(3)
    try:
        f(x.clone())
    except RuntimeError as e:
        message = str(e)
    with_jit = outcome(jit(f, "torch", "constant values"), x)
    assert with_jit is RuntimeError and torch.equal(x, torch.zeros(3)) and "memory" in message


def test_in_place_ops_eager_refuses_raise_its_error_type():
    cases = [lambda x: x.add_(0.5),                               # int target, float result
             lambda x: x.add_(torch.ones(2, 3, dtype=torch.int32)),   # does not broadcast
             lambda x: torch.add(x, 1, out=torch.zeros(3, dtype=torch.int8) > 0)]
    for f in cases:
        x = torch.zeros(3, dtype=torch.int32)
        assert outcome(jit(f, "torch", "constant values"), x) is outcome(f, x.clone())
        assert torch.equal(x, torch.zeros(3, dtype=torch.int32))


def test_whether_a_reshape_sees_a_later_write_follows_the_inputs_layout():
    def f(x):
        flat = x.reshape(-1)    # a view of a contiguous x, a copy of a transposed one
        x.add_(1)
        return flat * 1

    jitted = jit(f, "torch", "constant values")
    for x in (torch.zeros(2, 3), torch.zeros(3, 2).t(), torch.zeros(2, 3)):
        expected_x = x.clone() if x.is_contiguous() else x.t().clone().t()
        torch.testing.assert_close(jitted(x), f(expected_x))
        torch.testing.assert_close(x, expected_x)


@pytest.mark.parametrize("executors", [["triton"], ["torch"]])
def test_a_cache_hit_with_a_written_input_sharing_memory_is_refused_as_the_first_call(executors):
    """The entry traced x and y apart: a later call passing one tensor twice (or two views of
    one storage) must not hit it (y would not see x's write), but miss and be refused."""
    def f(x, y):
        x.add_(1)
        return y * 2
    jf = ir.jit(f, executors=executors)
    torch.testing.assert_close(jf(torch.zeros(4), torch.zeros(4)), torch.zeros(4))
    for x, y in [(t := torch.zeros(4), t), ((u := torch.zeros(8))[:4], u[4:])]:
        with pytest.raises(NotImplementedError, match="shares memory"):
            jf(x, y)
    assert ir.cache_stats(jf).hits == 0
