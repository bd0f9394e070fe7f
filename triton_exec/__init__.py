"""The Triton executor for `ir.jit`: fused pad/cat/slice/cast/broadcast/elementwise kernels with
resize-aware vectorized accesses.

    jfn = ir.jit(fn, executors=[triton_exec.executor])      # or executors=["triton"]
    triton_exec.last_kernels(jfn)                           # the kernels of the last call
    triton_exec.report(jfn, *args, out_dir="report")        # tune every kernel, write a report
"""
import sys
import types

import ir
from triton_exec import report as _report_module
from triton_exec.executor import KernelRecord, TritonExecutor
from triton_exec.reporting import report as _make_report

executor = ir.register_executor(TritonExecutor())
executor_without_vectorization = ir.register_executor(
    TritonExecutor(vectorize=False, name="triton_novec"))


def last_kernels(jfn) -> list[KernelRecord]:
    """One record per kernel of the cache entry that the last call of `jfn` ran."""
    return list(ir.last_entry(jfn).extra.get("triton", ()))


class _CallableReportModule(types.ModuleType):
    """`triton_exec.report` is both the report-writer module and the report function:
    `triton_exec.report(jfn, *args, out_dir=...)` calls `triton_exec.reporting.report`."""

    def __call__(self, jfn, *args, out_dir, max_configs=None):
        return _make_report(jfn, *args, out_dir=out_dir, max_configs=max_configs)


_report_module.__class__ = _CallableReportModule
report = sys.modules["triton_exec.report"]

__all__ = ["executor", "executor_without_vectorization", "last_kernels", "report", "KernelRecord",
           "TritonExecutor"]
