"""Spark adapter: push a DataFrame or RDD to nakflow receivers from Spark tasks.

    spark.dataSource.register(NakflowDataSource)
    df.write.format("nakflow").option("data", ...).option("feedback", ...).save()

or, row by row (the one-liner; slower: every row becomes a Python object)::

    df.foreachPartition(nakflow_writer(WriterConfig(data=..., feedback=..., mode="nak")))

Each task builds its own Sender; rows are pulled only as fast as the flow
policy admits them. PySpark itself is imported only where it is used, so this
package imports without it (``pip install 'nakflow[spark]'`` to run jobs).
"""

from .config import WriterConfig
from .serialize import msgpack_serializer, row_to_msgpack
from .writer import (
    METRICS_COLUMNS,
    METRICS_DDL,
    TaskIdentity,
    current_task,
    metrics_accumulator,
    metrics_frame,
    nakflow_batch_writer,
    nakflow_writer,
    send_and_collect,
    send_partition,
    send_with_metrics,
)


def __getattr__(name: str) -> object:
    """``NakflowDataSource`` imports PySpark: only when asked for."""
    if name == "NakflowDataSource":
        from .datasource import NakflowDataSource

        return NakflowDataSource
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "METRICS_COLUMNS",
    "METRICS_DDL",
    "NakflowDataSource",
    "TaskIdentity",
    "WriterConfig",
    "current_task",
    "metrics_accumulator",
    "metrics_frame",
    "msgpack_serializer",
    "nakflow_batch_writer",
    "nakflow_writer",
    "row_to_msgpack",
    "send_and_collect",
    "send_partition",
    "send_with_metrics",
]
