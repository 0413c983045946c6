"""The notebook layer: the panel (ipywidgets), charts (Altair), the background runner, the
workshop's checks and ``workbench lab``. Nothing below it imports it."""
