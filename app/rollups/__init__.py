"""Minute and hour rollups of the sample tables (see app.rollups.models)."""
