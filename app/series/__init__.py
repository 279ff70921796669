"""The time-series store: the only package that names a sample table.

It owns every sample table — raw rows (:mod:`app.series.tables`), their packed blocks
(:mod:`app.series.blocks`, :mod:`app.series.minute_blocks`), the minute and hour rollups
(:mod:`app.series.rollups`), the current readings (:mod:`app.series.latest`) and the arrival
feed (:mod:`app.series.arrivals`) — with the write path, the reads other packages ask for
(ranges, newest values, current readings, windows and rates for rules, chart tiers) and
retention. ``tests/app/test_sample_table_owner.py`` holds the rule.
"""
