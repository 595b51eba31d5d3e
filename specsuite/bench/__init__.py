"""``specsuite bench``: every speculative mode on one model, measured side by side."""
