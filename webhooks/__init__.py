"""Webhooks in both directions: the Standard Webhooks signature scheme, inbound events, outbound relays."""
