"""Helpers shared by integration tests: real servers on loopback, no mocks.

- :class:`tests.support.servers.ServerThread` serves any WSGI app on ``127.0.0.1:<free port>``.
- :class:`tests.support.servers.CallbackRecorder` is a WSGI app that records POSTs (a fake
  webhook receiver / domain app) with scripted answers and a ``wait_for`` polling helper.
- :class:`tests.support.listeners.CountingListener` counts raw TCP connections (proof that nothing
  reached a port); :class:`tests.support.listeners.Tarpit` drips one header every few seconds.
"""

from tests.support.servers import CallbackRecorder, RecordedRequest, ServerThread

__all__ = ["CallbackRecorder", "RecordedRequest", "ServerThread"]
