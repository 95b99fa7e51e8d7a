"""The clients' part of the operators' API in the OpenAPI document (``/admin/v1/clients``): keys,
secrets, disabling and callback origins (``app/api/openapi.py``)."""

from __future__ import annotations

from typing import Any

from app.api.openapi_parts import NAME, NO_STORE, ORIGIN, STRING, Schema, obj, ok, op, path, ref


def client_paths() -> dict[str, Schema]:
    client, key_row = ref("Client"), ref("ApiKeyRow")
    base = "/admin/v1/clients/{name}"
    origins = ok("The client's callback origins.", obj({"origins": {"type": "array", "items": STRING}}, ("origins",)))
    origin_list = {"oneOf": [ORIGIN, {"type": "array", "items": ORIGIN, "maxItems": 100}]}

    def change(operation_id: str, summary: str, responses: dict[int, Schema | None], **kw: Any) -> Schema:
        return op(
            operation_id, summary, {409: None, **responses}, tag="clients", params=(NAME, *kw.pop("params", ())), **kw
        )

    return {
        "/admin/v1/clients": {
            "get": op(
                "listClients",
                "Clients (never a key or a secret)",
                {200: ok("Every client.", obj({"items": {"type": "array", "items": client}}, ("items",)))},
                tag="clients",
            )
        },
        base: {"get": op("getClient", "One client", {200: ok("The client.", client)}, tag="clients", params=(NAME,))},
        f"{base}/keys": {
            "post": change(
                "rotateKey",
                "A new API key; the old ones stay valid until retired",
                {
                    201: ok(
                        "The key, shown this once.",
                        obj({"api_key": STRING, "key": key_row}, ("api_key", "key")),
                        **NO_STORE,
                    )
                },
            )
        },
        f"{base}/keys/retire": {
            "post": change(
                "retireKeys",
                "Retire every key but the newest",
                {200: ok("The keys retired.", obj({"retired": {"type": "array", "items": key_row}}, ("retired",)))},
            )
        },
        f"{base}/keys/{{key}}/revoke": {
            "post": change(
                "revokeKey",
                "Revoke one key now, by id or prefix",
                {200: ok("The key.", key_row)},
                params=(path("key", {"type": "string"}),),
            )
        },
        f"{base}/disable": {
            "post": change("disableClient", "Refuse its API requests (403)", {200: ok("The client.", client)})
        },
        f"{base}/enable": {
            "post": change("enableClient", "Accept its API requests again", {200: ok("The client.", client)})
        },
        f"{base}/secrets": {
            "post": change(
                "addSecret",
                "A new callback signing secret",
                {
                    201: ok(
                        "The secret, shown this once.",
                        obj(
                            {"callback_secret": STRING, "secrets": {"type": "integer"}}, ("callback_secret", "secrets")
                        ),
                        **NO_STORE,
                    )
                },
            )
        },
        f"{base}/secrets/retire": {
            "post": change(
                "retireSecrets",
                "Keep only the newest callback secret",
                {
                    200: ok(
                        "How many were retired.",
                        obj({"retired": {"type": "integer"}, "secrets": {"const": 1}}, ("retired", "secrets")),
                    )
                },
            )
        },
        f"{base}/channel": {
            "put": change(
                "setChannel",
                "Put the client on a broker channel (amqp or redis), or back on HTTP only (null)",
                {200: ok("The client.", client), 422: None},
                body=obj({"channel": {"enum": ["amqp", "redis", None]}}, ("channel",), closed=True),
                description="Its tasks submitted from then on send their events to the channel too "
                "(only there when it has no callback_url); channel-commands reads its commands within 10 s. "
                "409 when its name cannot name a queue (1-64 of a-z 0-9 _ -).",
            ),
        },
        f"{base}/origins": {
            "get": op("listOrigins", "The client's callback origins", {200: origins}, tag="clients", params=(NAME,)),
            "post": change(
                "changeOrigins",
                "Add and remove callback origins",
                {200: origins},
                body=obj({"add": origin_list, "remove": origin_list}, closed=True),
                description="409 when the client would then hold more than 20 origins, or its default "
                "callback_url would lie outside them (the problem's `errors` names `origin`).",
            ),
        },
    }
