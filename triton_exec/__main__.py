"""`python -m triton_exec demo|report`: the embedded default, the seed's RoPE.

    python -m triton_exec demo   [--out DIR] [--small]   # traces, kernel, widths, the small GPT,
                                                         # then the report
    python -m triton_exec report [--out DIR] [--small]   # the autotune report only
    python -m triton_exec report MODULE:FUNCTION --args MODULE:FUNCTION [--out DIR]
        # the report of your function (plain or ir.jit), on the arguments that the --args
        # function returns (a tuple of them)

On a GPU the RoPE runs at the seed's size (bsz 256, 16 heads, seq 1024, head 32, rope width 8,
bf16); without one (or with --small) at a tiny size through the Triton interpreter, whose timings
the report labels as not GPU timings.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys

import torch

if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
    # The interpreter must be chosen before Triton is imported, and `python -m triton_exec` has
    # imported it already (with the package): start again with the interpreter on.
    os.environ["TRITON_INTERPRET"] = "1"
    os.execv(sys.executable, [sys.executable, "-m", "triton_exec", *sys.argv[1:]])

import ir  # noqa: E402
from ir.examples import rope, rope_inputs  # noqa: E402
import triton_exec  # noqa: E402

SEED_SIZE = dict(B=256, H=16, T=1024, hs=32, n=8)
SMALL_SIZE = dict(B=1, H=2, T=8, hs=32, n=8)


def default_case(small: bool = False):
    """(jitted rope, args, size description) for this machine."""
    cuda = torch.cuda.is_available() and not small and os.environ.get("TRITON_INTERPRET") != "1"
    size = SEED_SIZE if cuda else SMALL_SIZE
    args = rope_inputs(**size, dtype=torch.bfloat16, device="cuda" if cuda else "cpu")
    jrope = ir.jit(rope, executors=["triton"], cache="constant values")
    where = "GPU, the seed's size" if cuda else "CPU via the Triton interpreter, a small size"
    return jrope, args, f"x bf16{list(args[0].shape)}, rope width {size['n']} ({where})"


def _widths_text(widths: dict) -> str:
    if widths.get("error"):
        return f"offline compile failed: {widths['error']}"
    return "; ".join(
        f"{name} " + (", ".join(f"{w} B x{c}" for w, c in sorted(widths[op].items(), reverse=True))
                      or "none")
        for op, name in (("ld", "loads"), ("st", "stores")))


def demo(out_dir: str, small: bool) -> int:
    jrope, args, what = default_case(small)
    print(f"# The seed's RoPE: {what}\n")
    out = jrope(*args)
    expected = rope(*args)
    torch.testing.assert_close(out.float(), expected.float(), atol=3e-2, rtol=2e-2)
    print("# Checked against eager PyTorch: close (bf16 tolerance)\n")
    print("# ---- Prologue ----")
    print(ir.last_prologue(jrope))
    for trace in ir.last_traces(jrope):
        print("\n# ---- Computation trace ----")
        print(trace)
    from triton_exec.reporting import access_widths_or_error
    for k in triton_exec.last_kernels(jrope):
        print(f"\n# ---- Kernel {k.name} ----")
        print(k.source)
        print(f"# Launch config: {', '.join(f'{n}={v}' for n, v in k.config.constexprs().items())}"
              f", num_warps={k.config.num_warps} "
              f"({k.tuning.source if k.tuning else 'heuristic'})")
        print("# Vector widths (elements per access, from the analysis):")
        for label, width in k.analysis_width.items():
            print(f"#   {label}: {width}")
        print("# Access widths from PTX (compiled offline for sm_90): "
              + _widths_text(access_widths_or_error(k)))
    gpt_section("cuda" if args[0].is_cuda else "cpu")
    paths = triton_exec.report(jrope, *args, out_dir=out_dir)
    print(f"\nAutotune report written to {paths['md']} "
          f"({', '.join(str(p) for k, p in paths.items() if k != 'md')})")
    return 0


def gpt_section(device: str) -> None:
    """The small GPT of ir.examples (1 layer, tiny), jitted as a module: one training step
    checked against eager, its fusion groups and its kernels by direction."""
    from ir.examples import GPT, GPTConfig, gpt_batch, gpt_loss
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=1)).to(device)
    jmodel = ir.jit(model, executors=["triton"])
    idx, targets = gpt_batch(model.config, 2, 16, device=device)
    loss = gpt_loss(jmodel(idx), targets)
    grads = torch.autograd.grad(loss, list(model.parameters()))
    expected = gpt_loss(model(idx), targets)
    expected_grads = torch.autograd.grad(expected, list(model.parameters()))
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(grads, expected_grads, rtol=1e-4, atol=1e-5)
    print("\n# ---- The small GPT (ir.examples.GPT, 1 layer): ir.jit(model) ----")
    print("# One training step (loss and every parameter's gradient) checked against eager: close")
    explanation = ir.explain(jmodel, idx)
    print("\n".join(str(explanation).split("\n\nLeft to torch")[0].splitlines()[2:]))
    directions = [k.direction for k in triton_exec.last_kernels(jmodel)]
    print(f"# Kernels: {directions.count('forward')} forward, {directions.count('backward')} "
          "backward")


def load(spec: str):
    """The object `module:name` (name may be dotted) names."""
    module, _, name = spec.partition(":")
    if not module or not name:
        raise SystemExit(f"python -m triton_exec report: expected MODULE:FUNCTION, got {spec!r}")
    obj = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def report_of(target: str, args_spec: str | None, out_dir: str) -> int:
    if args_spec is None:
        raise SystemExit("python -m triton_exec report: --args MODULE:FUNCTION is required with "
                         "a function to report (it returns the example arguments)")
    args = load(args_spec)()
    args = tuple(args) if isinstance(args, (tuple, list)) else (args,)
    paths = triton_exec.report(load(target), *args, out_dir=out_dir)
    print(f"Autotune report of {target} written to {paths['md']} "
          f"({', '.join(str(p) for k, p in paths.items() if k != 'md')})")
    return 0


def report_only(out_dir: str, small: bool) -> int:
    jrope, args, what = default_case(small)
    paths = triton_exec.report(jrope, *args, out_dir=out_dir)
    print(f"Autotune report of the seed's RoPE ({what}) written to {paths['md']} "
          f"({', '.join(str(p) for k, p in paths.items() if k != 'md')})")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m triton_exec", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("demo", "report"):
        p = sub.add_parser(name)
        p.add_argument("--out", default="perf/out/report", help="report folder")
        p.add_argument("--small", action="store_true", help="tiny size even on a GPU")
        if name == "report":
            p.add_argument("function", nargs="?",
                           help="MODULE:FUNCTION to report (default: the seed's RoPE)")
            p.add_argument("--args", help="MODULE:FUNCTION returning the example arguments")
    ns = parser.parse_args(argv)
    if ns.command == "report" and ns.function:
        return report_of(ns.function, ns.args, ns.out)
    return (demo if ns.command == "demo" else report_only)(ns.out, ns.small)


if __name__ == "__main__":
    sys.exit(main())
