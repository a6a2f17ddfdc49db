"""The CIFAR-10 demo that ``asyncreader demo`` runs: data, model and training loop.

* :mod:`.cifar10_format` — the CIFAR-10 binary format (record layout, file names), shared
  with :mod:`asyncreader.cifar10`;
* :mod:`.synthetic` — a synthetic CIFAR-10 data set with learnable class structure, so the
  demo needs no download;
* :mod:`.model` — the small numpy classifier the demo trains;
* :mod:`.training` — the training loop and held-out evaluation, fed by
  :func:`asyncreader.cifar10.distorted_pipeline` and :func:`asyncreader.cifar10.inputs`.

Import order inside the package: ``cifar10_format``, ``synthetic`` and ``model`` import
nothing above the input pipeline, so :mod:`asyncreader.cifar10` can re-export them;
``training`` uses :mod:`asyncreader.cifar10` and is imported by nothing but the command line
tool.
"""
