"""``python -m bench.chaos``: see bench/chaos/cli.py (``bin/chaos --help``)."""

import sys

from bench.chaos.cli import main

sys.exit(main())
