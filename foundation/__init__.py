"""What every process needs before it does any work: settings from the environment (``settings``,
read through the one table of variables in ``setting_table``), structured logs with secrets
redacted (``logging``) and process-level metrics (``metrics``).

Callers import ``foundation.settings.Settings`` and the helpers of ``logging`` and ``metrics``; the
package knows no database, web framework, broker or HTTP client, so the tables, the service layer
and both edges build on it.
"""
