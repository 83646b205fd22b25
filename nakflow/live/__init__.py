"""The drivers: the threaded and asyncio senders and receivers, which only move bytes,
wait and lock around the sans-I/O cores; the delivery queue, sinks and metrics."""
