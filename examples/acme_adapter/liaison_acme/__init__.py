"""An example vendor adapter for Liaison: Acme Orders (``liaison_acme.adapter.AcmeAdapter``), and a
fake of its API for tests (``liaison_acme.fake_vendor``)."""

from liaison_acme.adapter import AcmeAdapter

__all__ = ["AcmeAdapter"]
