"""`python -m extender`: the same as the `escher-extender` command."""

import sys

from extender.cli import main

sys.exit(main())
