"""The cases file (cases.toml): its schema, parsing and selection of the suite's cases and prompt sets."""
