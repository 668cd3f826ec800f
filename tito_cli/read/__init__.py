"""Reading a turn log: find and classify files, index sessions, stream rows, validate them into turns."""
