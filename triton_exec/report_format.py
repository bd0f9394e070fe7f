"""Autotune report writer: report.json for machines, report.md and report.png for people.

It only formats results; how the timings were obtained (``do_bench`` on a GPU, or the Triton
interpreter on a CPU) is the caller's business, and the report says which one plainly. What the
picture plots (timings on a GPU, static costs without one) is `report_chart`'s.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from triton_exec import report_chart

REPORT_FORMAT_VERSION = 1
INTERPRETER_NOTE = "Timings come from the Triton interpreter on a CPU and are not GPU timings."


@dataclass(frozen=True)
class ConfigResult:
    """One tried config: its timing percentiles in milliseconds, or why it failed."""

    config: dict
    p20_ms: float | None = None
    p50_ms: float | None = None
    p80_ms: float | None = None
    error: str | None = None

    def __post_init__(self):
        timings = (self.p20_ms, self.p50_ms, self.p80_ms)
        if self.error is None and None in timings:
            raise ValueError(f"config {self.config} has neither all timings nor an error")

    @property
    def failed(self) -> bool:
        return self.error is not None

    @property
    def label(self) -> str:
        return ", ".join(f"{name}={value}" for name, value in self.config.items())


@dataclass(frozen=True)
class KernelReport:
    """Autotuning results of one kernel for one tuning key (shape bucket)."""

    name: str
    key: str
    configs: list[ConfigResult]
    bytes_moved: int  # an ideal kernel's traffic: each input read once, each output written once
    access_widths: dict  # from offline.access_widths: {"ld": {bytes: count}, "st": {...}}
    compile_s: float
    cache_hits: int
    vector_widths: dict  # the vectorization analysis' V per access
    # per config label: its static cost from the offline compile (triton_exec.cost.StaticCost's
    # as_dict), or {"error": why}
    static_costs: dict = field(default_factory=dict)

    def _ranked(self) -> list[ConfigResult]:
        return sorted((c for c in self.configs if not c.failed), key=lambda c: c.p50_ms)

    @property
    def winner(self) -> ConfigResult | None:
        ranked = self._ranked()
        return ranked[0] if ranked else None

    @property
    def margin(self) -> float | None:
        """Runner-up p50 over winner p50 (1.25 means the winner is 25% faster); None without both."""
        ranked = self._ranked()
        if len(ranked) < 2 or ranked[0].p50_ms <= 0:
            return None
        return ranked[1].p50_ms / ranked[0].p50_ms

    @property
    def achieved_gbps(self) -> float | None:
        winner = self.winner
        if winner is None or winner.p50_ms <= 0:
            return None
        return self.bytes_moved / (winner.p50_ms * 1e-3) / 1e9

    def copy_share(self, copy_gbps: float | None) -> float | None:
        """Achieved bandwidth as a fraction of a measured device-to-device copy's bandwidth."""
        achieved = self.achieved_gbps
        if achieved is None or not copy_gbps:
            return None
        return achieved / copy_gbps


def write_report(
    kernels: list[KernelReport], out_dir: Path, *, device: str, copy_gbps: float | None, interpreter: bool
) -> dict[str, Path]:
    """Write report.json, report.md and (when matplotlib imports) report.png into ``out_dir``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": out_dir / "report.json", "md": out_dir / "report.md"}
    chart = report_chart.chart(kernels, device=device, interpreter=interpreter)
    chart_written = report_chart.draw(chart, out_dir / "report.png")
    if chart_written:
        paths["png"] = out_dir / "report.png"
    paths["json"].write_text(
        json.dumps(_report_json(kernels, device, copy_gbps, interpreter, chart), indent=2) + "\n",
        encoding="utf-8"
    )
    paths["md"].write_text(
        _report_markdown(kernels, device, copy_gbps, interpreter, chart, chart_written),
        encoding="utf-8"
    )
    return paths


def _timings_note(device: str, interpreter: bool) -> str:
    return INTERPRETER_NOTE if interpreter else f"Timings measured on {device}."


def _report_json(kernels, device, copy_gbps, interpreter, chart) -> dict:
    return {
        "format": REPORT_FORMAT_VERSION,
        "interpreter": interpreter,
        "timings_note": _timings_note(device, interpreter),
        "device": device,
        "copy_gbps": copy_gbps,
        "kernels": [
            {
                **asdict(kernel),
                "winner": kernel.winner.config if kernel.winner else None,
                "margin": kernel.margin,
                "achieved_gbps": kernel.achieved_gbps,
                "copy_share": kernel.copy_share(copy_gbps),
            }
            for kernel in kernels
        ],
        "chart": asdict(chart),
    }


def _report_markdown(kernels, device, copy_gbps, interpreter, chart, chart_written) -> str:
    if interpreter:
        lines = [
            "# Autotune report: Triton interpreter on a CPU, NOT GPU timings",
            "",
            f"**{INTERPRETER_NOTE}** They show that every config runs; they say nothing about GPU speed.",
        ]
    else:
        lines = ["# Autotune report", "", _timings_note(device, interpreter)]
    copy_text = f"{copy_gbps:.1f} GB/s (device-to-device copy, read + write)" if copy_gbps else "not measured"
    lines += ["", f"Device: {device}. Copy bandwidth: {copy_text}.", ""]
    lines.append(
        f"![{chart.title}: {chart.x_label}](report.png)" if chart_written
        else "Chart not written: matplotlib is not installed."
    )
    for kernel in kernels:
        lines += ["", *_kernel_markdown(kernel, copy_gbps, interpreter)]
    return "\n".join(lines) + "\n"


def _kernel_markdown(kernel: KernelReport, copy_gbps: float | None,
                     interpreter: bool = False) -> list[str]:
    """Under the interpreter no config is called a winner (its timings are noise): the
    heuristic's config (the first tried) is shown as what runs without tuning."""
    winner = None if interpreter else kernel.winner
    lines = [
        f"## {kernel.name}",
        "",
        f"Key: `{kernel.key}`",
        "",
        "| config | p20 ms | p50 ms | p80 ms | static cost (sm_90, per program) | result |",
        "|---|---:|---:|---:|---|---|",
    ]
    for result in kernel.configs:
        cost = _cost_text(kernel.static_costs.get(result.label))
        if result.failed:
            reason = " ".join(result.error.split()).replace("|", "\\|")
            lines.append(f"| {result.label} | - | - | - | {cost} | failed: {reason} |")
        else:
            status = "winner" if result is winner else "ok"
            lines.append(
                f"| {result.label} | {result.p20_ms:.4f} | {result.p50_ms:.4f} | {result.p80_ms:.4f} | {cost} "
                f"| {status} |"
            )
    margin = f"{kernel.margin:.2f}x over the runner-up" if kernel.margin else "no runner-up"
    achieved = f"{kernel.achieved_gbps:.1f} GB/s" if kernel.achieved_gbps is not None else "n/a"
    share = kernel.copy_share(copy_gbps)
    share_text = f"{share:.0%} of copy bandwidth" if share is not None else "share of copy bandwidth n/a"
    if interpreter:
        heuristic = kernel.configs[0].label if kernel.configs else "none"
        verdict = (f"none: the configs were not timed on a GPU (interpreter timings are noise); "
                   f"the heuristic's config, used without tuning: {heuristic}")
        achieved, share_text = "n/a: no GPU", "share of copy bandwidth n/a: no GPU"
    else:
        verdict = f"{winner.label if winner else 'none (every config failed)'}; {margin}"
    lines += [
        "",
        f"- Winner: {verdict}",
        f"- Bytes moved (ideal): {kernel.bytes_moved:,}",
        f"- Achieved: {achieved}; {share_text}",
        f"- Access widths from PTX: {_widths_text(kernel.access_widths)}",
        f"- Vector widths from the analysis: {_mapping_text(kernel.vector_widths)}",
        f"- Compile time: {kernel.compile_s:.2f} s; cache hits: {kernel.cache_hits}",
    ]
    return lines


def _cost_text(cost: dict | None) -> str:
    """`4.76 B/warp-instr: 444 SASS x 4 warps, 8448 B, 40 regs, 0 B spill`; `-` when not computed."""
    if not cost:
        return "-"
    if cost.get("error"):
        return "n/a (" + " ".join(cost["error"].split()).replace("|", "\\|")[:200] + ")"
    regs = (f", {cost['registers']} regs, {cost['spill_bytes']} B spill"
            if cost.get("registers") is not None else "")
    moved = cost["bytes_loaded"] + cost["bytes_stored"]
    return (f"{cost['bytes_per_warp_instruction']:.2f} B/warp-instr: {cost['instructions']} "
            f"{cost['counted']} x {cost['num_warps']} warps, {moved:.0f} B{regs}")


def _widths_text(access_widths: dict) -> str:
    if access_widths.get("error"):
        return "not available (offline compile failed: " + access_widths["error"].replace("|", "\\|") + ")"
    parts = []
    for op, name in (("ld", "loads"), ("st", "stores")):
        counts = access_widths.get(op) or {}
        widths = ", ".join(f"{width} B x{count}" for width, count in sorted(counts.items(), reverse=True))
        parts.append(f"{name} {widths or 'none'}")
    return "; ".join(parts)


def _mapping_text(mapping: dict) -> str:
    return ", ".join(f"{name}: {value}" for name, value in mapping.items()) or "none"
