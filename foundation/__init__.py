"""What every process needs before it does any work: settings from the environment (``settings``,
read through the tables of variables in ``setting_table`` and, per provider, ``provider_setting_table``),
structured logs with secrets redacted (``logging``) and process-level metrics (``metrics``).

Callers import ``foundation.settings.Settings`` (``foundation.provider_settings.ProviderSettings``
for one provider's) and the helpers of ``logging`` and ``metrics``; the package knows no database,
web framework, broker or HTTP client, so the tables, the service layer and both edges build on it.
"""
