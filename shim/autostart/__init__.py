"""A folder ``wooly run`` puts on its program's PYTHONPATH: sitecustomize.py (NOTE [child interpreters])."""
