"""Connection strings of a shared store, and the one place that makes them safe to show.

A class store is named by a URL such as ``postgresql://learner:secret@10.0.0.5:5432/class``.
Its password must never be shown: not in a repr, an error, a log line, a result, a saved config
or a notebook. Everything that could show a DSN goes through :func:`redact_dsn`, and every
message that comes back from the driver goes through :func:`scrub` (libpq does not echo the
password today, but a message is scrubbed anyway rather than trusted).
"""

from __future__ import annotations

import re
from urllib.parse import quote, unquote, urlsplit, urlunsplit

__all__ = [
    "MASK", "Secret", "is_postgres_url", "password_of", "redact_dsn", "redact_urls", "scrub",
]  # fmt: skip

MASK = "***"
_SCHEMES = ("postgresql://", "postgres://")
_QUERY_PASSWORD = re.compile(r"(?i)(^|[?&;])(password=)[^&;#]*")
_URL_PASSWORD = re.compile(r"(?i)\b(postgres(?:ql)?://[^\s:@/]*:)[^\s@]*@")
_KEYWORD_PASSWORD = re.compile(r"(?i)\b(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)")


def is_postgres_url(text: object) -> bool:
    """Whether ``text`` names a PostgreSQL server (``postgresql://`` or ``postgres://``)."""
    return isinstance(text, str) and text.strip().lower().startswith(_SCHEMES)


def redact_dsn(dsn: str) -> str:
    """``dsn`` with its password replaced by ``***``: ``postgresql://user:***@host:5432/db``.

    Handles the URL form (the password in the user part or as a ``password=`` query parameter)
    and libpq's ``key=value`` form. Whatever cannot be parsed is masked whole, never shown.
    """
    if not is_postgres_url(dsn):
        return _KEYWORD_PASSWORD.sub(lambda m: m.group(1) + MASK, dsn)
    try:
        parts = urlsplit(dsn.strip())  # the port is not checked: shown as written
    except ValueError:  # e.g. an unclosed IPv6 bracket
        return "postgresql://" + MASK
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, hostport = netloc.rpartition("@")
        user, has_password, _ = userinfo.partition(":")
        netloc = f"{user}:{MASK}@{hostport}" if has_password else f"{user}@{hostport}"
    query = _QUERY_PASSWORD.sub(lambda m: m.group(1) + m.group(2) + MASK, parts.query)
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def redact_urls(text: str) -> str:
    """``text`` (a command line, a log line) with the password of every PostgreSQL URL in it
    masked: ``--store=postgresql://ada:pw@host/db`` -> ``--store=postgresql://ada:***@host/db``.
    For text that may hold URLs nobody handed us apart (a recorded argv)."""
    return _URL_PASSWORD.sub(lambda m: m.group(1) + MASK + "@", text)


def password_of(dsn: str) -> str | None:
    """The password written in ``dsn`` (decoded), or None; used only to scrub messages."""
    if not is_postgres_url(dsn):
        match = _KEYWORD_PASSWORD.search(dsn)
        return match.group(2).strip("'") if match else None
    try:
        parts = urlsplit(dsn.strip())
    except ValueError:
        return None
    if parts.password:
        return unquote(parts.password)
    match = _QUERY_PASSWORD.search(parts.query)
    if match:
        return unquote(parts.query[match.end(2) : match.end()]) or None
    return None


def scrub(text: str, dsn: str) -> str:
    """``text`` with ``dsn`` shown redacted and its password masked wherever it appears.

    The password is looked for as written, percent-encoded and decoded, so a driver message
    that quotes it in any of those forms is cleaned too.
    """
    text = text.replace(dsn, redact_dsn(dsn))
    password = password_of(dsn)
    if password:
        for form in {password, quote(password, safe=""), quote(password)}:
            text = text.replace(form, MASK)
    return text


class Secret:
    """A DSN held by a store: the real string for the driver, a redacted one for everyone else.

    Its ``repr`` and ``str`` are redacted, so ``vars(store)``, a debugger or a notebook that
    shows the store's attributes does not show the password either.
    """

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """The real DSN: only for handing to the driver."""
        return self._value

    def __repr__(self) -> str:
        return f"Secret({redact_dsn(self._value)!r})"

    def __str__(self) -> str:
        return redact_dsn(self._value)

    def __reduce__(self) -> tuple[type[Secret], tuple[str]]:
        return (Secret, (self._value,))  # a store sent to a worker process still connects
