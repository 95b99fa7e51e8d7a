import sys

from bench.cluster.cli import main

sys.exit(main())
