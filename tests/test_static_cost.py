"""perf/static_cost.py --quick: every variant's static cost, side by side, and the hand-written
kernels it compares with are right."""

from perf_modules import perf_module


def test_quick_mode_prints_every_variant(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_EXEC_CACHE_DIR", str(tmp_path))
    results = perf_module("static_cost").main(["--quick"])
    printed = capsys.readouterr().out
    assert len(results) == 3 and "B/warp-instr" in printed
    for case, rows in results.items():
        variants = [r.variant for r in rows]
        rope = case.startswith("seed RoPE")
        assert variants == ["ours", "ours, no vectorization", "hand-written"] + (
            ["Liger-Kernel"] if rope else []), case
        for r in rows:
            assert f"### {case}" in printed
            if r.variant == "Liger-Kernel" and r.cost is None:
                assert r.note.startswith("not available"), r.note      # no wheel here
                continue
            assert r.cost is not None and "WRONG" not in r.note, (case, r.variant, r.note)
            assert r.cost.instructions > 0 and r.cost.bytes_moved > 0
            assert r.widths["st"], (case, r.variant)
        ours, hand = rows[0].cost, rows[2].cost
        # the same tile, the same bytes; ours covers LOOP tiles per program where it loops
        assert ours.bytes_moved == hand.bytes_moved * (rows[0].loop or 1)
