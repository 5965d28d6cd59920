import sys

from wirebroker.cli import main

sys.exit(main())
