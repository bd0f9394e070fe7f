"""The Triton executor for `ir.jit`: fused pad/cat/slice/cast/broadcast/elementwise kernels with
resize-aware vectorized accesses.

    jfn = ir.jit(fn, executors=[triton_exec.executor])      # or executors=["triton"]
    triton_exec.last_kernels(jfn)                           # the kernels of the last call
    triton_exec.report(jfn, *args, out_dir="report")        # tune every kernel, write a report
"""
import ir
from triton_exec.executor import KernelRecord, TritonExecutor
from triton_exec.reporting import report

executor = ir.register_executor(TritonExecutor())
executor_without_vectorization = ir.register_executor(
    TritonExecutor(vectorize=False, name="triton_novec"))


def last_kernels(jfn) -> list[KernelRecord]:
    """One record per kernel of the cache entry that the last call of `jfn` ran; for a
    `torch.compile` backend (`ir.dynamo.Backend`), of the last entry of each of its graphs."""
    entries = ir.dynamo.last_entries(jfn) if isinstance(jfn, ir.dynamo.Backend) else [
        ir.last_entry(jfn)]
    return [k for entry in entries for k in entry.extra.get("triton", ())]


__all__ = ["executor", "executor_without_vectorization", "last_kernels", "report", "KernelRecord",
           "TritonExecutor"]
