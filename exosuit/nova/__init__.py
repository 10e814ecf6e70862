"""Exosuit's side of the Nova integration: the events Nova waits for after a bind."""
