"""Test-wide set-up: Triton runs through its interpreter unless told otherwise (this must happen
before any Triton kernel is defined), and the hypothesis profiles ("ci" by default; pick another
with HYPOTHESIS_PROFILE)."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile(
    "ci",
    max_examples=60,
    deadline=None,
    derandomize=False,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("thorough", parent=settings.get_profile("ci"), max_examples=1000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
