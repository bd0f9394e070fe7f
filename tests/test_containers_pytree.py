"""Containers by pytree: arguments and outputs keep every registered node type and its nesting,
at any depth: tuples, lists (a list argument returned as-is is a list), dicts, OrderedDicts and a
registered subclass (transformers' `ModelOutput`: `out.logits` and `out[0]` work), namedtuples,
dataclasses registered with pytree, `torch.Size`. Hypothesis builds random nestings of them, as
arguments (passed, computed on, returned) and as outputs, in both cache modes; a second call hits
the entry. A leaf that is neither a tensor nor a number is refused, naming its path."""
import collections
import dataclasses

import pytest
import torch
from hypothesis import given, note, settings
from hypothesis import strategies as st
from torch.utils import _pytree as pytree

import ir
import triton_exec  # noqa: F401  (registers the "triton" executor)

MODES = ["constant values", "symbolic values"]
Pair = collections.namedtuple("Pair", "first second")


@dataclasses.dataclass
class Block:
    weight: torch.Tensor
    extra: object


pytree.register_dataclass(Block)


class Output(collections.OrderedDict):
    """As transformers' ModelOutput: an OrderedDict subclass with attribute access, registered
    with pytree (ModelOutput registers each subclass so)."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def __getitem__(self, k):
        return list(self.values())[k] if isinstance(k, int) else super().__getitem__(k)


pytree.register_pytree_node(
    Output, lambda d: (list(d.values()), list(d.keys())),
    lambda values, keys: Output(zip(keys, values)),
    flatten_with_keys_fn=lambda d: ([(pytree.GetAttrKey(k), v) for k, v in d.items()],
                                    list(d.keys())))

NODES = {   # kind -> how to build one from a list of two children
    "tuple": tuple, "list": list,
    "dict": lambda c: {"a": c[0], "b": c[1]},
    "OrderedDict": lambda c: collections.OrderedDict(z=c[0], y=c[1]),
    "ModelOutput-like": lambda c: Output(logits=c[0], past_key_values=c[1]),
    "namedtuple": lambda c: Pair(*c),
    "dataclass": lambda c: Block(c[0], c[1]),
}


def leaves():
    return st.one_of(st.integers(1, 4).map(lambda n: torch.randn(n, 3)),
                     st.sampled_from([2, 0.5, None]))


trees = st.recursive(leaves(), lambda inner: st.tuples(
    st.sampled_from(sorted(NODES)), st.lists(inner, min_size=2, max_size=2)).map(
        lambda kc: NODES[kc[0]](kc[1])), max_leaves=6)


def assert_same_tree(actual, expected):
    assert type(actual) is type(expected), f"{type(actual).__name__} != {type(expected).__name__}"
    a_leaves, a_spec = pytree.tree_flatten(actual)
    e_leaves, e_spec = pytree.tree_flatten(expected)
    assert a_spec == e_spec
    for a, e in zip(a_leaves, e_leaves):
        assert type(a) is type(e)
        if isinstance(e, torch.Tensor):
            torch.testing.assert_close(a, e)
        else:
            assert a == e


def doubled(tree):
    """The tree with every tensor doubled and the rest kept: what the jitted function returns."""
    return pytree.tree_map(lambda v: v * 2 if isinstance(v, torch.Tensor) else v, tree)


@settings(max_examples=40)
@given(tree=trees, mode=st.sampled_from(MODES), executor=st.sampled_from(["torch", "triton"]))
def test_containers_round_trip_as_arguments_and_outputs(tree, mode, executor):
    note(repr(tree))
    as_is = ir.jit(lambda t: t, executors=[executor], cache=mode)
    computed = ir.jit(lambda t, k: (doubled(t), [t, k]), executors=[executor], cache=mode)
    for _ in range(2):      # the miss, then the entry
        assert_same_tree(as_is(tree), tree)
        assert_same_tree(computed(tree, 3), (doubled(tree), [tree, 3]))
    assert ir.cache_stats(computed).misses == 1


def test_a_list_argument_returned_as_is_is_a_list():
    x = [torch.randn(3), torch.randn(3)]
    assert type(ir.jit(lambda x: x)(x)) is list


@pytest.mark.parametrize("mode", MODES)
def test_model_output_keeps_attribute_and_index_access(mode):
    def forward(x, w):
        return Output(logits=x @ w, hidden=torch.tanh(x))
    x, w = torch.randn(2, 4), torch.randn(4, 3)
    out = ir.jit(forward, executors=["triton"], cache=mode)(x, w)
    assert type(out) is Output
    torch.testing.assert_close(out.logits, x @ w)
    torch.testing.assert_close(out[0], x @ w)
    torch.testing.assert_close(out.hidden, torch.tanh(x))


def test_a_structure_change_of_an_argument_is_a_new_entry():
    jfn = ir.jit(lambda p: p[0] * 2 + p[1])
    x = torch.randn(3)
    torch.testing.assert_close(jfn(Pair(x, x)), x * 3)
    torch.testing.assert_close(jfn(Pair(x, 1.0)), x * 2 + 1)
    torch.testing.assert_close(jfn((x, x)), x * 3)        # a tuple is not a Pair
    assert ir.cache_stats(jfn).misses == 3


def test_a_leaf_that_is_not_a_tensor_or_number_is_refused_naming_its_path():
    class Cache:
        pass

    def forward(x):
        return Output(logits=x * 2, past_key_values=Cache())
    with pytest.raises(TypeError, match=r"out\.past_key_values is a Cache(.|\n)*"
                                        r"torch\.compile\(model, backend=\"triton_exec\"\)"):
        ir.jit(forward)(torch.randn(3))
