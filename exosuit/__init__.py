"""Exosuit: accelerator management service, compatible with OpenStack Cyborg's v2 API."""

__version__ = "0.1.0"
