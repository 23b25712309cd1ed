"""Small shared building blocks, one concept per module, importable from every layer.

* ``suggest`` — "did you mean" for unknown names (torch-free);
* ``files`` — atomic file writes and directory syncs (torch-free);
* ``logs`` — the ``Logs`` type of step and loop outputs (torch-free);
* ``tensors`` — tensor shape helpers shared by losses and metrics (imports torch).

This package imports nothing else from torchgarden, so any module may use it.
"""
