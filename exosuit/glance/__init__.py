"""Glance and where images come from (doc/programming.md): the Glance client, and the
look-up of an image in the catalogue or in Glance."""
