"""Web health for supervisors: ``python -m app.web_health [--timeout 5]``, the container image's
``HEALTHCHECK``. GETs ``/healthz`` of the web process in this container (127.0.0.1, port ``PORT``
as the Procfile's web line binds it, 5000 by default) and exits 0 when it answers 200, 1 otherwise,
printing why in one line. The image has no curl; the standard library suffices. ``/healthz`` is
open and says nothing; readiness (``/readyz``: database, broker, migrations) is the router's
question, not a reason to restart the container.
"""

from __future__ import annotations

import argparse
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.web_health", description=__doc__.split("\n\n")[0])
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for the answer (default 5)")
    args = parser.parse_args(argv)
    url = f"http://127.0.0.1:{os.environ.get('PORT') or '5000'}/healthz"
    try:
        # No proxy: an HTTP_PROXY of the environment must not stand between the probe and loopback.
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(url, timeout=args.timeout) as response:
            status = response.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    except (urllib.error.URLError, OSError) as exc:
        print(f"web unhealthy: {url}: {getattr(exc, 'reason', exc)}")
        return 1
    if status != 200:
        print(f"web unhealthy: {url} answered {status}")
        return 1
    print(f"web healthy: {url}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
