"""A nemesis for kafka-timers, Jepsen style: a real stack, a mixed load whose promises are
recorded, random overlapping faults, and a checker that judges the history against the
topics alone. ``make nemesis``; see docs/nemesis.md."""
