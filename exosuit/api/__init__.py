"""exosuit-api: Cyborg's v2 REST API (plus Exosuit microversions) and the agent API."""
