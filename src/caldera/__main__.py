"""`python -m caldera`: the CLI, as the `caldera` script runs it (the image's entrypoint)."""

from caldera.cli.main import main

main()
