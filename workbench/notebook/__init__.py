"""The notebook layer: the panel (ipywidgets), charts (Altair), the background runner and
``workbench lab``. Nothing below it imports it. The lessons' helpers and the class board moved
to the workshop tier (``workbench.workshop``); their old paths here warn, for one release."""
