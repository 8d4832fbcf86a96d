"""The run half: torchrun launches, the worker each rank runs, the run folder and its summary.

``launcher`` starts the interleaved launches, ``worker`` is the only code that runs under torchrun,
``run_folder`` owns the results folder's layout and files, ``summary`` the typed ``summary.json``.
Nothing is imported here: ``fsdpbench.results.run_folder`` stays torch-free for the analysis side.
"""
