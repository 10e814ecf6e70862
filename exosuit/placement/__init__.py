"""Placement: the conductor keeps each host's resource providers equal to the database.

``providers`` computes what Placement should hold (pure), ``client`` talks to
Placement through keystoneauth, ``sync`` declares the conductor's job kinds and
``metrics`` their counters. What the sync reads and records in the database
(and the enqueueing of host syncs) is exosuit/db/placement.py. See doc/placement.md.
"""
