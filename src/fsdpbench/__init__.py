"""fsdpbench: fair, interleaved A/B benchmarks of FSDP implementations, and the profile analysis
that explains the difference."""

__version__ = "0.1.0"
