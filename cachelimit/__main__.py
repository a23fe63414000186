"""`python -m cachelimit`: the same command line as the `cachelimit` console script."""

import os
import sys

try:
    from .cli.main import main
except KeyboardInterrupt:  # Ctrl-C while the command line itself is still being imported: the same exit as later
    print("\ncachelimit: interrupted", file=sys.stderr, flush=True)
    os._exit(130)

sys.exit(main())
