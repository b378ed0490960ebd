"""backchannel."""
