"""exosuit-agent: discovers the host's devices and reports them to the API."""
