"""``python -m asyncreader``: the ``asyncreader`` command line tool."""

import sys

from asyncreader._cli.main import main

sys.exit(main())
