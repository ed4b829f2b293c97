"""`python -m speed_runtime.cli` is `speed`."""
import sys

from . import main

sys.exit(main())
