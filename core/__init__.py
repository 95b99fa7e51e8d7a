"""The pure core: Liaison's policy as plain functions over plain data, importing only the standard
library, so each rule is unit-tested with nothing running.

Offers the task state machine (``states``), retries and error classes (``retry_policy``,
``classify``, ``errors``), deadlines and beat's liveness (``deadlines``, ``beat_liveness``), callback
order and endpoint health (``ordering``, ``endpoint_health``), fair dispatch and rate limits
(``fair_share``, ``rate_limit``), notices (``notifications``), and the outbound guard with what it
reads (``outbound_guard``, ``addresses``, ``origins``, ``urls``). Every layer may import any module
here; nothing here imports a layer above (tests/unit/test_layers.py).
"""
