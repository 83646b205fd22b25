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


#: Spark masters the adapter is tested on: local mode with task retries allowed, and
#: separate executor JVMs (each with its own Python workers).
SPARK_MASTERS = {"local": "local[2,4]", "local-cluster": "local-cluster[2,1,1024]"}


@pytest.fixture(scope="session")
def spark(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    """One SparkSession per master for the whole run (start-ups are the expensive part).

    Request it through ``@pytest.mark.parametrize("spark", [...], indirect=True)`` with
    keys of SPARK_MASTERS; pytest groups the tests by master and stops one session
    before it starts the next.
    """
    pytest.importorskip("pyspark")
    from spark_adapter.session import spark_session

    session = spark_session(SPARK_MASTERS[request.param], "nakflow-tests")
    yield session
    session.stop()
