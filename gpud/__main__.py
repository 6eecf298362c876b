"""``python -m gpud`` — same as ``wooly gpud``."""

from woolyhv.cli import app

if __name__ == "__main__":
    app(["gpud", *__import__("sys").argv[1:]])
