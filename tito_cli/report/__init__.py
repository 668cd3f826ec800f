"""The facts that ls, stats, inspect and the golden dumps show (plain data, no rich)."""
