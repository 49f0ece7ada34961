"""The run plan: a config resolved against the installed cards, sized, checked and estimated before anything heavy starts."""
