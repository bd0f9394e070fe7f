"""Arguments and calls: any Python signature (keyword-only parameters, defaults, *args, **kwargs,
parameter names that generated code also uses), torch functions and methods called with
keyword names, and `executors` given as one name or one executor. Generated signatures and
calls are compared with eager."""

import builtins
import functools
import keyword

import ir
import pytest
import torch
from hypothesis import given, settings, strategies as st

CONSTANT, SYMBOLIC = "constant values", "symbolic values"
MODES = [CONSTANT, SYMBOLIC]

# Names that trace, prologue and launcher code generate or read, and ordinary ones.
TRICKY_NAMES = ["x", "y", "t0", "t1", "i0", "i1", "x_0", "F", "torch", "math", "Tensor", "prims",
                "DEVICE_0", "opaque_a", "out0", "f_fusion_0", "computation", "prologue", "input",
                "args", "kwargs", "b_1"]
names = st.sampled_from(TRICKY_NAMES) | st.from_regex(r"[a-z_][a-z0-9_]{0,6}", fullmatch=True)
names = names.filter(lambda n: not keyword.iskeyword(n) and n not in ("_", "k", "v")
                     and not hasattr(builtins, n))


@st.composite
def signatures(draw):
    """(source of a function `f`, the kinds of its parameters): a sum of its arguments."""
    count = draw(st.integers(1, 6))
    params = draw(st.lists(names, min_size=count + 4, max_size=count + 4, unique=True))
    plain, star, keyword_only, star_star = (draw(st.integers(0, count)), draw(st.booleans()),
                                            draw(st.integers(0, 2)), draw(st.booleans()))
    plain = max(plain, 1)
    sig, kinds = [], []
    for name in params[:plain]:
        default = kinds and kinds[-1][1] == "default" or draw(st.booleans()) and len(kinds) > 0
        sig.append(f"{name}=1.5" if default else name)
        kinds.append((name, "default" if default else "plain"))
    if star:
        sig.append("*" + params[plain])
        kinds.append((params[plain], "star"))
    elif keyword_only:
        sig.append("*")
    for name in params[plain + 1:plain + 1 + keyword_only]:
        default = draw(st.booleans())
        sig.append(f"{name}=2" if default else name)
        kinds.append((name, "kw_default" if default else "kw"))
    if star_star:
        sig.append("**" + params[plain + 1 + keyword_only])
        kinds.append((params[plain + 1 + keyword_only], "star_star"))
    terms = []
    for name, kind in kinds:
        if kind == "star":
            terms.append(f"sum(v * (k + 2) for k, v in enumerate({name}))")
        elif kind == "star_star":
            terms.append(f"sum(v * len(k) for k, v in sorted({name}.items()))")
        else:
            terms.append(name)
    first = kinds[0][0]
    body = " + ".join(f"({t}) * {k + 1}" for k, t in enumerate(terms))
    return f"def f({', '.join(sig)}):\n    return {first} * 0 + {body}\n", kinds


@st.composite
def calls(draw, kinds):
    """(args, kwargs) for a function with these parameters; tensors and ints mixed."""
    def value():
        return draw(st.sampled_from(["tensor", "tensor", "int"]))

    def make(kind):
        return torch.randn(3, 4) if kind == "tensor" else draw(st.integers(-3, 3))

    args, kwargs = [torch.randn(3, 4)], {}
    keyword_from = draw(st.integers(1, len(kinds)))
    for i, (name, kind) in enumerate(kinds[1:], start=1):
        if kind in ("plain", "default"):
            if kind == "default" and draw(st.booleans()) and i >= keyword_from:
                continue        # left to its default
            if i < keyword_from and not kwargs:
                args.append(make(value()))
            else:
                kwargs[name] = make(value())
        elif kind == "star":
            if kwargs:          # *args cannot follow keywords: fill the plain ones positionally
                for plain, _ in kinds[1:i]:
                    if plain in kwargs:
                        args.append(kwargs.pop(plain))
            args.extend(make(value()) for _ in range(draw(st.integers(0, 3))))
        elif kind in ("kw", "kw_default"):
            if kind == "kw" or draw(st.booleans()):
                kwargs[name] = make(value())
        else:
            extra = draw(st.lists(names.filter(lambda n: n not in dict(kinds)), max_size=3,
                                  unique=True))
            kwargs.update({n: make(value()) for n in extra})
    return args, kwargs


@pytest.mark.parametrize("mode", MODES)
@settings(max_examples=25)
@given(data=st.data())
def test_generated_signatures_and_names(mode, data):
    source, kinds = data.draw(signatures())
    ns = {}
    exec(source, ns)
    f = ns["f"]
    j = ir.jit(f, executors="torch", cache=mode)
    for _ in range(2):
        args, kwargs = data.draw(calls(kinds))
        torch.testing.assert_close(j(*args, **kwargs), f(*args, **kwargs))
    args, kwargs = data.draw(calls(kinds))
    for _ in range(2):      # the same call twice: the second is a hit
        torch.testing.assert_close(j(*args, **kwargs), f(*args, **kwargs))
    assert ir.cache_stats(j).hits >= 1


# torch callables with their parameter names as torch documents them, and argument makers
def _t(*shape):
    return lambda: torch.randn(*shape)


KEYWORD_CALLS = [
    (torch.add, ["input", "other"], [_t(3, 4), _t(4)]),
    (torch.sub, ["input", "other"], [_t(3, 4), _t(3, 4)]),
    (torch.mul, ["input", "other"], [_t(3, 4), lambda: 2.5]),
    (torch.div, ["input", "other"], [_t(3, 4), _t(1, 4)]),
    (torch.maximum, ["input", "other"], [_t(3, 4), _t(3, 4)]),
    (torch.minimum, ["input", "other"], [_t(3, 4), _t(4)]),
    (torch.pow, ["input", "exponent"], [_t(3, 4), lambda: 2]),
    (torch.eq, ["input", "other"], [_t(3, 4), _t(3, 4)]),
    (torch.lt, ["input", "other"], [_t(3, 4), lambda: 0.0]),
    (torch.exp, ["input"], [_t(3, 4)]),
    (torch.sigmoid, ["input"], [_t(3, 4)]),
    (torch.where, ["condition", "input", "other"],
     [lambda: torch.randn(3, 4) > 0, _t(3, 4), _t(4)]),
    (torch.clamp, ["input", "min", "max"], [_t(3, 4), lambda: -0.5, lambda: 0.5]),
    (torch.nn.functional.relu, ["input"], [_t(3, 4)]),
    (torch.nn.functional.silu, ["input"], [_t(3, 4)]),
    (torch.nn.functional.pad, ["input", "pad"], [_t(3, 4), lambda: (1, 2)]),
    (torch.cat, ["tensors", "dim"], [lambda: (torch.randn(3, 4), torch.randn(3, 2)), lambda: 1]),
    (torch.stack, ["tensors", "dim"], [lambda: (torch.randn(3, 4), torch.randn(3, 4)),
                                       lambda: 0]),
    (torch.reshape, ["input", "shape"], [_t(3, 4), lambda: (4, 3)]),
    (torch.flatten, ["input", "start_dim", "end_dim"], [_t(2, 3, 4), lambda: 0, lambda: 1]),
    (torch.unsqueeze, ["input", "dim"], [_t(3, 4), lambda: 1]),
    (torch.squeeze, ["input", "dim"], [_t(3, 1), lambda: 1]),
    (torch.transpose, ["input", "dim0", "dim1"], [_t(3, 4), lambda: 0, lambda: 1]),
    (torch.permute, ["input", "dims"], [_t(2, 3, 4), lambda: (2, 0, 1)]),
    (torch.narrow, ["input", "dim", "start", "length"],
     [_t(3, 4), lambda: 1, lambda: 1, lambda: 2]),
    (torch.zeros_like, ["input"], [_t(3, 4)]),
    (torch.full_like, ["input", "fill_value"], [_t(3, 4), lambda: 7.0]),
    (torch.broadcast_to, ["input", "size"], [_t(4), lambda: (3, 4)]),
]
METHOD_CALLS = [  # (method name, keyword names after self, argument makers after self)
    ("add", ["other"], [_t(4)]), ("mul", ["other"], [_t(3, 4)]), ("sub", ["other"], [_t(4)]),
    ("div", ["other"], [lambda: 2.0]), ("clamp", ["min", "max"], [lambda: -1.0, lambda: 1.0]),
    ("reshape", ["shape"], [lambda: (2, 6)]),
    ("permute", ["dims"], [lambda: (1, 0)]), ("expand", ["size"], [lambda: (2, 3, 4)]),
    ("transpose", ["dim0", "dim1"], [lambda: 1, lambda: 0]), ("type_as", ["other"],
                                                              [lambda: torch.ones(2).half()]),
    ("unsqueeze", ["dim"], [lambda: 0]), ("flatten", ["start_dim"], [lambda: 0]),
]


@pytest.mark.parametrize("mode", MODES)
@settings(max_examples=60)
@given(data=st.data())
def test_torch_functions_and_methods_with_keyword_names(mode, data):
    method = data.draw(st.booleans(), label="method")
    table = METHOD_CALLS if method else KEYWORD_CALLS
    target, keywords, makers = data.draw(st.sampled_from(table), label="call")
    values = [torch.randn(3, 4)] * method + [make() for make in makers]
    positional = data.draw(st.integers(int(method), len(values)), label="positional")
    keywords = ([None] if method else []) + keywords

    def f(v0, v1=None, v2=None, v3=None):   # every value is an argument of the jitted function
        given = (v0, v1, v2, v3)[:len(values)]
        kwargs = dict(zip(keywords[positional:], given[positional:]))
        if method:
            return getattr(given[0], target)(*given[1:positional], **kwargs)
        return target(*given[:positional], **kwargs)

    j = ir.jit(f, executors="torch", cache=mode)
    torch.testing.assert_close(j(*values), f(*values))


def test_executors_as_one_name_or_one_executor():
    def f(x):
        return x * 2

    x = torch.randn(3)
    for executors in ("torch", ir.torch_executor, ["torch"], (ir.torch_executor,)):
        j = ir.jit(f, executors=executors)
        torch.testing.assert_close(j(x), f(x))
        assert j.executors == [ir.torch_executor]
    with pytest.raises(ValueError, match="no executor named 'tritn'"):
        ir.jit(f, executors="tritn")


def test_past_the_cache_limit_the_eager_call_keeps_the_signature():
    def f(x, *rest, scale=2, **named):
        return x * scale * int(x.shape[0]) + sum(rest) + sum(named.values())

    j = ir.jit(f, executors="torch", cache=SYMBOLIC, cache_limit=1)   # one entry per size
    with pytest.warns(UserWarning, match="cache limit"):
        for n in (2, 3, 4):
            x = torch.randn(n)
            torch.testing.assert_close(j(x, x, 1, scale=3, a=x), f(x, x, 1, scale=3, a=x))
    assert ir.cache_stats(j).eager == 2


@pytest.mark.parametrize("mode", ["constant values", "symbolic values"])
def test_fn_is_called_as_the_caller_called_it(mode):
    """A decorator of fn may read its *args and **kwargs (transformers' merge_with_config_defaults
    sets `use_cache` in kwargs where the caller did not pass it): fn is traced with the call's own
    positional and keyword arguments, defaults left out, and each way of calling is its own
    entry."""
    def reads_the_call(f):
        @functools.wraps(f)
        def wrapper(x, *args, **kwargs):
            kwargs.setdefault("scale", 3.0)
            return f(x, *args, **kwargs) + len(args)
        return wrapper

    @reads_the_call
    def f(x, shift=0.0, scale=1.0):
        return x * scale + shift

    jf = ir.jit(f, cache=mode)
    x = torch.randn(4)
    for args, kwargs in [((x,), {}), ((x, 1.0), {}), ((x,), {"shift": 1.0}),
                         ((x,), {"scale": 2.0}), ((x, 1.0), {})]:
        torch.testing.assert_close(jf(*args, **kwargs), f(*args, **kwargs))
    with pytest.raises(TypeError, match="multiple values for argument 'scale'"):
        f(x, 1.0, 2.0)      # the decorator passes scale twice: eager's error, and ours
    with pytest.raises(TypeError, match="multiple values for argument 'scale'"):
        jf(x, 1.0, 2.0)
