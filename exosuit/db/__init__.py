"""Data access: plain functions over SQLAlchemy Core, in reader/writer transactions."""

from sqlalchemy.engine import Connection

__all__ = ["Connection"]

# ``Connection``: what ``Database.read`` and ``Database.write`` hand the function they run.
# Code outside exosuit/db/ that writes such a function annotates it with this name, since
# it may not import SQLAlchemy itself (the `sql` import contract).
