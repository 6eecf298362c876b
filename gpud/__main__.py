"""``python -m gpud`` — same as ``wooly gpud``."""

from woolyhv.cli import main

if __name__ == "__main__":
    main(["gpud", *__import__("sys").argv[1:]])
