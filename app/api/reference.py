"""The API's reference, open to anyone: ``GET /api/v1/openapi.json`` (the OpenAPI 3.1 document) and
``GET /api/v1/docs`` (the same document as one HTML page, rendered here on the server: no script,
font or stylesheet from elsewhere, so it reads the same offline or behind a firewall), and
``GET /api/v1/asyncapi.yaml`` (the AsyncAPI 3.0 document of the broker channels, docs/asyncapi.yaml)."""

from __future__ import annotations

import json
import re
from functools import cache
from html import escape
from typing import Any

from flask import Blueprint, Response, abort, jsonify

from app.api.openapi import document
from app.package_files import shipped

bp = Blueprint("reference", __name__, url_prefix="/api/v1")
METHODS = ("get", "post", "put", "patch", "delete")
_REF = re.compile(r"&quot;\$ref&quot;: &quot;#/components/(schemas|responses)/(\w+)&quot;")
STYLE = """
body{font:15px/1.5 system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#222}
code,pre{font:13px/1.4 ui-monospace,monospace}pre{background:#f6f6f6;padding:.6rem;overflow:auto}
.op{border-top:1px solid #ddd;padding-top:.5rem;margin-top:1.5rem}.m{font-weight:bold;text-transform:uppercase}
table{border-collapse:collapse}td,th{border:1px solid #ddd;padding:.2rem .5rem;vertical-align:top;text-align:left}
"""


@bp.get("/openapi.json")
def openapi_json() -> Response:
    return jsonify(document())


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
    return Response(_page(), mimetype="text/html")


@cache
def _page() -> str:
    """The document never changes in a running process: render it once."""
    return render(document())


def _json(value: Any) -> str:
    """A schema as indented JSON, each ``$ref`` a link to the component it names."""
    text = escape(json.dumps(value, indent=2, ensure_ascii=False))
    return "<pre>" + _REF.sub(lambda m: f'<a href="#{m[1]}-{m[2]}">{m[2]}</a>', text) + "</pre>"


def _anchor(method: str, path: str) -> str:
    return f"{method}-{re.sub(r'[^A-Za-z0-9]+', '-', path).strip('-')}"


def _operation(method: str, path: str, op: dict[str, Any]) -> list[str]:
    out = [
        f'<div class="op" id="{_anchor(method, path)}"><h3><span class="m">{method}</span> '
        f"<code>{escape(path)}</code></h3><p>{escape(op.get('summary', ''))}</p>"
    ]
    if op.get("description"):
        out.append(f"<p>{escape(op['description'])}</p>")
    schemes = [name for requirement in op.get("security", []) for name in requirement]
    out.append(f"<p>Authentication: {escape(', '.join(schemes) or 'none')}</p>")
    if params := op.get("parameters"):
        out.append("<table><tr><th>parameter</th><th>in</th><th>required</th><th>schema</th></tr>")
        out += [
            f"<tr><td><code>{escape(p['name'])}</code><br>{escape(p.get('description', ''))}</td>"
            f"<td>{p['in']}</td><td>{'yes' if p.get('required') else 'no'}</td><td>{_json(p['schema'])}</td></tr>"
            for p in params
        ]
        out.append("</table>")
    if body := op.get("requestBody"):
        for media, content in body["content"].items():
            required = "required" if body.get("required") else "optional"
            out.append(f"<p>Request body ({escape(media)}, {required}):</p>{_json(content['schema'])}")
    out.append("<table><tr><th>status</th><th>response</th></tr>")
    for status, response in op["responses"].items():
        out.append(f"<tr><td>{escape(status)}</td><td>{_json(response)}</td></tr>")
    out.append("</table></div>")
    return out


def render(doc: dict[str, Any]) -> str:
    """The document as one self-contained HTML page."""
    info = doc["info"]
    ops = [(m, p, o) for p, item in doc["paths"].items() for m, o in item.items() if m in METHODS]
    out = [
        f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{escape(info['title'])} API</title>"
        f"<style>{STYLE}</style></head><body><h1>{escape(info['title'])} API {escape(info['version'])}</h1>",
        f"<p>{escape(info.get('description', ''))}</p>",
        '<p>Machine-readable: <a href="openapi.json">openapi.json</a> (OpenAPI 3.1).</p><h2>Authentication</h2><ul>',
    ]
    out += [
        f"<li><code>{escape(name)}</code>: {escape(s.get('scheme', ''))} — {escape(s.get('description', ''))}</li>"
        for name, s in doc["components"]["securitySchemes"].items()
    ]
    out.append("</ul><h2>Operations</h2>")
    for tag in doc.get("tags", []):
        tagged = [(m, p, o) for m, p, o in ops if tag["name"] in o.get("tags", [])]
        out.append(f"<h3>{escape(tag['name'])}</h3><p>{escape(tag.get('description', ''))}</p><ul>")
        out += [
            f'<li><a href="#{_anchor(m, p)}"><span class="m">{m}</span> <code>{escape(p)}</code></a> '
            f"{escape(o.get('summary', ''))}</li>"
            for m, p, o in tagged
        ]
        out.append("</ul>")
    for method, path, op in ops:
        out += _operation(method, path, op)
    out.append("<h2>Components</h2>")
    for kind in ("schemas", "responses"):
        for name, value in doc["components"].get(kind, {}).items():
            out.append(f'<h3 id="{kind}-{name}">{escape(name)}</h3>{_json(value)}')
    out.append("</body></html>")
    return "\n".join(out)
