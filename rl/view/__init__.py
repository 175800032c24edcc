"""``ragym view``: the trajectory viewer and the traces training and evaluation write for it."""
