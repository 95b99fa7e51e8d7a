"""Vendor profiles (wire.profiles): every kind of mistake names the file and the key; templates keep
every substituted value inside its slot; the shipped examples parse."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wire.profiles import (
    ProfileError,
    UnsafeValue,
    load_profile,
    parse_profile,
    render_header,
    render_json,
    render_path,
    render_query,
    template,
)

ROOT = Path(__file__).resolve().parents[2]

GOOD = """
[headers]
Authorization = "Bearer {api_key}"

[statuses]
PENDING = "queued"
DONE = "succeeded"

[submit]
method = "POST"
path = "/v1/jobs"
headers = { "Idempotency-Key" = "{idempotency_key}" }
body = { params = "{input}", ref = "{reference}", hook = "{callback_url}" }
job_id = "/data/id"

[status]
method = "GET"
path = "/v1/jobs/{job_id}"
status = "/data/state"

[cancel]
method = "POST"
path = "/v1/jobs/{job_id}/cancel"

[find]
method = "GET"
path = "/v1/jobs"
query = { reference = "{reference}" }
job_id = "/data/0/id"

[events]
type = "/type"
job_id = "/data/object/id"
[events.types]
"job.finished" = "completed:succeeded"
"""


def _good() -> dict[str, Any]:
    return tomllib.loads(GOOD)


def _set(data: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    *parents, last = dotted.split(".")
    target = data
    for part in parents:
        target = target[part]
    if value is _DELETE:
        del target[last]
    else:
        target[last] = value
    return data


_DELETE = object()

#: (the change to the good profile, the key the error must name)
MISTAKES = [
    ("colour", "blue", "colour"),  # an unknown top-level key
    ("submit.retries", 3, "submit.retries"),  # an unknown key in an operation
    ("submit.method", "FETCH", "submit.method"),
    ("submit.path", _DELETE, "submit.path"),
    ("submit.path", "v1/jobs", "submit.path"),  # not under the base URL
    ("submit.path", "/v1/{nope}", "submit.path"),  # an unknown variable
    ("submit.path", "/v1/{input}", "submit.path"),  # the input is JSON, not a path segment
    ("submit.path", "/v1/{api_key}", "submit.path"),  # a secret in a path
    ("submit.path", "/v1/{reference", "submit.path"),  # a stray brace
    ("submit.body.ref", "{api_key}", "submit.body.ref"),  # a secret in a body
    ("submit.body.ref", "ref-{input}", "submit.body.ref"),  # the input pasted into text
    ("submit.body.when", [1, {"a": "{job_id}"}], "submit.body.when[1].a"),
    ("submit.headers.Bad Name", "x", 'submit.headers."Bad Name"'),
    ("submit.job_id", "data/id", "submit.job_id"),  # a pointer without its leading slash
    ("submit.job_id", "/data/~2", "submit.job_id"),  # a bad escape
    ("submit.job_id", _DELETE, "submit.job_id"),
    ("status.path", "/v1/jobs/{reference}", "status.path"),  # not known to status
    ("status.status", _DELETE, "status.status"),
    ("status.body", {"a": 1}, "status.body"),  # a GET with a body
    ("cancel.query", {"key": "{api_key}"}, "cancel.query.key"),  # a secret in a query
    ("find.job_id", 7, "find.job_id"),
    ("statuses.DONE", "finished", "statuses.DONE"),  # not one of our states
    ("statuses", {}, "statuses"),
    ("headers.Authorization", "Bearer {job_key}", "headers.Authorization"),
    ("uncertain", "resend", "uncertain"),  # only without [find]
    ("find", _DELETE, "uncertain"),  # without find, uncertain is required
    ("events.types.bogus", "exploded", "events.types.bogus"),
    ("events.types.done", "completed", "events.types.done"),  # plain completed needs events.status
    ("events.reference", "/data/object/ref", "events.job_id"),  # both job_id and reference
    ("events.type", _DELETE, "events.type"),
    ("events.types", {}, "events.types"),
    ("events.extra", "/x", "events.extra"),
]


@pytest.mark.parametrize(("dotted", "value", "key"), MISTAKES, ids=[m[2] + ":" + str(m[1])[:20] for m in MISTAKES])
def test_each_mistake_names_the_file_and_the_key(tmp_path: Path, dotted: str, value: Any, key: str) -> None:
    data = _set(_good(), dotted, value)
    path = tmp_path / "vendor.toml"
    path.write_text(_dump(data))
    with pytest.raises(ProfileError) as raised:
        load_profile(str(path))
    assert str(raised.value).startswith(f"{path}: {key}: "), str(raised.value)


def test_resend_needs_an_idempotency_header(tmp_path: Path) -> None:
    data = _set(_set(_good(), "find", _DELETE), "uncertain", "resend")
    data["submit"]["headers"] = {}
    path = tmp_path / "v.toml"
    path.write_text(_dump(data))
    with pytest.raises(ProfileError, match=rf"^{path}: submit.headers: .*idempotency_key"):
        load_profile(str(path))
    data["submit"]["headers"] = {"Idempotency-Key": "{idempotency_key}"}
    path.write_text(_dump(data))
    assert load_profile(str(path)).uncertain == "resend"


def test_an_unreadable_or_broken_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(ProfileError, match=rf"^{missing}: cannot be read"):
        load_profile(str(missing))
    broken = tmp_path / "broken.toml"
    broken.write_text("[submit\nmethod = 1")
    with pytest.raises(ProfileError, match=rf"^{broken}: is not valid TOML"):
        load_profile(str(broken))


def test_the_good_profile_parses() -> None:
    profile = parse_profile(_good(), "good.toml")
    assert profile.uncertain == "find"
    assert profile.state_of == {"PENDING": "queued", "DONE": "succeeded"}
    assert [name for name, _ in profile.submit.request.headers] == ["Authorization", "Idempotency-Key"]
    assert profile.events is not None and profile.events.meanings["job.finished"].status == "succeeded"


@pytest.mark.parametrize("name", ["stripe-like.toml", "poll-only.toml"])
def test_the_shipped_examples_parse(name: str) -> None:
    profile = load_profile(str(ROOT / "docs" / "profiles" / name))
    assert profile.submit.job_id and profile.status.status


def test_a_body_places_values_as_json() -> None:
    profile = parse_profile(_good())
    values = {"input": {"a": [1, '"x"']}, "reference": 'r"}', "callback_url": "http://h/x", "idempotency_key": "r"}
    assert render_json(profile.submit.request.body, values) == {
        "params": {"a": [1, '"x"']},
        "ref": 'r"}',
        "hook": "http://h/x",
    }


# --- no value leaves its slot ---------------------------------------------------------------------

NASTY = st.text(
    alphabet=st.sampled_from(list("ab/?#&=%+ \"'{}\\\r\n\x00é~.")) | st.characters(exclude_categories=["Cs"]),
    max_size=30,
)


@given(NASTY)
def test_a_path_value_stays_one_segment(value: str) -> None:
    url = "http://vendor.test" + render_path(template("/v1/jobs/{job_id}/cancel"), {"job_id": value})
    parts = urlsplit(url)
    assert parts.hostname == "vendor.test" and not parts.query and not parts.fragment
    segments = parts.path.split("/")
    assert segments[:3] == ["", "v1", "jobs"] and segments[4:] == ["cancel"]
    assert unquote(segments[3]) == value


@given(NASTY, NASTY)
def test_a_query_value_stays_its_value(value: str, other: str) -> None:
    query = (("reference", template("{reference}")), ("mode", template("x{job_id}")))
    pairs = parse_qsl(render_query(query, {"reference": value, "job_id": other}), keep_blank_values=True)
    assert pairs == [("reference", value), ("mode", "x" + other)]


@given(NASTY)
def test_a_header_value_never_ends_the_header(value: str) -> None:
    t = template("Bearer {api_key}")
    if set(value) & set("\r\n\x00"):
        with pytest.raises(UnsafeValue):
            render_header(t, {"api_key": value})
    else:
        assert render_header(t, {"api_key": value}) == "Bearer " + value


@given(NASTY)
def test_a_json_value_stays_a_string(value: str) -> None:
    spec = parse_profile(_good()).submit.request.body
    values = {"input": None, "reference": value, "callback_url": "u", "idempotency_key": value}
    body = json.loads(json.dumps(render_json(spec, values)))
    assert body["ref"] == value and set(body) == {"params", "ref", "hook"}


def _dump(data: dict[str, Any]) -> str:
    """A minimal TOML writer for the test's tables (the standard library reads TOML, never writes it)."""
    lines: list[str] = []

    def value(v: Any) -> str:
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{json.dumps(k)} = {value(x)}" for k, x in v.items()) + " }"
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return json.dumps(v)

    for key, v in data.items():
        if not isinstance(v, dict):
            lines.append(f"{json.dumps(key)} = {value(v)}")
    for key, v in data.items():
        if isinstance(v, dict):
            lines.append(f"[{json.dumps(key)}]")
            lines.extend(f"{json.dumps(k)} = {value(x)}" for k, x in v.items())
    return "\n".join(lines) + "\n"
