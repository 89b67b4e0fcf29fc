"""What the traffic looks like: exact statistics, fitted length and arrival distributions, grouped tables, and
the replay workloads built from a stored trace."""
