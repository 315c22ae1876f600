"""`python -m workbench.cli ...`: what `workbench serve` spawns per connection, the ranks' launcher per rank, and
what `workbench_command` prints where no `workbench` script is installed."""

import sys

from workbench.cli import main

if __name__ == "__main__":  # importing it (a walk over the package's modules) runs nothing
    sys.exit(main())
