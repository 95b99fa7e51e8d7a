"""The server's version: the distribution's (pyproject.toml reads it from here) and the OpenAPI
document's ``info.version``, one number for both."""

VERSION = "0.1.0"
