"""The OpenAPI document against the code: every route under /api/v1 and /admin/v1 is documented and
every documented operation is a route; the document is valid OpenAPI 3.1 and states the package's
version; every operation has an example request; its page (Redoc) loads nothing from another host.

Whether the server answers as documented is tests/integration/test_conformance.py (schemathesis)."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pytest
import schemathesis
from flask import Flask

from app import create_app
from app.api.openapi import document
from app.api.reference import CDN_LOGO, LOGO, POLICY, redoc_script
from app.errors import PROBLEM
from app.version import VERSION
from foundation.settings import Settings

if TYPE_CHECKING:
    from schemathesis.core.result import Ok

PREFIXES = ("/api/v1/", "/admin/v1/")
ENV = {"DATABASE_URL": "sqlite:///:memory:", "CELERY_BROKER_URL": "redis://127.0.0.1:1/0"}


@pytest.fixture(scope="module")
def app() -> Flask:
    return create_app(Settings.from_env(ENV))


def routes(app: Flask) -> set[tuple[str, str]]:
    """(method, OpenAPI path) of every route the API serves, converters dropped: ``<int:x>`` → ``{x}``."""
    found = set()
    for rule in app.url_map.iter_rules():
        path = re.sub(r"<(?:[^:>]+:)?([^>]+)>", r"{\1}", rule.rule)
        if path.startswith(PREFIXES) or path.rstrip("/") in ("/api/v1", "/admin/v1"):
            assert rule.methods is not None  # Flask fills them in for every route
            found |= {(m.lower(), path) for m in rule.methods - {"HEAD", "OPTIONS"}}
    return found


def documented(doc: dict[str, Any]) -> set[tuple[str, str]]:
    return {(method, path) for path, item in doc["paths"].items() for method in item}


def test_every_route_is_documented_and_every_documented_operation_is_a_route(app: Flask) -> None:
    served, doc = routes(app), documented(document())
    assert served - doc == set(), "routes missing from the document"
    assert doc - served == set(), "documented operations no route serves"
    assert len(served) > 30


def test_the_document_is_valid_openapi_3_1_and_every_reference_resolves() -> None:
    doc = document()
    assert doc["openapi"].startswith("3.1")
    schema = schemathesis.openapi.from_dict(doc)
    schema.validate()  # the OpenAPI 3.1 meta-schema
    text = json.dumps(doc)
    for kind, name in re.findall(r'"#/components/(\w+)/([^"]+)"', text):
        assert name in doc["components"][kind], f"dangling $ref {kind}/{name}"
    operations = list(schema.get_all_operations())
    assert all(cast("Ok[Any]", result).ok() for result in operations)  # an Err has no ok(): every one parses
    ids = [op["operationId"] for item in doc["paths"].values() for op in item.values()]
    assert len(ids) == len(set(ids))


def test_every_operation_declares_its_security_and_its_problem_responses() -> None:
    for path, item in document()["paths"].items():
        for method, op in item.items():
            statuses = set(op["responses"])
            if path.startswith("/admin/v1/"):
                assert op["security"] == [{"AdminToken": []}] and {"401", "404"} <= statuses, (method, path)
            elif path.startswith("/api/v1/tasks"):
                assert op["security"] == [{"ApiKey": []}] and {"401", "403"} <= statuses, (method, path)
            else:
                assert op["security"] == [], (method, path)  # the document itself is public
            if "requestBody" in op:
                assert {"400", "413", "415", "422"} <= statuses, (method, path)
            errors = [s for s in statuses if s >= "400"]
            for status in errors:
                assert op["responses"][status]["$ref"].startswith("#/components/responses/"), (method, path, status)


def test_problem_responses_are_problem_json() -> None:
    for name, response in document()["components"]["responses"].items():
        assert list(response["content"]) == [PROBLEM], name


def test_the_document_and_its_page_are_served_without_authentication(app: Flask) -> None:
    client = app.test_client()
    response = client.get("/api/v1/openapi.json")
    assert response.status_code == 200 and response.is_json
    assert response.get_json() == json.loads(json.dumps(document()))
    page = client.get("/api/v1/docs")
    assert page.status_code == 200 and page.mimetype == "text/html"
    assert page.headers["Content-Security-Policy"] == POLICY


def test_the_documents_version_is_the_packages() -> None:
    pyproject = tomllib.loads(Path(__file__).parents[2].joinpath("pyproject.toml").read_text())
    assert pyproject["project"]["dynamic"] == ["version"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "app.version.VERSION"}
    assert document()["info"]["version"] == VERSION == "0.1.0"


def test_the_page_loads_its_assets_from_the_platform_and_nothing_from_elsewhere(app: Flask) -> None:
    client = app.test_client()
    html = client.get("/api/v1/docs").get_data(as_text=True)
    assert not re.search(r"https?:|//[a-z]", html.replace("<!doctype html>", "")), "no URL of another host"
    sources = re.findall(r'<script src="([^"]+)"', html)
    assert sources == ["/assets/api-reference/redoc.standalone.js", "/assets/api-reference/start.js"]
    for source in sources:
        asset = client.get(source)
        assert asset.status_code == 200 and asset.mimetype == "text/javascript", source
    redoc = client.get(sources[0]).get_data()
    assert redoc == redoc_script() and len(redoc) > 500_000  # the package's script
    assert CDN_LOGO not in redoc and client.get(LOGO.decode()).mimetype == "image/svg+xml"
    assert "/api/v1/openapi.json" in client.get(sources[1]).get_data(as_text=True)  # this server's document
    directives = dict(d.strip().split(" ", 1) for d in POLICY.split(";"))
    for directive, allowed in directives.items():  # the browser fetches nothing from another host
        assert not re.search(r"https?:|\*", allowed), (directive, allowed)
    assert directives["default-src"] == "'none'" and directives["script-src"] == "'self'"


def test_every_operation_has_an_example_request_and_its_bodies_an_example() -> None:
    for route, item in document()["paths"].items():
        for method, op in item.items():
            (sample,) = op["x-codeSamples"]
            assert sample["source"].startswith(f"curl -X {method.upper()} 'http://localhost:5000/"), (method, route)
            assert "{" not in sample["source"].split("\n")[0], "every path parameter has an example"
            if "requestBody" in op:
                example = op["requestBody"]["content"]["application/json"]["example"]
                assert f"-d '{json.dumps(example)}'" in sample["source"], (method, route)
            answers = [r for s, r in op["responses"].items() if s.startswith("2") and ("content" in r or s == "204")]
            assert answers, (method, route)
