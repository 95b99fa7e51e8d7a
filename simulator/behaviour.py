"""Behaviour knobs: how the simulated vendor misbehaves for one job.

Pure parsing only (no Flask, no I/O) so the rules are unit-testable. Knobs come from two places:
the global config set with ``POST /_sim/config`` and ``input["simulate"]`` of a job; the job's
knobs win key by key. Parsing is strict — an unknown key or a wrong type is an error (→ 400)
rather than silently ignored, because a typo in a test knob would otherwise make a test pass for
the wrong reason.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

EVENT_ACCEPTED = "job.accepted"
EVENT_COMPLETED = "job.completed"
EVENT_TYPES = (EVENT_ACCEPTED, EVENT_COMPLETED)
#: reports sent between acceptance and completion (``progress``), each with a webhook-id of its own
EVENT_PROGRESS = "job.progress"

#: statuses a transient failure (or an outage) may answer with
TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})
_MAX_DUPLICATE = 20
_MAX_PROGRESS_REPORTS = 1000
_MAX_DELAY_S = 3600.0


class BehaviourError(ValueError):
    """The knobs are invalid; ``errors`` lists one human-readable problem per bad key."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("; ".join(errors))
        self.errors = errors


@dataclass(frozen=True)
class Behaviour:
    """The effective knobs for one job (global config merged under the job's own)."""

    outcome: str = "succeeded"
    outcome_payload: Mapping[str, Any] | None = None
    reject: bool = False
    transient_failures: int = 0
    retry_after: int | None = None
    transient_status: int = 503
    slow_s: float = 0.0
    accept_delay_s: float | None = None  # None: the app-wide SIMULATOR_ACCEPT_DELAY_S
    complete_delay_s: float | None = None  # None: the app-wide SIMULATOR_COMPLETE_DELAY_S
    drop: frozenset[str] = frozenset()
    duplicate: int = 1
    reorder: bool = False
    #: percentages reported as ``job.progress`` once accepted, one every ``progress_interval_s``
    progress: tuple[float, ...] = ()
    progress_interval_s: float = 0.1
    #: accept the job and then send nothing at all (no webhook of any type), while ``GET
    #: /jobs/<id>`` still answers: a vendor that went silent, for heartbeats and deadlines
    silent: bool = False


@dataclass(frozen=True)
class GlobalConfig:
    """What ``POST /_sim/config`` sets: an outage switch plus default knobs for every new job."""

    down: bool = False
    down_status: int = 503
    #: the outage reaches the status and find endpoints too (``GET /jobs/<id>``, ``GET
    #: /jobs?reference=``): a vendor that cannot be asked
    status_down: bool = False
    knobs: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready view (what the control endpoint echoes back)."""
        out = {key: _jsonable(value) for key, value in self.knobs.items()}
        out.update(down=self.down, down_status=self.down_status, status_down=self.status_down)
        return out


# --- validators: each returns the normalised value or raises _Invalid -------------------------


class _Invalid(Exception):
    pass


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise _Invalid("must be true or false")
    return value


def _int(low: int, high: int | None = None) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _Invalid("must be an integer")
        if value < low or (high is not None and value > high):
            raise _Invalid(f"must be between {low} and {high}" if high else f"must be >= {low}")
        return value

    return check


def _seconds(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Invalid("must be a number of seconds")
    if not 0 <= value <= _MAX_DELAY_S:
        raise _Invalid(f"must be between 0 and {_MAX_DELAY_S:g}")
    return float(value)


def _optional_int(value: Any) -> int | None:
    return None if value is None else _int(0)(value)


def _status(value: Any) -> int:
    if isinstance(value, bool) or value not in TRANSIENT_STATUSES:
        raise _Invalid(f"must be one of {sorted(TRANSIENT_STATUSES)}")
    return int(value)


def _outcome(value: Any) -> str:
    if value not in ("succeeded", "failed"):
        raise _Invalid('must be "succeeded" or "failed"')
    return value


def _payload(value: Any) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise _Invalid("must be a JSON object")
    return MappingProxyType(dict(value))


def _progress(value: Any) -> tuple[float, ...]:
    if (
        not isinstance(value, list)
        or len(value) > _MAX_PROGRESS_REPORTS
        or not all(not isinstance(p, bool) and isinstance(p, (int, float)) and 0 <= p <= 100 for p in value)
    ):
        raise _Invalid(f"must be a list of at most {_MAX_PROGRESS_REPORTS} percentages (0 to 100)")
    return tuple(float(p) for p in value)


def _drop(value: Any) -> frozenset[str]:
    if not isinstance(value, list) or not all(item in EVENT_TYPES for item in value):
        raise _Invalid(f"must be a list of event types among {list(EVENT_TYPES)}")
    return frozenset(value)


_JOB_VALIDATORS: dict[str, Callable[[Any], Any]] = {
    "outcome": _outcome,
    "outcome_payload": _payload,
    "reject": _bool,
    "transient_failures": _int(0),
    "retry_after": _optional_int,
    "transient_status": _status,
    "slow_s": _seconds,
    "accept_delay_s": _seconds,
    "complete_delay_s": _seconds,
    "drop": _drop,
    "duplicate": _int(1, _MAX_DUPLICATE),
    "reorder": _bool,
    "progress": _progress,
    "progress_interval_s": _seconds,
    "silent": _bool,
}
_GLOBAL_VALIDATORS: dict[str, Callable[[Any], Any]] = {
    **_JOB_VALIDATORS,
    "down": _bool,
    "down_status": _status,
    "status_down": _bool,
}


def _validate(raw: object, validators: Mapping[str, Callable[[Any], Any]], where: str) -> dict:
    if not isinstance(raw, dict):
        raise BehaviourError([f"{where} must be a JSON object"])
    errors: list[str] = []
    knobs: dict[str, Any] = {}
    for key, value in raw.items():
        check = validators.get(key)
        if check is None:
            errors.append(f"{where}: unknown key {key!r}")
            continue
        try:
            knobs[key] = check(value)
        except _Invalid as exc:
            errors.append(f"{where}.{key} {exc}")
    if errors:
        raise BehaviourError(errors)
    return knobs


# --- public API -------------------------------------------------------------------------------


def parse_global_config(raw: object) -> GlobalConfig:
    """Parse the body of ``POST /_sim/config`` (replaces the whole global config)."""
    knobs = _validate(raw, _GLOBAL_VALIDATORS, "config")
    down = knobs.pop("down", False)
    down_status = knobs.pop("down_status", 503)
    status_down = knobs.pop("status_down", False)
    return GlobalConfig(down=down, down_status=down_status, status_down=status_down, knobs=MappingProxyType(knobs))


def parse_job_knobs(job_input: object) -> dict[str, Any]:
    """The validated ``input["simulate"]`` of a job; ``{}`` when the input carries none."""
    if not isinstance(job_input, dict) or "simulate" not in job_input:
        return {}
    return _validate(job_input["simulate"], _JOB_VALIDATORS, "input.simulate")


def resolve_behaviour(config: GlobalConfig, job_input: object) -> Behaviour:
    """The effective behaviour of a new job: the job's knobs merged over the global ones."""
    merged = {**config.knobs, **parse_job_knobs(job_input)}
    return Behaviour(**merged)


def _jsonable(value: Any) -> Any:
    if isinstance(value, frozenset):
        return sorted(value)
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, Mapping):
        return dict(value)
    return value
