"""The PySpark audit: reconcile requested timers with fired ones (see its issue)."""
