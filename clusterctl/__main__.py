"""`python -m clusterctl`: the command line (cli.main), as the `clusterctl` script runs it."""
import sys

from clusterctl.cli import main

sys.exit(main())
