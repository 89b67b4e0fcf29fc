"""Pure Altair chart builders, shared by the pages and the reports."""
