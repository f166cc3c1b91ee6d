"""``python -m tests.nemesis``: see :mod:`tests.nemesis.run`."""

from __future__ import annotations

import sys

from tests.nemesis.run import main

sys.exit(main())
