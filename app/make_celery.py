"""Entry point for the ``celery`` command: ``celery -A app.make_celery worker`` (and ``beat``).

A bad setting ends the process here with one line naming the variable; a worker or beat whose
database or broker does not answer at start-up ends with one line naming the host (app/startup.py).
"""

from celery.signals import beat_init, celeryd_init

from app import create_app, startup

_settings = startup.load_settings()
flask_app = create_app(_settings)
celery_app = flask_app.extensions["celery"]


@celeryd_init.connect(weak=False)
@beat_init.connect(weak=False)
def _check_services(**_: object) -> None:
    startup.check_services(_settings)
