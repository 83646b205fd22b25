"""The sans-I/O protocol: ``SenderCore`` and ``ReceiverCore`` and their parts.

Each side's whole protocol is one object: frames and ``now`` in; frames, events and
deadlines out (aioquic's driver contract: ``get_timer`` / ``handle_timer``,
``next_event``). Nothing here opens a socket, starts a thread or reads a clock
(``make lint``: import-linter; ``tests/test_core_purity.py``).
"""
