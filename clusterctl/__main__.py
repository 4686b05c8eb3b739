import sys

from clusterctl.cli import main

sys.exit(main())
