"""Wire formats, pure: how Liaison's messages look on the wire, apart from who sends them.

``bounded_json`` reads untrusted JSON within limits of size and depth; ``broker_messages`` is the
envelope of vendor commands and events on a broker queue (the amqp provider); ``channel_messages``
is the envelope of a domain app's channel (its commands in, its task events out). Standard library
only: every layer may import it, and the simulator speaks the same formats through it.
"""
