"""The burst store: every burst appended to one SQLite file (imports only ``core``)."""
