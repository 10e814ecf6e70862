"""Alembic environment: migrations run on the connection handed over by exosuit.db.migration."""

from alembic import context

from exosuit.db import models

target_metadata = models.Base.metadata


def run_migrations_online() -> None:
    connection = context.config.attributes["connection"]
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    raise SystemExit("offline (SQL script) migrations are not supported")
run_migrations_online()
