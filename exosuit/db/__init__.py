"""Data access: plain functions over SQLAlchemy Core, in reader/writer transactions."""
