"""Remote adapters: manifests, their review and pinning, and the live catalog they feed."""
