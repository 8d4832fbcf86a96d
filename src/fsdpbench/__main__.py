from fsdpbench.cli import run

run()
