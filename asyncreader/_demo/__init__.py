"""The training run that ``asyncreader demo`` performs.

:mod:`.training` trains :class:`asyncreader.cifar10.SoftmaxClassifier` on CIFAR-10 records
fed by :func:`asyncreader.cifar10.distorted_pipeline`, evaluates it on held-out records
from :func:`asyncreader.cifar10.inputs`, and reports progress to a display the command
line tool gives it.
"""
