"""Settings (foundation.settings.Settings.from_env): defaults, providers, and errors that name, never leak."""

from __future__ import annotations

import base64
import dataclasses

import pytest

from foundation.provider_settings import ProviderSettings
from foundation.settings import ConfigError, Settings
from webhooks.signing import SECRET_PREFIX, generate_secret

SECRET_1 = SECRET_PREFIX + base64.b64encode(b"first-secret-key-bytes-32-long!!").decode()
SECRET_2 = SECRET_PREFIX + base64.b64encode(b"second-secret-key-bytes-32-long!").decode()
ADMIN_TOKEN = "adm-tok-7f3c9e1b5a-0d4c8b2e6f1a3c5e7"  # 34 characters: at least the 32 required
API_KEY = "sk-live-8d2e4f6a0b"


def sim_env(**extra: str) -> dict[str, str]:
    return {
        "LIAISON_PROVIDERS": "sim",
        "LIAISON_PROVIDER_SIM_BASE_URL": "http://sim.local:9000/",
        "LIAISON_PROVIDER_SIM_WEBHOOK_SECRETS": f"{SECRET_1}, {SECRET_2}",
        **extra,
    }


def config_error(env: dict[str, str]) -> str:
    with pytest.raises(ConfigError) as info:
        Settings.from_env(env)
    return str(info.value)


# --- defaults -----------------------------------------------------------------------------


def test_defaults_from_empty_env():
    """With nothing set: sqlite under var/, the embedded filesystem broker, no providers."""
    settings = Settings.from_env({})
    assert settings.database_url.startswith("sqlite:///")
    assert settings.database_url.endswith("liaison.db")
    assert settings.broker_url == "filesystem://localhost//"
    assert settings.broker_folder.name == "broker"
    assert settings.public_url == "http://127.0.0.1:5000"
    assert settings.admin_token == ""
    assert dict(settings.providers) == {}
    assert settings.default_provider is None
    assert settings.max_body_bytes == 256 * 1024
    assert settings.webhook_tolerance_s == 300
    assert settings.processed_retention_s > 2 * settings.webhook_tolerance_s
    assert settings.relay_schedule_s == (5, 300, 1800, 7200, 18000, 36000, 36000)
    assert settings.relay_max_total_s == 2 * 24 * 3600
    assert settings.log_format == "console"
    assert settings.log_level == "INFO"


def test_empty_env_reads_no_os_environ(monkeypatch):
    """An explicit mapping is the only source: process environment is ignored."""
    monkeypatch.setenv("CELERY_BROKER_URL", "redis://elsewhere")
    assert Settings.from_env({}).broker_url == "filesystem://localhost//"


def test_blank_values_mean_default():
    settings = Settings.from_env({"DATABASE_URL": "   ", "LIAISON_MAX_BODY_BYTES": ""})
    assert settings.database_url.startswith("sqlite:///")
    assert settings.max_body_bytes == 256 * 1024


def test_settings_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        Settings.from_env({}).broker_url = "x"  # type: ignore[misc]


# --- providers ----------------------------------------------------------------------------


def test_provider_from_env():
    """LIAISON_PROVIDERS names providers; each reads LIAISON_PROVIDER_<NAME>_*; one provider is the default."""
    settings = Settings.from_env(sim_env(LIAISON_PROVIDER_SIM_API_KEY=API_KEY))
    assert set(settings.providers) == {"sim"}
    sim = settings.providers["sim"]
    assert isinstance(sim, ProviderSettings)
    assert sim.name == "sim"
    assert sim.kind == "rest"
    assert sim.base_url == "http://sim.local:9000"  # trailing slash stripped
    assert sim.webhook_secrets == (SECRET_1, SECRET_2)
    assert sim.api_key == API_KEY
    assert sim.acceptance_timeout_s is None and sim.execution_timeout_s is None
    assert sim.submit_max_total_s == 24 * 3600
    assert settings.default_provider == "sim"


def test_provider_names_are_case_insensitive_and_trimmed():
    env = sim_env(LIAISON_PROVIDERS=" SIM , ")
    assert set(Settings.from_env(env).providers) == {"sim"}


def test_two_providers_have_no_implicit_default():
    env = sim_env(
        LIAISON_PROVIDERS="sim,other",
        LIAISON_PROVIDER_OTHER_BASE_URL="https://other.example",
        LIAISON_PROVIDER_OTHER_WEBHOOK_SECRETS=generate_secret(),
    )
    settings = Settings.from_env(env)
    assert set(settings.providers) == {"sim", "other"}
    assert settings.default_provider is None
    assert Settings.from_env(env | {"LIAISON_DEFAULT_PROVIDER": "other"}).default_provider == "other"


def test_default_provider_must_be_configured():
    message = config_error(sim_env(LIAISON_DEFAULT_PROVIDER="ghost"))
    assert "LIAISON_DEFAULT_PROVIDER" in message


def test_provider_timeouts():
    settings = Settings.from_env(
        sim_env(LIAISON_PROVIDER_SIM_ACCEPTANCE_TIMEOUT_S="60", LIAISON_PROVIDER_SIM_EXECUTION_TIMEOUT_S="3600")
    )
    assert settings.providers["sim"].acceptance_timeout_s == 60
    assert settings.providers["sim"].execution_timeout_s == 3600


def test_max_total_times_parse():
    """How long retries may go on is configuration: per provider, and for relays."""
    settings = Settings.from_env(
        sim_env(LIAISON_PROVIDER_SIM_SUBMIT_MAX_TOTAL_S="7200", LIAISON_RELAY_MAX_TOTAL_S="90.5")
    )
    assert settings.providers["sim"].submit_max_total_s == 7200.0
    assert settings.relay_max_total_s == 90.5


@pytest.mark.parametrize("value", ["0", "0.5", "-1", "a day", "nan", "inf"])
def test_bad_max_total_times_name_their_variable(value):
    assert "LIAISON_RELAY_MAX_TOTAL_S" in config_error({"LIAISON_RELAY_MAX_TOTAL_S": value})
    assert "LIAISON_PROVIDER_SIM_SUBMIT_MAX_TOTAL_S" in config_error(
        sim_env(LIAISON_PROVIDER_SIM_SUBMIT_MAX_TOTAL_S=value)
    )


def test_bad_provider_name():
    assert "LIAISON_PROVIDERS" in config_error({"LIAISON_PROVIDERS": "sim-1"})


def test_missing_base_url_names_variable():
    env = sim_env()
    del env["LIAISON_PROVIDER_SIM_BASE_URL"]
    assert "LIAISON_PROVIDER_SIM_BASE_URL" in config_error(env)


def test_non_http_base_url_names_variable():
    message = config_error(sim_env(LIAISON_PROVIDER_SIM_BASE_URL="ftp://sim"))
    assert "LIAISON_PROVIDER_SIM_BASE_URL" in message


@pytest.mark.parametrize("value", [None, "", " , ,"])
def test_missing_secret_names_variable(value):
    env = sim_env()
    if value is None:
        del env["LIAISON_PROVIDER_SIM_WEBHOOK_SECRETS"]
    else:
        env["LIAISON_PROVIDER_SIM_WEBHOOK_SECRETS"] = value
    assert "LIAISON_PROVIDER_SIM_WEBHOOK_SECRETS" in config_error(env)


@pytest.mark.parametrize(
    "bad_secret",
    [
        pytest.param("hunter2-not-prefixed-secret", id="no-prefix"),
        pytest.param("whsec_%%%%not-base64-at-all%%%%", id="bad-base64"),
        pytest.param(SECRET_PREFIX + base64.b64encode(b"short-key").decode(), id="too-short"),
        pytest.param(SECRET_1[len(SECRET_PREFIX) :], id="base64-without-prefix"),
    ],
)
def test_malformed_secret_names_variable_but_not_value(bad_secret):
    """The error names LIAISON_PROVIDER_SIM_WEBHOOK_SECRETS and never echoes any secret."""
    env = sim_env(LIAISON_PROVIDER_SIM_WEBHOOK_SECRETS=f"{SECRET_1},{bad_secret}")
    message = config_error(env)
    assert "LIAISON_PROVIDER_SIM_WEBHOOK_SECRETS" in message
    for leaked in (bad_secret, bad_secret.removeprefix(SECRET_PREFIX), SECRET_1, SECRET_1[len(SECRET_PREFIX) :]):
        assert leaked not in message


# --- numbers & choices --------------------------------------------------------------------


@pytest.mark.parametrize("value", ["lots", "256k", "1.5", "0x100", "1e6"])
def test_non_numeric_max_body_bytes_names_variable(value):
    message = config_error({"LIAISON_MAX_BODY_BYTES": value})
    assert "LIAISON_MAX_BODY_BYTES" in message
    assert value not in message


def test_max_body_bytes_minimum():
    assert "LIAISON_MAX_BODY_BYTES" in config_error({"LIAISON_MAX_BODY_BYTES": "100"})
    assert Settings.from_env({"LIAISON_MAX_BODY_BYTES": "1024"}).max_body_bytes == 1024


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("LIAISON_RELAY_SCHEDULE_S", "5,x,10"),
        ("LIAISON_RELAY_SCHEDULE_S", "5,-1"),
        ("LIAISON_RELAY_SCHEDULE_S", "5,nan"),
        ("LIAISON_RELAY_TIMEOUT_S", "nan"),
        ("LIAISON_LOG_FORMAT", "xml"),
        ("LIAISON_LOG_LEVEL", "verbose"),
        ("LIAISON_PUBLIC_URL", "not a url"),
        ("LIAISON_RELAY_MAX_ATTEMPTS", "0"),
        ("LIAISON_RELAY_TIMEOUT_S", "soon"),
    ],
)
def test_other_bad_values_name_their_variable(name, value):
    assert name in config_error({name: value})


def test_relay_schedule_and_log_settings_parse():
    settings = Settings.from_env(
        {"LIAISON_RELAY_SCHEDULE_S": "1, 2.5,10", "LIAISON_LOG_FORMAT": "JSON", "LIAISON_LOG_LEVEL": "debug"}
    )
    assert settings.relay_schedule_s == (1.0, 2.5, 10.0)
    assert settings.log_format == "json"
    assert settings.log_level == "DEBUG"


def test_config_error_is_value_error():
    assert issubclass(ConfigError, ValueError)


# --- cross-setting rules ------------------------------------------------------------------


@pytest.mark.parametrize(("tolerance", "retention"), [(300, 600), (300, 599), (300, 1), (1000, 2000)])
def test_retention_must_exceed_twice_tolerance(tolerance, retention):
    """A redelivered message older than the retention must be refused by its timestamp instead."""
    message = config_error(
        {"LIAISON_WEBHOOK_TOLERANCE_S": str(tolerance), "LIAISON_PROCESSED_RETENTION_S": str(retention)}
    )
    assert "LIAISON_PROCESSED_RETENTION_S" in message


def test_retention_just_above_twice_tolerance_is_fine():
    settings = Settings.from_env({"LIAISON_WEBHOOK_TOLERANCE_S": "300", "LIAISON_PROCESSED_RETENTION_S": "601"})
    assert settings.processed_retention_s == 601


@pytest.mark.parametrize("url", ["memory://", "memory://localhost/"])
def test_memory_broker_rejected(url):
    assert "CELERY_BROKER_URL" in config_error({"CELERY_BROKER_URL": url})


def test_other_brokers_accepted():
    assert Settings.from_env({"CELERY_BROKER_URL": "redis://localhost:6379/0"}).broker_url.startswith("redis://")


# --- no secrets in repr -------------------------------------------------------------------


def test_repr_hides_admin_token_and_api_key():
    settings = Settings.from_env(sim_env(LIAISON_ADMIN_TOKEN=ADMIN_TOKEN, LIAISON_PROVIDER_SIM_API_KEY=API_KEY))
    assert settings.admin_token == ADMIN_TOKEN
    text = repr(settings) + str(settings)
    assert ADMIN_TOKEN not in text
    assert API_KEY not in text
    assert API_KEY not in repr(settings.providers["sim"])


def test_repr_hides_webhook_secrets():
    text = repr(Settings.from_env(sim_env()))
    assert SECRET_1 not in text
    assert SECRET_2 not in text


def test_repr_masks_passwords_in_database_and_broker_urls():
    settings = Settings.from_env(
        {
            "DATABASE_URL": "postgresql+psycopg://liaison:db-pass-4e1f@db.local:5432/liaison",
            "CELERY_BROKER_URL": "redis://:broker-pass-9c2a@redis.local:6379/0",
        }
    )
    text = repr(settings) + str(settings)
    assert "db-pass-4e1f" not in text and "broker-pass-9c2a" not in text
    assert "postgresql+psycopg://liaison:***@db.local:5432/liaison" in text
    assert "redis://:***@redis.local:6379/0" in text
    assert settings.database_url.endswith("liaison:db-pass-4e1f@db.local:5432/liaison")  # the value itself is intact


@pytest.mark.parametrize(
    "url", ["sqlite:////tmp/x.db", "filesystem://localhost//", "amqp://guest@h//", "redis://h:1/0"]
)
def test_urls_without_password_are_shown_as_they_are(url):
    from foundation.options import mask_url_password

    assert mask_url_password(url) == url


# --- admin token --------------------------------------------------------------------------


@pytest.mark.parametrize("token", ["x", "short-token", "a" * 31, " " + "b" * 31 + " "])
def test_short_admin_token_refused(token):
    message = config_error({"LIAISON_ADMIN_TOKEN": token})
    assert "LIAISON_ADMIN_TOKEN" in message and "32" in message
    assert token.strip() not in message


def test_admin_token_of_32_characters_accepted_and_empty_means_disabled():
    assert Settings.from_env({"LIAISON_ADMIN_TOKEN": "c" * 32}).admin_token == "c" * 32
    assert Settings.from_env({"LIAISON_ADMIN_TOKEN": "   "}).admin_token == ""


# --- outbound guard and bounded calls (issue 8) ---------------------------------------------


def test_outbound_settings_defaults_and_values():
    default = Settings.from_env({})
    assert not default.outbound_allow  # production: no exception to the outbound guard
    assert default.provider_max_response_bytes == 1024 * 1024 and default.callback_max_response_bytes == 4096
    s = Settings.from_env(
        {
            **sim_env(),
            "LIAISON_OUTBOUND_ALLOW": "127.0.0.1:5002, hooks.internal, 10.0.0.0/8",
            "LIAISON_PROVIDER_SIM_CALL_DEADLINE_S": "12.5",
        }
    )
    assert s.outbound_allow.host_ports == {("127.0.0.1", 5002)} and s.outbound_allow.hosts == {"hooks.internal"}
    assert s.providers["sim"].call_deadline_s == 12.5


@pytest.mark.parametrize("value", ["127.0.0.1:notaport", "10.0.0.0/99", "user@host", "a b"])
def test_a_bad_outbound_allow_entry_names_the_variable(value):
    with pytest.raises(ConfigError) as info:
        Settings.from_env({"LIAISON_OUTBOUND_ALLOW": value})
    assert "LIAISON_OUTBOUND_ALLOW" in str(info.value) and value not in str(info.value)


# --- limits and internal surfaces (issue 8) ----------------------------------------------------


def test_rate_limit_storage_follows_the_broker_unless_told():
    assert Settings.from_env({}).rate_limit_storage == "database"
    assert Settings.from_env({"CELERY_BROKER_URL": "amqp://localhost//"}).rate_limit_storage == "database"
    on_redis = Settings.from_env({"CELERY_BROKER_URL": "redis://localhost:6379/3"})
    assert (on_redis.rate_limit_storage, on_redis.rate_limit_redis_url) == ("redis", "redis://localhost:6379/3")
    told = Settings.from_env(
        {"CELERY_BROKER_URL": "redis://localhost:6379/3", "LIAISON_RATE_LIMIT_STORAGE": "database"}
    )
    assert (told.rate_limit_storage, told.rate_limit_redis_url) == ("database", "")


def test_redis_storage_without_a_redis_url_names_the_variable():
    with pytest.raises(ConfigError, match="LIAISON_RATE_LIMIT_REDIS_URL"):
        Settings.from_env({"CELERY_BROKER_URL": "amqp://localhost//", "LIAISON_RATE_LIMIT_STORAGE": "redis"})


def test_a_short_metrics_token_is_refused_and_no_token_is_shown():
    with pytest.raises(ConfigError, match="LIAISON_METRICS_TOKEN"):
        Settings.from_env({"LIAISON_METRICS_TOKEN": "short"})
    token = "m" * 40
    settings = Settings.from_env(
        {
            "LIAISON_METRICS_TOKEN": token,
            "LIAISON_RATE_LIMIT_STORAGE": "redis",
            "LIAISON_RATE_LIMIT_REDIS_URL": "redis://:hunter2-secret@localhost/0",
        }
    )
    assert token not in repr(settings) and "hunter2-secret" not in repr(settings)


@pytest.mark.parametrize(
    "name",
    [
        "LIAISON_CLIENT_SUBMIT_RATE_PER_S",
        "LIAISON_CLIENT_SUBMIT_BURST",
        "LIAISON_CLIENT_MAX_OPEN_TASKS",
        "LIAISON_METRICS_CACHE_S",
    ],
)
def test_bad_limit_values_name_their_variable(name):
    with pytest.raises(ConfigError, match=name):
        Settings.from_env({name: "-1"})


def test_repr_masks_passwords_in_every_url():
    settings = Settings.from_env(
        sim_env(
            DATABASE_URL="postgresql+psycopg://app:pg-pass-91@db:5432/liaison",
            CELERY_BROKER_URL="redis://:redis-pass-92@cache:6379/0",
            LIAISON_PROVIDER_SIM_BASE_URL="https://svc:vendor-pass-93@vendor.example/api",
        )
    )
    text = repr(settings) + str(settings) + repr(settings.providers["sim"]) + repr(dict(settings.providers))
    for password in ("pg-pass-91", "redis-pass-92", "vendor-pass-93"):
        assert password not in text
    assert "postgresql+psycopg://app:***@db:5432/liaison" in text
    assert "redis://:***@cache:6379/0" in text
    assert "https://svc:***@vendor.example/api" in text
    # the values themselves are untouched: only their display is masked
    assert settings.broker_url == "redis://:redis-pass-92@cache:6379/0"


@pytest.mark.parametrize(
    ("name", "url"),
    [
        ("CELERY_BROKER_URL", "amqp://liaison:mq@pass-95@127.0.0.1:5672//"),
        ("CELERY_BROKER_URL", "redis://:redis#pass-95@127.0.0.1:6379/0"),
        ("CELERY_BROKER_URL", "redis://:ok@127.0.0.1:6379/0;redis://:re?pass-95@127.0.0.1:6380/0"),
        ("LIAISON_RATE_LIMIT_REDIS_URL", "redis://:redis@pass-95@127.0.0.1:6379/0"),
        ("LIAISON_CHANNEL_REDIS_URL", "redis://:redis/pass-95@127.0.0.1:6379/0"),
        ("LIAISON_CHANNEL_AMQP_URL", "amqp://liaison:mq@pass-95@127.0.0.1:5672/%2f"),
    ],
)
def test_a_broker_or_redis_password_with_a_raw_reserved_character_is_refused(name, url):
    """As for DATABASE_URL (tests/unit/test_database_urls.py): one line naming the variable, saying
    to percent-encode, showing no part of the password."""
    message = config_error({name: url})
    assert message.startswith(f"{name} has a raw @, #, / or ? in its user name or password: percent-encode")
    assert "pass-95" not in message and "\n" not in message


def test_broker_urls_percent_encoded_or_in_a_failover_list_are_taken():
    failover = "redis://:pw-a@127.0.0.1:6379/0;redis://:pw%40b@127.0.0.1:6380/0"
    assert Settings.from_env({"CELERY_BROKER_URL": failover}).broker_url == failover
    assert Settings.from_env({"CELERY_BROKER_URL": "amqp://u:p%23w@127.0.0.1//"}).broker_url.endswith(
        "p%23w@127.0.0.1//"
    )


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("amqp://liaison:mq@pass-96@mq:5672//", "amqp://liaison:***@mq:5672//"),
        ("redis://:r@e@dis-96@cache:6379/0", "redis://:***@cache:6379/0"),
        ("https://svc:ven@dor-96@vendor.example/api", "https://svc:***@vendor.example/api"),
        ("https://svc@corp:vendor-96@vendor.example/api", "https://svc@corp:***@vendor.example/api"),
    ],
)
def test_a_raw_at_sign_in_a_password_is_masked_whole_not_half(url, shown):
    """Masking reads the password up to the authority's last @, as urllib and Kombu do: the part
    after a raw @ in it is not shown as if it were the host."""
    from foundation.logging import redact
    from foundation.options import mask_url_password

    assert mask_url_password(url) == shown
    assert redact(f"cannot reach {url} (retrying)") == f"cannot reach {shown.replace('***', '[redacted]')} (retrying)"


def test_repr_masks_amqp_passwords():
    text = repr(Settings.from_env({"CELERY_BROKER_URL": "amqp://liaison:mq-pass-94@mq:5672//"}))
    assert "mq-pass-94" not in text and "amqp://liaison:***@mq:5672//" in text


# --- isolation: time limits, the relay queue, relay slots -------------------------------------


def test_time_limit_and_relay_defaults():
    settings = Settings.from_env({})
    assert (settings.task_soft_time_limit_s, settings.task_time_limit_s) == (120, 150)
    assert (settings.beat_soft_time_limit_s, settings.beat_time_limit_s) == (280, 300)
    assert settings.beat_soft_time_limit_s > settings.reconcile_max_run_s
    assert settings.relay_queue == "liaison.relay"
    assert Settings.from_env({"LIAISON_QUEUE": "work"}).relay_queue == "work.relay"
    assert Settings.from_env({"LIAISON_RELAY_QUEUE": "callbacks"}).relay_queue == "callbacks"
    caps = (settings.relay_threads, settings.relay_client_concurrency, settings.relay_endpoint_concurrency)
    assert caps == (64, 16, 4)
    # A crashed worker's slot frees itself soon after the longest call a relay can make (not after
    # the task's hard time limit: bin/chaos saw a client's callbacks stall three minutes on that).
    assert settings.relay_timeout_s + 10 < settings.relay_slot_ttl_s < settings.task_time_limit_s


@pytest.mark.parametrize(
    "env, named",
    [
        ({"LIAISON_TASK_SOFT_TIME_LIMIT_S": "150"}, "LIAISON_TASK_TIME_LIMIT_S"),
        ({"LIAISON_BEAT_SOFT_TIME_LIMIT_S": "300"}, "LIAISON_BEAT_TIME_LIMIT_S"),
        ({"LIAISON_RECONCILE_MAX_RUN_S": "280"}, "LIAISON_BEAT_SOFT_TIME_LIMIT_S"),
        ({"LIAISON_RELAY_QUEUE": "liaison"}, "LIAISON_RELAY_QUEUE"),
        ({"LIAISON_RELAY_CLIENT_CONCURRENCY": "0"}, "LIAISON_RELAY_CLIENT_CONCURRENCY"),
        # one client's slow endpoints must never fill the relay process
        ({"LIAISON_RELAY_CLIENT_CONCURRENCY": "33"}, "LIAISON_RELAY_CLIENT_CONCURRENCY"),
        ({"LIAISON_RELAY_THREADS": "8"}, "LIAISON_RELAY_CLIENT_CONCURRENCY"),
        ({"LIAISON_RELAY_ENDPOINT_CONCURRENCY": "17"}, "LIAISON_RELAY_ENDPOINT_CONCURRENCY"),
        ({"LIAISON_ENDPOINT_PAUSE_S": "60", "LIAISON_ENDPOINT_PAUSE_CAP_S": "30"}, "LIAISON_ENDPOINT_PAUSE_CAP_S"),
        ({"LIAISON_TASK_TIME_LIMIT_S": "soon"}, "LIAISON_TASK_TIME_LIMIT_S"),
        ({"LIAISON_CALLS_QUEUE": "liaison"}, "LIAISON_CALLS_QUEUE"),
        ({"LIAISON_CALLS_QUEUE": "liaison.relay"}, "LIAISON_CALLS_QUEUE"),
        ({"LIAISON_CALL_THREADS": "1"}, "LIAISON_CALL_THREADS"),
        # a vendor's share is some of the calls process's threads, never more than all of them
        ({"LIAISON_PROVIDER_SIM_MAX_CONCURRENT_CALLS": "17"}, "LIAISON_PROVIDER_SIM_MAX_CONCURRENT_CALLS"),
        ({"LIAISON_PROVIDER_SIM_MAX_CONCURRENT_CALLS": "-1"}, "LIAISON_PROVIDER_SIM_MAX_CONCURRENT_CALLS"),
    ],
)
def test_time_limit_relay_and_call_settings_are_checked(env, named):
    assert named in config_error(sim_env(**env))


def test_vendor_calls_have_their_own_queue_and_a_share_of_its_threads_per_vendor():
    one = Settings.from_env(sim_env())
    assert (one.calls_queue, one.call_threads) == ("liaison.calls", 16)
    assert Settings.from_env({"LIAISON_QUEUE": "work"}).calls_queue == "work.calls"
    assert one.call_slots("sim") == 16  # the only vendor: nobody else's calls to leave room for
    slow = {
        "LIAISON_PROVIDERS": "sim,slow",
        "LIAISON_PROVIDER_SLOW_BASE_URL": "http://slow.local:9000/",
        "LIAISON_PROVIDER_SLOW_WEBHOOK_SECRETS": SECRET_1,
    }
    two = Settings.from_env(sim_env(**slow))
    assert (two.call_slots("sim"), two.call_slots("slow")) == (8, 8)  # each leaves half to the other
    own = Settings.from_env(sim_env(**slow, LIAISON_PROVIDER_SLOW_MAX_CONCURRENT_CALLS="2"))
    assert (own.call_slots("sim"), own.call_slots("slow")) == (8, 2)


def test_the_procfile_calls_line_runs_the_threads_the_settings_count_on():
    """Submissions, cancellations and probes run on the calls line's LIAISON_CALL_THREADS threads,
    the capacity the per-vendor shares (call_slots) are taken from, on the calls queue."""
    from pathlib import Path

    lines = dict(
        line.split(":", 1) for line in (Path(__file__).resolve().parents[2] / "Procfile").read_text().splitlines()
    )
    calls = lines["calls"]
    assert " --pool threads " in calls and " -n calls@%h " in calls
    assert f" --concurrency ${{LIAISON_CALL_THREADS:-{Settings.from_env({}).call_threads}}} " in calls
    assert calls.endswith(" -Q ${LIAISON_CALLS_QUEUE:-${LIAISON_QUEUE:-liaison}.calls}")
    assert "--pool" not in lines["worker"]  # beat's jobs keep prefork: time limits are enforced there


def test_the_procfile_relay_runs_the_threads_the_settings_count_on():
    """The relay line holds LIAISON_RELAY_THREADS deliveries at once on threads, with the table's
    default: the caps the settings check against it are the Procfile's real capacity."""
    from pathlib import Path

    relay = next(
        line.split(":", 1)[1]
        for line in (Path(__file__).resolve().parents[2] / "Procfile").read_text().splitlines()
        if line.startswith("relay:")
    )
    assert " --pool threads " in relay
    assert f" --concurrency ${{LIAISON_RELAY_THREADS:-{Settings.from_env({}).relay_threads}}} " in relay


# --- declared once: the table (issue 9) ---------------------------------------------------------


def test_every_settings_field_has_exactly_one_option():
    """Settings' fields and the table's attributes are the same set, each once (var_dir and the
    provider names are read only to build other fields)."""
    from foundation.settings import OPTIONS, PROVIDER_OPTIONS

    attrs = [o.attr for o in OPTIONS]
    assert len(attrs) == len(set(attrs))
    assert set(attrs) - {"var_dir", "provider_names"} | {"providers"} == {f.name for f in dataclasses.fields(Settings)}
    provider_attrs = [o.attr for o in PROVIDER_OPTIONS]
    assert len(provider_attrs) == len(set(provider_attrs))
    assert set(provider_attrs) | {"name"} == {f.name for f in dataclasses.fields(ProviderSettings)}
    assert len({o.env for o in (*OPTIONS, *PROVIDER_OPTIONS)}) == len(OPTIONS) + len(PROVIDER_OPTIONS)


def test_defaults_are_the_tables_and_read_by_their_own_parser():
    """What a blank environment gives is each row's default text, parsed: the one place it is written."""
    from foundation.settings import OPTIONS, PROVIDER_OPTIONS

    settings = Settings.from_env({})
    derived = {"rate_limit_storage", "rate_limit_redis_url"}  # "auto" is resolved against the broker
    for option in OPTIONS:
        if option.derive is None and option.attr not in derived | {"provider_names", "var_dir"}:
            assert getattr(settings, option.attr) == option.parser.convert(option.env, option.default), option.env
    provider = ProviderSettings.from_env(sim_env(), "sim")
    bare = ProviderSettings(name="sim", kind="rest", base_url="http://x", webhook_secrets=(SECRET_1,))
    for option in PROVIDER_OPTIONS:
        if not option.required and option.required_when is None:
            value = option.parser.convert(option.env, option.default)
            assert getattr(provider, option.attr) == getattr(bare, option.attr) == value, option.env


def test_derived_defaults_follow_what_they_derive_from(tmp_path):
    settings = Settings.from_env({"LIAISON_VAR_DIR": str(tmp_path), "LIAISON_QUEUE": "q7"})
    assert settings.database_url == f"sqlite:///{tmp_path / 'liaison.db'}"
    assert settings.broker_folder == tmp_path / "broker"
    assert settings.relay_queue == "q7.relay"


def test_repr_leaves_out_every_secret_option():
    from foundation.settings import OPTIONS, PROVIDER_OPTIONS

    shown = repr(Settings.from_env(sim_env(LIAISON_PROVIDER_SIM_API_KEY=API_KEY)))
    for option in (*OPTIONS, *PROVIDER_OPTIONS):
        assert (f"{option.attr}=" in shown) is not option.secret or option.attr in {"var_dir", "provider_names"}


@pytest.mark.parametrize(
    "env",
    [
        {"LIAISON_PROVIDERS": "foo"},  # no base URL, no secrets
        {"LIAISON_PROVIDERS": "foo", "LIAISON_PROVIDER_FOO_BASE_URL": "http://127.0.0.1:1"},  # no secrets
        {"LIAISON_MAX_BODY_BYTES": "lots", "LIAISON_ADMIN_TOKEN": "short"},
    ],
)
def test_migrations_need_only_the_database_url(env):
    from foundation.settings import database_url_from_env

    with pytest.raises(ConfigError):
        Settings.from_env(env)
    url = "postgresql+psycopg://u@db/x"
    assert database_url_from_env({**env, "DATABASE_URL": url}) == url


def test_a_required_provider_variable_is_named_as_required():
    assert "LIAISON_PROVIDER_FOO_BASE_URL is required for provider 'foo'" in config_error({"LIAISON_PROVIDERS": "foo"})


# --- worker metrics (issue 10) --------------------------------------------------------------

METRICS_TOKEN = "m" * 40


def test_worker_metrics_are_off_by_default_and_listen_on_loopback_when_on():
    settings = Settings.from_env({})
    assert settings.worker_metrics_port is None and settings.worker_metrics_address == "127.0.0.1"
    on = Settings.from_env(
        {
            "LIAISON_METRICS_TOKEN": METRICS_TOKEN,
            "LIAISON_WORKER_METRICS_PORT": "9808",
            "LIAISON_WORKER_METRICS_ADDRESS": "0.0.0.0",
        }
    )
    assert (on.worker_metrics_port, on.worker_metrics_address) == (9808, "0.0.0.0")
    assert Settings.from_env({"LIAISON_WORKER_METRICS_ADDRESS": "::"}).worker_metrics_address == "::"


def test_worker_metrics_port_zero_means_off_not_any_port():
    assert Settings.from_env({"LIAISON_WORKER_METRICS_PORT": "0"}).worker_metrics_port is None


@pytest.mark.parametrize("value", ["-1", "65536", "http", "98.08"])
def test_a_bad_worker_metrics_port_names_its_variable(value):
    message = config_error({"LIAISON_METRICS_TOKEN": METRICS_TOKEN, "LIAISON_WORKER_METRICS_PORT": value})
    assert "LIAISON_WORKER_METRICS_PORT" in message and value not in message


@pytest.mark.parametrize("value", ["localhost", "256.0.0.1", "0.0.0.0:9808"])
def test_a_worker_metrics_address_must_be_an_ip_address(value):
    assert "LIAISON_WORKER_METRICS_ADDRESS" in config_error({"LIAISON_WORKER_METRICS_ADDRESS": value})


def test_worker_metrics_need_the_metrics_token():
    """The port serves what /metrics guards: without the token there is nothing to guard it with."""
    message = config_error({"LIAISON_WORKER_METRICS_PORT": "9808"})
    assert "LIAISON_WORKER_METRICS_PORT" in message and "LIAISON_METRICS_TOKEN" in message


# --- amqp providers (issue 13) ------------------------------------------------------------


def bus_env(**extra: str) -> dict[str, str]:
    return {
        "LIAISON_PROVIDERS": "bus",
        "LIAISON_PROVIDER_BUS_KIND": "amqp",
        "LIAISON_PROVIDER_BUS_AMQP_URL": "amqp://vendor:s3cret-pass@broker.example:5672/jobs",
        "LIAISON_PROVIDER_BUS_WEBHOOK_SECRETS": SECRET_1,
        **extra,
    }


def test_an_amqp_provider_needs_no_base_url_and_names_its_queues_after_itself():
    bus = Settings.from_env(bus_env()).providers["bus"]
    assert (bus.kind, bus.base_url) == ("amqp", "")
    assert (bus.command_queue, bus.reply_queue) == ("bus.commands", "liaison.bus.events")
    named = Settings.from_env(
        bus_env(LIAISON_PROVIDER_BUS_COMMAND_QUEUE="v.in", LIAISON_PROVIDER_BUS_REPLY_QUEUE="us.in")
    ).providers["bus"]
    assert (named.command_queue, named.reply_queue) == ("v.in", "us.in")


def test_what_a_provider_requires_follows_its_kind():
    env = bus_env()
    del env["LIAISON_PROVIDER_BUS_AMQP_URL"]
    assert config_error(env) == "LIAISON_PROVIDER_BUS_AMQP_URL is required for provider 'bus'"
    assert "LIAISON_PROVIDER_BUS_AMQP_URL must be an amqp" in config_error(
        bus_env(LIAISON_PROVIDER_BUS_AMQP_URL="http://broker.example")
    )
    rest = bus_env(LIAISON_PROVIDER_BUS_KIND="rest")
    assert config_error(rest) == "LIAISON_PROVIDER_BUS_BASE_URL is required for provider 'bus'"
    assert "LIAISON_PROVIDER_BUS_KIND" in config_error(bus_env(LIAISON_PROVIDER_BUS_KIND="kafka"))


def test_an_amqp_providers_broker_password_is_never_shown():
    settings = Settings.from_env(bus_env())
    assert "s3cret-pass" not in repr(settings) and "s3cret-pass" not in repr(settings.providers["bus"])


def test_two_amqp_providers_may_not_share_a_reply_queue():
    env = bus_env(
        LIAISON_PROVIDERS="bus,other",
        LIAISON_PROVIDER_OTHER_KIND="amqp",
        LIAISON_PROVIDER_OTHER_AMQP_URL="amqp://127.0.0.1//",
        LIAISON_PROVIDER_OTHER_WEBHOOK_SECRETS=SECRET_2,
    )
    Settings.from_env(env).validate()  # each has its own by default
    assert "REPLY_QUEUE of its own" in config_error({**env, "LIAISON_PROVIDER_OTHER_REPLY_QUEUE": "liaison.bus.events"})
    assert "REPLY_QUEUE of its own" in config_error({**env, "LIAISON_PROVIDER_OTHER_REPLY_QUEUE": "bus.commands"})


def test_an_http_provider_needs_its_profile_and_only_it_takes_one(tmp_path):
    """kind http (issue 40): the profile is required, read at start-up (a mistake names the variable,
    the file and the key), and refused for another kind; the default kind is still rest."""
    from pathlib import Path

    example = str(Path(__file__).resolve().parents[2] / "docs" / "profiles" / "stripe-like.toml")
    http = bus_env(LIAISON_PROVIDER_BUS_KIND="http", LIAISON_PROVIDER_BUS_BASE_URL="http://vendor.example")
    assert config_error(http) == "LIAISON_PROVIDER_BUS_PROFILE is required for provider 'bus'"
    bus = Settings.from_env({**http, "LIAISON_PROVIDER_BUS_PROFILE": example}).providers["bus"]
    assert bus.kind == "http" and bus.vendor_profile is not None and bus.vendor_profile.path == example
    broken = tmp_path / "broken.toml"
    broken.write_text(Path(example).read_text().replace('method = "GET"', 'method = "FETCH"', 1))
    assert config_error({**http, "LIAISON_PROVIDER_BUS_PROFILE": str(broken)}) == (
        f"LIAISON_PROVIDER_BUS_PROFILE: {broken}: status.method: must be one of GET, POST, PUT, PATCH, DELETE"
    )
    del http["LIAISON_PROVIDER_BUS_BASE_URL"]
    assert "LIAISON_PROVIDER_BUS_BASE_URL is required" in config_error(
        {**http, "LIAISON_PROVIDER_BUS_PROFILE": example}
    )
    rest = bus_env(LIAISON_PROVIDER_BUS_KIND="rest", LIAISON_PROVIDER_BUS_BASE_URL="http://vendor.example")
    assert config_error({**rest, "LIAISON_PROVIDER_BUS_PROFILE": example}) == (
        "LIAISON_PROVIDER_BUS_PROFILE is for an http provider only"
    )
    default = {k: v for k, v in rest.items() if k != "LIAISON_PROVIDER_BUS_KIND"}
    assert Settings.from_env(default).providers["bus"].kind == "rest"
