"""Minute and hour rollups of the sample tables (see app.series.rollups.models)."""
