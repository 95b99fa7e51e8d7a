"""``service.credentials``: API keys (rotate, retire, revoke), callback secrets, disabling a client,
callback origins. New keys and secrets exist in clear only in what the call returns."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from models.client import ApiKey, hash_api_key
from models.db import Database
from service.credentials import (
    MAX_SECRETS,
    ClientNotFound,
    CredentialError,
    KeyNotFound,
    OriginRefused,
    add_secret,
    authenticate,
    change_origins,
    create_client,
    find_client,
    keys,
    live_keys,
    retire_keys,
    retire_secrets,
    revoke_key,
    rotate_key,
    set_disabled,
)
from tests.middle.builders import NOW, later


def test_a_new_client_has_one_key_stored_as_its_hash_and_one_secret(db: Database) -> None:
    with db.transaction() as session:
        client, key, secret = create_client(session, "shop", "https://shop.example/cb", now=NOW)
        assert key.api_key.startswith("lk_") and secret.startswith("whsec_")
        assert client.callback_secrets == [secret]
        stored = session.scalars(select(ApiKey)).one()
        assert stored.key_hash == hash_api_key(key.api_key) and stored.prefix == key.api_key[:10]
        assert key.api_key not in repr(client) and key.api_key not in repr(stored)
        assert authenticate(session, key.api_key) is client
        assert authenticate(session, key.api_key + "x") is None
        assert find_client(session, "shop") is client
        with pytest.raises(CredentialError, match="exists already"):
            create_client(session, "shop", None, now=NOW)
        with pytest.raises(ClientNotFound):
            find_client(session, "nobody")


def test_a_rotation_overlaps_until_the_old_keys_are_retired(db: Database) -> None:
    with db.transaction() as session:
        client, old, _ = create_client(session, "shop", None, now=NOW)
        new = rotate_key(session, client, later(1))
        assert authenticate(session, old.api_key) is client and authenticate(session, new.api_key) is client
        assert retire_keys(session, client, later(2)) == [old.row]
        assert authenticate(session, old.api_key) is None and authenticate(session, new.api_key) is client
        assert [k.state for k in keys(session, client)] == ["active", "retired"]
        assert retire_keys(session, client, later(3)) == []  # the newest is never retired


def test_a_key_is_revoked_by_id_or_prefix(db: Database) -> None:
    with db.transaction() as session:
        client, first, _ = create_client(session, "shop", None, now=NOW)
        second = rotate_key(session, client, later(1))
        revoke_key(session, client, str(first.row.id), later(2))
        assert authenticate(session, first.api_key) is None
        revoke_key(session, client, second.api_key[:10], later(3))
        assert live_keys(session, client) == []
        with pytest.raises(KeyNotFound):
            revoke_key(session, client, "lk_nothing", later(4))


def test_an_ambiguous_prefix_names_no_key(db: Database) -> None:
    with db.transaction() as session:
        client, _, _ = create_client(session, "shop", None, now=NOW)
        rotate_key(session, client, later(1))
        with pytest.raises(KeyNotFound, match="2 keys"):
            revoke_key(session, client, "lk_", later(2))
        assert len(live_keys(session, client)) == 2


def test_another_clients_key_cannot_be_revoked_through_this_one(db: Database) -> None:
    with db.transaction() as session:
        shop, _, _ = create_client(session, "shop", None, now=NOW)
        _, theirs, _ = create_client(session, "other", None, now=NOW)
        with pytest.raises(KeyNotFound):
            revoke_key(session, shop, str(theirs.row.id), later(1))
        assert authenticate(session, theirs.api_key) is not None


def test_secrets_are_added_first_bounded_and_retired_down_to_the_newest(db: Database) -> None:
    with db.transaction() as session:
        client, _, first = create_client(session, "shop", None, now=NOW)
        newest = add_secret(client)
        assert client.callback_secrets == [newest, first]
        while len(client.callback_secrets) < MAX_SECRETS:
            newest = add_secret(client)
        with pytest.raises(CredentialError):
            add_secret(client)
        assert retire_secrets(client) == MAX_SECRETS - 1 and client.callback_secrets == [newest]


def test_a_disabled_client_still_authenticates_and_can_be_enabled(db: Database) -> None:
    with db.transaction() as session:
        client, key, _ = create_client(session, "shop", None, now=NOW)
        set_disabled(client, True, later(1))
        set_disabled(client, True, later(2))  # the first time stands
        assert client.disabled_at == later(1) and authenticate(session, key.api_key) is client  # refused by the API
        set_disabled(client, False, later(3))
        assert client.disabled_at is None


def test_origins_are_normalized_and_must_hold_the_default_callback_url(db: Database) -> None:
    with db.transaction() as session:
        with pytest.raises(OriginRefused):
            create_client(session, "shop", "https://shop.example/cb", ("https://elsewhere.example",), now=NOW)
        client, _, _ = create_client(session, "shop", "https://shop.example/cb", ("HTTPS://Shop.Example:443",), now=NOW)
        assert client.callback_origins == ["https://shop.example"]
        assert change_origins(client, add=("https://backup.example",)) == [
            "https://shop.example",
            "https://backup.example",
        ]
        with pytest.raises(OriginRefused):
            change_origins(client, remove=("https://shop.example",))
        assert client.callback_origins == ["https://shop.example", "https://backup.example"]
        with pytest.raises(OriginRefused):
            change_origins(client, add=("not an origin",))
