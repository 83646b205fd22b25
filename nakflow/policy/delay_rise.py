"""The start's delay exit (``policy.startup``): HyStart++ (RFC 9406 4.2-4.3) over the
receivers' PROGRESS reports, each carrying the least one-way delay its frames showed.
Sans-I/O: every call takes ``now``."""

from __future__ import annotations

import math

__all__ = ["CSS_DIVISOR", "CSS_MAX_S", "CSS_ROUNDS", "DELAY_MIN_SAMPLES", "DELAY_RISE_S",
           "DELAY_SAMPLES", "ROUND_MIN_S", "DelayRise"]

#: Reports of a receiver in a block before its delay rise may end the start (HyStart++'s
#: N_RTT_SAMPLE) ...
DELAY_SAMPLES = 8
#: ... or, once a round (ROUND_MIN_S or the RTT) has passed since the block's first, at
#: least this many: a receiver behind a slow link reports about once a frame, and its
#: frames come in bursts (a TCP sender gets a sample per ACK; 8 took the lab's tcp run
#: 100 ms and 260 messages, where 3 showed the queue at 29 ms).
DELAY_MIN_SAMPLES = 3
#: The delay rise that ends the start: clamp(RTT / 8, these), s (HyStart++'s eta).
DELAY_RISE_S = (0.004, 0.016)
#: After a delay rise: rounds of growth divided by CSS_DIVISOR before the start ends,
#: unless the delay falls back below where it rose from (HyStart++'s CSS).
CSS_ROUNDS = 5
CSS_DIVISOR = 4
#: ... or this long, s, whichever is sooner (a round lasts as long as the queue it built).
CSS_MAX_S = 0.05
#: A round lasts at least this long, and an RTT (the least measured), s: its delivery
#: rate is taken over no less (a receiver's queue that had room at first takes a burst
#: far above its rate; confirmations come in bursts).
ROUND_MIN_S = 0.01


class DelayRise:
    """The start's delay exit, HyStart++ (RFC 9406 4.2-4.3) over the receivers' reports:
    ``sample`` takes a report's least one-way delay; each receiver's blocks of
    DELAY_SAMPLES reports (or of DELAY_MIN_SAMPLES over a round: a report that comes a
    round after a block's first begins the next) are judged against the least it ever
    showed (its clock offset cancels). A block whose least is ``threshold()`` above that
    begins the conservative growth (CSS, ``css_rounds`` not None); in it, a block of every
    receiver that rose back below the threshold was spurious (a process descheduled: the
    start goes on), and CSS_ROUNDS rounds (``on_round``) or CSS_MAX_S of it
    (``deadline``) end the start. HyStart++ calls a rise spurious once a round's least
    falls below the least of the round it rose in; a link's queue is not monotone (in the
    lab's tcp run 13.5 ms, then 9.0 while TCP recovered, 9 ms over its least), and that
    rule took it for spurious twice in one start."""

    def __init__(self) -> None:
        self.rtt_s: float | None = None  # the path's least RTT (the threshold's scale)
        # per receiver: [least delay this block, samples in it, least ever, block's first]
        self._rows: dict[str, list[float]] = {}
        #: in CSS: rounds since the rise, when, and the receivers whose delay is up
        self.css_rounds: int | None = None
        self._css_at = 0.0
        self._risen: set[str] = set()
        self.spurious = 0  # delay rises that fell back (the start went on)
        self.max_rise = 0.0  # the largest rise of a block's least delay seen, s

    def threshold(self) -> float:
        """How far a block's least delay must rise to count, s: clamp(RTT / 8)."""
        lo, hi = DELAY_RISE_S
        return min(max((self.rtt_s or 0.0) / 8, lo), hi)

    def suspect(self, receiver: str, delay: float) -> bool:
        """A report's least delay is ``threshold()`` above the least its receiver ever
        showed: one report is no rise (a process descheduled), but the window should not
        grow at full speed on it while its block is judged."""
        row = self._rows.get(receiver)
        return row is not None and delay >= row[2] + self.threshold()

    def sample(self, receiver: str, delay: float, now: float, n: int = 1) -> bool:
        """A report's least delay over the ``n`` messages it confirms (each one a sample,
        as each segment an ACK covers is TCP's); True if the rise lasted CSS_MAX_S (the
        start ends)."""
        row = self._rows.get(receiver)
        if row is None:
            row = self._rows[receiver] = [math.inf, 0.0, math.inf, now]
        if now >= self.deadline():
            return True
        if row[1] and now - row[3] >= max(ROUND_MIN_S, self.rtt_s or 0.0) and (
                row[1] >= DELAY_MIN_SAMPLES or row[0] < row[2] + self.threshold()):
            # a round is over: this report begins the next. A block of fewer samples is
            # judged if its least is low (a queue or a pause only adds delay), else it
            # goes on (it may be a process descheduled)
            self._judge(receiver, row, now)
        if row[1] == 0:
            row[3] = now
        if delay < row[0]:
            row[0] = delay
        row[1] += max(1, n)
        if row[1] >= DELAY_SAMPLES:
            self._judge(receiver, row, now)
        if delay < row[2]:
            row[2] = delay
        return False

    def _judge(self, receiver: str, row: list[float], now: float) -> None:
        """A block of ``receiver``'s reports is over: did its least delay rise?"""
        least, row[0], row[1] = row[0], math.inf, 0.0
        self.max_rise = max(self.max_rise, least - row[2])
        risen, up = self._risen, least >= row[2] + self.threshold()
        if self.css_rounds is None:
            if up:
                self.css_rounds, self._css_at = 0, now  # slower growth: is the rise real?
                risen.clear()
                risen.add(receiver)
        elif up:
            risen.add(receiver)
        elif receiver in risen:
            risen.discard(receiver)  # back below the threshold
            if not risen:  # every receiver that rose fell back: spurious
                self.css_rounds, self.spurious = None, self.spurious + 1

    def on_round(self) -> bool:
        """A round is over; True if CSS lasted CSS_ROUNDS of them (the start ends)."""
        if self.css_rounds is None:
            return False
        self.css_rounds += 1
        return self.css_rounds >= CSS_ROUNDS

    def deadline(self) -> float:
        """When CSS has lasted CSS_MAX_S (inf: not in CSS): the start ends then, however
        few reports come (a slow link's come in bursts, 50 ms apart in the lab)."""
        return math.inf if self.css_rounds is None else self._css_at + CSS_MAX_S

    def forget(self, receiver: str) -> None:
        self._rows.pop(receiver, None)
        self._risen.discard(receiver)
