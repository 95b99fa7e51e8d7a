"""``gunicorn 'app:create_app()'`` at a checkout's root reads this file by default: Liaison's web
settings are those of app/gunicorn_config.py, which the Procfile's web line names itself
(``-c python:app.gunicorn_config``), so that an installed server has them too."""

from app.gunicorn_config import child_exit, logger_class, on_starting, post_fork, worker_class, worker_exit

__all__ = ["child_exit", "logger_class", "on_starting", "post_fork", "worker_class", "worker_exit"]
