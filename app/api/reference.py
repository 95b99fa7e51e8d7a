"""The API's reference, open to anyone: ``GET /api/v1/openapi.json`` (the OpenAPI 3.1 document),
``GET /api/v1/docs`` (the same document read with Redoc: a menu, each operation with its parameters,
its example request as ``curl`` and its example answers), and ``GET /api/v1/asyncapi.yaml`` (the
AsyncAPI 3.0 document of the broker channels, docs/asyncapi.yaml).

Redoc's script comes from the ``flask-openapi3-redoc`` package's files (a pinned dependency, served
from here under ``/assets/api-reference/``, the address of its attribution's logo pointed at the
package's own): no CDN, so the page reads the same offline or behind a firewall, and its
Content-Security-Policy lets it load nothing from another host."""

from __future__ import annotations

import importlib.util
import json
from functools import cache
from pathlib import Path

from flask import Blueprint, Response, abort, send_file

from app.api.openapi import document
from app.package_files import shipped

bp = Blueprint("reference", __name__, url_prefix="/api/v1")
assets = Blueprint("reference_assets", __name__, url_prefix="/assets/api-reference")
#: Everything from this server; Redoc injects its styles and runs its search in a blob worker.
POLICY = (
    "default-src 'none'; script-src 'self'; connect-src 'self'; img-src 'self' data:; font-src 'self' data:; "
    "style-src 'self' 'unsafe-inline'; worker-src 'self' blob:; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)
PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Liaison API {version}</title></head>
<body><div id="redoc"></div>
<script src="/assets/api-reference/redoc.standalone.js"></script>
<script src="/assets/api-reference/start.js"></script>
</body></html>
"""
#: Redoc's options: the document from this server, each operation's curl shown first among its
#: request samples (then the JSON body), its success answers expanded.
START = """Redoc.init("/api/v1/openapi.json", {
  payloadSampleIdx: 1, expandResponses: "200,201,202", jsonSampleExpandLevel: 3,
  pathInMiddlePanel: true, sortTagsAlphabetically: false, expandSingleSchemaField: true,
  theme: {typography: {fontFamily: "system-ui, sans-serif", headings: {fontFamily: "system-ui, sans-serif"},
    code: {fontFamily: "ui-monospace, monospace"}}}
}, document.getElementById("redoc"));
"""


#: the one address Redoc's script would load by itself (its attribution's logo): the package's own logo instead
CDN_LOGO, LOGO = b"https://cdn.redoc.ly/redoc/logo-mini.svg", b"/assets/api-reference/redoc.svg"


def redoc_files() -> Path:
    """The package's Redoc files (``js/redoc.standalone.js``, ``images/redoc.svg``), found without
    importing it (its plugin module imports flask-openapi3, which Liaison does not use)."""
    spec = importlib.util.find_spec("flask_openapi3_redoc")
    assert spec is not None and spec.submodule_search_locations, "flask-openapi3-redoc is a runtime dependency"
    return Path(next(iter(spec.submodule_search_locations))) / "templates" / "redoc"


@cache
def redoc_script() -> bytes:
    script = (redoc_files() / "js" / "redoc.standalone.js").read_bytes()
    assert script.count(CDN_LOGO) == 1, "a new Redoc: check what else it loads by itself"
    return script.replace(CDN_LOGO, LOGO)


@bp.get("/openapi.json")
def openapi_json() -> Response:
    """In the document's own order (``jsonify`` would sort the keys): members as the models declare them."""
    return Response(_openapi_text(), mimetype="application/json")


@cache
def _openapi_text() -> str:
    return json.dumps(document(), ensure_ascii=False)


#: Shipped with the code (a checkout's docs/, an installed server's app/docs: app/package_files.py), read once.
ASYNCAPI = shipped("docs/asyncapi.yaml")


@bp.get("/asyncapi.yaml")
def asyncapi_yaml() -> Response:
    text = _asyncapi()
    if text is None:
        abort(404)
    return Response(text, mimetype="application/yaml")


@cache
def _asyncapi() -> str | None:
    try:
        return ASYNCAPI.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None


@bp.get("/docs")
def docs_page() -> Response:
    page = Response(PAGE.format(version=document()["info"]["version"]), mimetype="text/html")
    page.headers["Content-Security-Policy"] = POLICY
    return page


@assets.get("/redoc.standalone.js")
def redoc_js() -> Response:
    return Response(redoc_script(), mimetype="text/javascript", headers={"Cache-Control": "max-age=3600"})


@assets.get("/redoc.svg")
def redoc_logo() -> Response:
    return send_file(redoc_files() / "images" / "redoc.svg", mimetype="image/svg+xml", max_age=3600)


@assets.get("/start.js")
def start_js() -> Response:
    return Response(START, mimetype="text/javascript")
