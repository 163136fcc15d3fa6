"""python -m rehearsal_gym.cli: the rehearsal-gym command."""

import sys

from rehearsal_gym.cli import main

sys.exit(main())
