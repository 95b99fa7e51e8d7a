"""The webhook scheme, pure: Standard Webhooks signatures in both directions (``signing``: verify
what vendors send, sign the callbacks Liaison relays) and the vendor events a webhook carries
(``events``: parsed, bounded, mapped onto the state machine).

The HTTP view and the vendor queue consumer call it through ``service.ingress``; the relays sign
with it. Standard library, ``core`` and ``wire`` only.
"""
