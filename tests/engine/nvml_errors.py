"""pynvml's errors, as the tests' stand-ins for pynvml raise them.

pynvml has one base class, ``NVMLError``, and makes a subclass of it for each NVML return code
(``NVMLError_NotSupported``, ...) whose ``str()`` is NVML's own words for that code; the
workbench reads only the base class, ``NVMLError_NotSupported`` and the words.
"""

from __future__ import annotations


class NVMLError(Exception):
    """The base class; raised as is with a message of its own (``NVMLError("GPU is lost")``)."""


def _code(name: str, words: str) -> type[NVMLError]:
    """The subclass for one NVML return code: it prints as NVML words it."""
    return type(name, (NVMLError,), {"__str__": lambda self: words})


NotSupported = _code("NotSupported", "Not Supported")
NoPermission = _code("NoPermission", "Insufficient Permissions")
InvalidArgument = _code("InvalidArgument", "Invalid Argument")
NotFound = _code("NotFound", "Not Found")
LibraryNotFound = _code("LibraryNotFound", "NVML Shared Library Not Found")
