# One image for every process of the Procfile (docs/runbook.md, "Deploying"): this checkout's code on
# a slim Python, the pinned requirements, a user without privileges. The default command is the
# Procfile's web line; compose.yaml runs each other line on the same image. Each command runs as
# `bash -c LINE`, as the Procfile's shell would, and bash execs a single command: the process is the
# container's main one and gets its signals. tests/unit/test_container.py checks the commands are
# the Procfile's and that every variable set here or in compose.yaml is a declared setting.
# By tag: pin it by digest (`FROM python:3.11-slim@sha256:…`, from `docker buildx imagetools inspect
# python:3.11-slim`) where the build can reach the registry; this project's machine cannot (runbook).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
# The dependencies in a layer of their own (a code change does not reinstall them): the server's lock
# (bin/lock), every transitive version pinned and every file's hash checked, as bin/_venv.sh installs.
COPY requirements.lock ./
RUN pip install --require-hashes -r requirements.lock

COPY . .
# The `liaison` command (pyproject.toml), leaving the pinned dependencies as they are; the build
# uses the image's own setuptools and wheel (python:3.11 images ship both), so nothing is fetched.
RUN pip install --no-deps --no-build-isolation . && rm -rf build ./*.egg-info \
    && useradd --system --create-home --uid 10001 liaison \
    && mkdir -p var && chown liaison var
USER liaison

EXPOSE 5000
# The web's liveness (the default command's); compose.yaml gives each other process its own check
# (the workers: python -m app.worker_health) or none.
HEALTHCHECK --interval=30s --timeout=10s --start-period=30s --retries=3 CMD ["python", "-m", "app.web_health"]
CMD ["bash", "-c", "gunicorn -c python:app.gunicorn_config --no-control-socket --bind ${WEB_ADDRESS:-0.0.0.0}:${PORT:-5000} --workers 2 --threads 4 --access-logfile - 'app:create_app()'"]
