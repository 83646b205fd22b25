import os

import pytest

from tests.netns import multicast_unavailable


@pytest.fixture(scope="session")
def require_multicast() -> None:
    """Skip where multicast cannot run; under CI fail instead, so CI proves it works."""
    why = multicast_unavailable()
    if why is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"multicast must run in CI: {why}")
    pytest.skip(why)
