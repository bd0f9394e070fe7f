"""The trace IR and the jit: trace PyTorch functions into printable prologue and computation
traces of prims, cache them, and run them through pluggable executors."""
from ir.executors import CompileContext, Executor, get_executor, register_executor, torch_executor
from ir.diagnostics import Explanation
from ir.jit import (cache_stats, jit, last_backward_traces, last_entry, last_prologue,
                    last_traces, thin)
from ir.modules import JitModule
from ir.proxies import DataDependentError, IntProxy, TensorProxy
from ir.trace import Eqn, Trace
from ir import dynamo
from ir.dynamo import explain     # ir.jit's functions and torch.compile's (`ir.dynamo`)

__all__ = ["jit", "explain", "Explanation", "last_traces", "last_backward_traces",
           "last_prologue", "last_entry", "cache_stats", "thin", "Executor", "CompileContext",
           "register_executor", "get_executor", "torch_executor",
           "Eqn", "Trace", "IntProxy", "TensorProxy", "JitModule", "DataDependentError",
           "dynamo"]
