"""`python -m cachelimit`: the same command line as the `cachelimit` console script."""

import sys

from .cli.main import main

sys.exit(main())
