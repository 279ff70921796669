"""The time-series store's compact layout: samples older than a horizon move from the raw
per-sample tables into one row per series and hour holding a typed array per column
(compressed by Postgres itself), and every reader asks this package for rows of either form."""
