"""The autotune report's picture (report.png): what it plots, then the drawing.

On a GPU each config's timing (p50 ms, whiskers p20-p80, the winner in green). Without one the
interpreter's milliseconds say nothing about a GPU, so the picture is each config's static cost
from its offline sm_90 compile (`triton_exec.cost`): bytes per warp-instruction, higher is
better, with the band below which an H200 is bound by issuing instructions rather than by
memory; the bar's label gives the instructions per program. `chart(...)` is the data (also in
report.json), `draw(...)` the matplotlib figure.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

TIMED_TITLE = "Autotune: {device}"
STATIC_TITLE = "Static cost per config (sm_90, offline compile) - no GPU: not timed"
# cost.py: an H200 streams ~4.3 TB/s and issues ~1e12 warp-instructions/s, so a kernel under
# ~5-8 bytes per warp-instruction is bound by issue, not by memory
ISSUE_BOUND_BAND = (5.0, 8.0)


@dataclass(frozen=True)
class Bar:
    label: str                  # the config
    value: float                # p50 ms, or bytes per warp-instruction
    low: float = 0.0            # whisker below value (p50 - p20)
    high: float = 0.0           # whisker above value (p80 - p50)
    note: str = ""              # beside the bar: the instruction count, or why there is no value
    kind: str = "config"        # "config", "winner" or "missing" (failed or not computed)


@dataclass(frozen=True)
class Panel:
    title: str                  # the kernel and its tuning key
    bars: list[Bar]


@dataclass(frozen=True)
class Chart:
    title: str
    quantity: str               # "p50_ms" or "bytes_per_warp_instruction"
    x_label: str
    panels: list[Panel]
    band: tuple[float, float] | None = None     # the issue-bound band (static cost only)


def chart(kernels, *, device: str, interpreter: bool) -> Chart:
    """Timings where they mean something (a GPU), each config's static cost where they do not."""
    if interpreter:
        return Chart(STATIC_TITLE, "bytes_per_warp_instruction",
                     "bytes per warp-instruction (higher: fewer instructions per byte moved)",
                     [Panel(_panel_title(k), [_static_bar(k, c) for c in k.configs])
                      for k in kernels], band=ISSUE_BOUND_BAND)
    return Chart(TIMED_TITLE.format(device=device), "p50_ms", "ms (p50, whiskers p20-p80)",
                 [Panel(_panel_title(k), [_timed_bar(c, k.winner) for c in k.configs])
                  for k in kernels])


def _panel_title(kernel) -> str:
    return f"{kernel.name} [{kernel.key}]"


def _timed_bar(result, winner) -> Bar:
    if result.failed:
        return Bar(result.label, 0.0, note="failed", kind="missing")
    return Bar(result.label, result.p50_ms, result.p50_ms - result.p20_ms,
               result.p80_ms - result.p50_ms, kind="winner" if result is winner else "config")


def _static_bar(kernel, result) -> Bar:
    cost = kernel.static_costs.get(result.label)
    if not cost or cost.get("error"):
        why = cost["error"].split(":")[0] if cost else "not compiled"
        return Bar(result.label, 0.0, note=f"no static cost ({why})", kind="missing")
    return Bar(result.label, cost["bytes_per_warp_instruction"],
               note=f"{cost['instructions']} {cost['counted']} x {cost['num_warps']} warps",
               kind="config")


_COLORS = {"config": "tab:blue", "winner": "tab:green", "missing": "tab:gray"}
_LEGEND = {"winner": "winner (lowest p50)", "config": "config", "missing": "failed / no value"}


def draw(data: Chart, path: Path) -> bool:
    """report.png: one horizontal bar per config, a panel per kernel; False without matplotlib."""
    try:
        from matplotlib.figure import Figure
        from matplotlib.patches import Patch
    except ImportError:
        return False
    heights = sum(0.35 * max(len(p.bars), 1) + 0.8 for p in data.panels)
    figure = Figure(figsize=(8, 1.2 + heights))
    axes_list = figure.subplots(max(len(data.panels), 1), 1, squeeze=False)[:, 0]
    for axes, panel in zip(axes_list, data.panels):
        positions = range(len(panel.bars))
        axes.barh(positions, [b.value for b in panel.bars],
                  xerr=[[b.low for b in panel.bars], [b.high for b in panel.bars]],
                  color=[_COLORS[b.kind] for b in panel.bars], zorder=2)
        for y, bar in zip(positions, panel.bars):
            if bar.note:
                axes.annotate(bar.note, (bar.value, y), xytext=(3, 0), textcoords="offset points",
                              va="center", fontsize=6)
        if data.band is not None:
            axes.axvspan(*data.band, color="tab:red", alpha=0.12, zorder=1)
        axes.margins(x=0.2)                 # room for the notes right of the longest bar
        axes.set_yticks(positions, [b.label for b in panel.bars], fontsize=7)
        axes.invert_yaxis()
        axes.set_xlabel(data.x_label)
        axes.set_title(panel.title, fontsize=7, wrap=True)
    kinds = sorted({b.kind for p in data.panels for b in p.bars}, key=list(_LEGEND).index)
    legend = [Patch(color=_COLORS[k], label=_LEGEND[k]) for k in kinds]
    if data.band is not None:
        legend.append(Patch(color="tab:red", alpha=0.12,
                            label="issue-bound on an H200 (%g-%g B)" % data.band))
    figure.legend(handles=legend, loc="lower center", ncol=len(legend), fontsize=7, frameon=False)
    figure.suptitle(data.title, fontsize=9, wrap=True)
    figure.tight_layout(rect=(0, 0.05, 1, 0.97))
    figure.savefig(path, dpi=100)
    return True
