"""``python -m fedstats``: the ``fedstats`` command (the same entry point as the console script)."""

from fedstats.cli.app import main

if __name__ == "__main__":
    main()
