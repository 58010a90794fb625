"""``python -m rocmlab``: the command line, for an interpreter whose ``rocmlab`` script is not on PATH."""

import sys

from .cli import main

sys.exit(main())
