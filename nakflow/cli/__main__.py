"""``python -m nakflow.cli``: the same as ``nakflow`` and ``python -m nakflow``."""

import sys

from . import main

sys.exit(main())
