"""Splitting a Dynamo graph around the ops `ir.jit` refuses, as ThunderFX does (`ir.dynamo`).

A graph is jitted whole where the tracer takes every op: autocast and grad-mode blocks included,
as Dynamo records them (`_enter_autocast`/`_exit_autocast`, `_set_grad_enabled` calls), since
the tracer honours the state they set (`ir.autocast`, `ir.grad_regions`). Where the tracer
refuses an op (an in-place method that changes a tensor's shape, `nonzero` or `.item()` where
Dynamo captures them, a complex argument, ...), the graph is split by
`torch.fx.passes.split_module` into pieces in graph order: runs of ops the tracer takes, each
jitted as a graph of its own (split again where it refuses another op), and runs of refused ops,
run as Dynamo captured them, on PyTorch. `split_module` carries an autocast or grad-mode block
that spans pieces into each piece it covers.

The refused op is found by tracing: the graph runs under `NodeTracker`, an FX interpreter that
remembers the node whose tracing raised; a refused argument is found by the jit's own check of
the call's arguments, and each op reading it is refused.
"""
from __future__ import annotations

import re

import torch
import torch.utils._pytree as pytree
from torch.fx.node import _get_qualified_name
from torch.fx.passes.split_module import split_module


class NodeTracker(torch.fx.Interpreter):
    """Runs a graph node by node (while `ir.jit` traces it); `failed` is the node whose run
    raised in the last run, or None. A run that raises leaves the grad mode and the autocast
    state as it found them (a graph sets them by calls, not by `with` blocks)."""

    def __init__(self, gm: torch.fx.GraphModule):
        super().__init__(gm)
        self.extra_traceback = False    # the tracer's message as it is
        self.failed: torch.fx.Node | None = None
        self.autocasts: list = []       # the autocast contexts the run entered and not exited

    def run(self, *args):
        self.failed, self.autocasts, grad_mode = None, [], torch.is_grad_enabled()
        try:
            return super().run(*args)
        except Exception:
            for context in reversed(self.autocasts):
                torch.amp._exit_autocast(context)
            torch._C._set_grad_enabled(grad_mode)
            raise

    def run_node(self, node):
        try:
            value = super().run_node(node)
        except Exception:
            self.failed = node
            raise
        if node.target is torch.amp._enter_autocast:
            self.autocasts.append(value)
        elif node.target is torch.amp._exit_autocast:
            self.autocasts.pop()
        return value


def refused_nodes(gm, tracker: NodeTracker, error: Exception) -> dict:
    """The nodes of `gm` that the tracer refused in this failed lookup, each with the reason:
    the node whose tracing raised, or else every op reading the argument the jit's error names
    (`ir.jit: argument 'x': a torch.complex64 tensor is not supported`)."""
    reason = f"{type(error).__name__}: {error}"
    if tracker.failed is not None and tracker.failed.op in ("call_function", "call_method"):
        return {tracker.failed: reason}
    named = re.match(r"ir\.jit: argument '(\w+)'", str(error))
    argument = next((n for n in gm.graph.nodes if n.op == "placeholder" and named
                     and n.name == named[1]), None)
    return {user: reason for user in (argument.users if argument is not None else ())
            if user.op in ("call_function", "call_method")}


def split(gm: torch.fx.GraphModule, refused) -> torch.fx.GraphModule:
    """`gm` as a graph of pieces (`submod_<k>`, k from 0 in graph order), each a maximal run of
    ops that are all refused (their names in `refused`) or all not. A node computing no tensor
    joins the piece it stands in: one setting global state (autocast, grad mode; `split_module`
    repeats it in the pieces its block spans), size arithmetic and its assertions (where a
    data-dependent op is refused, the sizes of its result are read in its piece, so the piece
    after it gets them as inputs)."""
    piece, last = -1, None

    def piece_of(node) -> int:
        nonlocal piece, last
        if node.name not in refused and not _computes_tensors(node):
            return max(piece, 0)
        if (node.name in refused) != last:
            piece, last = piece + 1, node.name in refused
        return piece

    return split_module(gm, gm, piece_of, keep_original_order=True,
                        keep_original_node_name=True)


def python_line(node: torch.fx.Node) -> str:
    """A call node as the line of Python Dynamo's graph code runs: `y = x.unsqueeze_(0)`."""
    args = node.args[1:] if node.op == "call_method" else node.args
    text = ", ".join([*map(repr, args), *(f"{k}={v!r}" for k, v in node.kwargs.items())])
    if node.op == "call_method":
        return f"{node.name} = {node.args[0]!r}.{node.target}({text})"
    return f"{node.name} = {_get_qualified_name(node.target)}({text})"


def pieces(split_gm) -> list[tuple[str, torch.fx.GraphModule]]:
    """(attribute name, graph module) of each piece, in the order the split graph calls them."""
    return [(node.target, getattr(split_gm, node.target)) for node in split_gm.graph.nodes
            if node.op == "call_module"]


def _computes_tensors(node) -> bool:
    value = node.meta.get("example_value")
    return any(isinstance(v, torch.Tensor) for v in pytree.tree_leaves(value))
