"""``python -m eqiforge.profiling profile|train|eval``: see ``commands.main``."""
import sys

from .commands import main

sys.exit(main())
