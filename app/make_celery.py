"""Entry point for the ``celery`` command: ``celery -A app.make_celery worker``."""

from app import create_app

flask_app = create_app()
celery_app = flask_app.extensions["celery"]
