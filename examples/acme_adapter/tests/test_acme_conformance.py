"""Acme's adapter passes Liaison's conformance kit, against the fake Acme on loopback; and it is
found by name, as an installed package's entry point (the way an operator names it)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from foundation.adapter_plugins import load_adapter
from liaison_acme.adapter import AcmeAdapter
from liaison_acme.fake_vendor import FakeAcme
from workers.providers.conformance import AdapterConformance, Kit


@pytest.fixture
def kit() -> Iterator[Kit]:
    vendor = FakeAcme().start()
    try:
        yield Kit(AcmeAdapter, vendor)
    finally:
        vendor.stop()


class TestAcmeConformance(AdapterConformance):
    """Every check of the kit, as tests of this package."""


def test_the_installed_package_declares_the_adapter() -> None:
    assert load_adapter("acme") is AcmeAdapter
