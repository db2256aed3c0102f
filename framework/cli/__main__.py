"""``python -m framework.cli``: the powercut command line."""

import sys

from framework.cli import main

sys.exit(main())
