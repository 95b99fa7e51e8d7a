"""The naive pipeline's one table and its engine (one per process, created lazily)."""

from __future__ import annotations

import functools
import os

from sqlalchemy import JSON, Column, DateTime, Engine, Integer, MetaData, String, Table, create_engine, func

metadata = MetaData()

jobs = Table(
    "naive_jobs",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("correlation_id", String(200), nullable=False, unique=True),
    Column("state", String(32), nullable=False),
    Column("input", JSON),
    Column("outcome", JSON),
    Column("vendor_job_id", String(200), index=True),
    Column("created_at", DateTime(timezone=True), server_default=func.now()),
    Column("updated_at", DateTime(timezone=True), server_default=func.now()),
)


@functools.cache
def engine() -> Engine:
    """The process's engine. Prefork children must not share a parent's pooled connections:
    tasks.py disposes it in ``worker_process_init`` (without that, the pipeline hangs)."""
    return create_engine(os.environ["NAIVE_DATABASE_URL"])
