"""The burst store: every burst appended to one SQLite file, or in class to one PostgreSQL
server shared by the room (imports only ``core``)."""
