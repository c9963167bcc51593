import sys

from roll.envs.code.problems import main

sys.exit(main())
