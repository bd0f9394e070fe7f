"""Test-wide set-up: Triton runs through its interpreter unless told otherwise (this must happen
before any Triton kernel is defined), and the hypothesis profiles: "ci" (the default) draws the
same examples on every run, so a CI verdict is reproducible; "explore" draws new ones each run
(with `pytest --hypothesis-seed=N` to replay one); "thorough" is explore with more examples where
a test does not fix its own count. Pick one with HYPOTHESIS_PROFILE. Autotune winners persist in a
directory of this run's own (not the user's ~/.cache), so a kernel's launch config never depends on
what an earlier run on the same machine tuned."""

import os
import tempfile

os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("IR_CHECK_GUARDS", "1")   # every call also checks its entry's whole prologue
os.environ.setdefault("TRITON_EXEC_CACHE_DIR", tempfile.mkdtemp(prefix="triton_exec_tests_"))

from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile(
    "ci",
    max_examples=60,
    deadline=None,
    derandomize=True,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("explore", parent=settings.get_profile("ci"), derandomize=False)
settings.register_profile("thorough", parent=settings.get_profile("explore"), max_examples=1000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
