"""Images (bitstreams): verification (size, hash, signature) and the content-addressed
file store. Pure: no HTTP, no database; the agent uses it too (doc/programming.md)."""
