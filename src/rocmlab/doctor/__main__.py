"""``python -m rocmlab.doctor [OPTIONS]`` is ``rocmlab doctor [OPTIONS]`` (lab 01 runs it this way)."""

import sys

from rocmlab.cli import main

sys.exit(main(["doctor", *sys.argv[1:]]))
