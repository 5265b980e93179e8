"""Pure functions over the gateway's vocabulary: no I/O, no clock unless passed in."""
