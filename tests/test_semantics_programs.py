"""Generated programs with every class of the eager-semantics issue at once: comparisons with
constants, int8/uint8/int16/int32 inputs through pads, wheres and casts, copy ops, in-place calls
(traced functionally), in both executors and both cache modes, against eager. The soak:
SEMANTICS_PROGRAMS=N (examples; HYPOTHESIS_PROFILE=explore draws new ones each run)."""
import os

from hypothesis import event, given, note, settings

from programs import ALL_INPUT_DTYPES, FLOAT_DTYPES, NARROW_INTS, assert_matches_eager, programs
from semantics import grid, jit

import torch

SEMANTIC_OPS = ("compare_const", "copy", "in_place", "arith", "where", "pad", "cast", "cat",
                "index", "max_min", "clamp", "unary", "layout", "compare", "stack", "expand",
                "pow", "masked_fill", "split")
EXAMPLES = int(os.environ.get("SEMANTICS_PROGRAMS", "25"))


@settings(max_examples=EXAMPLES)
@given(program=programs(max_ops=5, op_names=SEMANTIC_OPS, input_dtypes=ALL_INPUT_DTYPES,
                        main_dtypes=FLOAT_DTYPES + (torch.int32,) + NARROW_INTS),
       where=grid)
def test_generated_programs_keep_eager_semantics(program, where):
    executor, mode = where
    note(f"{executor}, {mode}\n{program.describe()}")
    tensors = [t for t in program.inputs if isinstance(t, torch.Tensor)]
    event("integer inputs" if any(not t.is_floating_point() and t.dtype != torch.bool
                                  for t in tensors) else "float/bool inputs")
    jfn = jit(program.fn, executor, mode)
    assert_matches_eager(program, jfn(*program.inputs))
    assert_matches_eager(program, jfn(*program.inputs))     # the cached entry
