"""`python -m ckptlint.runtime SCRIPT [ARGS]...`: the same as `ckptlint confirm SCRIPT [ARGS]...`."""

from ckptlint.cli import main

main(["confirm", *__import__("sys").argv[1:]])
