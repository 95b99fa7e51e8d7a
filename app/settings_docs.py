"""``.env.example`` and ``docs/settings.md``, written from the settings table (``foundation.settings``).

    python -m app.settings_docs --env-example > .env.example
    python -m app.settings_docs --markdown > docs/settings.md

Both files are generated, never edited by hand: tests/unit/test_docs_in_step.py fails when either
differs from what this prints, so a name or a default cannot drift from the code that reads it.
"""

from __future__ import annotations

import argparse
import sys

from foundation.options import TEXT, Option, Section
from foundation.provider_setting_table import PROVIDER_SECTION
from foundation.setting_table import SECTIONS

#: The demo's provider name, used for the provider block of .env.example.
EXAMPLE_PROVIDER = "SIMULATOR"


def _other(env: str, default: str, doc: str, example: str | None = None) -> Option:
    return Option(env, "", TEXT, default, doc, example=example)


#: Variables other programs read (Liaison's code does not): documented here, so they are in one place.
OTHER_SECTIONS = (
    Section(
        "The web process (read by the Procfile's web line)",
        (
            _other("PORT", "5000", "the web's port; a PaaS sets it (Heroku and the like)"),
            _other(
                "WEB_ADDRESS",
                "0.0.0.0",
                "where the Procfile's web listens: all interfaces for a deploy (bin/demo: 127.0.0.1)",
            ),
        ),
    ),
    Section(
        "Metrics (read by prometheus-client itself; see docs/observability.md)",
        (
            _other(
                "PROMETHEUS_MULTIPROC_DIR",
                "",
                "one per host, for its web + workers; wiped before they start; unset = one process",
                example="var/prometheus",
            ),
        ),
    ),
    Section(
        "Flower (read by Flower itself)",
        (
            _other(
                "FLOWER_BASIC_AUTH",
                "",
                "refused as is: a password of your own, 16+ characters (workers/flower_check.py)",
                example="admin:change-me",
            ),
            _other(
                "FLOWER_ADDRESS",
                "0.0.0.0",
                "where the Procfile's Flower listens: all interfaces for a deploy (bin/demo: 127.0.0.1)",
            ),
            _other("FLOWER_PORT", "5555", "Flower's port (Procfile)"),
            _other(
                "FLOWER_URL_PREFIX",
                "",
                "serve Flower under /PREFIX/ behind a proxy that forwards that path unchanged (docs/runbook.md)",
                example="flower",
            ),
        ),
    ),
    Section(
        "The vendor simulator (the demo's and tests' external system)",
        (
            _other(
                "SIMULATOR_PERSONALITY",
                "liaison",
                "the vendor it plays: liaison | stripe | github | poll-only | token-url (docs/design.md §5)",
            ),
            _other(
                "SIMULATOR_WEBHOOK_SECRET",
                "",
                "must be one of the provider's WEBHOOK_SECRETS; liaison: whsec_<base64>, stripe: whsec_…, "
                "github: any text, poll-only and token-url: none",
                example="whsec_...",
            ),
            _other(
                "SIMULATOR_WEBHOOK_URL",
                "",
                "stripe, github: the endpoint every webhook goes to (registered at the vendor), "
                "e.g. http://127.0.0.1:5000/webhooks/stripe",
            ),
            _other(
                "SIMULATOR_CALLBACK_ORIGINS",
                "",
                "token-url: the origins (http(s)://host[:port], comma-separated) a callback_url handed in "
                "a submit may lie on; empty: loopback only",
            ),
            _other(
                "SIMULATOR_WEBHOOK_BASIC_AUTH",
                "",
                "user:password: every webhook also carries Authorization: Basic with it (a vendor "
                "Liaison's basic scheme verifies); empty: none",
            ),
            _other("SIMULATOR_ACCEPT_DELAY_S", "0.5", "seconds before a job is accepted"),
            _other("SIMULATOR_COMPLETE_DELAY_S", "2.0", "seconds before an accepted job completes"),
            _other("SIMULATOR_WEBHOOK_TIMEOUT_S", "5", "seconds a webhook POST may take"),
            _other(
                "SIMULATOR_RETRY_BACKOFF_S",
                "0.2,0.5,1,2",
                "pauses between re-sends of a webhook not answered 2xx (attempts: one more than pauses)",
            ),
            _other("SIMULATOR_PORT", "5001", "the simulator's port (Procfile: vendor)"),
            _other(
                "SIMULATOR_AMQP_URL",
                "",
                "set (amqp://…): the simulator is also an amqp vendor on that "
                "RabbitMQ (simulator/broker.py); empty: HTTP only",
            ),
            _other(
                "SIMULATOR_AMQP_COMMAND_QUEUE",
                "sim.commands",
                "the command queue it consumes (a provider's LIAISON_PROVIDER_<NAME>_COMMAND_QUEUE)",
            ),
        ),
    ),
)


def _provider_section() -> Section:
    options = tuple(
        Option(
            o.env.replace("<NAME>", EXAMPLE_PROVIDER),
            o.attr,
            o.parser,
            o.default,
            o.doc,
            o.secret,
            o.example,
            o.derive,
            o.required,
        )
        for o in PROVIDER_SECTION.options
    )
    return Section(PROVIDER_SECTION.title, options)


def _env_line(option: Option) -> str:
    """``# NAME=value  # doc``: the default (blank when it is derived), or the demo value."""
    if option.example is not None:
        value = option.example
        note = f" (default: {option.default})" if option.default else ""
    else:
        value = "" if option.derive else option.default
        note = f" (default: {option.default})" if option.derive else ""
    setting = f"# {option.env}={value}"
    return f"{setting:<51} # {option.doc}{note}"


def render_env_example() -> str:
    lines = [
        "# Every setting Liaison reads, with its default. Generated from foundation/setting_table.py by",
        "# `python -m app.settings_docs --env-example > .env.example`: edit the table there, not this file.",
        "# Nothing set = embedded mode: a SQLite file under var/ and kombu's filesystem:// broker, no server needed.",
        "# A blank value means the default; <NAME> stands for another setting's value.",
    ]
    for section in (*SECTIONS, _provider_section(), *OTHER_SECTIONS):
        lines += ["", f"# --- {section.title} ---", *(_env_line(o) for o in section.options)]
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    """Markdown-safe: a pipe would end the cell, ``<name>`` would vanish as an HTML tag."""
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def _default_cell(option: Option) -> str:
    if not option.default:
        return "(empty)"
    return _cell(option.default) if option.derive else f"`{option.default}`"


def render_markdown() -> str:
    lines = [
        "# Settings",
        "",
        "Liaison is configured by its environment only, read once at start-up by `foundation/settings.py` (web,",
        "worker, beat and the CLI read the same variables). A blank value means the default. A bad value",
        'stops the process at start-up with one line naming the variable (see docs/runbook.md, "Start-up',
        'errors"). Migrations (`flask --app app liaison db upgrade`) read only `DATABASE_URL`.',
        "",
        "This page and [.env.example](../.env.example) are generated from the table in `foundation/setting_table.py`",
        "(`python -m app.settings_docs --markdown > docs/settings.md`); a unit test keeps them in step.",
    ]
    for section in (*SECTIONS, PROVIDER_SECTION, *OTHER_SECTIONS):
        lines += ["", f"## {_cell(section.title)}", "", "| Variable | Default | Value | Meaning |", "|---|---|---|---|"]
        for o in section.options:
            meaning = o.doc + ("; a secret, never logged or shown" if o.secret else "")
            meaning += f"; e.g. `{o.example}`" if o.example is not None else ""
            lines.append(f"| `{o.env}` | {_default_cell(o)} | {_cell(o.parser.kind)} | {_cell(meaning)} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m app.settings_docs", description=__doc__.splitlines()[0])
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--env-example", action="store_true", help="print .env.example")
    what.add_argument("--markdown", action="store_true", help="print docs/settings.md")
    args = parser.parse_args(argv)
    sys.stdout.write(render_env_example() if args.env_example else render_markdown())


if __name__ == "__main__":
    main()
