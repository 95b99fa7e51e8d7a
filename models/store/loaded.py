"""Rows a Core statement read, made the session's persistent objects without the ORM's loading.

An ORM ``SELECT`` of an entity sets up its loading anew on every execution: a row processor per
column and per relationship, a getter looked up per column in the result, a loading context
(``sqlalchemy.orm.loading.instances``) — about 150 Python calls for a task row before the first
value is read, more than the statement's own execution. The hot paths' statements read their
rows as plain Core columns instead, and :class:`Loaded` makes each row the object the ORM would
have made: the same class, in the session's identity map under the same key, its columns held
and clean, the columns left unread (a task's ``input`` and ``outcome``) deferred exactly as
``defer()`` leaves them (loaded on first access, alone). What callers do with the object — change
it, flush it, expire it, lazy-load a relationship — is the ORM's as before.

What the ORM does when the row's object is in the identity map already is kept too: the object
is returned as it is, or, where the statement asked for ``populate_existing`` (a row re-read
under its lock), its columns are overwritten with the row's and marked clean, its deferred
columns deferred again and its relationships left to load afresh.

This is the ORM's own bookkeeping done by hand (``InstanceState``'s attributes, the identity
map's ``_add_unpresent``, as ``loading._instance`` does it): private API, kept in the store
(``tests/unit/test_store_boundary.py``), and held to the ORM's own loading by
``tests/middle/test_store_claims.py`` (what the ORM loads, flushes and re-reads, against these).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Generic, TypeVar, cast

from sqlalchemy import Column, inspect
from sqlalchemy.orm import Mapper, Session, make_transient_to_detached
from sqlalchemy.orm.base import instance_state
from sqlalchemy.orm.strategies import LoadDeferredColumns

from models.client import Client
from models.messages import OutboxMessage
from models.task import ExternalTask

Mapped_ = TypeVar("Mapped_")


class Loaded(Generic[Mapped_]):
    """How a mapped class's rows become objects of a session: :attr:`columns` are what a statement
    selects, in this order, and :meth:`one` makes an object of their values."""

    def __init__(self, cls: type[Mapped_], unloaded: tuple[str, ...] = ()) -> None:
        mapper: Mapper[Mapped_] = cast("Mapper[Mapped_]", inspect(cls))
        [pk] = mapper.primary_key
        props = [prop for prop in mapper.column_attrs if prop.key not in unloaded]
        assert all(len(prop.columns) == 1 for prop in props), "one column per attribute"
        assert {prop.key for prop in mapper.column_attrs} >= set(unloaded), "unloaded columns of the class"
        self.cls = cls
        #: the table's columns a statement selects for the object, in the order :meth:`one` takes
        self.columns: tuple[Column[Any], ...] = tuple(cast("Column[Any]", prop.columns[0]) for prop in props)
        self._keys = tuple(prop.key for prop in props)
        self._pk_index = self._keys.index(mapper.get_property_by_column(pk).key)
        self._identity_class = mapper._identity_class
        self._new_instance = mapper.class_manager.new_instance
        self._deferred = {key: LoadDeferredColumns(key) for key in unloaded}
        self._relationships = tuple(rel.key for rel in mapper.relationships)

    def execute(self, session: Session, statement: Any, params: dict[str, Any]) -> Any:
        """``statement``'s result, its rows plain: run on the session's connection (an ORM-enabled
        statement, one with a mapped class's column somewhere in it, would be loaded by the ORM
        through ``Session.execute``), after the autoflush the ORM would have made."""
        return execute(session, statement, params)

    def one(self, session: Session, values: Sequence[Any], *, populate_existing: bool = False) -> Mapped_ | None:
        """The object of a row's :attr:`columns`' ``values`` (None for a row of nulls: an outer
        join that found none), a persistent object of ``session``."""
        pk = values[self._pk_index]
        if pk is None:
            return None
        identity_key = (self._identity_class, (pk,), None)
        identity_map = session.identity_map
        existing = identity_map.get(identity_key)
        if existing is not None:
            if populate_existing:
                self._refresh(session, existing, values)
            return existing
        obj = self._new_instance()
        state = instance_state(obj)
        state.key = identity_key
        state.identity_token = None
        state.session_id = session.hash_key
        identity_map._add_unpresent(state, identity_key)
        state.dict.update(zip(self._keys, values, strict=True))
        if self._deferred:
            state.callables = dict(self._deferred)
        return obj

    def new(self, values: dict[str, Any]) -> Mapped_:
        """A new object of the class holding ``values``, transient (not in any session), as the
        class's constructor makes it but without an attribute event per value: a flush inserts what
        its ``__dict__`` holds, and :meth:`persist` makes it a row inserted outside the unit of work."""
        obj = self._new_instance()
        obj.__dict__.update(values)
        return obj

    def persist(self, session: Session, obj: Mapped_) -> None:
        """``obj``, transient, now the session's persistent and clean object of the row a statement
        just inserted with its values (its id set): what ``make_transient_to_detached`` and
        ``Session.add`` do, without the save-update cascade an object holding no related object has
        nothing for. Every column must be held (``None`` ones too): one not held would read as None."""
        state = instance_state(obj)
        held = state.dict
        if any(key in held for key in self._relationships):  # related objects: the ORM's own way
            make_transient_to_detached(obj)
            session.add(obj)
            return
        identity_key = (self._identity_class, (held[self._keys[self._pk_index]],), None)
        state.key = identity_key
        state.identity_token = None
        state._commit_all(held)
        state.session_id = session.hash_key
        session.identity_map._add_unpresent(state, identity_key)

    def _refresh(self, session: Session, obj: Any, values: Sequence[Any]) -> None:
        """What ``populate_existing`` does to an object already in the session: the row's values,
        clean; the unread columns and the relationships loaded afresh on next access."""
        state = instance_state(obj)
        held = state.dict
        for key in self._relationships:
            state._reset(held, key)
        held.update(zip(self._keys, values, strict=True))
        for key, loader in self._deferred.items():
            held.pop(key, None)
            if "callables" not in state.__dict__:
                state.callables = {}
            state.callables[key] = loader
        state._commit_all(held, session.identity_map)


def execute(session: Session, statement: Any, params: dict[str, Any]) -> Any:
    """``statement``'s result on the session's connection, its rows plain (no ORM loading), the
    session's pending changes flushed first as an ORM statement's execution would (autoflush)."""
    session._autoflush()
    return session.connection().execute(statement, params)


#: an outbox row, every column
OUTBOX_ROW = Loaded(OutboxMessage)
#: a task, every column
TASK = Loaded(ExternalTask)
#: a task without the caller's ``input`` (``models.store.outbox.WITHOUT_INPUT``)
TASK_WITHOUT_INPUT = Loaded(ExternalTask, unloaded=("input",))
#: a task without its payloads, ``input`` and ``outcome`` (``models.store.outbox.WITHOUT_PAYLOAD``)
TASK_WITHOUT_PAYLOAD = Loaded(ExternalTask, unloaded=("input", "outcome"))
#: a client, every column
CLIENT = Loaded(Client)
