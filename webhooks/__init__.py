"""The webhook scheme, pure: Standard Webhooks signatures in both directions (``signing``: verify
what vendors send, sign the callbacks Liaison relays) and the vendor events a webhook carries
(``events``: parsed, bounded, mapped onto the state machine), and the other ways vendors prove an
inbound webhook is theirs (``schemes``: Stripe, GitHub, a generic HMAC, Basic, a per-task URL token,
and an unsigned hint that is only confirmed with the vendor's API).

The HTTP view and the vendor queue consumer call it through ``service.ingress``; the relays sign
with it. Standard library, ``core`` and ``wire`` only.
"""
