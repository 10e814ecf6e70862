"""Placement: the conductor keeps each host's resource providers equal to the database.

``providers`` computes what Placement should hold (pure), ``state`` reads and
records it in the database (and enqueues host syncs), ``client`` talks to
Placement through keystoneauth, ``sync`` holds the conductor jobs and
``metrics`` their counters. See doc/placement.md.
"""
