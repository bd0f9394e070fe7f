"""Persisted autotuning winners: one JSON file mapping a tuning key to the winning config.

A file that cannot be used (unreadable, bad JSON, another format version, wrong structure) is ignored
with a warning and replaced by the next ``put``; the cache never makes a call fail.
"""

from __future__ import annotations

import json
import os
import tempfile
import warnings
from pathlib import Path

FORMAT_VERSION = 1


def default_tuning_cache_path() -> Path:
    """``$TRITON_EXEC_CACHE_DIR/tuning.json``, else ``~/.cache/triton_exec/tuning.json``."""
    cache_dir = os.environ.get("TRITON_EXEC_CACHE_DIR")
    base = Path(cache_dir) if cache_dir else Path.home() / ".cache" / "triton_exec"
    return base / "tuning.json"


class TuningCache:
    """Winning configs by tuning key, read from and written through to ``path``."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = Path(path) if path is not None else default_tuning_cache_path()
        self._entries: dict[str, dict] | None = None
        self._warned_unusable = False

    def get(self, key: str) -> dict | None:
        if self._entries is None:
            self._entries = self._read()
        config = self._entries.get(key)
        return dict(config) if config is not None else None

    def put(self, key: str, config: dict) -> None:
        """Store ``config`` for ``key``, keeping entries that other processes wrote meanwhile."""
        entries = self._read()
        entries[key] = dict(config)
        self._write(entries)
        self._entries = entries

    def _read(self) -> dict[str, dict]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        except OSError as error:
            return self._unusable(f"cannot be read ({error})")
        try:
            data = json.loads(text)
        except ValueError as error:
            return self._unusable(f"is not valid JSON ({error})")
        if not isinstance(data, dict) or data.get("format") != FORMAT_VERSION:
            found = data.get("format") if isinstance(data, dict) else None
            return self._unusable(f"has format {found!r}, expected {FORMAT_VERSION}")
        entries = data.get("entries")
        if not isinstance(entries, dict) or not all(isinstance(c, dict) for c in entries.values()):
            return self._unusable("does not map keys to config objects")
        return entries

    def _unusable(self, reason: str) -> dict[str, dict]:
        if not self._warned_unusable:
            warnings.warn(
                f"tuning cache {self.path} {reason}; ignoring it, it will be rewritten on the next put",
                stacklevel=4,
            )
            self._warned_unusable = True
        return {}

    def _write(self, entries: dict[str, dict]) -> None:
        """Replace the file atomically; a failure to write warns and leaves the old file in place."""
        text = json.dumps({"format": FORMAT_VERSION, "entries": entries}, indent=1, sort_keys=True)
        temp_name = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, temp_name = tempfile.mkstemp(dir=self.path.parent, prefix=self.path.name, suffix=".tmp")
            with os.fdopen(fd, "w", encoding="utf-8") as temp_file:
                temp_file.write(text)
            os.replace(temp_name, self.path)
        except OSError as error:
            warnings.warn(f"tuning cache {self.path} could not be written ({error})", stacklevel=3)
            if temp_name is not None and os.path.exists(temp_name):
                os.unlink(temp_name)
            return
        self._warned_unusable = False
