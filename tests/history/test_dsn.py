"""Tests for workbench.history.dsn: a connection string's password is never shown."""

from __future__ import annotations

import pickle

import pytest

from workbench.history.dsn import (
    Secret,
    is_postgres_url,
    password_of,
    redact_dsn,
    redact_urls,
    scrub,
)


@pytest.mark.parametrize(
    ("dsn", "shown"),
    [
        ("postgresql://ada:s3cret@10.0.0.5:5432/class", "postgresql://ada:***@10.0.0.5:5432/class"),
        ("postgres://ada:s3cret@host/db", "postgres://ada:***@host/db"),
        ("postgresql://ada@host:5432/db", "postgresql://ada@host:5432/db"),
        ("postgresql://host/db", "postgresql://host/db"),
        ("postgresql://ada:p%40ss%3Aw@host/db", "postgresql://ada:***@host/db"),
        ("postgresql://ada:a@b@host/db", "postgresql://ada:***@host/db"),  # '@' in the password
        (
            "postgresql://host/db?user=ada&password=s3cret&sslmode=require",
            "postgresql://host/db?user=ada&password=***&sslmode=require",
        ),
        ("host=h user=ada password=s3cret dbname=x", "host=h user=ada password=*** dbname=x"),
        ("host=h password='s3 cret' dbname=x", "host=h password=*** dbname=x"),
        ("postgresql://ada:s3cret@host:notaport/db", "postgresql://ada:***@host:notaport/db"),
        ("postgresql://ada:s3cret@[::1/db", "postgresql://***"),
    ],
)
def test_redact_dsn(dsn: str, shown: str) -> None:
    assert redact_dsn(dsn) == shown
    password = password_of(dsn)
    if password:
        assert password not in redact_dsn(dsn)


def test_password_of_decodes_it() -> None:
    assert password_of("postgresql://ada:p%40ss%3Aw@host/db") == "p@ss:w"
    assert password_of("postgresql://host/db?password=q%26r") == "q&r"
    assert password_of("postgresql://ada@host/db") is None


def test_scrub_masks_every_form_of_the_password() -> None:
    dsn = "postgresql://ada:p%40ss%3Aw@host/db"
    text = f"failed for {dsn}: got 'p@ss:w' (encoded p%40ss%3Aw)"
    cleaned = scrub(text, dsn)
    assert "p@ss:w" not in cleaned and "p%40ss%3Aw" not in cleaned
    assert "postgresql://ada:***@host/db" in cleaned


def test_is_postgres_url() -> None:
    assert is_postgres_url("postgresql://h/db") and is_postgres_url(" Postgres://h/db")
    assert not is_postgres_url("/tmp/history.sqlite") and not is_postgres_url(None)


def test_secret_shows_only_the_redacted_form_but_pickles_whole() -> None:
    secret = Secret("postgresql://ada:s3cret@host/db")
    assert (
        "s3cret" not in repr(secret) and "s3cret" not in str(secret) and "s3cret" not in f"{secret}"
    )
    assert pickle.loads(pickle.dumps(secret)).reveal() == secret.reveal()


def test_redact_urls_masks_every_url_password_in_a_command_line() -> None:
    line = (
        "python -m workbench burst --store=postgresql://ada:Pw-1%40x@10.0.0.5:5432/class "
        "--store postgres://bob:s3cret@h/db --data /data/postgresql://not-a-url"
    )
    shown = redact_urls(line)
    assert "Pw-1%40x" not in shown and "s3cret" not in shown
    assert "--store=postgresql://ada:***@10.0.0.5:5432/class" in shown
    assert "postgres://bob:***@h/db" in shown
    assert redact_urls("postgresql://ada@h/db --seconds 3") == "postgresql://ada@h/db --seconds 3"
