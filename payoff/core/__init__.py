"""Data types, configuration, seeding and errors shared by every layer."""
