"""The Triton executor: a fusion pass that replaces each fusion group by one kernel launch.

For each group it generates the kernel (`codegen`), imports it from a file (`launch`), builds
the launcher, and records a `KernelRecord` that `triton_exec.last_kernels` returns.
"""
from __future__ import annotations

import dataclasses
import functools
import logging
import time

import torch

import ir
from ir.prims import Prim
from ir.proxies import IntProxy, hint
from ir.trace import Eqn, render_eqn
from triton_exec import (autotune, cost, fusion, horizontal, launch, offline, split_reductions,
                         strided)
from triton_exec.codegen import KERNEL_OPTIONS, Lowered, lower_group
from triton_exec.codegen.lower_reduction import refusal

log = logging.getLogger("triton_exec")


@dataclasses.dataclass
class KernelRecord:
    """One generated kernel, as a user inspects it."""

    name: str
    source: str                 # the Triton kernel
    launcher_source: str        # the Python that launches it
    lowered: Lowered
    config: launch.LaunchConfig
    example_args: dict          # kernel parameter -> value (tensors as TensorFacts) in the call
                                # that built it
    kernel: object
    compile_s: float = 0.0
    tuning: autotune.Outcome | None = None    # how `config` was chosen; every timed config
    direction: str = "forward"  # "backward" for a kernel of a differentiable unit's backward
    variants: list = dataclasses.field(default_factory=list)    # the kernels lowered for other
                                # layouts of its torch-made inputs (`triton_exec.strided`)

    @property
    def vector_width(self) -> dict:
        """Elements per access, per load/store, as the kernel does them: read from the kernel
        compiled for this machine's GPU (sm_90 without one; offline, once per record) with the
        launch's specialization and config. See `analysis_width` for what the analysis proved;
        it is also the answer, with a warning, where the offline compiler refuses the kernel."""
        try:
            return self.compiled_vector_width()
        except Exception as error:     # noqa: BLE001 (the offline compiler's refusal)
            log.warning("%s: widths of the analysis: the offline compile failed: %s: %s",
                        self.name, type(error).__name__, error)
            return self.analysis_width

    @property
    def min_vector_width(self) -> int:
        return min(self.vector_width.values(), default=1)

    @property
    def analysis_width(self) -> dict:
        """The vectorization analysis' V per access: the width along the tile's columns that
        the prologue's guards make legal. The kernel does exactly this along the columns, capped
        by the config's VEC; Triton may widen a load whose address is not linear in the columns,
        which this does not model: along the rows (a transposed read, contiguous along the outer
        index), or on Triton 3.9 through `cols % n` (n of known divisibility)."""
        return self.lowered.vector_width

    def ptx(self, arch: int | None = None, form: str = "ptx") -> str:
        """The kernel compiled offline for sm_<arch> (default: this machine's GPU, else 90),
        specialized as a launch on the inputs that built it would be (pointer alignment,
        divisible and unit integers, constexprs); `form="llir"`: its LLVM IR."""
        signature, constexprs, divisible = launch.launch_specialization(
            self.lowered, self.example_args, self.config)
        return offline.compile_asm(self.kernel, signature, constexprs, divisible,
                                   self.config.num_warps, arch or _arch(), KERNEL_OPTIONS)[form]

    def access_widths(self, arch: int | None = None) -> dict:
        """Counts of global loads and stores by width in bytes, read from the PTX."""
        return offline.access_widths(self.ptx(arch))

    def cost(self, arch: int = 90) -> cost.StaticCost:
        """Its static cost per program, compiled offline for sm_<arch>: SASS instructions (PTX
        where the cubin or the disassembler is missing), bytes moved, bytes per
        warp-instruction, registers and spills (see `triton_exec.cost`)."""
        return cost.record_cost(self, arch)

    def compiled_vector_width(self, arch: int | None = None) -> dict:
        """Elements per access, per load/store, of the compiled kernel: the widest
        `ld.global`/`st.global` compiled from the access's own source line (offline, for
        sm_<arch>; the line found by the access's text, wherever the writer moved it); 0 for an
        access the compiler left out."""
        by_line = offline.access_widths_by_line(self.ptx(arch, "llir"))
        first = launch.KERNEL_HEADER.count("\n") + 1    # the kernel file's line of source line 1
        numbers = {line.strip(): n for n, line in enumerate(self.source.splitlines(), start=first)
                   if line.strip()}
        found = {}
        for a in self.lowered.accesses:
            op = "ld" if a.kind == "load" else "st"
            widest = max(by_line.get(numbers.get(a.line), {}).get(op, ()), default=0)
            found[a.label] = widest // self.lowered.itemsizes[a.number]
        return found


def _arch() -> int:
    """The compute capability the records' widths are read for: this machine's GPU, else 90."""
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        return 10 * major + minor
    return 90


@dataclasses.dataclass(frozen=True)
class TensorFacts:
    """What a record keeps of a tensor argument: metadata and its address, never the tensor (a
    cache entry must not keep the first call's inputs alive). Reads like a tensor where records
    are read (offline specialization, bytes moved)."""

    shape: tuple
    strides: tuple
    dtype: torch.dtype
    address: int

    @classmethod
    def of(cls, value):
        if not isinstance(value, torch.Tensor):
            return value
        return cls(tuple(value.shape), value.stride(), value.dtype, value.data_ptr())

    def stride(self, dim=None):
        return self.strides if dim is None else self.strides[dim]

    def data_ptr(self) -> int:
        return self.address

    def element_size(self) -> int:
        return self.dtype.itemsize


class FusionPrim(Prim):
    """The prim of one fusion-group call in a trace; prints as the launcher call."""


def _fusion_render(eqn: Eqn):
    args = ", ".join(a.name for a in eqn.args)
    body = [line for e in eqn.params["body"] for line in render_eqn(e)]
    return f"{eqn.prim.name}({args})", body


class TritonExecutor(ir.Executor):
    """Fuses pad/cat/slice/cast/broadcast/elementwise groups into Triton kernels."""

    name = "triton"

    def __init__(self, vectorize: bool = True, name: str = "triton"):
        self.vectorize = vectorize
        self.name = name

    def decomposes(self, tensor, dims: tuple = ()) -> bool:
        return fusion.device_claimable(tensor.device) and (
            not dims or refusal("amax", tuple(tensor.shape), dims) is None)

    def fusion_pass(self, trace, ctx):
        trace = split_reductions.split(trace)   # column sums of many rows: two levels
        groups = fusion.partition(trace)
        if not groups:
            return trace
        replaced = {}
        records = ctx.extra.setdefault("triton", [])
        for group in groups:
            eqn, record = self._fuse(trace, group, groups, ctx, len(records))
            records.append(record)
            for i in group[:-1]:
                replaced.setdefault(i, None)
            replaced[group[-1]] = eqn
        eqns = []
        for i, e in enumerate(trace.eqns):
            new = replaced.get(i, e)
            if new is not None:
                eqns.append(new)
        return trace.replace(eqns=tuple(horizontal.schedule(eqns)),
                             provenance=f"Fusion by the {self.name} executor")

    def _fuse(self, trace, group, groups, ctx, number):
        body = [trace.eqns[i] for i in group]
        return self._build(f"{ctx.name}_fusion_{number}", body,
                           fusion.group_inputs(trace, group),
                           fusion.group_outputs(trace, group, groups), ctx)

    def with_outputs(self, eqn, extra, ctx):
        """The fusion call `eqn` rebuilt so that its kernel also writes `extra` (values its
        group computes: what a whole-trace backward saves rather than recomputes, see
        `ir.whole_backward`); its kernel record replaces the old one."""
        body = list(eqn.params["body"])
        known = {id(o) for o in eqn.outs}
        # the first output keeps deciding the kernel's domain
        outputs = [*eqn.outs, *[o for o in extra if id(o) not in known]]
        inputs = fusion.group_inputs(ir.Trace("group", (), tuple(body), ()), range(len(body)))
        new, record = self._build(eqn.prim.name, body, inputs, outputs, ctx)
        records = ctx.extra["triton"]
        records[next(i for i, r in enumerate(records) if r.name == record.name)] = record
        return new

    def _build(self, name, body, inputs, outputs, ctx):
        lowered, args, record = self._kernel(name, body, inputs, outputs, dict(ctx.values),
                                             ctx.name, ctx.direction, timing=not ctx.explaining)
        for g in lowered.guards:
            ctx.add_guard(g)
        variants = None
        if lowered.contiguous_inputs:    # torch-made inputs laid out otherwise: `strided`
            variants = strided.StridedVariants(
                functools.partial(self._variant, name, body, inputs, outputs, ctx.name,
                                  ctx.direction),
                args, lowered.contiguous_inputs, lowered.guards, record.variants)
        launcher = self._launcher(name, record, args, variants)
        prim = FusionPrim(name, "fusion", None, None)
        eqn = Eqn(prim, tuple(args), {"body": tuple(body), "launcher": launcher,
                                      "kernel": f"{name}_kernel"}, tuple(outputs), executor=self)
        return eqn, record

    def _kernel(self, name, body, inputs, outputs, values, stem, direction, timing: bool):
        """(lowered, launcher arguments, record without its launcher) of one group's kernel,
        lowered with `values` (id of an input Var -> its tensor in this call; an input without
        one was made by torch: contiguous, as the launcher passes it)."""
        start = time.perf_counter()
        lowered = lower_group(f"{name}_kernel", body, outputs, inputs, values, self.vectorize)
        kernel = launch.load_kernel(f"{name}_kernel", lowered.source, stem)
        # Made by torch in this computation: a contiguous stand-in, as the launcher passes it
        example = {a.name: values[id(a)] if id(a) in values else _example_tensor(a, a.device)
                   for a in inputs}
        outs = [_example_tensor(o, "meta") for o in lowered.outputs]
        example_args = {p.name: p.evaluate(example, outs) for p in lowered.params}
        tuning = autotune.choose_config(lowered, kernel, example_args,
                                        [hint(s) for s in lowered.tiled], body[-1].out.device,
                                        timing=timing)
        record = KernelRecord(f"{name}_kernel", lowered.source, "", lowered, tuning.config,
                              {k: TensorFacts.of(v) for k, v in example_args.items()}, kernel,
                              time.perf_counter() - start - tuning.seconds, tuning=tuning,
                              direction=direction)
        log.info("built %s: %d prims, vector width up to %d, %s config %s", record.name,
                 len(body), lowered.max_width, tuning.source, tuning.config)
        return lowered, inputs + lowered.size_vars, record

    @staticmethod
    def _launcher(name, record, args, variants=None):
        """The record's launcher (its source kept in the record); `variants`: the group's
        `strided.StridedVariants`, which it calls where torch-made inputs are not contiguous."""
        launcher, record.launcher_source = launch.build_launcher(
            name, record.lowered, record.kernel, args, record.config,
            record.lowered.outputs[0].device, variants)
        if variants is not None:
            variants.base = launcher
        return launcher

    def _variant(self, name, body, inputs, outputs, stem, direction, suffix, tensors):
        """(lowered, launcher, record, launcher arguments) of a group's kernel for the layouts
        of `tensors` (every input's, in a call): a `strided.StridedVariants` variant, its
        config not timed (it is built in the middle of a call)."""
        lowered, args, record = self._kernel(name + suffix, body, inputs, outputs, tensors, stem,
                                             direction, timing=False)
        return lowered, self._launcher(name + suffix, record, args), record, args

    def refusal(self, eqn):
        found = fusion.refusal(eqn.replace(executor=None))
        if found is not None:
            return found
        if fusion.is_view(eqn):
            return "view", "a view outside every fusion group: free on PyTorch"
        return "not fusible", "no fusion group took it"

    def render(self, eqn):
        return _fusion_render(eqn)

    def namespace(self, eqn):
        return {eqn.prim.name: eqn.params["launcher"]}


def _example_tensor(t, device):
    return torch.empty([hint(s) for s in t.shape], dtype=t.dtype, device=device)


def last_kernels(jfn) -> list[KernelRecord]:
    """One record per kernel of the cache entry that the last call of `jfn` ran; for a
    `torch.compile` backend (`ir.dynamo.Backend`), of the last entry of each of its graphs."""
    entries = ir.dynamo.last_entries(jfn) if isinstance(jfn, ir.dynamo.Backend) else [
        ir.last_entry(jfn)]
    return [k for entry in entries for k in entry.extra.get("triton", ())]
