"""``python -m app.cli``: the ``kafka-timers`` command."""

import sys

from app.cli import main

sys.exit(main())
