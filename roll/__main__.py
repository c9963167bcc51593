import sys

from roll.cli import main

sys.exit(main())
