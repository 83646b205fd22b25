"""A Structured Streaming query that sends a parquet directory to nakflow receivers
through the data source (``writeStream.format("nakflow")``), for tests that kill it and
restart it from its checkpoint.

    python tests/stream_job.py SRC CHECKPOINT DATA FEEDBACK [OPTION=VALUE ...]
"""

from __future__ import annotations

import sys
from typing import Any

from spark_adapter import NakflowDataSource
from spark_adapter.session import spark_session


def start_query(spark: Any, src: str, checkpoint: str, data: str, feedback: str,
                *extra: str) -> Any:
    """Start the query (availableNow, one file a batch); return it."""
    spark.dataSource.register(NakflowDataSource)
    schema = spark.read.parquet(src).schema
    writer = (spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(src)
              .writeStream.format("nakflow").option("checkpointLocation", checkpoint)
              .option("data", data).option("feedback", feedback).option("stream", "st"))
    for kv in extra:
        key, _, value = kv.partition("=")
        writer = writer.option(key, value)
    return writer.trigger(availableNow=True).start()


def main() -> int:
    spark = spark_session("local[2]", "nakflow-stream-test")
    query = start_query(spark, *sys.argv[1:])
    query.awaitTermination()
    print(f"stream job: {query.lastProgress['batchId'] + 1} batches", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
