"""Prometheus metrics for live Senders and Receivers (``pip install 'nakflow[metrics]'``).

The exporter reads each source's ``snapshot()`` at scrape time (a custom collector, as
prometheus_client recommends for proxying existing statistics), so the numbers scraped
are exactly those of the JSON snapshot, with no second set of counters to drift::

    server = serve_metrics(sender, port=9108)     # http://127.0.0.1:9108/metrics
    ...
    server.close()

Every series carries the labels ``role`` (sender or receiver), ``id`` (sender or
receiver id), ``stream`` and ``mode``. Names and units follow Prometheus conventions
(``_total`` counters, base units: seconds, bytes, ratios).
"""

from __future__ import annotations

import errno
import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Protocol

from transports import EndpointError

from ..report import stream_counts

try:
    from prometheus_client import CollectorRegistry, push_to_gateway, start_http_server
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
    from prometheus_client.registry import Collector
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(f"Prometheus metrics need prometheus_client "
                      f"(pip install 'nakflow[metrics]'): {exc}") from exc


class Snapshotting(Protocol):
    def snapshot(self) -> dict[str, Any]: ...


# (metric name without _total, snapshot key, help); counters then gauges, per role
SENDER_COUNTERS = (
    ("nakflow_messages_sent", "sent", "Messages sent (each once, repairs not included)"),
    ("nakflow_frames_sent", "frames", "DATA frames sent"),
    ("nakflow_bytes_sent", "bytes", "Bytes of DATA frames sent"),
    ("nakflow_send_blocked_seconds", "blocked_s",
     "Seconds send() waited for the rate limit or credit"),
    ("nakflow_credit_stalled_seconds", "credit_stalled_s",
     "Seconds the sender waited for its receivers: credit (ack), its start's window (nak)"),
    ("nakflow_try_send_refused", "try_refused", "try_send() calls that said not now"),
    ("nakflow_feedback_frames_received", "feedback_frames",
     "Feedback frames received (NAKs, credits, repair requests, HELLOs)"),
    ("nakflow_feedback_malformed", "feedback_malformed",
     "Feedback frames dropped as malformed"),
    ("nakflow_feedback_foreign", "feedback_foreign",
     "Feedback frames of another stream, or of a kind that does not belong there"),
)
SENDER_GAUGES = (
    ("nakflow_rate_limit_messages_per_second", "rate_limit", "Current send-rate limit"),
    ("nakflow_receivers", "receivers", "Receivers the sender has heard from"),
)
RECEIVER_COUNTERS = (
    ("nakflow_messages_received", "received", "Messages that arrived (new, in order or not)"),
    ("nakflow_messages_delivered", "delivered", "Messages delivered to the application"),
    ("nakflow_messages_dropped", "dropped",
     "Messages the full queue dropped (repair may bring them back)"),
    ("nakflow_messages_repaired", "repaired", "Messages delivered after a repair"),
    ("nakflow_messages_duplicate", "duplicates", "Messages that arrived more than once"),
    ("nakflow_frames_received", "frames", "DATA frames received"),
    ("nakflow_frames_malformed", "malformed", "Frames dropped as malformed"),
    ("nakflow_frames_foreign", "foreign",
     "Frames of another stream, or of a kind that does not belong on the data channel"),
    ("nakflow_naks_suppressed", "naks_suppressed", "NAKs not sent: another receiver's heard"),
    ("nakflow_credits_sent", "credits_sent", "Credit frames sent (ack mode)"),
    ("nakflow_backpressure_seconds", "backpressure_duration_s",
     "Seconds of backpressure episodes: from the queue full until it drained below half"),
)
RECEIVER_GAUGES = (
    ("nakflow_queue_messages", "queued", "Messages waiting in the receiver's queue"),
    ("nakflow_queue_capacity_messages", "capacity_msgs", "The queue's bound"),
    ("nakflow_queue_peak_messages", "queue_peak", "Most messages ever waiting in the queue"),
    ("nakflow_senders_silent", "senders_silent",
     "Streams whose sender fell silent without END (killed, or cut off)"),
)
#: nakflow_messages_missing's reasons and the snapshot keys they come from. A gauge: the
#: messages missing now, which repair brings down (in_flight, queue_full, before_join).
MISSING_REASONS = (("in_flight", "lost"), ("queue_full", "dropped_unrepaired"),
                ("beyond_history", "beyond_history"), ("before_join", "missed_before_join"))


class SnapshotCollector(Collector):
    """Turns Senders' and Receivers' snapshots into metric families at each scrape; the
    samples of every source go into one family per name (as the exposition format asks)."""

    def __init__(self, sources: list[Snapshotting] | None = None) -> None:
        self.sources = list(sources or [])
        self._lock = threading.Lock()

    def add(self, source: Snapshotting) -> None:
        with self._lock:
            self.sources.append(source)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            sources = list(self.sources)
        return iter(merge_families(snapshot_metrics(s.snapshot()) for s in sources))

    def describe(self) -> Iterator[Metric]:
        return iter(())


def merge_families(groups: Iterable[list[Metric]]) -> list[Metric]:
    merged: dict[str, Metric] = {}
    for families in groups:
        for family in families:
            if family.name in merged:
                merged[family.name].samples.extend(family.samples)
            else:
                merged[family.name] = family
    return list(merged.values())


def _labels(snap: Mapping[str, Any]) -> tuple[str, dict[str, str]]:
    role = "sender" if "sender_id" in snap else "receiver"
    return role, {"role": role, "id": str(snap.get(f"{role}_id", "")),
                  "stream": str(snap.get("stream", "")), "mode": str(snap.get("mode", ""))}


def snapshot_metrics(snap: Mapping[str, Any]) -> list[Metric]:
    """The metric families of one snapshot (a Sender's or a Receiver's)."""
    role, labels = _labels(snap)
    names, values = list(labels), list(labels.values())
    out: list[Metric] = []

    def add(kind: type[CounterMetricFamily | GaugeMetricFamily], name: str, doc: str,
            value: float) -> None:
        family = kind(name, doc, labels=names)
        family.add_metric(values, float(value))
        out.append(family)

    counters, gauges = ((SENDER_COUNTERS, SENDER_GAUGES) if role == "sender"
                        else (RECEIVER_COUNTERS, RECEIVER_GAUGES))
    for name, key, doc in counters:
        add(CounterMetricFamily, name, doc, snap.get(key) or 0)
    for name, key, doc in gauges:
        value = snap.get(key, 0)
        if value is not None:  # None: no such figure now (a NAK sender's limit in its start)
            add(GaugeMetricFamily, name, doc, value)
    naks_key = "naks_received" if role == "sender" else "naks_sent"
    naks = CounterMetricFamily("nakflow_naks", "NAKs received (role sender) or sent (role "
                               "receiver), by fill level in percent", labels=[*names, "level"])
    for level, count in sorted((snap.get(naks_key) or {}).items()):
        naks.add_metric([*values, str(level)], float(count))
    out.append(naks)
    _by_signal(out, names, values, role, snap)
    mismatch = CounterMetricFamily("nakflow_peer_mismatch", "Frames from peers in another "
                                   "mode, or with another shared key (or none)",
                                   labels=[*names, "kind"])
    for kind in ("mode", "key"):
        mismatch.add_metric([*values, kind], float(snap.get(f"{kind}_mismatch") or 0))
    out.append(mismatch)
    if role == "sender":
        repair = snap.get("repair") or {}
        add(CounterMetricFamily, "nakflow_repair_requests_received",
            "Repair requests received", repair.get("requests", 0))
        add(CounterMetricFamily, "nakflow_messages_resent", "Messages re-sent by repair",
            repair.get("resent", 0))
        add(GaugeMetricFamily, "nakflow_history_messages",
            "Messages kept in the sender's repair history", repair.get("msgs", 0))
        if snap.get("rtt_ms") is not None:
            add(GaugeMetricFamily, "nakflow_rtt_seconds",
                "Round-trip time to the receivers, measured by the sender",
                snap["rtt_ms"] / 1000.0)
        return out
    capacity = snap.get("capacity_msgs") or 0
    add(GaugeMetricFamily, "nakflow_queue_fill_ratio", "Queue fill, 0 to 1",
        (snap.get("queued") or 0) / capacity if capacity else 0.0)
    missing = GaugeMetricFamily("nakflow_messages_missing", "Messages sent and not delivered "
                                "here now, by reason (repair brings in_flight, queue_full "
                                "and before_join down)", labels=[*names, "reason"])
    for reason, key in MISSING_REASONS:
        missing.add_metric([*values, reason], float(snap.get(key) or 0))
    out.append(missing)
    streams = GaugeMetricFamily("nakflow_streams", "Streams by status: complete, open (no "
                                "END yet), incomplete (END short, or the sender gone "
                                "without END)", labels=[*names, "status"])
    for status, n in stream_counts(dict(snap)).items():
        streams.add_metric([*values, status], float(n))
    out.append(streams)
    _sink(out, names, values, snap.get("sink"))
    add(CounterMetricFamily, "nakflow_repair_requests_sent", "Repair requests sent",
        (snap.get("repair") or {}).get("requests_sent", 0))
    latency = snap.get("latency_ms") or {}
    quantiles = [(q, latency.get(k)) for q, k in (("0.5", "p50"), ("0.99", "p99"))]
    if any(v is not None for _q, v in quantiles):
        family = GaugeMetricFamily("nakflow_delivery_latency_seconds",
                                   "Send-to-delivery latency quantiles (sampled)",
                                   labels=[*names, "quantile"])
        for q, v in quantiles:
            if v is not None:
                family.add_metric([*values, q], v / 1000.0)
        out.append(family)
    return out


def _sink(out: list[Metric], names: list[str], values: list[str],
          sink: Mapping[str, Any] | None) -> None:
    """``nakflow receive --sink``: what its sink did with the messages delivered, and
    whether it failed (the receive stops then)."""
    if not sink:
        return
    names, values = [*names, "sink"], [*values, str(sink.get("target", ""))]
    done = CounterMetricFamily("nakflow_sink_messages", "Messages the sink wrote, rejected "
                               "(no row it can write: left out, the rest written) or did "
                               "not write (after it failed)", labels=[*names, "outcome"])
    for outcome in ("written", "rejected", "not_written"):
        done.add_metric([*values, outcome], float(sink.get(outcome) or 0))
    failed = GaugeMetricFamily("nakflow_sink_failed", "1 once the sink failed (the receive "
                               "stops), else 0", labels=names)
    failed.add_metric(values, 1.0 if sink.get("error") else 0.0)
    out += [done, failed]


def _by_signal(out: list[Metric], names: list[str], values: list[str], role: str,
               snap: Mapping[str, Any]) -> None:
    """Cuts and holds (sender) or NAKs (receiver) by the signal behind them, and the
    receiver that limits the sender now (an info metric: value 1, the labels say who)."""
    if role == "receiver":
        sent = CounterMetricFamily("nakflow_nak_signals", "NAKs sent, by what filled the "
                                   "receiver (queue, delay, loss, silence, io, repair)",
                                   labels=[*names, "signal"])
        for signal, count in sorted((snap.get("naks_by_signal") or {}).items()):
            sent.add_metric([*values, signal], float(count))
        out.append(sent)
        return
    for name, key, doc in (("nakflow_rate_cuts", "cuts_by_signal",
                            "Rate-limit cuts, by the signal of the NAK that cut"),
                           ("nakflow_rate_holds", "holds_by_signal",
                            "NAKs that kept the rate limit from rising, by signal")):
        family = CounterMetricFamily(name, doc, labels=[*names, "signal"])
        for signal, count in sorted((snap.get(key) or {}).items()):
            family.add_metric([*values, signal], float(count))
        out.append(family)
    limiting = snap.get("limiting")
    if limiting:
        info = GaugeMetricFamily("nakflow_limiting_receiver_info", "The receiver whose NAK "
                                 "cut the rate last, and why", labels=[*names, "receiver",
                                                                       "signal"])
        info.add_metric([*values, limiting["receiver"], limiting["signal"]], 1.0)
        out.append(info)


class _Fixed:
    def __init__(self, snap: dict[str, Any]) -> None:
        self.snap = snap

    def snapshot(self) -> dict[str, Any]:
        return self.snap


class MetricsServer:
    """An HTTP endpoint serving /metrics for any number of Senders and Receivers."""

    def __init__(self, port: int = 0, addr: str = "127.0.0.1") -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.collector = SnapshotCollector()
        self.registry.register(self.collector)
        try:
            self._server, self._thread = start_http_server(port, addr, registry=self.registry)
        except OSError as exc:  # its own error named neither the address nor the port
            why = {errno.EADDRINUSE: "the port is in use (another receiver's or sender's "
                                     "--metrics-port?); pick another, or 0 for any free one",
                   errno.EADDRNOTAVAIL: f"{addr} is no address of this machine"}.get(
                       exc.errno or 0, exc.strerror or str(exc))
            raise EndpointError(f"cannot serve metrics on http://{addr}:{port}/metrics: "
                                f"{why}") from None
        self.addr = addr
        self.port: int = self._server.server_port

    @property
    def url(self) -> str:
        return f"http://{self.addr}:{self.port}/metrics"

    def add(self, source: Snapshotting) -> None:
        self.collector.add(source)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


def serve_metrics(*sources: Snapshotting, port: int = 0,
                  addr: str = "127.0.0.1") -> MetricsServer:
    """Serve the sources' metrics on http://addr:port/metrics (port 0: any free port).

    Binds to loopback by default; pass ``addr="0.0.0.0"`` for a Prometheus on another host.
    """
    server = MetricsServer(port, addr)
    for source in sources:
        server.add(source)
    return server


def push_metrics(gateway: str, snapshot: Mapping[str, Any], job: str = "nakflow",
                 timeout: float = 5.0) -> None:
    """Push one snapshot's metrics to a Prometheus Pushgateway (e.g. at a Spark task's end),
    grouped by the snapshot's role and id so tasks do not overwrite each other."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector([_Fixed(dict(snapshot))]))
    role, labels = _labels(snapshot)
    push_to_gateway(gateway, job=job, registry=registry, timeout=timeout,
                    grouping_key={"role": role, "id": labels["id"]})
