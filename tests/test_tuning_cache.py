"""The persisted autotuning cache: round trips, atomic rewrite, and surviving unusable files."""

import json
import warnings

import pytest

from triton_exec.tuning_cache import FORMAT_VERSION, TuningCache, default_tuning_cache_path

CONFIG = {"ROWS": 4, "num_warps": 4, "V": 8}


def test_missing_file_is_an_empty_cache(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert TuningCache(tmp_path / "none" / "tuning.json").get("k") is None


def test_put_persists_across_instances(tmp_path):
    path = tmp_path / "sub" / "tuning.json"
    TuningCache(path).put("rope|bf16|bucket0", CONFIG)
    TuningCache(path).put("pad|fp32|bucket1", {"ROWS": 1, "num_warps": 1, "V": 4})
    fresh = TuningCache(path)
    assert fresh.get("rope|bf16|bucket0") == CONFIG
    assert fresh.get("pad|fp32|bucket1") == {"ROWS": 1, "num_warps": 1, "V": 4}
    assert fresh.get("other") is None
    assert json.loads(path.read_text())["format"] == FORMAT_VERSION
    assert [p.name for p in path.parent.iterdir()] == ["tuning.json"]  # no temp file left behind


def test_returned_config_is_a_copy(tmp_path):
    cache = TuningCache(tmp_path / "tuning.json")
    cache.put("k", CONFIG)
    cache.get("k")["V"] = 1
    assert cache.get("k") == CONFIG


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        json.dumps([1, 2]),
        json.dumps({"format": FORMAT_VERSION, "entries": {"k": 3}}),
        json.dumps({"format": FORMAT_VERSION}),
    ],
    ids=["bad-json", "not-an-object", "entry-not-a-config", "no-entries"],
)
def test_corrupt_file_is_ignored_with_a_warning_then_rewritten(tmp_path, content):
    path = tmp_path / "tuning.json"
    path.write_text(content)
    cache = TuningCache(path)
    with pytest.warns(UserWarning, match=str(path)):
        assert cache.get("k") is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once already
        cache.put("k", CONFIG)
        assert TuningCache(path).get("k") == CONFIG


def test_stale_format_version_is_ignored(tmp_path):
    path = tmp_path / "tuning.json"
    path.write_text(json.dumps({"format": FORMAT_VERSION - 1, "entries": {"k": CONFIG}}))
    with pytest.warns(UserWarning, match="format"):
        assert TuningCache(path).get("k") is None


def test_put_on_a_corrupt_file_warns_and_replaces_it(tmp_path):
    path = tmp_path / "tuning.json"
    path.write_text("\x00garbage")
    with pytest.warns(UserWarning, match=str(path)):
        TuningCache(path).put("k", CONFIG)
    assert TuningCache(path).get("k") == CONFIG


def test_unwritable_location_warns_instead_of_failing(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    cache = TuningCache(blocker / "tuning.json")
    with pytest.warns(UserWarning) as record:
        cache.put("k", CONFIG)
    assert any("could not be written" in str(w.message) for w in record)


def test_default_path_follows_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("TRITON_EXEC_CACHE_DIR", str(tmp_path))
    assert default_tuning_cache_path() == tmp_path / "tuning.json"
    assert TuningCache().path == tmp_path / "tuning.json"
    monkeypatch.delenv("TRITON_EXEC_CACHE_DIR")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_tuning_cache_path() == tmp_path / "home" / ".cache" / "triton_exec" / "tuning.json"
