"""Generic array-API engines: no validation, any namespace."""
