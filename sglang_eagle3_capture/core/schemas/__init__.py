"""The user records the core reads, one module per file kind (docs/development.md, "Reading user input")."""
