"""The root of the service layer's domain errors, which the API maps to 4xx responses."""

from __future__ import annotations


class ServiceError(Exception):
    """Root of the domain errors the API maps to 4xx responses."""
