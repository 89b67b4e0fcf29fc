"""Distribution fitting: length families with censoring, and arrival processes."""
