"""Containers of arguments and outputs, by `torch.utils._pytree` (as torch.compile, torch.export).

Every node type pytree knows keeps its type and nesting through `ir.jit`: tuples, lists, dicts,
OrderedDicts and their registered subclasses (transformers' `ModelOutput`), namedtuples,
dataclasses registered with pytree, at any depth.

- An argument that is a **deep** container (anything but a tuple, list or `**kwargs` dict of
  leaves) reaches the traces as the flat tuple of its leaves (`flat_argument`, at every call); its
  cache key holds its tree structure, so one entry sees one structure. A shallow tuple, list or
  `**kwargs` dict is passed as it is (the common case costs nothing more).
- The traced function receives each container rebuilt around its leaves' proxies (`rebuild`): a
  list argument is a list, a namedtuple a namedtuple.
- A `torch.Size` stays a `torch.Size` everywhere the traced code or the caller sees it
  (`unflatten`, `tree_map`): torch registers it with pytree to unflatten as a plain tuple (for its
  own tracer's sake), which would otherwise turn `return x.shape` into a tuple.
- Outputs: a structure of plain tuples, lists and dicts is the trace's own return value; any other
  structure is returned by the trace as its flat leaves and rebuilt at each call
  (`output_structure`). A leaf that is neither a tensor nor a number is refused, naming its path
  (`out.past_key_values`).
"""
from __future__ import annotations

import re

import torch
from torch.utils import _pytree as pytree

from ir.proxies import Var

_PLAIN = (tuple, list, dict)
# leaves an output may hold besides traced values: numbers, and literals that generated code
# writes as themselves
_OUTPUT_LITERALS = (bool, int, float, complex, str, type(None), torch.dtype, torch.layout,
                    torch.memory_format, torch.device)


class Keywords(dict):
    """The **kwargs of a call (a pytree node, rebuilt as Keywords)."""


pytree.register_pytree_node(
    Keywords, lambda d: (list(d.values()), list(d)),
    lambda values, keys: Keywords(zip(keys, values)),
    flatten_with_keys_fn=lambda d: ([(pytree.MappingKey(k), v) for k, v in d.items()], list(d)))


def is_shallow(a) -> bool:
    """A plain tuple or list, or a `**kwargs` dict, of leaves: the traces take it as it is."""
    if type(a) in (tuple, list):
        return all(map(pytree.tree_is_leaf, a))
    return type(a) is Keywords and all(map(pytree.tree_is_leaf, a.values()))


def is_deep(a) -> bool:
    """A container argument passed to the traces as its flat leaves."""
    return not pytree.tree_is_leaf(a) and not is_shallow(a)


def flat_argument(a) -> tuple:
    """What the traces take for a deep container argument: its leaves, in pytree order."""
    return tuple(pytree.tree_leaves(a))


def leaf_names(name: str, a) -> list[str]:
    """A name per leaf of a deep container argument, from its path: `cfg_scale`, `x_0_1`."""
    return [re.sub(r"\W+", "_", name + pytree.keystr(path)).strip("_")
            for path, _ in pytree.tree_flatten_with_path(a)[0]]


def unflatten(leaves, spec):
    """`pytree.tree_unflatten`, except that a torch.Size node is rebuilt as a torch.Size."""
    if spec.type is torch.Size:
        return torch.Size(leaves)
    if not _holds_size(spec):
        return spec.unflatten(leaves)
    leaves, children, start = list(leaves), [], 0
    for child in spec.children():
        children.append(unflatten(leaves[start:start + child.num_leaves], child))
        start += child.num_leaves
    return pytree.SUPPORTED_NODES[spec.type].unflatten_fn(children, spec.context)


def _holds_size(spec) -> bool:
    return spec.type is torch.Size or any(map(_holds_size, spec.children()))


def tree_map(fn, tree):
    """`pytree.tree_map` keeping torch.Size nodes torch.Size."""
    leaves, spec = pytree.tree_flatten(tree)
    return unflatten([fn(x) for x in leaves], spec)


def rebuild(argument, traced):
    """The traced function's view of an argument: `traced` (the traces' input: a proxy, or the
    tuple or dict of a container's leaves' proxies) in the container `argument` is."""
    if pytree.tree_is_leaf(argument):
        return traced
    leaves = traced.values() if isinstance(traced, dict) else traced
    return unflatten(list(leaves), pytree.tree_structure(argument))


def _is_plain(x) -> bool:
    if type(x) in _PLAIN:
        return all(map(_is_plain, x.values() if type(x) is dict else x))
    return pytree.tree_is_leaf(x)


def output_structure(outputs):
    """(what the trace returns, the tree structure to rebuild at each call or None): `outputs`
    itself where it is plain tuples, lists and dicts, else its flat leaves. Raises TypeError
    naming the path of a leaf that is neither a tensor nor a number."""
    leaves, spec = pytree.tree_flatten_with_path(outputs)
    for path, leaf in leaves:
        if not isinstance(leaf, (Var, *_OUTPUT_LITERALS)):
            raise TypeError(
                f"ir.jit: the output out{pytree.keystr(path)} is a {type(leaf).__name__}, which "
                "is neither a tensor nor a number; return tensors and numbers in containers that "
                "torch.utils._pytree knows (tuples, lists, dicts, namedtuples, registered "
                "dataclasses and classes), or, for a model that returns such objects (a "
                "transformers KV cache), use torch.compile(model, backend=\"triton_exec\"), "
                "whose graphs run on our kernels while Python handles the objects")
    if _is_plain(outputs):
        return outputs, None
    return tuple(leaf for _, leaf in leaves), pytree.tree_structure(outputs)


def rebuilding(computation, spec):
    """The computation returning its outputs in the structure `spec` (its trace returns them
    flat)."""
    def computation_in_structure(*args):
        return unflatten(computation(*args), spec)
    return computation_in_structure
