"""`python -m cli` runs the same app as the `agent` console script."""

from cli.app import main

if __name__ == "__main__":
    main()
