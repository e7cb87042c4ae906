"""The `caldera` command line."""
