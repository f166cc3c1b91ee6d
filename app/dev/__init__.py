"""For development only: the embedded dev broker, real child processes, the demo."""
