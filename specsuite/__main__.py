"""``python -m specsuite <command> …``: the same front door as the ``specsuite`` console script."""

from specsuite.cli import entry

if __name__ == "__main__":
    entry()
