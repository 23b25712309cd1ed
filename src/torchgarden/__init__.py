"""torchgarden."""
