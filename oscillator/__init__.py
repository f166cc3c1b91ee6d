"""The oscillator: one tick per epoch second, to every partition of the tick topic."""
