"""exosuit-conductor: durable jobs (Placement sync, Nova events, drift repair)."""
