"""`python -m payoff ...`: the `payoff` command, for environments without its script."""

import sys

from payoff.cli import main

sys.exit(main())
