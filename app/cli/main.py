"""The ``liaison`` console command (pyproject.toml ``[project.scripts]``): the operators' CLI without
``flask --app app``. ``liaison clients list`` is ``flask --app app liaison clients list``: the same
``liaison`` group (app/cli), at the top, with the app built on first use the way the ``flask``
command builds it (so ``liaison db upgrade`` still runs while another setting is wrong)."""

from __future__ import annotations

from flask.cli import ScriptInfo

from app import create_app
from app.cli import group


def main() -> None:
    group.main(prog_name="liaison", obj=ScriptInfo(create_app=create_app))


if __name__ == "__main__":
    main()
