"""Flow control: NAK's adaptive rate limit, what a receiver's fill and path signal,
ACK's credit, and the registry of modes (``nakflow.policies``). Sans-I/O, like ``core``,
which uses it."""
